"""The flag contract's second pass (issue 24): code-loading flags are the platform's decision, listener and
layout flags are refused with a reason, JSON flags obey the rules of the fields they override, no message
quotes what it refuses, and model fields cannot smuggle flags onto the command line."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from llama_operator.api.resource import InvalidSpecError, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.catalog.vllm_flags import flag_contract
from llama_operator.planning import PlanningConfig, PlanningError
from llama_operator.planning.extra_args import parse_extra_args
from llama_operator.planning.flag_policy import LAYOUT_FLAGS, OWNED_FLAGS
from llama_operator.reconcile.outcome import plan_llamaservice
from tests.planning.builders import LLAMA_1B, plan, spec

HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"

# What issue 24 measured: each loads code named by its value (a module, a class, a file on the cache volume).
CODE_LOADING_CASES: list[list[str]] = [
    ["--middleware", "os.system"],
    ["--worker-cls", "evil.Worker"],
    ["--worker-extension-cls", "evil.Extension"],
    ["--scheduler-cls", "evil.Scheduler"],
    ["--logits-processors", "evil.Processor"],
    ["--tool-parser-plugin", "/models/evil.py"],
    ["--reasoning-parser-plugin", "/models/evil.py"],
    ["--io-processor-plugin", "evil"],
    ["--model-class-overrides", '{"LlamaForCausalLM": "evil:Model"}'],
    ["--kv-transfer-config", '{"kv_connector": "x", "kv_connector_module_path": "evil"}'],
    ["--kv-transfer-config.kv_connector_module_path", "evil"],
    ["--ec-transfer-config", '{"ec_connector_module_path": "evil"}'],
    ["--logging-config", '{"pylogging_config_file": "/models/logging.json"}'],
    ["--logging-config.pylogging_config_file", "/models/logging.json"],
    ["--log-config-file", "/models/logging.json"],
    ["--compilation-config", '{"inductor_passes": {"p": "evil.run"}}'],
    ["--compilation-config", '{"inductor_compile_config": {"cpp.cxx": ["/models/evil"]}}'],
    ["--compilation-config.cache_dir", "/models/compiled"],
    ["--structured-outputs-config.reasoning_parser_plugin", "/models/evil.py"],
    ["--tool-server", "demo"],
]


@pytest.mark.parametrize("args", CODE_LOADING_CASES, ids=lambda a: a[0])
def test_code_loading_flags_are_refused_naming_the_setting(args: list[str]) -> None:
    with pytest.raises(PlanningError, match=r"config.allowedCodeLoadingFlags") as error:
        parse_extra_args(args)
    assert "imports or loads code" in str(error.value)


def test_the_contract_marks_the_code_loading_flags_found_in_the_parser() -> None:
    """e2e/vllm/flags.py finds them by name and help text; the measured ones must be among them."""
    raw: dict[str, Any] = json.loads(
        resources.files("llama_operator").joinpath("data/vllm_flags.json").read_text(encoding="utf-8")
    )
    marked = {f["dest"] for f in raw["flags"] if f["loads_code"]}
    keys = {f"{f['dest']}.{k}" for f in raw["flags"] for k in f["code_keys"] or ()}
    assert {
        "trust_remote_code",
        "middleware",
        "worker_cls",
        "worker_extension_cls",
        "scheduler_cls",
        "logits_processors",
        "tool_parser_plugin",
        "reasoning_parser_plugin",
        "io_processor_plugin",
        "model_class_overrides",
        "log_config_file",
    } <= marked
    assert {
        "kv_transfer_config.kv_connector_module_path",
        "ec_transfer_config.ec_connector_module_path",
        "logging_config.pylogging_config_file",
        "compilation_config.inductor_passes",
        "compilation_config.inductor_compile_config",  # reviewed: the text does not say so
        "compilation_config.cache_dir",
    } <= keys
    # Flags that only choose among what the image registered are not code loading.
    assert not marked & {"tool_call_parser", "tokenizer_mode", "load_format", "reasoning_parser"}


@pytest.mark.parametrize(
    ("allowed", "args"),
    [
        (["--middleware"], ["--middleware", "corp.audit.Middleware"]),
        (["--logits_processors"], ["--logits-processors", "corp.Processor"]),  # _ and - alike
        (["--kv-transfer-config"], ["--kv-transfer-config", '{"kv_connector_module_path": "corp.kv"}']),
        (
            ["--kv-transfer-config.kv_connector_module_path"],
            ["--kv-transfer-config.kv_connector_module_path", "corp.kv"],
        ),
    ],
)
def test_the_platform_may_allow_a_code_loading_flag(allowed: list[str], args: list[str]) -> None:
    assert parse_extra_args(args, allowed_code_loading=allowed).args == tuple(args)
    with pytest.raises(PlanningError, match="which lists --other-flag"):
        parse_extra_args(args, allowed_code_loading=["--other-flag"])


def test_allowing_one_key_does_not_allow_another() -> None:
    with pytest.raises(PlanningError, match="its key inductor_passes"):
        parse_extra_args(
            ["--compilation-config", '{"inductor_passes": {"p": "evil.run"}}'],
            allowed_code_loading=["--compilation-config.backend"],
        )


def test_code_loading_setting_reaches_the_planner_from_the_operator_config() -> None:
    body = {
        "metadata": {"name": "m", "namespace": "t"},
        "spec": {"model": {"name": LLAMA_1B}, "engine": {"extraArgs": ["--middleware", "corp.Audit"]}},
    }
    with pytest.raises(PlanningError, match="allowedCodeLoadingFlags"):
        plan_llamaservice(body, Settings(), None)
    _, planned = plan_llamaservice(body, Settings(allowed_code_loading_flags=["--middleware"]), None)
    assert planned.vllm_args[-2:] == ["--middleware", "corp.Audit"]


def test_trust_remote_code_is_a_typed_field_the_platform_allows_or_forbids() -> None:
    wanted = spec(trustRemoteCode=True)
    with pytest.raises(PlanningError, match=r"config.allowTrustRemoteCode"):
        plan(wanted)
    assert "--trust-remote-code" in plan(wanted, PlanningConfig(allow_trust_remote_code=True)).vllm_args
    assert "--trust-remote-code" not in plan(spec(), PlanningConfig(allow_trust_remote_code=True)).vllm_args
    for args in (["--trust-remote-code"], ["--no-trust-remote-code"], ["--trust_remote_code"]):
        with pytest.raises(PlanningError, match=r"spec.model.trustRemoteCode"):
            parse_extra_args(args)
    with pytest.raises(PlanningError, match="trust_remote_code"):
        parse_extra_args(["--speculative-config", '{"method": "ngram", "trust_remote_code": true}'])


# Listener, TLS, path and process-layout flags: each refused with its reason.
@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--ssl-keyfile", "/models/key.pem"], "plain HTTP"),
        (["--ssl-certfile", "/models/cert.pem"], "plain HTTP"),
        (["--ssl-ca-certs", "/models/ca.pem"], "plain HTTP"),
        (["--headless"], "no API server"),
        (["-n", "2", "-r", "1"], "multi-node"),
        (["--nnodes", "2"], "multi-node"),
        (["--node-rank", "1"], "multi-node"),
        (["--h11-max-header-count", "1"], "probes"),
        (["--h11-max-incomplete-event-size", "10"], "probes"),
        (["--allowed-local-media-path", "/"], "read files of the pod"),
        (["--root-path", "/v1"], "re-roots every request path"),
        (["--grpc"], "gRPC"),
        (["--api-server-count", "2"], "one API server per pod"),
        (["-dpn", "1"], "one engine per pod"),
        (["--data-parallel-address", "10.0.0.1"], "one engine per pod"),
        (["--device-ids", "2,3"], "spec.accelerator.count"),
        (["--profiler-config", '{"profiler": "torch"}'], "/start_profile"),
        (["--profiler-config.profiler", "torch"], "/start_profile"),
        (["--enable-fault-tolerance"], "control endpoint"),
    ],
)
def test_listener_and_layout_flags_are_refused_with_the_reason(args: list[str], reason: str) -> None:
    with pytest.raises(PlanningError, match="is refused") as error:
        parse_extra_args(args)
    assert reason in str(error.value)


def test_every_refused_layout_flag_is_a_flag_of_the_pinned_vllm() -> None:
    dests = {flag.dest for flag in flag_contract().flags()}
    assert set(LAYOUT_FLAGS) <= dests
    assert set(OWNED_FLAGS) <= dests


# JSON flags against the rules of the fields they override.
@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--hf-overrides", '{"quantization_config": {"quant_method": "fp8"}}'], "spec.engine.quantization"),
        (["--hf-overrides", '{"text_config": {"quantization_config": {}}}'], "spec.engine.quantization"),
        (["--hf-overrides", '{"max_position_embeddings": 1000000}'], "spec.engine.maxModelLen"),
        (["--hf-overrides", '{"rope_scaling": {"factor": 8}}'], "spec.engine.maxModelLen"),
        (["--hf-overrides", '{"architectures": ["Other"]}'], "spec.model"),
        (["--hf-overrides", '{"num_key_value_heads": 1}'], "spec.model.architecture"),
        (["--hf-overrides", '{"torch_dtype": "bfloat16"}'], "spec.engine.dtype"),
        (["--hf-overrides", '{"auto_map": {"AutoModel": "m.Model"}}'], "trustRemoteCode"),
        (["--quantization-config", '{"linear": {}}'], "spec.engine.quantization"),
        (["--speculative-config", '{"model": "d", "quantization": "fp8"}'], "spec.engine.quantization"),
        (["--speculative-config", '{"model": "d", "max_model_len": 99999}'], "spec.engine.maxModelLen"),
        (["--speculative-config.quantization", "fp8"], "spec.engine.quantization"),
        (["--hf-overrides.quantization_config.quant_method", "fp8"], "spec.engine.quantization"),
        (["--speculative-config", '{"model": "d", "kv_cache_dtype": "fp8"}'], "--kv-cache-dtype"),
        (
            ["--speculative-config", '{"model": "d", "attention_backend": "FLASH_ATTN"}'],
            "--attention-backend",
        ),
        (
            ["--speculative-config", '{"model": "d", "draft_load_config": {"download_dir": "/"}}'],
            "spec.model.cache",
        ),
        (
            ["--speculative-config", '{"model": "d", "draft_tensor_parallel_size": 8}'],
            "spec.accelerator.count",
        ),
        (["--hf-overrides.text_config", '{"num_hidden_layers": 2}'], "spec.model.architecture"),
    ],
)
def test_json_flags_obey_the_rules_of_the_fields_they_override(args: list[str], field: str) -> None:
    with pytest.raises(PlanningError) as error:
        parse_extra_args(args)
    assert field in str(error.value)


def test_hf_overrides_fp8_is_refused_on_a_t4_like_the_quantization_field() -> None:
    t4 = {"type": "t4"}
    with pytest.raises(PlanningError, match="fp8"):
        plan(spec(accelerator=t4, engine={"quantization": "fp8"}))
    with pytest.raises(PlanningError, match=r"spec.engine.quantization"):
        plan(
            spec(
                accelerator=t4,
                engine={"extraArgs": ["--hf-overrides", '{"quantization_config": {"quant_method": "fp8"}}']},
            )
        )


@pytest.mark.parametrize(
    "args",
    [
        ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'],
        ["--speculative-config", '{"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 3}'],
        ["--hf-overrides", '{"rope_theta": 500000}'],
        ["--compilation-config.mode", "3"],
        ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'],
        ["--allow-credentials"],  # CORS: a switch, no value that could be a secret
        ["--otlp-traces-endpoint", "http://collector.monitoring:4317"],
        ["--hf-overrides", '{"eos_token": "</s>", "pad_token": "<pad>", "rope_theta": 500000}'],
        ["--kv-transfer-config", '{"kv_connector_extra_config": {"cache_key": "x"}}'],
    ],
)
def test_json_and_listener_neighbours_that_change_nothing_owned_pass(args: list[str]) -> None:
    assert parse_extra_args(args).args == tuple(args)


# Secrets never echoed: no message quotes the item it refuses.
@pytest.mark.parametrize(
    "args",
    [
        ["--enforce-eager", HF_TOKEN],
        [f"-{HF_TOKEN}"],
        [f"--{HF_TOKEN}"],
        ["--max-num-batched-tokens", HF_TOKEN],
        ["--max-num-batched-tokens", "LEAKED"],
        ["--seed", "LEAKED"],
        ["--kv-cache-dtype", "LEAKED"],
        ["--served_model_name", "LEAKED"],
        ["--kv-transfer-config", '{"LEAKED": 1}'],
        ["--kv-transfer-config.LEAKED", "1"],
        ["--seed.LEAKED", "1"],
        ["--compilation-config", '{"mode": "LEAKED"'],
        [f"--otlp-traces-endpoint=http://user:{HF_TOKEN}@collector:4317"],
        ["--otlp-traces-endpoint", "https://LEAKED@collector:4317"],
        ["--chat-template", HF_TOKEN],
        ["--hf-overrides", json.dumps({"x": HF_TOKEN})],
        ["--kv-transfer-config", json.dumps({"kv_connector_extra_config": {"credentials": "LEAKED"}})],
        ["--kv-transfer-config", json.dumps({"kv_connector_extra_config": {"auth": "LEAKED"}})],
        ["--kv-transfer-config", json.dumps({"kv_connector_extra_config": {"accessToken": "LEAKED"}})],
        ["--model-loader-extra-config", json.dumps({"Authorization": "Bearer LEAKED"})],
        ["--additional-config", json.dumps({"s3": {"aws_secret_access_key": "LEAKED"}})],
        ["--block-size", "-LEAKED.x"],
        ["--middleware", "LEAKED.mod"],
        ["--kv-transfer-config", json.dumps({"kv_connector_module_path": "LEAKED"})],
        ["--max-num-seqs", "LEAKED"],
        ["--otlp-traces-endpoint", "https://collector:4317/v1?access_token=LEAKED"],
        ["--otlp-traces-endpoint", "https://collector:4317/v1?x=1&apiKey=LEAKED"],
        ["--kv-transfer-config.kv_connector_extra_config.password", "LEAKED"],
        ["--lora-modules", "sql=https://user:LEAKED@adapters.example.com/sql"],
    ],
)
def test_no_message_quotes_the_item_it_refuses(args: list[str]) -> None:
    with pytest.raises(PlanningError) as error:
        parse_extra_args(args)
    message = str(error.value)
    assert "LEAKED" not in message
    assert HF_TOKEN not in message
    assert "hf_AbC" not in message


@pytest.mark.parametrize(
    "key",
    ["credentials", "auth", "Authorization", "accessToken", "api_key", "apiKey", "client_secret", "passwd"],
)
def test_the_secret_name_pattern_covers_json_keys(key: str) -> None:
    with pytest.raises(PlanningError, match="named like a secret"):
        parse_extra_args(["--kv-transfer-config", json.dumps({"kv_connector_extra_config": {key: "v"}})])


@pytest.mark.parametrize(
    "extra_args",
    [
        ["--otlp-traces-endpoint", f"http://u:{HF_TOKEN}@c:4317"],
        ["--enforce-eager", HF_TOKEN],
        [f"-{HF_TOKEN}"],
        ["--max-num-batched-tokens", HF_TOKEN],
    ],
)
def test_a_refused_secret_reaches_neither_args_nor_status(extra_args: list[str]) -> None:
    """Refused by the spec itself (as by the CRD's CEL at apply, so never stored), naming no value."""
    body = {
        "metadata": {"name": "m", "namespace": "t"},
        "spec": {"model": {"name": LLAMA_1B}, "engine": {"extraArgs": extra_args}},
    }
    with pytest.raises(InvalidSpecError) as error:
        plan_llamaservice(body, Settings(), None)
    assert "must not carry credentials" in str(error.value)
    assert HF_TOKEN not in str(error.value)
    assert HF_TOKEN[3:12] not in str(error.value)


# Values starting with '-' in every spec field that becomes an argument.
def _string_fields(model: type[Any], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every string field of the spec's models, by its wire path (alias)."""
    found: list[tuple[str, ...]] = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        annotation = info.annotation
        args = getattr(annotation, "__args__", ()) or (annotation,)
        for arg in args:
            if isinstance(arg, type) and hasattr(arg, "model_fields"):
                found += _string_fields(arg, (*path, alias))
            elif arg is str:
                found.append((*path, alias))
    return found


def _with(body: dict[str, Any], path: tuple[str, ...], value: str) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(body))
    node = copy
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return copy


def test_no_spec_string_field_puts_an_option_on_the_command_line() -> None:
    """Every string field of the spec, given `--port=9000`: refused, or it does not reach vLLM's argv as
    an item of its own (where the parser would read it as a flag)."""
    base: dict[str, Any] = {
        "model": {"name": LLAMA_1B, "cache": {"sizeLimit": "20Gi"}},
        "accelerator": {"type": "a10g"},
    }
    fields = _string_fields(LlamaServiceSpec)
    # The fields that become vLLM arguments are among them (a test that sees none would prove nothing).
    assert {("model", "name"), ("model", "servedName"), ("model", "revision")} <= set(fields)
    reached = []
    for path in fields:
        for value in ("--port=9000", "-O3", "-x"):
            body = {"metadata": {"name": "m", "namespace": "t"}, "spec": _with(base, path, value)}
            try:
                _, planned = plan_llamaservice(body, Settings(), None)
            except (InvalidSpecError, PlanningError):
                continue
            if value in planned.vllm_args:
                reached.append(".".join(path))
    assert not reached, f"fields whose '-' values reach vLLM's argv: {reached}"


@pytest.mark.parametrize("field", ["name", "servedName", "revision"])
def test_model_fields_starting_with_a_dash_are_refused(field: str) -> None:
    model: dict[str, Any] = {"name": "org/model", "architecture": _ARCHITECTURE, field: "--port=9000"}
    with pytest.raises(InvalidSpecError, match="must not start with '-'") as error:
        parse_spec({"model": model})
    assert "9000" not in str(error.value)


_ARCHITECTURE = {"layers": 16, "kvHeads": 8, "headDim": 64, "parameters": 1_235_814_400, "maxContext": 131072}


def test_model_name_minus_o3_with_an_architecture_is_refused() -> None:
    with pytest.raises(InvalidSpecError, match="must not start with '-'"):
        parse_spec({"model": {"name": "-O3", "architecture": _ARCHITECTURE}})
