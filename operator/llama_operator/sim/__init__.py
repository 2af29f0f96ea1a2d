"""Offline simulator and benchmark of the autoscalers.

- `accelerators`: per-accelerator step-time parameters (with sources) and models;
- `replica`: one vLLM replica (continuous batching, chunked prefill, KV admission);
- `fleet`: the discrete-event loop, routing, cold starts, draining;
- `metrics`: what policies observe (Prometheus scrapes, queue-proxy concurrency);
- `policies`, `oracle`: the autoscalers behind one interface;
- `trace`, `report`, `scenario`, `bench`, `commands`: replay, measures, the `simulate`/`bench` CLI.
"""
