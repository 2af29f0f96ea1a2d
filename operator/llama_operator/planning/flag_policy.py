"""The operator's policy over vLLM's flags in `spec.engine.extraArgs`: the flags it owns or sets by default,
those that change the pod's layout, carry secrets or cannot run, and the JSON keys the planner sizes from,
each with what to do instead. planning/extra_args.py checks extraArgs against them.
"""

from __future__ import annotations

import re

# Flags the operator sets or depends on (by the parser's `dest`, so every alias and dotted sub-key is
# covered), with what to do instead. tests/planning/test_extra_args.py checks that every flag in every
# argument list the planner and the pod builder emit is here or in PLANNER_DEFAULTS.
OWNED_FLAGS: dict[str, str] = {
    "model": "set spec.model.name",
    "served_model_name": "set spec.model.servedName",
    "host": "the operator fixes it (0.0.0.0) for the Service and probes",
    "port": "the operator fixes it (8000) for the Service and probes",
    "uds": "the operator serves on TCP port 8000 for the Service and probes",
    "dtype": "set spec.engine.dtype",
    "max_model_len": "set spec.engine.maxModelLen",
    "max_num_seqs": "set spec.engine.maxNumSeqs",
    "gpu_memory_utilization": "set spec.engine.gpuMemoryUtilization",
    "kv_cache_memory_bytes": "set spec.engine.gpuMemoryUtilization (the planner sizes the KV cache)",
    "tensor_parallel_size": "set spec.accelerator.count",
    "pipeline_parallel_size": "set spec.accelerator.nodes (a replica over several nodes, pipeline parallel)",
    "data_parallel_size": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "quantization": "set spec.engine.quantization",
    "kv_offloading_size": "set spec.engine.kvOffload.cpuBytes (the planner adds it to the pod's memory request and "
    "limit; through extraArgs the pod would be OOM-killed)",
    "kv_offloading_backend": "set spec.engine.kvOffload (the operator runs vLLM's native CPU offloading)",
    "enable_prefix_caching": "set spec.engine.prefixCaching",
    "download_dir": "set spec.model.cache (mounted at the operator's cache path)",
    "revision": "set spec.model.revision",
    "config": "a config file would override flags the operator sizes; pass flags individually",
    # vLLM 0.32 has no shutdown-mode flag: SIGTERM drains for --shutdown-timeout seconds.
    "shutdown_timeout": "the operator derives it from the pod's termination grace period",
    "help": "it prints and exits: the server would never start; see `vllm serve --help` locally",
    "quantization_config": "set spec.engine.quantization (the planner checks the method against the accelerator)",
    # LoRA: the planner sizes the slots from spec.adapters and takes their memory from the KV cache; the
    # operator loads and unloads adapters through vLLM's runtime API and the router routes by adapter.
    "enable_lora": "list the adapters in spec.adapters (the operator turns LoRA on and sizes it)",
    "lora_modules": "list the adapters in spec.adapters (the operator loads them into every replica)",
    "max_loras": "the planner sizes it from spec.adapters (and takes the slots' memory from the KV cache)",
    "max_lora_rank": "set spec.adapters[].rank (the planner takes the next rank vLLM accepts)",
    "max_cpu_loras": "the planner sizes it from spec.adapters",
    "trust_remote_code": "set spec.model.trustRemoteCode (this cluster's config.allowTrustRemoteCode decides "
    "whether it may)",
}
# Flags that change how the pod listens, is probed or is laid out, by dest, with why each is refused: the
# operator's Service and HTTP probes reach one OpenAI-compatible server, in plain HTTP on port 8000 at /, in
# a pod that is one whole engine.
LAYOUT_FLAGS: dict[str, str] = {
    "ssl_keyfile": "the operator's HTTP probes and Service speak plain HTTP to port 8000; terminate TLS at "
    "the gateway or a service mesh",
    "ssl_certfile": "the operator's HTTP probes and Service speak plain HTTP to port 8000; terminate TLS at "
    "the gateway or a service mesh",
    "ssl_ca_certs": "the operator serves plain HTTP (no TLS, so no client certificates); use a service mesh",
    "ssl_cert_reqs": "the operator serves plain HTTP (no TLS, so no client certificates); use a service mesh",
    "ssl_ciphers": "the operator serves plain HTTP (no TLS); terminate TLS at the gateway or a service mesh",
    "enable_ssl_refresh": "the operator serves plain HTTP (no TLS); terminate TLS at the gateway",
    # FastAPI strips the prefix from every request path that starts with it before routing (and vLLM's
    # API-key check reads the stripped path): with /v1, /v1/models no longer resolves; with /health, the probe.
    "root_path": "it re-roots every request path that starts with its prefix (with /v1, /v1/models stops "
    "resolving); the probes and the Service's clients call the server's own paths",
    "h11_max_header_count": "it limits the headers of every request, the probes' included; the operator "
    "keeps vLLM's default",
    "h11_max_incomplete_event_size": "it limits the size of every request, the probes' included; the "
    "operator keeps vLLM's default",
    "headless": "it runs no API server: the probes and the Service would find nothing on port 8000",
    "grpc": "it serves gRPC instead of HTTP on the port: the probes and the Service's clients speak HTTP",
    "tokens_only": "it serves only the tokens endpoint: the Service's OpenAI API would be gone",
    "api_server_count": "one API server per pod: the operator scales pods (spec.replicas, spec.autoscaling)",
    # Control endpoints opened to every API client (vLLM attaches their routers when these are set).
    "profiler_config": "it opens /start_profile and /stop_profile to every API client, and the traces fill "
    "the pod's disk; profile vLLM outside the cluster",
    "enable_fault_tolerance": "it opens /fault_tolerance/apply, an engine control endpoint, to every API client",
    "allowed_local_media_path": "it lets API clients read files of the pod (the model cache, mounted "
    "Secrets); give media by URL",
    "nnodes": "one pod is one whole engine: multi-node layouts are not offered",
    "node_rank": "one pod is one whole engine: multi-node layouts are not offered",
    "master_addr": "one pod is one whole engine: multi-node layouts are not offered",
    "master_port": "one pod is one whole engine: multi-node layouts are not offered",
    "distributed_executor_backend": "the pod runs vLLM's own multiprocessing backend on its own GPUs; Ray "
    "clusters are not offered",
    "device_ids": "the pod sees the GPUs Kubernetes allocated to it; set spec.accelerator.count",
    "prefill_context_parallel_size": "it multiplies the GPUs one engine needs; set spec.accelerator.count",
    "data_parallel_rank": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_start_rank": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_size_local": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_address": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_rpc_port": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_backend": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_hybrid_lb": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_external_lb": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_multi_port_external_lb": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "data_parallel_supervisor_port": "set spec.replicas or spec.autoscaling (one engine per pod)",
}
# Keys of --hf-overrides (the model's Hugging Face config, at any depth) that the planner sized from or that
# name code, with the field that sets them: a T4 refuses engine.quantization fp8, and must refuse it here too.
HF_OVERRIDE_KEYS: dict[str, str] = {
    "quantization_config": "set spec.engine.quantization (checked against the accelerator)",
    "torch_dtype": "set spec.engine.dtype (checked against the accelerator)",
    "dtype": "set spec.engine.dtype (checked against the accelerator)",
    "max_position_embeddings": "set spec.engine.maxModelLen (the planner sizes the KV cache for it)",
    "max_sequence_length": "set spec.engine.maxModelLen (the planner sizes the KV cache for it)",
    "seq_length": "set spec.engine.maxModelLen (the planner sizes the KV cache for it)",
    "rope_scaling": "set spec.engine.maxModelLen (the planner sizes the KV cache for it)",
    "rope_parameters": "set spec.engine.maxModelLen (the planner sizes the KV cache for it)",
    "sliding_window": "the planner sizes the KV cache from the model's own attention window",
    "architectures": "set spec.model.name (and spec.model.architecture for a model the catalog lacks)",
    "model_type": "set spec.model.name (and spec.model.architecture for a model the catalog lacks)",
    "num_hidden_layers": "set spec.model.architecture.layers (the planner sizes the KV cache from it)",
    "num_layers": "set spec.model.architecture.layers (the planner sizes the KV cache from it)",
    "num_key_value_heads": "set spec.model.architecture.kvHeads (the planner sizes the KV cache from it)",
    "num_attention_heads": "set spec.model.architecture (the planner sizes the KV cache from it)",
    "head_dim": "set spec.model.architecture.headDim (the planner sizes the KV cache from it)",
    "hidden_size": "set spec.model.architecture (the planner sizes the weights from it)",
    "intermediate_size": "set spec.model.architecture.parameters (the planner sizes the weights from it)",
    "vocab_size": "set spec.model.architecture.parameters (the planner sizes the weights from it)",
    "auto_map": "it names remote code to import; set spec.model.trustRemoteCode where the platform allows it",
}
# Keys of the free-form JSON flags (--speculative-config's draft settings) that the planner checks or
# chooses for the engine: the draft follows the target's when they are unset, so they are refused here rather
# than left unchecked (an fp8 KV cache for the draft on a T4 would crash the pod as the engine's would).
PLANNED_JSON_KEYS: dict[str, str] = {
    "kv_cache_dtype": "give it as --kv-cache-dtype (checked against the accelerator); the draft follows it",
    "attention_backend": "give it as --attention-backend (checked against the accelerator); the draft "
    "follows it",
    "enforce_eager": "give it as --enforce-eager; the draft follows it",
    "draft_load_config": "the draft loads as the model does (spec.model.cache)",
    "draft_tensor_parallel_size": "set spec.accelerator.count; the draft follows it",
}
# Keys of any JSON flag (at any depth) that would set again what an owned flag sets; by the owned flag's
# dest. Exempt: what a JSON flag means for its own part (the draft model of --speculative-config).
OWN_KEYS_OF_JSON_FLAGS: dict[str, frozenset[str]] = {"speculative_config": frozenset({"model", "revision"})}
# Flags the planner sets only when extraArgs does not (it reads them from extraArgs instead).
PLANNER_DEFAULTS: dict[str, str] = {
    "attention_backend": "the planner picks one on GPUs without FlashAttention-2 unless extraArgs names one",
    "max_num_batched_tokens": "the planner sizes it for an autoscaled service's TTFT/TPOT objective unless "
    "extraArgs gives it",
    "enforce_eager": "the planner turns CUDA graphs off where their memory would starve the KV cache unless "
    "extraArgs says --enforce-eager or --no-enforce-eager",
}
# Flags whose value is a secret, by dest: a value in extraArgs would be stored in the LlamaService.
SECRET_FLAGS: dict[str, str] = {
    "hf_token": "set spec.model.tokenSecretRef (a Secret key, exposed to vLLM as HF_TOKEN)",
    "api_key": "set spec.engine.apiKeySecretRef (a Secret key, exposed to vLLM as VLLM_API_KEY)",
}
SECRET_FIX = "keep secrets in a Secret: spec.model.tokenSecretRef, spec.engine.apiKeySecretRef"
# Any other flag, sub-key or JSON key whose name ends in one of these words is taken to carry a secret
# (apiKey and accessToken as well as api_key and access-token).
SECRET_NAME = re.compile(
    r"(token|key|keys|secret|secrets|password|passwd|passphrase|pwd|credential|credentials|creds|auth|"
    r"authorization|cookie|bearer|private[-_]?key|sas)$",
    re.IGNORECASE,
)
# Names ending so that are not secrets: vLLM's and Hugging Face's own keys (a tokenizer's special tokens,
# lookup keys).
NOT_SECRET_NAMES = re.compile(
    r"((^|[-_.])(bos|eos|pad|unk|sep|cls|mask|image|video|audio|think|start|end|special|sot|eot)[-_]?token|"
    r"(hash|cache|sort|partition|routing|group|prefix|lora|monkey)[-_]?key)$",
    re.IGNORECASE,
)
# Credential-shaped values and URL userinfo: api/secrets.py (the CRD refuses them at apply too).
# A URL in a value, whose query parameters' names are checked too (`?access_token=...`).
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"']+")
# Flags the parser takes but the pod cannot run with, by dest.
UNUSABLE_FLAGS: dict[str, str] = {
    "grpc_port": "vLLM serves gRPC only with VLLM_USE_RUST_FRONTEND=1, which the operator's pod does not set",
}
# Names that are not vLLM server flags but read as such, with what they would do.
NOT_SERVER_FLAGS = {"--version": "it prints and exits: the server would never start"}

OPTIMIZATION_LEVEL = "--optimization-level"
SPACED_OPTIMIZATION_LEVELS = frozenset({"0", "1", "2", "3"})
KV_CACHE_DTYPE = "kv_cache_dtype"
ATTENTION_BACKEND = "attention_backend"
ATTENTION_CONFIG = "attention_config"
NUM_GPU_BLOCKS_OVERRIDE = "num_gpu_blocks_override"
MAX_NUM_BATCHED_TOKENS = "max_num_batched_tokens"
CPU_OFFLOAD_GB = "cpu_offload_gb"
ENFORCE_EAGER = "enforce_eager"
