"""The vLLM flag contract (data/vllm_flags.json) against the real parser of the pinned vLLM:
- it is what e2e/vllm/flags.py generates from that parser today (CI fails on drift, as for the CRD);
- whatever the real parser refuses in extraArgs, the pure checker refuses too (it is stricter: no
  abbreviations, no flags the operator owns);
- every value of every enum in the API, on every accelerator family, plans arguments the parser accepts."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from importlib import resources
from typing import Any

import pytest

from llama_operator.api.settings import Settings
from llama_operator.api.spec import MIG_PROFILES_BY_TYPE, AcceleratorType, DType, Quantization
from llama_operator.catalog.vllm_flags import flag_contract
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.extra_args import parse_extra_args
from llama_operator.reconcile.outcome import plan_llamaservice
from tests.vllm_args.test_vllm_parser import REPO, VLLM_PYTHON, _require_vllm, check

pytestmark = pytest.mark.vllm

BASE = ["--model", "/models/m", "--served-model-name", "m", "--host", "0.0.0.0", "--port", "8000"]
HOSTILE: list[list[str]] = [
    ["--por", "9000"],
    ["--hos", "127.0.0.1"],
    ["--ser", "other"],
    ["--max-m", "99999"],
    ["--gp", "0.1"],
    ["--te", "2"],
    ["--do", "/tmp"],
    ["--model.x", "1"],
    ["--help"],
    ["--speculative-model", "x", "--num-speculative-tokens", "banana"],
    ["--max-num-batched-tokens", "lots"],
    ["--kv-cache-dtype", "int3"],
    ["--seed", "1.5"],
    ["--no-such-flag"],
    ["--enforce-eager=yes"],
    ["--compilation-config", "not json"],
    ["--dtype", "float32"],
    ["-q", "awq"],
    ["--api-key", "k"],
    ["--enforce-eager"],
    ["--max-num-batched-tokens", "8k"],
    ["-O3"],
    ["--compilation-config.level", "3"],
    ["--compilation-config.mode", "3"],
    ["--long-prefill-token-threshold", "512"],
    ["-ac.backend", "FLASH_ATTN"],
    ["-ac.bogus", "1"],
    ["--attention-backend", "FLASH_TURBO"],
    ["--attention-backend", "FLASHINFER", "-ac.backend", "TRITON_ATTN"],
    ["--block-size", "0"],
    ["--lora-modules", "sql"],
    ["--moe-backend", "Flashinfer-Cutlass"],
    ["-O", "fast"],
    ["--grpc-port", "50051"],
    ["--kv-transfer-config.kv_conector", "x"],
]
# What vLLM checks beyond its parser and the config fields, out of the contract's reach, with why. The
# contract accepts these values; vLLM may refuse them when the server starts.
BEYOND_THE_CONTRACT = {
    "chat_template": "a template or a path inside the container: only the pod's filesystem can tell",
    "pt_load_map_location": "a device name or a JSON object of device names: checked by LoadConfig",
    "sse_keep_alive_interval": "checked by validate_parsed_serve_args, not by the parser nor a config bound",
}
# A wrong value of each type, and forms every flag must refuse, to try on every flag of the contract.
WRONG_VALUES = ["x", "1.5", "-1", "", "None", "{", "[1]", '{"zz": 1}', "1k", "0", "1.5K"]


def test_the_committed_contract_is_what_the_parser_says() -> None:
    _require_vllm()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    done = subprocess.run(
        [str(VLLM_PYTHON), str(REPO / "e2e" / "vllm" / "flags.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    committed = resources.files("llama_operator").joinpath("data/vllm_flags.json").read_text()
    assert json.loads(done.stdout) == json.loads(committed), "regenerate it: make vllm-flags"


def _refused(extra: list[str]) -> bool:
    try:
        parse_extra_args(extra)
    except PlanningError:
        return True
    return False


def test_what_the_parser_refuses_the_contract_refuses() -> None:
    results = check([BASE + extra for extra in HOSTILE])
    missed = [
        f"{extra}: vLLM says {r['error']}"
        for extra, r in zip(HOSTILE, results, strict=True)
        if not r["ok"] and not _refused(extra)
    ]
    assert not missed, "accepted by the contract, refused by vLLM:\n" + "\n".join(missed)
    # And the contract's own refusals include every measured override (they parse in vLLM, wrongly).
    for extra in HOSTILE[:10]:
        assert _refused(extra), extra


def _enum_product() -> list[tuple[str, dict[str, Any]]]:
    accelerators: list[dict[str, Any]] = [
        {"type": t.value} for t in AcceleratorType if t is not AcceleratorType.AUTO
    ] + [{"type": t.value, "mig": p} for t, profiles in MIG_PROFILES_BY_TYPE.items() for p in profiles]
    cases = []
    for accel, dtype, quantization in itertools.product(accelerators, DType, Quantization):
        spec = {
            "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
            "accelerator": accel,
            "engine": {"dtype": dtype.value, "quantization": quantization.value},
        }
        cases.append((f"{json.dumps(accel)} {dtype.value} {quantization.value}", spec))
    return cases


def test_every_enum_value_on_every_accelerator_plans_arguments_vllm_accepts() -> None:
    planned: list[tuple[str, list[str]]] = []
    refused = 0
    for label, spec in _enum_product():
        body = {"metadata": {"name": "e", "namespace": "t"}, "spec": spec}
        try:
            _, plan = plan_llamaservice(body, Settings(), None)
        except PlanningError:
            refused += 1  # refused with a reason (fp8 below sm_89, bf16 on a T4, ...): nothing reaches vLLM
            continue
        planned.append((label, plan.vllm_args))
    assert len(planned) > 100
    results = check([args for _, args in planned])
    failures = [
        f"{label}: {r['error']}" for (label, _), r in zip(planned, results, strict=True) if not r["ok"]
    ]
    assert not failures, "vLLM rejects planned arguments:\n" + "\n".join(failures)
    print(f"\n{len(planned)} enum combinations planned and parsed, {refused} refused by the planner")


def _every_flag_wrongly() -> list[list[str]]:
    cases: list[list[str]] = []
    for flag in flag_contract().flags():
        name = next(n for n in flag.names if n.startswith("--"))
        if not flag.takes_value:
            cases += [[f"{name}=1"], [name, "1"]]
            continue
        cases += [[name, value] for value in WRONG_VALUES]
        cases += [[name], [f"{name}.zz", "1"], [name[:-1], "1"]]
    return cases


def test_every_flag_given_wrongly_what_vllm_refuses_the_contract_refuses() -> None:
    """Generated from the contract itself, so a flag added by a vLLM upgrade is tried too."""
    cases = _every_flag_wrongly()
    results = check([BASE + extra for extra in cases])
    contract = flag_contract()
    missed = [
        f"{extra}: vLLM says {r['error'][:160]}"
        for extra, r in zip(cases, results, strict=True)
        if not r["ok"]
        and not _refused(extra)
        and (known := contract.lookup(extra[0].split("=", 1)[0].split(".", 1)[0])) is not None
        and known.dest not in BEYOND_THE_CONTRACT
    ]
    assert not missed, f"{len(missed)} accepted by the contract, refused by vLLM:\n" + "\n".join(missed)


def test_every_flag_given_rightly_the_contract_accepts_unless_the_operator_owns_it() -> None:
    """The contract is no stricter than vLLM except where it means to be (owned, secret, unusable)."""
    typical = {
        "int": "1",
        "float": "0.5",
        "human-int": "8k",
        "human-int-or-auto": "auto",
        "json": "{}",
        "json-value": "{}",
        "json-or-str": "x",
        "str": "x",
        "any": "0",
        "lora-module": "sql=/adapters/sql",
    }
    cases: list[list[str]] = []
    for flag in flag_contract().flags():
        name = next(n for n in flag.names if n.startswith("--"))
        if not flag.takes_value:
            cases.append([name])
            continue
        cases.append([name, flag.choices[0] if flag.choices else typical[flag.type]])
        if flag.fields:
            cases.append([f"{name}.{min(flag.fields)}=1"])
    results = check([BASE + extra for extra in cases])
    # "which the planner checks": a --speculative-config key the planner sets for the draft (it follows the
    # engine's), refused so that it is checked against the accelerator once, as the engine's flag.
    refused_on_purpose = (
        "set by the operator",
        "carries a secret",
        "is refused:",
        "which the planner checks",
    )
    too_strict = []
    for extra, r in zip(cases, results, strict=True):
        if not r["ok"]:
            continue
        try:
            parse_extra_args(extra)
        except PlanningError as error:
            if not any(reason in str(error) for reason in refused_on_purpose):
                too_strict.append(f"{extra}: {error}")
    assert not too_strict, "vLLM accepts, the contract refuses:\n" + "\n".join(too_strict)
