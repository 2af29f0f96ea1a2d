"""docs/call-your-model.md's curl and OpenAI-client examples, run as written against a real vLLM (the
session's tiny-model server, started with an API key the way the operator starts vLLM), so the doc
cannot rot; and the errors and open paths it promises. The one change made to each example is its base
URL: `http://localhost:8000`, where the doc's `kubectl port-forward` listens, becomes the test server's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support import vllm_server_module

pytestmark = pytest.mark.vllm
vs = vllm_server_module()


@pytest.fixture
def server(vllm_server: Any) -> Any:
    return vllm_server  # the session's server (e2e/conftest.py), with an API key, answering to "chat"


DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "call-your-model.md"
DOC_BASE_URL = "http://localhost:8000"
FENCE = re.compile(r"^```(?P<language>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Example:
    language: str  # "bash" (a curl command) or "python"
    code: str
    line: int

    def __str__(self) -> str:
        return f"{DOC_PATH.name}:{self.line} ({self.language})"


def doc_examples() -> list[Example]:
    """The doc's runnable blocks: every Python block and every bash block that is a curl command."""
    text = DOC_PATH.read_text()
    found = []
    for m in FENCE.finditer(text):
        language, body = m.group("language"), m.group("body")
        line = text.count("\n", 0, m.start()) + 1
        first = next((s for s in body.splitlines() if s.strip() and not s.startswith("#")), "")
        if language == "python" or (language == "bash" and first.startswith("curl ")):
            found.append(Example(language, body, line))
    return found


EXAMPLES = doc_examples()


def test_the_doc_has_curl_and_python_examples_of_each_kind() -> None:
    curl = [e.code for e in EXAMPLES if e.language == "bash"]
    python = [e.code for e in EXAMPLES if e.language == "python"]
    for kind in ("/chat/completions", "/completions", '"stream": true'):
        assert any(kind in c for c in curl), f"no curl example of {kind}"
    for kind in ("chat.completions.create", "client.completions.create", "stream=True"):
        assert any(kind in c for c in python), f"no Python example of {kind}"
    assert all(DOC_BASE_URL in e.code for e in EXAMPLES), (
        f"every example calls {DOC_BASE_URL} (the port-forward)"
    )


def _requests_finished(server: Any) -> float:
    return float(server.metric_value("vllm:request_success_total") or 0.0)


def _run(example: Example, server: Any) -> subprocess.CompletedProcess[str]:
    code = example.code.replace(DOC_BASE_URL, server.base_url)
    env = {**os.environ, "LLAMA_API_KEY": server.api_key}
    if example.language == "python":
        # The vLLM environment has the OpenAI client (vLLM depends on it); the project's does not.
        argv = [str(server.python or vs.require_vllm_python()), "-c", code]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_the_doc_example_runs_against_real_vllm(example: Example, server: Any) -> None:
    before = _requests_finished(server)
    result = _run(example, server)
    assert result.returncode == 0, f"{example} failed:\n{result.stderr[-3000:]}"
    out = result.stdout
    if example.language == "bash":
        if '"stream": true' in example.code:
            events = [line.removeprefix("data: ") for line in out.splitlines() if line.startswith("data: ")]
            assert events and events[-1] == "[DONE]", out[-2000:]
            assert all("choices" in json.loads(e) for e in events[:-1])
        else:
            answer = json.loads(out)
            assert "choices" in answer or "data" in answer, out[-2000:]
            if "data" in answer:
                assert server.extra_served_names[0] in {m["id"] for m in answer["data"]}
    generates = "/v1/models" not in example.code
    assert _requests_finished(server) >= before + (1 if generates else 0), "the example never reached vLLM"
    if example.language == "python":
        assert out.strip(), f"{example} printed nothing"


def _status(
    server: Any, path: str, body: dict[str, Any] | None = None, key: str | None = None
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(server.base_url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read().decode()
            return response.status, raw
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read().decode())


def test_the_errors_and_open_paths_the_doc_lists(server: Any) -> None:
    doc = " ".join(DOC_PATH.read_text().split())  # the prose, whatever its line breaks
    name = server.extra_served_names[0]
    chat = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    assert _status(server, "/v1/chat/completions", chat) == (401, {"error": "Unauthorized"})
    assert _status(server, "/v1/models", key="not-the-key") == (401, {"error": "Unauthorized"})
    assert '`401` `{"error":"Unauthorized"}`' in doc

    # Probes and Prometheus need no key, so autoscaling works with one set.
    assert _status(server, "/health")[0] == 200
    assert _status(server, "/metrics")[0] == 200
    assert "`/health` and `/metrics` answer without it" in doc

    code, error = _status(server, "/v1/chat/completions", {**chat, "model": "no-such-model"}, server.api_key)
    assert (code, error["error"]["type"]) == (404, "NotFoundError")
    assert error["error"]["message"].startswith("The model `no-such-model` does not exist.")
    assert "`404` `NotFoundError`: ``The model `x` does not exist.``" in doc

    too_long = server.max_model_len + 1
    code, error = _status(
        server, "/v1/completions", {"model": name, "prompt": "hi", "max_tokens": too_long}, server.api_key
    )
    assert (code, error["error"]["type"]) == (400, "BadRequestError")
    assert error["error"]["message"].startswith(
        f"max_tokens={too_long} cannot be greater than max_model_len="
    )
    code, error = _status(
        server,
        "/v1/completions",
        {"model": name, "prompt": "hi " * too_long, "max_tokens": 1},
        server.api_key,
    )
    assert (code, error["error"]["type"]) == (400, "BadRequestError")
    assert error["error"]["message"].startswith(
        f"This model's maximum context length is {server.max_model_len} tokens"
    )
    assert (
        "`max_tokens=... cannot be greater than max_model_len=...`, or `This model's maximum context length is N tokens...`"
        in doc
    )
