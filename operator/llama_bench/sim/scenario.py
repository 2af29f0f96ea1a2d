"""A benchmark scenario (trace, hardware, SLO, bounds) and the policies that can run in it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from llama_bench.sim.accelerators import ReplicaProfile, planned_engine, replica_profile
from llama_bench.sim.fleet import FleetConfig, SimPolicy, SimulationResult, simulate
from llama_bench.sim.oracle import FixedReplicas, ScheduledReplicas, oracle_schedule, reactive_schedule
from llama_bench.sim.policies import HpaPolicy, KedaPolicy, KpaPolicy, SloPolicy
from llama_bench.sim.report import RunSummary, summarize
from llama_bench.sim.trace import Trace
from llama_operator.api.plan import MeasuredSteps, Plan
from llama_operator.api.spec import MAX_OBJECTIVE, MIN_OBJECTIVE, AutoscalingSpec, SLOSpec

BASE_POLICIES = ("slo", "hpa", "keda", "kpa", "static", "oracle", "oracle-target", "oracle-reactive")
TUNED_POLICIES = ("hpa-tuned", "keda-tuned", "kpa-tuned")
AUTOSCALERS = (SloPolicy, HpaPolicy, KedaPolicy, KpaPolicy)
# Targets the tuned baselines sweep: waiting requests per pod (HPA), the KEDA threshold, and in-flight
# requests per pod (KPA, whose concurrency includes the running batch).
TUNING_SWEEPS: dict[str, tuple[float, ...]] = {
    "hpa": (0.5, 1.0, 2.0, 3.0, 5.0, 8.0),
    "keda": (0.5, 1.0, 2.0, 3.0, 5.0, 8.0),
    "kpa": (4.0, 8.0, 16.0, 32.0, 64.0),
}


def _api_default(model: type[BaseModel], field: str) -> Any:
    """The LlamaService API's default for a field: the operator's, so the bench's scenario is the same."""
    return model.model_fields[field].default


