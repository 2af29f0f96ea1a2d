"""What the autoscaler records in status.autoscaling: observations, the last decision, and the policy's
state (kept here, in the CR, so an operator restart loses nothing)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema

from llama_operator.api.base import WireModel
from llama_operator.api.times import micro_rfc3339


def unix_time(value: object) -> object:
    """Unix seconds from an RFC 3339 string, as status now holds times; a number (as status held them
    before) passes as it is, so an upgrade reads what the previous version wrote."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ValueError(
                f"{value!r} is not an RFC 3339 time (e.g. 2026-01-02T03:04:05.000006Z)"
            ) from None
    return value


# A time the pure policy does arithmetic on (unix seconds, a float) and status shows as RFC 3339.
Time = Annotated[
    float,
    BeforeValidator(unix_time),
    PlainSerializer(micro_rfc3339, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class Recommendation(WireModel):
    """One past replica recommendation, kept for the scale-down stabilization window."""

    time: Annotated[Time, Field(description="When it was recommended.")]
    replicas: Annotated[int, Field(description="Replicas recommended then.")]
    queued: Annotated[
        bool | None,
        Field(
            description="True when the queue-depth target set it (a backlog seen at one scrape): held for "
            "the stabilization window, but not taken as a sign that the load comes in bursts."
        ),
    ] = None
    confirming: Annotated[
        bool | None,
        Field(
            description="True when it was a rise within the rate window's noise, held until it had lasted "
            "(a replica's worth of noise, not a burst): not taken as a sign that the load comes in bursts."
        ),
    ] = None
    ahead: Annotated[
        int | None,
        Field(
            description="Replicas taken beyond the load's need because the load was climbing (its third "
            "rise within the stabilization window): held like the rest, but not counted as a rise of the "
            "load.",
            ge=1,
        ),
    ] = None


class ScalingDecision(WireModel):
    """The autoscaler's last decision."""

    time: Annotated[str, Field(description="When it was made (RFC 3339).")]
    from_replicas: Annotated[int, Field(description="Replicas before.")]
    to_replicas: Annotated[int, Field(description="Replicas decided.")]
    reason: Annotated[str, Field(description="Why.")]


class StepCalibration(WireModel):
    """The step model fitted to the hardware the service really runs on (autoscale/calibration.py), beside
    the catalog's estimates: the policy sizes decode and prefill with the calibrated figures."""

    observations: Annotated[
        float,
        Field(description="Observations (one-minute windows) the fit holds, older ones discounted.", ge=0),
    ]
    bandwidth_efficiency: Annotated[
        float, Field(description="Calibrated share of the data-sheet memory bandwidth a decode step reaches.")
    ]
    compute_efficiency: Annotated[
        float, Field(description="Calibrated share of the data-sheet FLOPS a prompt chunk reaches.")
    ]
    step_overhead_seconds: Annotated[float, Field(description="Calibrated fixed time per engine step.")]
    catalog_bandwidth_efficiency: Annotated[float, Field(description="The catalog's estimate of it.")]
    catalog_compute_efficiency: Annotated[float, Field(description="The catalog's estimate of it.")]
    catalog_step_overhead_seconds: Annotated[float, Field(description="The catalog's estimate of it.")]
    sums: Annotated[
        list[float],
        Field(description="The fit's weighted normal equations, kept so that a restart loses nothing."),
    ] = Field(default_factory=list)


class ErrorBudget(WireModel):
    """The error-budget controller's memory (autoscale/budget.py): how the service has kept its objective
    lately, from its own TTFT histogram, and the sizing that follows from it."""

    requests_long: Annotated[
        float,
        Field(description="Requests seen, decayed over about an hour (the page alert's long window).", ge=0),
    ] = 0.0
    missed_long: Annotated[
        float,
        Field(description="Of those, requests whose TTFT missed the objective's histogram bucket.", ge=0),
    ] = 0.0
    requests_short: Annotated[
        float, Field(description="Requests seen, decayed over about five minutes (its short window).", ge=0)
    ] = 0.0
    missed_short: Annotated[
        float, Field(description="Of those, requests that missed the objective.", ge=0)
    ] = 0.0
    slo_share: Annotated[
        float,
        Field(
            description="Share of the TTFT objective the replicas are sized to keep a request's wait under "
            "(1 - the headroom): lowered (more replicas) while the budget burns faster than the objective "
            "allows over both windows, raised back toward the cheapest sizing while it burns at under half "
            "that pace.",
            gt=0,
            le=1,
        ),
    ]
    updated: Annotated[Time, Field(description="When requests were last counted.")]


class AutoscalerState(WireModel):
    """The policy's memory between evaluations."""

    recommendations: Annotated[
        list[Recommendation], Field(description="Recent recommendations (stabilization window).")
    ] = Field(default_factory=list)
    last_scale_time: Annotated[Time | None, Field(description="When replicas last changed.")] = None
    last_scale_up_time: Annotated[Time | None, Field(description="When replicas were last added.")] = None
    recent_scale_ups: Annotated[
        list[Time],
        Field(
            description="When replicas were added within the last stabilization window. Scale-ups within one "
            "signal window of each other are one rise; a third rise within it, with the need's floor risen, "
            "is a climb, taken one replica ahead."
        ),
    ] = Field(default_factory=list)
    last_scale_down_time: Annotated[
        Time | None,
        Field(
            description="When replicas were last removed (spec.autoscaling.scaleDownIntervalSeconds apart)."
        ),
    ] = None
    no_data_since: Annotated[Time | None, Field(description="When signals went missing.")] = None
    last_starting_time: Annotated[
        Time | None,
        Field(
            description="Time of the last evaluation that saw replicas starting: a queue seen within "
            "one signal window after that is the new replicas' to drain, not a reason for more."
        ),
    ] = None
    slo_breach_since: Annotated[
        Time | None,
        Field(
            description="Time since which every evaluation has seen the TTFT percentile above the SLO "
            "with no replica starting (a persistent breach)."
        ),
    ] = None
    capacity_tokens_per_second: Annotated[
        float | None,
        Field(
            description="Estimated prompt tokens per second one replica can prefill: seeded from the "
            "accelerator catalog when known, then calibrated by one bounded step per window: raised when "
            "a replica serves more, or TTFT stays well inside the SLO where the model asked for more "
            "replicas; lowered when the SLO breaks where the model said the replicas were enough.",
            gt=0,
        ),
    ] = None
    capacity_prior_tokens_per_second: Annotated[
        float | None,
        Field(
            description="The accelerator catalog's figure for that capacity, if known: the learned estimate "
            "stays within a band around it, so bursts cannot talk it into nonsense.",
            gt=0,
        ),
    ] = None
    decode_step_seconds: Annotated[
        float | None,
        Field(
            description="The plan's decode step time with nothing but the weights to read: with "
            "decodeSecondsPerContextToken, the batch a replica decodes within the TPOT objective.",
            gt=0,
        ),
    ] = None
    decode_seconds_per_context_token: Annotated[
        float | None,
        Field(description="The plan's decode step time per token of context read.", gt=0),
    ] = None
    prefill_seconds_per_token: Annotated[
        float | None,
        Field(description="The plan's step time per prompt token computed.", gt=0),
    ] = None
    seconds_per_step_token: Annotated[
        float | None,
        Field(description="The plan's step time per token of a step that tensor parallelism adds.", gt=0),
    ] = None
    chunk_tokens: Annotated[
        int | None,
        Field(
            description="The prompt chunk a step carries beside a full batch: the plan's step budget "
            "(--max-num-batched-tokens) less maxNumSeqs.",
            ge=1,
        ),
    ] = None
    max_num_seqs: Annotated[
        int | None,
        Field(
            description="The plan's --max-num-seqs: a replica decodes at most this many sequences at once, "
            "whatever batch the TPOT objective would allow.",
            ge=1,
        ),
    ] = None
    kv_cache_tokens: Annotated[
        int | None,
        Field(
            description="The plan's KV-cache capacity of one replica, in tokens: with the KV-cache usage and "
            "the running requests, the context a decoding sequence holds.",
            ge=1,
        ),
    ] = None
    plan_factors: Annotated[
        list[float] | None,
        Field(
            description="The efficiency factors the plan's step figures were built with (bandwidth and "
            "compute efficiency, fixed time per step), where they were measured on the replicas "
            "(status.plan.measuredSteps); unset: the catalog's. The calibration divides them out.",
            min_length=3,
            max_length=3,
        ),
    ] = None
    capacity_corrected_time: Annotated[
        Time | None, Field(description="When the capacity estimate was last lowered.")
    ] = None
    idle_since: Annotated[
        Time | None,
        Field(
            description="Since when every evaluation has seen the service idle (metrics present, no "
            "request): with minReplicas 0, scaleToZeroAfterSeconds counts from here."
        ),
    ] = None
    scaled_to_zero_time: Annotated[
        Time | None,
        Field(
            description="When the autoscaler last removed the last replica: a request held by the "
            "activator after this wakes the service."
        ),
    ] = None
    activation_requested_time: Annotated[
        Time | None,
        Field(
            description="The held request's time that woke the service from zero, until a replica is ready."
        ),
    ] = None
    burst_since: Annotated[
        Time | None,
        Field(
            description="Since when every evaluation has seen the load of the burst window (a scrape or two) "
            "beyond the noise of the rate window's: a burst, met at once once confirmed, and the replicas "
            "it needs are held while it lasts."
        ),
    ] = None
    decided_replicas: Annotated[
        int | None,
        Field(
            description="The replica count the autoscaler last decided. A count nobody decided (a hand "
            "scale) is never taken as demand: past the bounds the service goes back to this decision.",
            ge=0,
        ),
    ] = None
    step_calibration: Annotated[
        StepCalibration | None,
        Field(description="The plan's step model calibrated from the replicas' own vLLM series."),
    ] = None
    error_budget: Annotated[
        ErrorBudget | None,
        Field(description="The error-budget controller's memory: the objective kept lately, and the sizing."),
    ] = None


class AutoscalingStatus(WireModel):
    """Observed signals and the autoscaler's decisions."""

    desired_replicas: Annotated[int | None, Field(description="Replicas the autoscaler wants.")] = None
    observed_ttft_seconds: Annotated[
        float | None, Field(description="TTFT at the SLO percentile over the last window, in seconds.")
    ] = None
    observed_tpot_seconds: Annotated[
        float | None,
        Field(
            description="TPOT (inter-token latency) at the SLO percentile over the last window, in seconds."
        ),
    ] = None
    ttft: Annotated[
        str | None,
        Field(
            description="observedTtftSeconds for people, with its unit (440ms, 1.25s): kubectl's TTFT column."
        ),
    ] = None
    tpot: Annotated[
        str | None,
        Field(description="observedTpotSeconds for people, with its unit (61ms): the TPOT column."),
    ] = None
    slo: Annotated[
        str | None,
        Field(description="The objective as written in spec (p95 TTFT <= 1s, TPOT <= 50ms): the SLO column."),
    ] = None
    observed_queue_depth: Annotated[float | None, Field(description="Requests waiting, all replicas.")] = None
    observed_queue_per_replica: Annotated[
        float | None, Field(description="Requests waiting per ready replica.")
    ] = None
    observed_request_rate: Annotated[float | None, Field(description="Requests per second.")] = None
    last_decision: Annotated[ScalingDecision | None, Field(description="The last decision.")] = None
    last_activation_seconds: Annotated[
        float | None,
        Field(
            description="The last wake from zero: seconds from the first request the activator held to "
            "its first token (the cold start users paid), as the activator measured it."
        ),
    ] = None
    last_activation: Annotated[
        str | None,
        Field(description="lastActivationSeconds for people, with its unit (48.2s): the Wake column."),
    ] = None
    last_activation_time: Annotated[
        str | None, Field(description="When that first token came (RFC 3339).")
    ] = None
    last_reason: Annotated[str | None, Field(description="Reason given at the last evaluation.")] = None
    last_evaluation_time: Annotated[
        str | None, Field(description="When signals were last evaluated (RFC 3339).")
    ] = None
    state: Annotated[AutoscalerState, Field(description="Policy state.")] = Field(
        default_factory=AutoscalerState
    )
