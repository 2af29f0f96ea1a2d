"""The bench's scenario states no autoscaling default of its own: the ones the operator's API has are read
from it (they were restated in llama_bench/sim/scenario.py), and the two the bench sets differently say why."""

from __future__ import annotations

import dataclasses

from pydantic import BaseModel

from llama_bench.sim.scenario import Scenario
from llama_operator.api.spec import AutoscalingSpec, SLOSpec

# Scenario field -> (API model, field): the same setting under the bench's and the API's names.
FROM_THE_API: dict[str, tuple[type[BaseModel], str]] = {
    "percentile": (SLOSpec, "percentile"),
    "slo_tpot_seconds": (SLOSpec, "tpot_seconds"),
    "queue_depth_per_replica": (SLOSpec, "queue_depth_per_replica"),
    "min_replicas": (AutoscalingSpec, "min_replicas"),
    "scale_down_stabilization_seconds": (AutoscalingSpec, "scale_down_stabilization_seconds"),
    "activation_timeout_seconds": (AutoscalingSpec, "activation_timeout_seconds"),
}


def test_the_scenario_defaults_are_the_apis() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(Scenario)}
    for name, (model, field) in FROM_THE_API.items():
        assert defaults[name] == model.model_fields[field].default, name


def test_the_bench_own_settings_differ_from_the_api_on_purpose() -> None:
    # 1 s and 20 replicas are the figures' settings in docs/bench; the API's are 0.5 s and 8.
    assert Scenario().slo_ttft_seconds == 1.0 != SLOSpec.model_fields["ttft_seconds"].default
    assert Scenario().max_replicas == 20 != AutoscalingSpec.model_fields["max_replicas"].default
