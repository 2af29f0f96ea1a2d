"""Every invalid LlamaService is either refused at `kubectl apply`, naming the field, or accepted and then
reported within seconds: Degraded with the planner's message, exactly one Warning Event, and no Deployment
that cannot work. Never accepted and silent."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from support import Cluster, OperatorProcess

pytestmark = pytest.mark.e2e

GROUP = "serving.llama-operator.dev"
MODEL = {"name": "meta-llama/Llama-3.2-1B-Instruct"}


def spec(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "accelerator": {"type": "a10g"}, **fields}


def engine(**fields: Any) -> dict[str, Any]:
    return spec(engine=fields)


def extra(*args: str) -> dict[str, Any]:
    return engine(extraArgs=list(args))


# (name, spec); a name of None means the case is about the name itself (given as the spec's key).
BAD_NAMES = ["x" * 64, "chat.v2", "1chat", "Chat", "chat_v2", "chat-"]
BAD_SPECS: list[tuple[str, dict[str, Any]]] = [
    ("replicas-word", spec(replicas="two")),
    ("replicas-fraction", spec(replicas=1.5)),
    ("accelerator-string", {"model": MODEL, "accelerator": "t4"}),
    ("model-number", {"model": {"name": 123}}),
    ("max-model-len-small", engine(maxModelLen=64)),
    ("max-model-len-word", engine(maxModelLen="big")),
    ("max-model-len-past-context", engine(maxModelLen=9_000_000)),
    ("gpu-util-map", engine(gpuMemoryUtilization={"oops": 1})),
    ("gpu-util-high", engine(gpuMemoryUtilization=1.5)),
    ("gpu-util-string", engine(gpuMemoryUtilization="0.9")),
    ("num-seqs-zero", engine(maxNumSeqs=0)),
    ("num-seqs-huge", engine(maxNumSeqs=5000)),
    ("size-limit-word", spec(model={**MODEL, "cache": {"sizeLimit": "lots"}})),
    ("size-limit-negative", spec(model={**MODEL, "cache": {"sizeLimit": "-1Gi"}})),
    ("secret-name-bad", spec(model={**MODEL, "tokenSecretRef": {"name": "Bad_Name"}})),
    ("secret-key-empty", spec(model={**MODEL, "tokenSecretRef": {"name": "hf", "key": ""}})),
    ("unknown-model", spec(model={"name": "someone/unknown-model-7b"})),
    ("architecture-zero", spec(model={"name": "x/y", "architecture": {"layers": 0}})),
    ("min-replicas-negative", spec(autoscaling={"minReplicas": -1})),
    ("stabilization-negative", spec(autoscaling={"scaleDownStabilizationSeconds": -1})),
    ("ttft-zero", spec(autoscaling={"slo": {"ttftSeconds": 0}})),
    ("percentile-low", spec(autoscaling={"slo": {"percentile": 30}})),
    # Issue 8 case 4: the pinned vLLM has no such method; the CRD's enum refuses it (REFUSED_AT_ADMISSION).
    ("quantization-bitsandbytes", engine(quantization="bitsandbytes")),
    ("fp8-on-t4", {"model": MODEL, "accelerator": {"type": "t4"}, "engine": {"quantization": "fp8"}}),
    ("bf16-on-t4", {"model": MODEL, "accelerator": {"type": "t4"}, "engine": {"dtype": "bfloat16"}}),
    ("cpu-count", {"model": MODEL, "accelerator": {"type": "cpu", "count": 2}}),
    ("extra-value-first", extra("9000")),
    ("extra-empty", extra("")),
    ("extra-hf-token", extra("--hf-token", "hf_abcdefghijklmnop")),
    ("extra-api-key", extra("--api-key=sk-secret-value")),
    ("extra-owned-abbrev", extra("--por", "9000")),
    ("extra-owned-abbrev-host", extra("--hos", "127.0.0.1")),
    ("extra-owned-dtype", extra("--dtype", "float32")),
    ("extra-model-subkey", extra("--model.x", "1")),
    ("extra-help", extra("--help")),
    ("extra-version", extra("--version")),
    ("extra-bad-int", extra("--speculative-model", "x", "--num-speculative-tokens", "banana")),
    ("extra-unknown", extra("--no-such-flag")),
    ("extra-bad-choice", extra("--kv-cache-dtype", "int3")),
]
SECRETS = ("hf_abcdefghijklmnop", "sk-secret-value")
# Cases the CRD itself must refuse at `kubectl apply` (accepted-then-Degraded is not enough for these), and
# the field the refusal names.
REFUSED_AT_ADMISSION = {"quantization-bitsandbytes": "spec.engine.quantization"}
# After every accepted case is Degraded with its Event: how long to keep watching for a second Event (a
# retry, a resync of the key by another watch event, the autoscaler's 2 s cycles).
QUIET_SECONDS = 10


def manifest(name: str, body: dict[str, Any]) -> str:
    return json.dumps(
        {"apiVersion": f"{GROUP}/v1alpha1", "kind": "LlamaService", "metadata": {"name": name}, "spec": body}
    )


def test_invalid_input_is_never_silent(cluster: Cluster, operator: OperatorProcess, namespace: str) -> None:
    cases = [(n, spec()) for n in BAD_NAMES] + BAD_SPECS
    accepted: list[str] = []
    for name, body in cases:
        done = cluster.kubectl(
            "apply", "-n", namespace, "-f", "-", input_text=manifest(name, body), check=False
        )
        if done.returncode == 0:
            assert name not in REFUSED_AT_ADMISSION, f"{name} passed admission"
            accepted.append(name)
        else:
            assert "spec." in done.stderr or "metadata.name" in done.stderr, f"{name}: {done.stderr}"
            assert REFUSED_AT_ADMISSION.get(name, "") in done.stderr, f"{name}: {done.stderr}"

    def warnings() -> dict[str, list[dict[str, Any]]]:
        """The Warning Events on each LlamaService of the namespace."""
        out: dict[str, list[dict[str, Any]]] = {}
        for e in cluster.list_objects("events", namespace):
            if e.get("type") == "Warning" and e["involvedObject"].get("kind") == "LlamaService":
                out.setdefault(e["involvedObject"]["name"], []).append(e)
        return out

    def silent() -> list[str]:
        """Accepted cases without Degraded=True and a Warning Event yet."""
        warned = warnings()
        out = []
        for name in accepted:
            cond = cluster.condition(name, namespace, "Degraded")
            if not (cond and cond["status"] == "True" and cond["message"] and name in warned):
                out.append(name)
        return out

    deadline = time.monotonic() + 60
    while (left := silent()) and time.monotonic() < deadline:
        time.sleep(2)
    assert not left, f"accepted without Degraded and an Event: {left}\n{operator.tail()}"
    # One problem, one Warning Event: none posted again by a later reconcile of the same spec. Counted
    # after a quiet spell, as Event objects and their `count` (a repeat may be either).
    time.sleep(QUIET_SECONDS)
    warned = warnings()
    repeated = {
        name: [f"{e.get('reason')}: {e.get('message')}" for e in warned[name]]
        for name in accepted
        if sum(int(e.get("count") or 1) for e in warned[name]) != 1
    }
    assert not repeated, f"not exactly one Warning Event per accepted case: {repeated}"
    deployments = {d["metadata"]["name"] for d in cluster.list_objects("deployments", namespace)}
    assert not deployments & set(accepted), f"Deployments that cannot work: {deployments & set(accepted)}"
    # The secrets reached nothing: refused at admission, so not stored, not in any status or log.
    stored = cluster.kubectl("get", f"llamaservices.{GROUP}", "-n", namespace, "-o", "json").stdout
    for secret in SECRETS:
        assert secret not in stored
        assert secret not in operator.log.read_text()
    print(
        f"\n{len(cases)} invalid LlamaServices: {len(cases) - len(accepted)} refused at admission, "
        f"{len(accepted)} reported Degraded with an Event ({', '.join(accepted)})"
    )


# Issue 24, through the operator: what the flag contract's second pass refuses is Degraded with a message that
# names the setting or the reason and never quotes the refused text (a token in the wrong place stays out of
# status, Events and the operator's log), and a model field starting with '-' is refused at `kubectl apply`.
TOKEN = "hf_Issue24LeakedTokenAbCdEfGhIjKlMnOp"
ARCHITECTURE = {"layers": 16, "kvHeads": 8, "headDim": 64, "parameters": 1_235_814_400, "maxContext": 131072}
SECOND_PASS: list[tuple[str, dict[str, Any], str]] = [
    ("code-middleware", extra("--middleware", "os.system"), "config.allowedCodeLoadingFlags"),
    (
        "code-plugin-on-cache",
        extra("--tool-parser-plugin", "/models/evil.py"),
        "config.allowedCodeLoadingFlags",
    ),
    (
        "code-kv-connector",
        extra("--kv-transfer-config", '{"kv_connector": "x", "kv_connector_module_path": "evil"}'),
        "config.allowedCodeLoadingFlags",
    ),
    ("trust-remote-code", spec(model={**MODEL, "trustRemoteCode": True}), "config.allowTrustRemoteCode"),
    ("trust-remote-code-flag", extra("--trust-remote-code"), "spec.model.trustRemoteCode"),
    ("tls-keyfile", extra("--ssl-keyfile", "/models/key.pem"), "plain HTTP"),
    ("headless", extra("--headless"), "no API server"),
    ("multi-node", extra("-n", "2", "-r", "1"), "multi-node"),
    ("header-count", extra("--h11-max-header-count", "1"), "probes"),
    ("local-media", extra("--allowed-local-media-path", "/"), "read files of the pod"),
    (
        "hf-overrides-fp8-t4",
        {
            "model": MODEL,
            "accelerator": {"type": "t4"},
            "engine": {"extraArgs": ["--hf-overrides", '{"quantization_config": {"quant_method": "fp8"}}']},
        },
        "spec.engine.quantization",
    ),
    ("secret-after-a-switch", extra("--enforce-eager", TOKEN), "is not a flag"),
    ("secret-as-a-number", extra("--max-num-batched-tokens", TOKEN), "credential"),
    (
        "secret-in-a-url",
        extra("--otlp-traces-endpoint", f"http://user:{TOKEN}@collector:4317"),
        "credentials",
    ),
    (
        "secret-json-key",
        extra(
            "--kv-transfer-config",
            json.dumps({"kv_connector_extra_config": {"credentials": "Issue24Leaked"}}),
        ),
        "named like a secret",
    ),
]
DASH_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    ("dash-name", {"model": {"name": "-O3", "architecture": ARCHITECTURE}}, "spec.model.name"),
    ("dash-revision", spec(model={**MODEL, "revision": "--port=9000"}), "spec.model.revision"),
    ("dash-served-name", spec(model={**MODEL, "servedName": "--port=9000"}), "spec.model.servedName"),
]


def test_second_pass_refusals_name_the_setting_and_quote_nothing(
    cluster: Cluster, operator: OperatorProcess, namespace: str
) -> None:
    for name, body, field in DASH_FIELDS:
        done = cluster.kubectl(
            "apply", "-n", namespace, "-f", "-", input_text=manifest(name, body), check=False
        )
        assert done.returncode != 0, f"{name} passed admission"
        assert field in done.stderr, f"{name}: {done.stderr}"
    accepted: dict[str, str] = {}
    for name, body, reason in SECOND_PASS:
        done = cluster.kubectl(
            "apply", "-n", namespace, "-f", "-", input_text=manifest(name, body), check=False
        )
        if done.returncode == 0:
            accepted[name] = reason
        else:  # refused at admission: never stored at all
            assert TOKEN not in done.stderr, f"{name}: {done.stderr}"

    def reported() -> dict[str, str] | None:
        messages = {}
        for name in accepted:
            cond = cluster.condition(name, namespace, "Degraded")
            if not (cond and cond["status"] == "True"):
                return None
            messages[name] = cond["message"]
        return messages

    deadline = time.monotonic() + 60
    messages = reported()
    while messages is None and time.monotonic() < deadline:
        time.sleep(2)
        messages = reported()
    assert messages is not None, f"not all Degraded: {sorted(accepted)}\n{operator.tail()}"
    wrong = {n: m for n, m in messages.items() if accepted[n] not in m}
    assert not wrong, f"Degraded without the setting or reason: {wrong}"
    deployments = {d["metadata"]["name"] for d in cluster.list_objects("deployments", namespace)}
    assert not deployments & set(accepted), f"Deployments made: {deployments & set(accepted)}"
    # The token reached no status, no Event and no log line.
    for svc in json.loads(
        cluster.kubectl("get", f"llamaservices.{GROUP}", "-n", namespace, "-o", "json").stdout
    )["items"]:
        assert TOKEN not in json.dumps(svc.get("status") or {}), svc["metadata"]["name"]
    events = cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert TOKEN not in events
    # The operator's own lines (the e2e operator runs --verbose, where the Kubernetes client logs whole
    # response bodies, the stored spec included: production logs at INFO have none of those).
    own = [
        line
        for line in operator.log.read_text().splitlines()
        if "Issue24Leaked" in line and "response body:" not in line
    ]
    assert not own, own[:3]
