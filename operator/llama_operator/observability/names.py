"""Metric and label names the dashboard and the rules read.

Operator names are the contract of infra/metrics.py (a test checks each one against its registry); vLLM
names are those of the pinned vLLM, spelled once in catalog/vllm.py (a test checks each one against a real
server's /metrics)."""

from __future__ import annotations

from llama_operator.catalog import vllm

# Labels the operator's PodMonitor puts on vLLM series, and the operator puts on its per-service series.
NS = "namespace"
SVC = "llamaservice"
BY_SERVICE = f"{NS}, {SVC}"

# vLLM (V1 engine) series, spelled in catalog/vllm.py (the autoscaler's queries and the bench read them
# too). Histograms are named by family; the queries add _bucket/_count.
VLLM_TTFT = vllm.VLLM_TTFT  # includes the time queued
VLLM_ITL = vllm.VLLM_ITL  # TPOT (was time_per_output_token_seconds)
VLLM_QUEUE_TIME = vllm.VLLM_QUEUE_TIME
VLLM_WAITING = vllm.VLLM_WAITING
VLLM_RUNNING = vllm.VLLM_RUNNING
VLLM_PROMPT_TOKENS = vllm.VLLM_PROMPT_TOKENS
VLLM_GENERATION_TOKENS = vllm.VLLM_GENERATION_TOKENS
VLLM_PREEMPTIONS = vllm.VLLM_PREEMPTIONS
VLLM_KV_CACHE = vllm.KV_CACHE_METRICS[0]
# Older vLLMs (an image the user pinned) export the KV-cache usage under its former name: the panels
# read either, as the autoscaler does.
VLLM_KV_CACHE_ANY = "|".join(vllm.KV_CACHE_METRICS)
VLLM_LEGACY_NAMES = frozenset(vllm.KV_CACHE_METRICS[1:])

# The operator's own series (defined in infra/metrics.py with these names; spelled nowhere else).
OPERATOR_PREFIX = "llama_operator_"
OP_INFO = "llama_operator_info"
OP_LEADER = "llama_operator_leader"
OP_LEADER_ELECTION_BLOCKED = "llama_operator_leader_election_blocked"
OP_RECONCILES = "llama_operator_reconcile_total"
OP_RECONCILE_SECONDS = "llama_operator_reconcile_duration_seconds"
OP_WRITES = "llama_operator_object_writes_total"
OP_API_ERRORS = "llama_operator_api_errors_total"
OP_QUEUE_DEPTH = "llama_operator_workqueue_depth"
OP_PLAN_REFUSALS = "llama_operator_plan_refusals_total"
OP_DESIRED = "llama_operator_desired_replicas"
OP_CURRENT = "llama_operator_current_replicas"
OP_READY = "llama_operator_ready_replicas"
OP_MIN = "llama_operator_min_replicas"
OP_MAX = "llama_operator_max_replicas"
OP_DECISIONS = "llama_operator_autoscaler_decisions_total"
OP_TTFT_OBSERVED = "llama_operator_ttft_observed_seconds"
OP_SLO_TTFT = "llama_operator_slo_ttft_seconds"
OP_SLO_OBJECTIVE = "llama_operator_slo_objective_ratio"  # spec.autoscaling.slo.objective: 0.99
OP_SLO_WINDOW = "llama_operator_slo_objective_window_seconds"  # spec.autoscaling.slo.objectiveWindow
OP_SLO_TPOT = "llama_operator_slo_tpot_seconds"
OP_SLO_MET = "llama_operator_slo_met"
OP_NO_DATA = "llama_operator_signal_no_data_seconds"
OP_GPUS = "llama_operator_gpus"
OP_GPU_PRICE = "llama_operator_gpu_price_per_hour"
OP_GPU_SECONDS = "llama_operator_gpu_seconds_total"
OP_SLO_BOUND = "llama_operator_slo_ttft_bound_info"  # label `bound`: vLLM's TTFT `le` within the SLO
OP_TPOT_BOUND = "llama_operator_slo_tpot_bound_info"  # label `bound`: vLLM's ITL `le` within the SLO
OP_SERVICE_READY = "llama_operator_llamaservice_ready"
OP_SERVICE_DEGRADED = "llama_operator_llamaservice_degraded"
OP_UNKNOWN_GPU_NODES = "llama_operator_unknown_gpu_nodes"
OP_CYCLE_SECONDS = "llama_operator_autoscaler_cycle_duration_seconds"
OP_REFRESH_BACKLOG = "llama_operator_autoscaler_refresh_backlog"
OP_PROMETHEUS_ERRORS = "llama_operator_prometheus_errors_total"
OP_SCALED_TO_ZERO = "llama_operator_scaled_to_zero"
OP_ACTIVATION_SECONDS = "llama_operator_activation_seconds"
# The per-LlamaService gauges of one autoscaler cycle, by the key infra/metrics.py files them under.
PER_SERVICE_GAUGES: dict[str, str] = {
    "desired_replicas": OP_DESIRED,
    "current_replicas": OP_CURRENT,
    "ready_replicas": OP_READY,
    "min_replicas": OP_MIN,
    "max_replicas": OP_MAX,
    "ttft_observed_seconds": OP_TTFT_OBSERVED,
    "slo_ttft_seconds": OP_SLO_TTFT,
    "slo_objective_ratio": OP_SLO_OBJECTIVE,
    "slo_objective_window_seconds": OP_SLO_WINDOW,
    "slo_met": OP_SLO_MET,
    "signal_no_data_seconds": OP_NO_DATA,
    "scaled_to_zero": OP_SCALED_TO_ZERO,
    "activation_seconds": OP_ACTIVATION_SECONDS,
    "slo_tpot_seconds": OP_SLO_TPOT,
    "gpus": OP_GPUS,
    "gpu_price_per_hour": OP_GPU_PRICE,
}

# The router's series (router/metrics.py).
ROUTER_HELD = "llama_router_held_requests"
ROUTER_INFLIGHT = "llama_router_inflight_requests"
ROUTER_REQUESTS = "llama_router_requests_total"
ROUTER_PICKS = "llama_router_picks_total"
ROUTER_REJECTED = "llama_router_rejected_total"
ROUTER_ADDED_LATENCY = "llama_router_added_latency_seconds"
ROUTER_ACTIVATION_SECONDS = "llama_router_activation_seconds"
ROUTER_HOLD_SECONDS = "llama_router_hold_seconds"
ROUTER_DEMAND_REPORTS = "llama_router_demand_reports_total"
ROUTER_MODEL_REQUESTS = "llama_router_model_requests_total"
ROUTER_ADAPTER_PICKS = "llama_router_adapter_picks_total"
ROUTER_NAMES = (ROUTER_HELD, ROUTER_REQUESTS, ROUTER_ACTIVATION_SECONDS)

# Prometheus' own series.
PROMETHEUS_UP = "up"
