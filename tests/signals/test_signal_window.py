"""The autoscaler's rate window: the operator ships the window the benchmarks measure, and refuses one too
short for the scrapes it is taken over."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llama_bench.sim.policies import SloPolicy
from llama_bench.sim.scenario import Scenario
from llama_operator.api.resource import LlamaService, ObjectMeta, parse_spec
from llama_operator.api.settings import SCRAPES_PER_SIGNAL_WINDOW, Settings
from llama_operator.desired.objects import build_pod_monitor


def test_the_simulator_measures_the_window_the_operator_ships() -> None:
    # Every figure in docs/bench comes from the simulated policy: at another window than the operator's
    # default they would describe an operator nobody runs (at 60 s, 67 of the 100 probe traces meet the
    # windows target instead of 81: docs/bench/burst.md).
    assert SloPolicy(Scenario().spec()).signal_window == Settings().signal_window_seconds == 20.0


def test_the_default_window_spans_four_of_the_pod_monitors_scrapes() -> None:
    settings = Settings()
    svc = LlamaService(
        metadata=ObjectMeta(name="chat", namespace="team-a", uid="1234"),
        spec=parse_spec({"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}}),
    )
    interval = build_pod_monitor(svc, settings)["spec"]["podMetricsEndpoints"][0]["interval"]
    assert interval.endswith("s")
    scrape = float(interval.removesuffix("s"))
    assert settings.burst_window_seconds == scrape
    assert settings.signal_window_seconds == SCRAPES_PER_SIGNAL_WINDOW * scrape


@pytest.mark.parametrize(
    ("config", "minimum"),
    [
        ({"signalWindowSeconds": 10}, "at least 20"),
        ({"signalWindowSeconds": 19.5}, "at least 20"),
        ({"signalWindowSeconds": 60, "burstWindowSeconds": 30}, "at least 120"),
    ],
)
def test_a_window_under_four_scrapes_is_refused_naming_both_settings(
    config: dict[str, float], minimum: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings.model_validate(config)
    message = str(refused.value)
    assert "signalWindowSeconds" in message and "burstWindowSeconds" in message and minimum in message


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"signalWindowSeconds": 60},
        {"signalWindowSeconds": 120, "burstWindowSeconds": 30},
        {"signalWindowSeconds": 5, "burstWindowSeconds": 0},  # no burst response: no scrape interval stated
    ],
)
def test_windows_of_four_scrapes_or_more_are_taken(config: dict[str, float]) -> None:
    settings = Settings.model_validate(config)
    assert settings.signal_window_seconds == config.get("signalWindowSeconds", 20.0)


@pytest.mark.parametrize("window", [0, -20])
def test_a_window_of_no_time_is_refused(window: float) -> None:
    with pytest.raises(ValidationError, match=r"signalWindowSeconds|signal_window_seconds"):
        Settings.model_validate({"signalWindowSeconds": window, "burstWindowSeconds": 0})


def test_the_operator_refuses_a_short_window_from_its_environment_naming_the_fix() -> None:
    from llama_operator.infra.config import ConfigError, load_settings  # noqa: PLC0415

    with pytest.raises(ConfigError) as refused:
        load_settings({"LLAMA_OPERATOR_SIGNAL_WINDOW_SECONDS": "10"})
    assert "signalWindowSeconds 10 is under 4 scrape intervals (burstWindowSeconds 5)" in str(refused.value)
    assert "at least 20" in str(refused.value)


@pytest.mark.parametrize(
    ("config", "window"),
    [
        ({"burstWindowSeconds": 15}, 60.0),
        ({"burstWindowSeconds": 2.5}, 10.0),
        ({"burst_window_seconds": 10}, 40.0),
        ({"burstWindowSeconds": 0}, 20.0),  # no burst response, no scrape interval stated: the default
        ({"burstWindowSeconds": 15, "signalWindowSeconds": 90}, 90.0),  # a window set is kept
    ],
)
def test_an_unset_window_is_four_of_the_stated_scrapes(config: dict[str, float], window: float) -> None:
    # A platform whose Prometheus scrapes every 15 s says so once (burstWindowSeconds), and the window
    # follows: an upgrade from the 60 s default does not stop an operator configured that way.
    assert Settings.model_validate(config).signal_window_seconds == window


def test_the_window_follows_the_scrape_interval_from_the_environment() -> None:
    from llama_operator.infra.config import load_settings  # noqa: PLC0415

    assert load_settings({"LLAMA_OPERATOR_BURST_WINDOW_SECONDS": "15"}).signal_window_seconds == 60.0
