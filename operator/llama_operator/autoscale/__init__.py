"""Autoscaling core, pure: `signals` (what is observed), `queueing` (M/M/c estimates), `policy`
(`decide()`). The autoscalers it is compared with are the bench's (`llama_bench.baselines`)."""
