"""The objectives judged: an observed TTFT or TPOT percentile against the SLO, and since when a breach
has persisted.
"""

from __future__ import annotations

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.spec import AutoscalingSpec
from llama_operator.autoscale.signals import Signals
from llama_operator.catalog.vllm import tpot_judged_at


def persistent_breach_since(
    slo_met: bool | None, signals: Signals, state: AutoscalerState, now: float
) -> float | None:
    """Since when the TTFT percentile has been above the SLO at every evaluation with no replica
    starting; None when it is not now (a start resets it: the new replica gets its chance first)."""
    if slo_met is not False or signals.starting_replicas > 0:
        return None
    return state.slo_breach_since if state.slo_breach_since is not None else now


def objective_met(observed: float | None, objective: float | None) -> bool | None:
    """An observed percentile within its objective (at or below it); None when either is missing. The one
    place that judges a latency against its SLO: the policy and the status conditions both ask it."""
    if observed is None or objective is None:
        return None
    return observed <= objective


def tpot_objective_met(observed: float | None, objective: float | None) -> bool | None:
    """`objective_met` for TPOT, the objective judged as it can be read from vLLM's histogram
    (catalog/vllm.py tpot_judged_at)."""
    return objective_met(observed, None if objective is None else tpot_judged_at(objective))


def judge_tpot(spec: AutoscalingSpec, signals: Signals) -> bool | None:
    return tpot_objective_met(signals.tpot_percentile_seconds, spec.slo.tpot_seconds)


def judge_ttft(spec: AutoscalingSpec, signals: Signals) -> bool | None:
    return objective_met(signals.ttft_percentile_seconds, spec.slo.ttft_seconds)


def judge_slo(spec: AutoscalingSpec, signals: Signals) -> bool | None:
    """Both objectives held (False when either is missed; None when neither was observed)."""
    ttft_met = judge_ttft(spec, signals)
    tpot_met = judge_tpot(spec, signals)
    if ttft_met is False or tpot_met is False:
        return False
    if ttft_met is None and tpot_met is None:
        return None
    return True
