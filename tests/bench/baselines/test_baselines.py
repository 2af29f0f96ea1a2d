"""The baselines follow their documented semantics."""

from __future__ import annotations

from llama_bench.baselines.hpa import HorizontalPodAutoscaler, HpaSettings
from llama_bench.baselines.keda import KedaPrometheusScaler, KedaSettings
from llama_bench.baselines.kpa import KnativePodAutoscaler, KpaSettings
from llama_bench.baselines.static import StaticReplicas


def hpa(target: float = 4.0, max_replicas: int = 50) -> HorizontalPodAutoscaler:
    return HorizontalPodAutoscaler(HpaSettings(target=target, max_replicas=max_replicas))


def test_hpa_ceil_of_ratio_times_pods() -> None:
    assert hpa().pods_metric_replicas(current=2, reporting_pods=2, missing_pods=0, total=10.0) == 3
    assert hpa().pods_metric_replicas(current=4, reporting_pods=4, missing_pods=0, total=2.0) == 1


def test_hpa_tolerance_of_ten_percent() -> None:
    # 8.6 / 2 pods = 4.3 per pod: ratio 1.075, within 10 %.
    assert hpa().pods_metric_replicas(current=2, reporting_pods=2, missing_pods=0, total=8.6) == 2
    assert hpa().pods_metric_replicas(current=2, reporting_pods=2, missing_pods=0, total=8.9) == 3


def test_hpa_missing_pods_count_as_zero_when_scaling_up() -> None:
    # 2 reporting pods at 8 each (ratio 2) and 2 starting pods: 16 over 4 pods = 4 per pod, ratio 1.
    assert hpa().pods_metric_replicas(current=4, reporting_pods=2, missing_pods=2, total=16.0) == 4
    assert hpa().pods_metric_replicas(current=4, reporting_pods=2, missing_pods=2, total=32.0) == 8


def test_hpa_downscale_takes_the_highest_recommendation_of_300s() -> None:
    h = hpa()
    assert h.normalize(0.0, current=1, recommended=6) == 5  # scale-up limit: max(2x, +4) per 15 s
    assert h.normalize(15.0, current=5, recommended=6) == 6
    assert h.normalize(30.0, current=6, recommended=1) == 6
    assert h.normalize(299.0, current=6, recommended=1) == 6
    assert h.normalize(316.0, current=6, recommended=1) == 1


def test_hpa_scale_up_rate_limit() -> None:
    h = hpa()
    assert h.normalize(0.0, current=2, recommended=40) == 6  # max(2 * 2, 2 + 4)
    assert h.normalize(5.0, current=6, recommended=40) == 6  # budget of this 15 s period spent
    assert h.normalize(15.0, current=6, recommended=40) == 12


def test_keda_average_value_and_polling() -> None:
    keda = KedaPrometheusScaler(KedaSettings(threshold=5.0, max_replicas=20))
    assert keda.poll_due(0.0)
    keda.observe(0.0, 23.0)
    assert keda.desired(0.0, current=1) == 5  # ceil(23 / 5); the rate limit from 1 is max(2, 1 + 4)
    assert not keda.poll_due(15.0)
    assert keda.poll_due(30.0)
    keda.observe(30.0, None)  # an empty result reads as 0
    assert keda.desired(30.0, current=5) == 5  # scale-down held by the 300 s window


def test_kpa_panics_and_does_not_scale_down_in_panic() -> None:
    kpa = KnativePodAutoscaler(KpaSettings(target_concurrency=10.0, max_replicas=50))
    # per pod 7 (70 %): stable 14 -> 2; panic 70 -> 10, 10 / 2 ready >= 2: panic.
    assert kpa.desired(0.0, ready=2, stable_concurrency=14.0, panic_concurrency=70.0) == 10
    assert kpa.panic_since == 0.0
    # The burst is over, but panic holds the high-water mark for the stable window.
    assert kpa.desired(30.0, ready=10, stable_concurrency=14.0, panic_concurrency=7.0) == 10
    assert kpa.desired(61.0, ready=10, stable_concurrency=14.0, panic_concurrency=7.0) == 5  # halving bound
    assert kpa.panic_since is None


def test_kpa_stable_mode_follows_the_stable_window() -> None:
    kpa = KnativePodAutoscaler(KpaSettings(target_concurrency=10.0))
    assert kpa.desired(0.0, ready=3, stable_concurrency=21.0, panic_concurrency=21.0) == 3
    assert kpa.desired(2.0, ready=3, stable_concurrency=28.0, panic_concurrency=30.0) == 4


def test_static() -> None:
    assert StaticReplicas(3).desired() == 3
