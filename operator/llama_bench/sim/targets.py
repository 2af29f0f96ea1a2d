"""The benchmark's targets for our policy and a verdict on each, computed from the runs' summaries.

The targets: a share of requests within the SLO; GPU-hours within a factor of the clairvoyant
oracle's; a saving against HPA and KEDA at equal or better attainment; few replica changes. Each
verdict line carries the figures it rests on, including what the clairvoyant references reach, so
a target that no policy could meet says so instead of only "not met"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from llama_bench.sim.report import RunSummary

# The oracle ratio asked of each bundled trace; other traces get the looser one.
DEFAULT_ORACLE_RATIOS: dict[str, float] = {"conversation": 1.15, "code": 1.25}
LOOSE_ORACLE_RATIO = 1.25


@dataclass(frozen=True, slots=True)
class Targets:
    attainment: float = 0.99  # share of requests within the SLO
    oracle_ratios: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_ORACLE_RATIOS))
    saving_vs_baselines: float = 0.25  # fewer GPU-hours than HPA and KEDA, at equal or better attainment
    changes_per_hour: float = 6.0
    policy: str = "slo"  # the policy judged


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _find(summaries: Sequence[RunSummary], prefix: str) -> RunSummary | None:
    return next((s for s in summaries if s.policy == prefix or s.policy.startswith(f"{prefix}(")), None)


def verdicts(
    trace: str,
    summaries: Sequence[RunSummary],
    sweeps: Mapping[str, Sequence[RunSummary]],
    targets: Targets,
) -> list[str]:
    """One line per target for `targets.policy` on `trace`. `summaries` holds the bench's rows (the
    oracles among them), `sweeps` every run of each baseline's tuning sweep."""
    ours = _find(summaries, targets.policy)
    if ours is None:
        return [f"[{trace}] no run of policy {targets.policy!r}"]
    oracle = _find(summaries, "oracle")
    target_oracle = next((s for s in summaries if s.policy.startswith("oracle@")), None)
    reactive = next((s for s in summaries if s.policy.startswith("reactive-oracle@")), None)
    lines: list[str] = []

    attained = ours.requests_within_slo
    line = (
        f"[{trace}] requests within SLO: {attained:.2%} (target >= {targets.attainment * 100:g}%): "
        f"{_met(attained >= targets.attainment)}"
    )
    if reactive is not None:
        line += (
            f"; without foresight, perfect per-minute sizing learned a minute late ({reactive.policy}) "
            f"reaches {reactive.requests_within_slo:.2%} at {reactive.gpu_hours:.2f} GPU-h"
        )
    lines.append(line)

    if oracle is not None and oracle.gpu_hours > 0:
        limit = targets.oracle_ratios.get(trace, LOOSE_ORACLE_RATIO)
        ratio = ours.gpu_hours / oracle.gpu_hours
        line = (
            f"[{trace}] GPU-hours {ours.gpu_hours:.2f} = {ratio:.2f}x the oracle's {oracle.gpu_hours:.2f} "
            f"(target <= {limit:.2f}x): {_met(ratio <= limit)}"
        )
        if target_oracle is not None and target_oracle.gpu_hours > 0:
            line += (
                f"; the oracle that reaches {target_oracle.requests_within_slo:.2%} needs "
                f"{target_oracle.gpu_hours / oracle.gpu_hours:.2f}x, and we use "
                f"{ours.gpu_hours / target_oracle.gpu_hours:.2f}x of that"
            )
        lines.append(line)

    for base in ("hpa", "keda"):
        default = _find(summaries, base)
        runs = [*([default] if default is not None else []), *sweeps.get(base, ())]
        if not runs:
            continue
        matching = [s for s in runs if s.requests_within_slo >= attained]
        if not matching:
            best = max(runs, key=lambda s: s.requests_within_slo)
            lines.append(
                f"[{trace}] vs {base}: no target in its sweep reaches our {attained:.2%} (its best: "
                f"{best.policy} {best.requests_within_slo:.2%} at {best.gpu_hours:.2f} GPU-h, ours "
                f"{ours.gpu_hours:.2f}): met at equal attainment"
            )
            continue
        cheapest = min(matching, key=lambda s: s.gpu_hours)
        saving = 1.0 - ours.gpu_hours / cheapest.gpu_hours if cheapest.gpu_hours else 0.0
        lines.append(
            f"[{trace}] vs {base}: its cheapest run at >= our attainment is {cheapest.policy} "
            f"({cheapest.requests_within_slo:.2%}, {cheapest.gpu_hours:.2f} GPU-h); ours uses "
            f"{f'{saving:.0%} fewer' if saving >= 0 else f'{-saving:.0%} more'} "
            f"(target >= {targets.saving_vs_baselines:.0%} fewer): "
            f"{_met(saving >= targets.saving_vs_baselines)}"
        )

    changes = ours.replica_changes_per_hour
    lines.append(
        f"[{trace}] replica changes per hour: {changes:.1f} (target <= {targets.changes_per_hour:g}): "
        f"{_met(changes <= targets.changes_per_hour)}"
    )
    return lines
