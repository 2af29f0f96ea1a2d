"""The autoscalers the simulator can drive, each behind the `SimPolicy` interface: what each one
reads (Prometheus scrapes, or Knative's per-second concurrency) and how often it decides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llama_bench.baselines.hpa import HorizontalPodAutoscaler, HpaSettings
from llama_bench.baselines.keda import (
    PRODUCTION_STACK_THRESHOLD,
    KedaPrometheusScaler,
    KedaSettings,
)
from llama_bench.baselines.kpa import KnativePodAutoscaler, KpaSettings
from llama_bench.sim.metrics import MetricsView
from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.plan import MeasuredSteps, Plan
from llama_operator.api.settings import POD_MONITOR_SCRAPE_SECONDS, SIGNAL_WINDOW_SECONDS
from llama_operator.api.spec import AutoscalingSpec
from llama_operator.autoscale.decision import DEFAULT_TUNING, Decision, PolicyTuning
from llama_operator.autoscale.policy import decide
from llama_operator.reconcile.autoscaling import autoscaler_state
from llama_operator.reconcile.engine import engine_plan


@dataclass(slots=True)
class SloPolicy:
    """Our policy, `decide()`, evaluated on Prometheus-like signals; its state carried as the CR would."""

    spec: AutoscalingSpec
    capacity_prior: float | None = None  # what the catalog publishes for the accelerator, if anything
    plan: Plan | None = None  # the planner's plan: its step model seeds the decode capacity (TPOT)
    evaluation_interval: int = 5
    signal_window: float = SIGNAL_WINDOW_SECONDS  # the operator's default rate window
    burst_window: float | None = POD_MONITOR_SCRAPE_SECONDS  # the burst window: the latest scrape interval
    tuning: PolicyTuning = DEFAULT_TUNING
    name: str = "slo"
    state: AutoscalerState = field(default_factory=AutoscalerState)
    decisions: list[tuple[float, Decision]] = field(default_factory=list)
    # The planner for this service with measured factors (None: the catalog's), when the reconciler may
    # re-plan the engine for the hardware the calibration measures (reconcile/engine.py); None: it keeps
    # `plan`. The fleet rolls its replicas to the flags `engine_flags` gives.
    replan: Callable[[MeasuredSteps | None], Plan] | None = None
    replans: list[tuple[float, Plan]] = field(default_factory=list)

    def __post_init__(self) -> None:
        prior = AutoscalerState(
            capacity_tokens_per_second=self.capacity_prior,
            capacity_prior_tokens_per_second=self.capacity_prior,
        )
        # The plan's step figures, as the reconciler seeds them from status.plan.
        plan = self.plan
        self.state = prior if plan is None else autoscaler_state({"plan": plan.to_wire()}, remembered=prior)

    def initial_replicas(self) -> int:
        return self.spec.min_replicas

    def evaluate(self, view: MetricsView, now: float) -> int:
        signals = view.signals(
            now,
            self.signal_window,
            self.spec.slo.percentile,
            self.burst_window,
            slo_ttft_seconds=self.spec.slo.ttft_seconds,
        )
        decision = decide(self.spec, signals, self.state, now, self.tuning)
        # Round-trip through the status JSON, as the operator persists it between evaluations.
        self.state = AutoscalerState.model_validate(decision.state.to_wire())
        if decision.desired_replicas != signals.current_replicas:
            self.decisions.append((now, decision))
        if self.replan is not None and self.plan is not None:
            self._reconcile_engine(now)
        return decision.desired_replicas

    def _reconcile_engine(self, now: float) -> None:
        """What the operator's reconciler does between evaluations: plan the engine (with the measured
        factors where they change it enough) and seed the policy's step figures from that plan."""
        assert self.replan is not None and self.plan is not None
        status = {"plan": self.plan.to_wire(), "autoscaling": {"state": self.state.to_wire()}}
        planned = engine_plan(self.replan, status, now)
        if planned.to_wire() == status["plan"]:
            return
        self.plan = planned
        self.replans.append((now, planned))
        self.state = autoscaler_state({"plan": planned.to_wire()}, remembered=self.state)

    def engine_flags(self) -> tuple[int, int] | None:
        """(--max-num-batched-tokens, --max-num-seqs) of the engine the replicas should run, when the
        engine may be re-planned."""
        if self.replan is None or self.plan is None or not self.plan.max_num_batched_tokens:
            return None
        return self.plan.max_num_batched_tokens, self.plan.max_num_seqs


class HpaPolicy:
    """HPA on the Pods metric vllm:num_requests_waiting (prometheus-adapter), target per pod."""

    def __init__(self, spec: AutoscalingSpec, target: float | None = None, name: str = "hpa") -> None:
        self.name = name
        self.spec = spec
        self.target = spec.slo.queue_depth_per_replica if target is None else target
        self.hpa = HorizontalPodAutoscaler(
            HpaSettings(target=self.target, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas)
        )
        self.evaluation_interval = self.hpa.settings.sync_period

    def initial_replicas(self) -> int:
        return self.spec.min_replicas

    def evaluate(self, view: MetricsView, now: float) -> int:
        current = view.current_replicas
        scrape = view.latest_scrape(now)
        if scrape is None:
            return current
        reporting = min(scrape.ready, current)
        missing = max(0, current - reporting)
        recommended = self.hpa.pods_metric_replicas(current, reporting, missing, float(scrape.waiting))
        return self.hpa.normalize(now, current, recommended)


class KedaPolicy:
    """KEDA's Prometheus trigger on vllm:num_requests_waiting, threshold 5 (vLLM production-stack)."""

    def __init__(
        self, spec: AutoscalingSpec, threshold: float = PRODUCTION_STACK_THRESHOLD, name: str = "keda"
    ):
        self.name = name
        self.spec = spec
        self.threshold = threshold
        self.keda = KedaPrometheusScaler(
            KedaSettings(threshold=threshold, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas)
        )
        self.evaluation_interval = self.keda.hpa.settings.sync_period

    def initial_replicas(self) -> int:
        return self.spec.min_replicas

    def evaluate(self, view: MetricsView, now: float) -> int:
        if self.keda.poll_due(now):
            scrape = view.latest_scrape(now)
            self.keda.observe(now, None if scrape is None else float(scrape.waiting))
        return self.keda.desired(now, view.current_replicas)


class KpaPolicy:
    """Knative's KPA on in-flight requests per pod (queue-proxy's view, sampled every second)."""

    def __init__(self, spec: AutoscalingSpec, target: float | None = None, name: str = "kpa") -> None:
        self.name = name
        self.spec = spec
        self.target = spec.slo.queue_depth_per_replica if target is None else target
        self.kpa = KnativePodAutoscaler(
            KpaSettings(
                target_concurrency=self.target, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas
            )
        )
        self.evaluation_interval = self.kpa.settings.tick

    def initial_replicas(self) -> int:
        return self.spec.min_replicas

    def evaluate(self, view: MetricsView, now: float) -> int:
        s = self.kpa.settings
        return self.kpa.desired(
            now,
            view.ready_replicas,
            view.mean_in_flight(now, s.stable_window),
            view.mean_in_flight(now, s.panic_window),
        )
