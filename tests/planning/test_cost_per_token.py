"""auto ranks by cost per served token at the objective (issue 43): the throughput the plan predicts within
the objective over the price, with the runner-up and the cheapest replica said; on main, 8B at a 40 ms TPOT
took the cheapest replica that met it, at a third of the tokens per unit of price of an H100."""

from __future__ import annotations

from typing import Any

from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.planning import PlanningConfig, plan_service
from llama_operator.planning.choose import cost_per_million_tokens
from llama_operator.planning.engine import try_size_engine
from llama_operator.planning.model import catalog_candidates, resolve_request

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def service(slo: dict[str, Any]) -> LlamaServiceSpec:
    return LlamaServiceSpec.model_validate(
        {"model": {"name": LLAMA_8B}, "accelerator": {"type": "auto"}, "autoscaling": {"slo": slo}}
    )


def costs(spec: LlamaServiceSpec, config: PlanningConfig) -> dict[str, float]:
    request = resolve_request(spec, config)
    out: dict[str, float] = {}
    for candidate in catalog_candidates(config, include_cpu=False):
        sized = try_size_engine(request, candidate, config)
        if sized is not None:
            out[candidate.name] = cost_per_million_tokens(sized, request, config)
    return out


def test_8b_at_a_40ms_tpot_takes_the_cheapest_token_not_the_cheapest_replica() -> None:
    config = PlanningConfig()
    spec = service({"ttftSeconds": 1, "tpotSeconds": 0.04})
    chosen = plan_service(spec, name="chat", config=config)
    by_option = costs(spec, config)
    assert by_option[chosen.display_name] == min(by_option.values())
    notes = [n for n in chosen.notes if n.startswith("auto:")]
    assert notes[0].startswith(f"auto: {chosen.display_name} is the option that serves a token for the least")
    assert notes[1].startswith("auto: runner-up ")
    # The cheapest replica that plans is named with what its tokens cost more, unless it is the pick.
    assert chosen.display_name == "2xl40s" or any(
        n.startswith("auto: not 2xl40s, the cheapest replica") for n in notes
    )


def test_a_ttft_only_service_ranks_by_a_full_batch() -> None:
    config = PlanningConfig()
    spec = service({"ttftSeconds": 1})
    chosen = plan_service(spec, name="chat", config=config)
    by_option = costs(spec, config)
    assert by_option[chosen.display_name] == min(by_option.values())
    assert "within a full batch" in next(n for n in chosen.notes if n.startswith("auto: "))


def test_prices_overridden_in_config_change_the_pick() -> None:
    spec = service({"ttftSeconds": 1, "tpotSeconds": 0.04})
    default = plan_service(spec, name="chat", config=PlanningConfig())
    # An L4 at a hundredth of its list price: its tokens are the cheapest whatever the others do.
    cheap_l4 = PlanningConfig(price_overrides={"l4": 0.0081})
    chosen = plan_service(spec, name="chat", config=cheap_l4)
    assert chosen.accelerator == "l4" != default.accelerator
