"""llama-operator: serve Llama models with vLLM on the GPU that fits, at the TTFT SLO, at the lowest cost."""

__version__ = "0.1.0"