@dataclass(frozen=True, slots=True)
class Scenario:
    accelerator: str = "t4"
    model: str = "llama-3.2-1b"
    # The bench's objective (the API's default is 0.5 s): the traces' figures in docs/bench are at 1 s.
    slo_ttft_seconds: float = 1.0
    percentile: float = float(_api_default(SLOSpec, "percentile"))
    # A TPOT objective: the policy sizes decode for it, and the replicas run the engine the planner tunes
    # for it (max-num-seqs capped where a step would exceed it, the prompt chunk it allows).
    slo_tpot_seconds: float | None = _api_default(SLOSpec, "tpot_seconds")
    min_replicas: int = int(_api_default(AutoscalingSpec, "min_replicas"))
    # Room for the traces' peaks (the API's default is 8).
    max_replicas: int = 20
    cold_start_seconds: float = 40.0
    scrape_interval: int = 5
    queue_depth_per_replica: float = float(_api_default(SLOSpec, "queue_depth_per_replica"))
    scale_down_stabilization_seconds: int = int(
        _api_default(AutoscalingSpec, "scale_down_stabilization_seconds")
    )
    # A measured replica (`llama-bench profile`, sim.profile) instead of the data-sheet estimate of
    # `accelerator`: its step times, limits and price, and its prefill throughput as the policy's prior.
    measured: ReplicaProfile | None = None
    # The share of requests the benchmark asks to be within the objective (the "99 %"); it
    # prices that target with perfect foresight (policy `oracle-target`), and the SLO policy keeps it as
    # its objective (spec.autoscaling.slo.objective). The baselines do not see it.
    target_attainment: float = 0.99
    # Scale to zero, an option of policy slo: minReplicas 0 with this scaleToZeroAfterSeconds, and an
    # activator that holds requests while no replica is ready, answering 503 after
    # activationTimeoutSeconds. None: at least min_replicas (>= 1) replicas, no activator.
    scale_to_zero_after_seconds: int | None = None
    activation_timeout_seconds: int = int(_api_default(AutoscalingSpec, "activation_timeout_seconds"))
    # A trace is a slice of continuous traffic: every autoscaler starts with the replicas its opening
    # minute needs (oracle@target's first minute), as it would hold them after the traffic before the
    # slice, not with minReplicas under full load. False: a cold open (a service created under load).
    warm_start: bool = True
    # What spreads requests over the replicas (sim/fleet.py ROUTERS), for every policy and the oracle alike.
    routing: str = "least-loaded"

    def __post_init__(self) -> None:
        if not 0.0 < self.target_attainment <= 1.0:
            raise ValueError(f"target attainment must be in (0, 1], got {self.target_attainment:g}")
        if self.min_replicas < 1:
            raise ValueError(
                f"min replicas must be at least 1, got {self.min_replicas}; for minReplicas 0 set "
                "scale_to_zero_after_seconds (--scale-to-zero SECONDS)"
            )
        after = self.scale_to_zero_after_seconds
        if after is not None:
            if not 0 <= after <= 86_400:
                raise ValueError(f"scale to zero after must be 0-86400 s, got {after}")
            if not 1 <= self.activation_timeout_seconds <= 3600:
                raise ValueError(
                    f"activation timeout must be 1-3600 s, got {self.activation_timeout_seconds}"
                )

    @property
    def scale_to_zero(self) -> bool:
        return self.scale_to_zero_after_seconds is not None

    def spec(self) -> AutoscalingSpec:
        slo = SLOSpec(
            ttft_seconds=self.slo_ttft_seconds,
            tpot_seconds=self.slo_tpot_seconds,
            percentile=self.percentile,
            queue_depth_per_replica=self.queue_depth_per_replica,
            objective=min(max(self.target_attainment, MIN_OBJECTIVE), MAX_OBJECTIVE),
        )
        if self.scale_to_zero_after_seconds is not None:
            return AutoscalingSpec(
                min_replicas=0,
                max_replicas=self.max_replicas,
                scale_down_stabilization_seconds=self.scale_down_stabilization_seconds,
                slo=slo,
                scale_to_zero_after_seconds=self.scale_to_zero_after_seconds,
                activation_timeout_seconds=self.activation_timeout_seconds,
            )
        return AutoscalingSpec(
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            scale_down_stabilization_seconds=self.scale_down_stabilization_seconds,
            slo=slo,
        )

    def plan(self, measured_steps: MeasuredSteps | None = None) -> Plan | None:
        """What the operator's planner deploys for this service (None for a measured profile, whose
        hardware the catalog may not know), with `measured_steps`' factors where given."""
        if self.measured is not None:
            return None
        return planned_engine(self.accelerator, self.model, self.spec(), measured_steps)

    def planner(self) -> Callable[[MeasuredSteps | None], Plan]:
        """The operator's planner for this service, with measured factors or the catalog's (None); each
        plan computed once (the simulated reconciler asks at every evaluation)."""
        plans: dict[MeasuredSteps | None, Plan] = {}

        def plan_with(measured: MeasuredSteps | None) -> Plan:
            if measured not in plans:
                plan = self.plan(measured)
                if plan is None:
                    raise ValueError("a measured replica profile has no plan to re-plan")
                plans[measured] = plan
            return plans[measured]

        return plan_with

    def fleet(self) -> FleetConfig:
        profile = self.measured or replica_profile(self.accelerator, self.model)
        plan = self.plan() if self.slo_tpot_seconds is not None else None
        if plan is not None:
            # The engine the planner tunes for the TPOT objective runs in the simulated replicas.
            profile = replace(
                profile,
                max_num_seqs=plan.max_num_seqs,
                max_num_batched_tokens=plan.max_num_batched_tokens or profile.max_num_batched_tokens,
            )
        return FleetConfig(
            profile=profile,
            cold_start_seconds=self.cold_start_seconds,
            scrape_interval=self.scrape_interval,
            activation_timeout_seconds=float(self.activation_timeout_seconds) if self.scale_to_zero else None,
            routing=self.routing,
        )


