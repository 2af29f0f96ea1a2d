"""What the SLO policy decides (`Decision`), and the knobs it decides with that are not the user's
(`PolicyTuning`).
"""

from __future__ import annotations

from dataclasses import dataclass

from llama_operator.api.autoscaling import AutoscalerState


@dataclass(frozen=True, slots=True)
class PolicyTuning:
    """Knobs of the policy that are not part of the user's contract."""

    slo_headroom: float = 0.5  # size for TTFT <= headroom * SLO at the percentile, leaving room for bursts
    max_utilization: float = 0.8  # never plan a replica's prefill above this share of its capacity
    backlog_drain_seconds: float = 20.0  # a queue found waiting should be gone within this
    kv_usage_target: float = 0.85  # KV cache usage per replica above which replicas are added
    capacity_correction: float = 0.9  # factor applied to the capacity estimate when the model is found wrong
    # Learned capacity stays within this band of the prior. Its floor is low enough for the effective
    # prefill rate of replicas whose steps also read long decode contexts (long prompts and outputs).
    capacity_band: tuple[float, float] = (0.4, 1.5)
    max_scale_down_fraction: float = 0.5  # at most this share of replicas removed in one step
    burst_window_factor: float = 3.0  # stabilization stretch when the load comes in bursts
    burst_memory_factor: float = 6.0  # bursts within this many windows make the load bursty
    burst_rise: int = 2  # a rise of the need by this many replicas at once counts as a burst
    burst_count: int = 1  # this many bursts within the burst memory make the load bursty
    burst_rise_seconds: float = 60.0  # ... a rise by burst_rise within this many seconds (0: at once)
    # A rise of at most `confirm_rise` replicas that the current replicas would serve at the request rate
    # less `confirm_noise_sigmas` Poisson standard deviations is taken only once the need has stood that
    # high for `scale_up_confirm_seconds`: a 20 s rate window of Poisson arrivals and varied prompts swings
    # by a replica's worth on its own. A rise beyond the noise (a flash crowd), a larger rise, a queue over
    # target and a broken SLO act at once.
    confirm_rise: int = 1
    scale_up_confirm_seconds: float = 30.0
    confirm_noise_sigmas: float = 2.0
    # The request at the percentile prompt length must wait at most this share of the SLO less its own
    # prefill (vllm:request_prompt_tokens); None: size from the mean prompt only. Below 1: a long prompt's
    # prefill shares its steps with the running decodes (chunked prefill), so it takes longer than its
    # tokens over the prefill capacity.
    prompt_tail_headroom: float | None = 0.9
    # Replicas are sized so that this share of the objective's error budget (1 - spec.slo.objective: 1 % of
    # requests at 0.99) waits past the wait budget (headroom * SLO less the prefill). The objective is the
    # promise, so a looser one buys fewer replicas. At the default 0.99 and a p95 SLO this is the 1 % that
    # sizing for a fifth of the percentile's tail gave before: each one-minute window's percentile is a
    # sample of a few hundred requests, and sized at exactly the percentile's tail about half the windows of
    # a steady load ended above it.
    budget_tail_share: float = 1.0
    # The burst response (Knative's panic mode in spirit): the load of the burst window (a scrape or two,
    # Signals.burst_*), less this many Poisson standard deviations of its count, sizes the replicas at
    # once when it needs more than the rate window's load and the replicas there are, and holds the
    # replicas it needs while it lasts. None: off.
    burst_noise_sigmas: float | None = 2.0
    # ... once every evaluation for this long has seen a burst: a single burst window beyond 2 sigmas
    # comes by chance a few times an hour at a steady load; two in a row do not.
    burst_confirm_seconds: float = 5.0
    # TPOT: a step carrying a prompt chunk (--max-num-batched-tokens less the batch) that the step model
    # puts above this share of the objective is taken as over it (the calibrated model is off by about
    # that much). Where it is, the decode tokens such steps give are held under `chunk_step_tail_share`
    # of the objective's tail (1 - percentile): each minute holds thousands of tokens, so a share closer
    # to the tail than TTFT's per-request `window_tail_share` keeps the window's percentile.
    chunk_step_margin: float = 0.9
    chunk_step_tail_share: float = 0.5
    # A climb: a rise after `climb_rises` rises within the stabilization window (scale-ups within one rate
    # window of each other are one rise, seen step by step as the window fills), with the need's floor in
    # the window's later half above its floor in the earlier half (the load rose, not only its noise), is
    # taken `climb_ahead` replicas beyond the need. A load that has risen three times in a window is likely
    # to rise again before a replica starts; a step ahead saves that step's change and its cold start
    # (mixed: 4 -> 12 in eight scale-ups). None: off.
    climb_rises: int | None = 2
    climb_ahead: int = 1
    # The error-budget controller (autoscale/budget.py): the share of the SLO the wait is sized under
    # (slo_headroom above is where it starts) moves within this range: down by `budget_tighten_per_minute`
    # per minute while the budget burns too fast over both windows, up by `budget_relax_per_minute` while it
    # burns at under half the allowed pace. None: off, slo_headroom throughout.
    budget_share_range: tuple[float, float] | None = (0.3, 0.7)
    budget_tighten_per_minute: float = 0.05
    budget_relax_per_minute: float = 0.005


DEFAULT_TUNING = PolicyTuning()


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy decided, and why."""

    desired_replicas: int
    reason: str
    state: AutoscalerState
    needed_replicas: int | None = None  # replicas the load needs (None on no data), before min/max
    scaling_limited: bool = False  # the SLO needs more than maxReplicas
    limited_message: str | None = None
    # Observed TTFT (and TPOT) percentile within the SLO; None when there is no observation.
    slo_met: bool | None = None
    no_data: bool = False
    scaled_to_zero: bool = False  # the decision leaves the service with no replica (idle)
    wake_timed_out: bool = False  # back to zero: a wake no replica answered in time, nobody waiting now
