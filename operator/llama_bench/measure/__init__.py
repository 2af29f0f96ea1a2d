"""Measuring a running vLLM: `vllm_probe` (the profile, and a trace slice replayed with its own arrival
times through the OpenAI API) and `commands` (the `profile` and `replay` subcommands)."""
