"""The error-budget controller: the objective (spec.autoscaling.slo.objective) kept by the service's own
recent attainment.

Each evaluation counts the requests of the last interval and those whose TTFT missed the objective's
histogram bucket (Signals.within_slo_request_rate, the vLLM histogram the burn-rate alerts read), in two
decayed sums: about an hour and about five minutes, the page alert's long and short windows. The burn is
the share missed over the error budget (1 - objective): 1 spends the budget exactly over the objective's
window. While both windows burn faster than 1 the share of the TTFT objective a request's wait is sized
under (PolicyTuning.slo_headroom; the headroom is the rest) is lowered, so the same load takes more
replicas; while the long window burns at under half the pace it is raised back toward the cheapest sizing
the tuning allows. Between the two it stays: a controller that moved on every wobble would trade replicas for noise.

The memory lives in status (AutoscalerState.error_budget): a restart loses nothing. No request counted
(idle, or no histogram), nothing moves and nothing is written: 1,000 services at rest cost nothing here.
"""

from __future__ import annotations

import math

from llama_operator.api.autoscaling import ErrorBudget
from llama_operator.api.spec import DEFAULT_SLO_OBJECTIVE, AutoscalingSpec
from llama_operator.autoscale.decision import PolicyTuning
from llama_operator.autoscale.signals import Signals, SignalStatus

LONG_WINDOW_SECONDS = 3600.0  # the page alert's long window (1h)
SHORT_WINDOW_SECONDS = 300.0  # and its short one (5m)


def burn(missed: float, requests: float, objective: float) -> float | None:
    """How many times faster than the objective allows requests missed it (None: none counted)."""
    if requests <= 0:
        return None
    return (missed / requests) / max(1.0 - objective, 1e-9)


def sizing_share(budget: ErrorBudget | None, tuning: PolicyTuning) -> float:
    """The share of the TTFT objective the need is sized with (PolicyTuning.slo_headroom): the
    controller's where it runs, else the tuning's."""
    if budget is None or tuning.budget_share_range is None:
        return tuning.slo_headroom
    return budget.slo_share


def update_budget(
    spec: AutoscalingSpec, signals: Signals, budget: ErrorBudget | None, now: float, tuning: PolicyTuning
) -> ErrorBudget | None:
    """The controller's memory after this evaluation; unchanged when it counted nothing."""
    if tuning.budget_share_range is None:
        return None
    within = signals.within_slo_request_rate
    rate = signals.request_rate
    if signals.status is not SignalStatus.OK or within is None or rate <= 0:
        return budget
    if budget is None:
        budget = ErrorBudget(slo_share=tuning.slo_headroom, updated=now)
    # The interval since the last count, at most one rate window (a gap is not counted as load).
    seconds = min(max(now - budget.updated, 0.0), signals.window_seconds)
    if seconds <= 0:
        return budget
    requests = rate * seconds
    missed = max(rate - within, 0.0) * seconds
    keep_long = math.exp(-seconds / LONG_WINDOW_SECONDS)
    keep_short = math.exp(-seconds / SHORT_WINDOW_SECONDS)
    requests_long = budget.requests_long * keep_long + requests
    missed_long = budget.missed_long * keep_long + missed
    requests_short = budget.requests_short * keep_short + requests
    missed_short = budget.missed_short * keep_short + missed
    objective = spec.slo.objective_ratio(DEFAULT_SLO_OBJECTIVE)
    long_burn = burn(missed_long, requests_long, objective)
    short_burn = burn(missed_short, requests_short, objective)
    low, high = tuning.budget_share_range
    share = budget.slo_share
    if long_burn is not None and short_burn is not None and long_burn > 1.0 and short_burn > 1.0:
        share = max(low, share - tuning.budget_tighten_per_minute * seconds / 60.0)
    elif long_burn is not None and long_burn < 0.5:
        share = min(high, share + tuning.budget_relax_per_minute * seconds / 60.0)
    return ErrorBudget(
        requests_long=requests_long,
        missed_long=missed_long,
        requests_short=requests_short,
        missed_short=missed_short,
        slo_share=share,
        updated=now,
    )
