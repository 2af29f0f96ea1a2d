"""How the operator runs vLLM, where the planner's arguments and the desired objects must agree: the port
the server listens on (its `--port`, the container port, the Service's target, the probes, the metrics
scrape) and where the model cache is mounted. The pinned vLLM version is the flag contract's
(data/vllm_flags.json, read by planning/extra_args.py): the operator deploys the vLLM whose parser checks
its arguments."""

from __future__ import annotations

VLLM_PORT = 8000
MODEL_CACHE_PATH = "/models"
