"""Llama 3.2 1B in fp16 as the design brief sizes it (2.47 GB of weights, 32 KiB of KV cache per token, 1.24 B
parameters) on a catalog accelerator: the replica the step-model tests reason about, most of them on a T4."""

from __future__ import annotations

from llama_operator.catalog.accelerators import BUILTIN_CATALOG
from llama_operator.catalog.performance import CATALOG_FACTORS, Hardware, calibrated_step_model


def llama_1b_hardware(accelerator: str, devices: int = 1) -> Hardware:
    """On `devices` of the accelerator (tensor parallel sums their bandwidth and compute)."""
    accel = BUILTIN_CATALOG.get(accelerator)
    return Hardware(
        bandwidth_bytes_per_s=accel.bandwidth_bytes_per_s * devices,
        fp16_tflops=accel.fp16_dense_tflops * devices,
        weight_bytes=2.47e9,
        kv_bytes_per_token=32768,
        parameters=1.24e9,
    )


LLAMA_1B_ON_T4 = llama_1b_hardware("t4")
T4_1B = calibrated_step_model(LLAMA_1B_ON_T4, CATALOG_FACTORS)  # its step model with the catalog's factors
