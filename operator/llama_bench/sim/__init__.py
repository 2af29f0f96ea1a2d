"""Offline simulator and benchmark of the autoscalers.

- `accelerators`: per-accelerator step-time parameters (with sources) and models;
- `replica`: one vLLM replica (continuous batching, chunked prefill, KV admission);
- `fleet`: the discrete-event loop, routing, cold starts, draining;
- `metrics`: what policies observe (Prometheus scrapes, queue-proxy concurrency);
- `policies`, `oracle`: the autoscalers behind one interface;
- `trace`, `report`, `scenario`, `bench`, `commands`: replay, measures, the `simulate`/`bench` CLI;
- `tracegen`, `family`, `frontier`: generated traces, the robustness family, the cost-attainment frontier;
- `zero`: scale to zero (an activator holding requests at zero) against the same trace without it.
"""