class ScenarioRunner:
    """Runs policies on one trace in one scenario; computes the oracle's schedule once."""

    def __init__(self, scenario: Scenario, trace: Trace) -> None:
        self.scenario = scenario
        self.trace = trace
        self.config = scenario.fleet()
        self._schedules: dict[float | None, list[int]] = {}

    def oracle_schedule(self, attainment: float | None = None) -> list[int]:
        """The clairvoyant per-minute schedule: meeting the SLO percentile, or `attainment`."""
        if attainment not in self._schedules:
            s = self.scenario
            self._schedules[attainment] = oracle_schedule(
                self.trace,
                self.config,
                slo_seconds=s.slo_ttft_seconds,
                percentile=s.percentile,
                min_replicas=s.min_replicas,
                max_replicas=s.max_replicas,
                attainment=attainment,
            )
        return self._schedules[attainment]

    def policy(self, name: str, target: float | None = None) -> SimPolicy:
        spec = self.scenario.spec()
        if self.scenario.scale_to_zero and name != "slo":
            raise ValueError(f"scale to zero is an option of policy slo, not of {name}")
        if name == "slo":
            # The prior is what the operator's plan says of the engine the replicas run
            # (status.plan.prefillTokensPerSecond: the step-time model at the engine's chunk), from the
            # same catalog and step-time model as the replicas; a measured replica's is its own.
            plan = self.scenario.plan() if self.scenario.slo_tpot_seconds is not None else None
            prior = (
                plan.prefill_tokens_per_second
                if plan is not None
                else self.config.profile.prefill_tokens_per_second
            )
            after = self.scenario.scale_to_zero_after_seconds
            label = "slo" if after is None else f"slo+zero(after={after}s)"
            # With the planner's engine, the operator's reconciler may re-plan it for the hardware the
            # calibration measures (reconcile/engine.py); the fleet rolls to it.
            replan = None if plan is None else self.scenario.planner()
            return SloPolicy(spec, capacity_prior=prior, plan=plan, name=label, replan=replan)
        if name == "hpa":
            return HpaPolicy(spec, target, name="hpa" if target is None else f"hpa(target={target:g})")
        if name == "keda":
            return (
                KedaPolicy(spec, name="keda")
                if target is None
                else KedaPolicy(spec, target, f"keda(target={target:g})")
            )
        if name == "kpa":
            return KpaPolicy(spec, target, name="kpa" if target is None else f"kpa(target={target:g})")
        if name == "static":
            return FixedReplicas(max(self.oracle_schedule()), name="static")
        if name == "oracle":
            return ScheduledReplicas(self.oracle_schedule(), self.scenario.cold_start_seconds)
        if name == "oracle-target":
            attainment = self.scenario.target_attainment
            return ScheduledReplicas(
                self.oracle_schedule(attainment),
                self.scenario.cold_start_seconds,
                name=f"oracle@{attainment * 100:g}%",
            )
        if name == "oracle-reactive":
            attainment = self.scenario.target_attainment
            hold = math.ceil(spec.scale_down_stabilization_seconds / 60)
            reactive = reactive_schedule(self.oracle_schedule(attainment), hold, self.scenario.min_replicas)
            return ScheduledReplicas(
                reactive, 0.0, name=f"reactive-oracle@{attainment * 100:g}%(hold={hold}m)"
            )
        raise ValueError(f"unknown policy {name!r}; known: {', '.join((*BASE_POLICIES, *TUNED_POLICIES))}")

    def opening_replicas(self, policy: SimPolicy) -> int | None:
        """The replicas an autoscaler starts with in a warm start (see `Scenario.warm_start`); None for
        fixed and scheduled replicas (they start with their own first count)."""
        s = self.scenario
        if not s.warm_start or not isinstance(policy, AUTOSCALERS):
            return None
        return self.oracle_schedule(s.target_attainment)[0]

    def run(self, policy: SimPolicy) -> tuple[SimulationResult, RunSummary]:
        result = simulate(self.trace, policy, self.config, initial=self.opening_replicas(policy))
        s = self.scenario
        return result, summarize(result, s.slo_ttft_seconds, s.percentile, s.slo_tpot_seconds)

    def sweep(
        self, base: str, progress: Callable[[str], None] | None = None
    ) -> list[tuple[float, SimulationResult, RunSummary]]:
        """`base` (hpa, keda, kpa) run at every target of its tuning sweep."""
        runs: list[tuple[float, SimulationResult, RunSummary]] = []
        for target in TUNING_SWEEPS[base]:
            result, summary = self.run(self.policy(base, target))
            runs.append((target, result, summary))
            if progress is not None:
                attained = f"{summary.requests_within_slo:.2%}"
                progress(f"{base} target {target:g}: {attained}, {summary.gpu_hours:.2f} GPU-h")
        return runs

    def tuned(
        self, base: str, progress: Callable[[str], None] | None = None
    ) -> tuple[SimulationResult, RunSummary, float]:
        """The best target of a sweep: the cheapest run whose attainment is within 0.1 point of the best
        attainment reached, or 99 % if any reaches it."""
        return best_of_sweep(base, self.sweep(base, progress))


def best_of_sweep(
    base: str, runs: list[tuple[float, SimulationResult, RunSummary]]
) -> tuple[SimulationResult, RunSummary, float]:
    """The tuned variant of a sweep (see `ScenarioRunner.tuned`)."""
    best_attainment = max(s.requests_within_slo for _, _, s in runs)
    bar = min(0.99, best_attainment - 0.001)
    eligible = [run for run in runs if run[2].requests_within_slo >= bar]
    target, result, summary = min(eligible, key=lambda run: run[2].gpu_hours)
    result.policy = f"{base}-tuned"
    named = replace(summary, policy=f"{base}-tuned(target={target:g})")
    return result, named, target
