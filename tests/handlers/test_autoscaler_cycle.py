"""One autoscaler cycle for many LlamaServices (issue 13): a write that fails for one service (a conflict, a
Deployment re-created meanwhile) is logged and leaves the others' decisions untouched; a cycle where
nothing changed writes nothing. No cluster: the API edge records the writes it is asked for and refuses the
ones the test names, as the API server would (an ApiException with the status code)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from llama_operator.api.settings import Settings
from llama_operator.autoscale import policy
from llama_operator.autoscale.promql import ServiceKey, ServiceView
from llama_operator.autoscale.signals import Signals, SignalStatus
from llama_operator.handlers import autoscaler as autoscaler_module
from llama_operator.handlers.autoscaler import AutoscalerMemory, autoscale_cycle
from llama_operator.handlers.indexes import Indexes
from llama_operator.infra.metrics import OperatorMetrics

NOW = 1_800_000_000.0


class RecordingKube:
    """The Kube edge's write methods the autoscaler calls; `refuse` names the Deployments whose replica
    write the API server answers with 409."""

    def __init__(self, refuse: set[str]) -> None:
        self.refuse = refuse
        self.replicas: dict[str, int] = {}
        self.status_writes: list[str] = []
        self.bodies: dict[str, dict[str, Any]] = {}  # the index's LlamaServices, by name

    def apply(self, manifest: Mapping[str, Any], *, field_manager: str, uid: str) -> dict[str, Any]:
        name = manifest["metadata"]["name"]
        if name in self.refuse:
            raise ApiException(status=409, reason="Conflict")
        self.replicas[name] = manifest["spec"]["replicas"]
        return dict(manifest)

    def patch_llamaservice_status(
        self, *, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        self.status_writes.append(name)
        # The API server merges the patch and bumps the version; the watch brings it to the index.
        body = self.bodies[name]
        body["status"] = merged(body["status"], status)
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        return {"metadata": dict(body["metadata"]), "status": body["status"]}

    def post_event(self, involved: Mapping[str, Any], **_: Any) -> None:
        pass


def merged(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386): objects merge, null deletes, anything else replaces."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


class NoMetrics:
    """A Prometheus that answers every batched query with nothing (pods still loading)."""

    queries = 0

    def fetch(
        self,
        views: Mapping[ServiceKey, ServiceView],
        *,
        window_seconds: float,
        burst_window_seconds: float | None = None,
    ) -> dict[str, Signals]:
        self.queries += 1
        return {}


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "generation": 1,
            "resourceVersion": "1",
        },
        "spec": {
            "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
            "accelerator": {"type": "a10g"},
            "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
        },
        "status": {},
    }


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"deploy-{name}",
            "ownerReferences": [
                {
                    "apiVersion": "serving.llama-operator.dev/v1alpha1",
                    "kind": "LlamaService",
                    "uid": f"uid-{name}",
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": replicas},
        "status": {"readyReplicas": replicas},
    }


def indexes(names: list[str], replicas: int, kube: RecordingKube) -> Indexes:
    kube.bodies = {n: service(n) for n in names}

    def index(content: dict[Any, list[dict[str, Any]]]) -> Any:
        return cast("kopf.Index[Any, dict[str, Any]]", content)

    return Indexes(
        llamaservices=index({("team", n): [kube.bodies[n]] for n in names}),
        nodes=index({}),
        pods=index({}),
        deployments=index({("team", n): [deployment(n, replicas)] for n in names}),
        services=index({}),
        pdbs=index({}),
        pod_monitors=index({}),
        endpoint_slices=index({}),
    )


def memo(kube: RecordingKube) -> kopf.Memo:
    made = kopf.Memo()
    made.settings = Settings()
    made.kube = kube
    made.prometheus = NoMetrics()
    made.metrics = OperatorMetrics()
    return made


NAMES = ["alpha", "beta", "gamma"]


def test_a_refused_write_costs_only_its_own_service(caplog: pytest.LogCaptureFixture) -> None:
    # One replica each, below minReplicas 2: every service is brought up this cycle, beta's write refused.
    kube = RecordingKube(refuse={"beta"})
    with caplog.at_level(logging.INFO, logger="llama_operator"):
        report = autoscale_cycle(memo(kube), indexes(NAMES, 1, kube), AutoscalerMemory(), now=NOW)
    assert kube.replicas == {"alpha": 2, "gamma": 2}
    assert report.replica_writes == 2 and report.failures == 1
    assert "gamma" in kube.status_writes  # decided after the failure, not skipped
    refused = [r for r in caplog.records if "team/beta" in r.getMessage() and "409" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
    assert not any(r.exc_info for r in caplog.records), "a refused write is not a bug: no traceback"


def test_the_next_cycle_decides_the_refused_service_again() -> None:
    kube = RecordingKube(refuse={"beta"})
    memory, fleet = AutoscalerMemory(), indexes(NAMES, 1, kube)
    autoscale_cycle(memo(kube), fleet, memory, now=NOW)
    kube.refuse.clear()
    report = autoscale_cycle(memo(kube), fleet, memory, now=NOW + 5)
    assert kube.replicas["beta"] == 2 and report.failures == 0


def test_a_cycle_where_nothing_changed_writes_nothing() -> None:
    # Within bounds and no metrics (pods loading): the first cycle records its state, the next has no news.
    kube = RecordingKube(refuse=set())
    memory, fleet, made = AutoscalerMemory(), indexes(NAMES, 2, kube), memo(kube)
    first = autoscale_cycle(made, fleet, memory, now=NOW)
    assert first.replica_writes == 0 and first.status_writes == len(NAMES)
    for seconds in (5, 10, 60, 600):
        again = autoscale_cycle(made, fleet, memory, now=NOW + seconds)
        assert (again.replica_writes, again.status_writes) == (0, 0), seconds
    assert made.prometheus.queries == 5  # one batched fetch per cycle, whatever the number of services


class LightLoad:
    """A Prometheus that sees every service served lightly, its TTFT moving a little each cycle: only
    observations change, never a decision."""

    queries = 0

    def fetch(
        self,
        views: Mapping[ServiceKey, ServiceView],
        *,
        window_seconds: float,
        burst_window_seconds: float | None = None,
    ) -> dict[ServiceKey, Signals]:
        self.queries += 1
        ttft = 0.2 + 0.001 * (self.queries % 7)
        return {
            key: Signals(
                status=SignalStatus.OK,
                ttft_percentile_seconds=ttft,
                queue_waiting_total=0.0,
                running_total=0.5,
                kv_cache_usage=0.01,
                request_rate=0.2,
                prompt_token_rate=100.0,
                generation_token_rate=10.0,
                ready_replicas=view.ready_replicas,
                starting_replicas=0,
                current_replicas=view.current_replicas,
            )
            for key, view in views.items()
        }


def test_observation_refreshes_stay_within_the_fleet_budget_oldest_first() -> None:
    names = [f"svc-{i}" for i in range(10)]
    kube = RecordingKube(refuse=set())
    memory, fleet, made = AutoscalerMemory(), indexes(names, 2, kube), memo(kube)
    made.prometheus = LightLoad()
    # 0.4 refreshes a second x a 5 s cycle: 2 a cycle for the whole fleet.
    made.settings = Settings(status_refreshes_per_second=0.4, status_refresh_seconds=60)
    first = autoscale_cycle(made, fleet, memory, now=NOW)
    assert first.status_writes == len(names)  # first conditions: news, never held back
    kube.status_writes.clear()
    quiet = autoscale_cycle(made, fleet, memory, now=NOW + 5)
    assert quiet.status_writes == 0  # observations only, 5 s old: not due
    refreshed: list[str] = []
    for cycle in range(5):
        report = autoscale_cycle(made, fleet, memory, now=NOW + 65 + 5 * cycle)
        assert report.status_writes == 2, cycle
        assert report.refreshes_deferred == len(names) - 2 * (cycle + 1), cycle
        refreshed += kube.status_writes
        kube.status_writes.clear()
    assert sorted(refreshed) == sorted(names)  # each once: the oldest first, none twice
    assert made.metrics.refresh_backlog._value.get() == 0


def test_a_refresh_is_dropped_when_a_reconcile_wrote_the_status_meanwhile() -> None:
    kube = RecordingKube(refuse=set())
    memory, fleet, made = AutoscalerMemory(), indexes(["alpha"], 2, kube), memo(kube)
    made.prometheus = LightLoad()
    autoscale_cycle(made, fleet, memory, now=NOW)
    kube.status_writes.clear()
    decided_from = memory.written.current
    reads: list[ServiceKey] = []

    def reconciled_after_the_decision(key: ServiceKey, body: Mapping[str, Any]) -> dict[str, Any]:
        # The first read is the decision's; by the refresh's re-read a reconcile has written a new plan.
        reads.append(key)
        seen = decided_from(key, body)
        return seen if len(reads) == 1 else {**seen, "plan": {"accelerator": "l4"}}

    memory.written.current = reconciled_after_the_decision  # type: ignore[method-assign]
    report = autoscale_cycle(made, fleet, memory, now=NOW + 65)
    assert len(reads) == 2  # the refresh was due, and re-read before writing
    assert report.status_writes == 0 and kube.status_writes == []  # decided again next cycle instead


def test_a_service_held_blind_is_decided_again_only_when_an_input_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No metrics (pods loading): the policy holds the replicas whatever the clock says, so a cycle where
    # nothing changed skips the decision; a change to any input (here the Deployment's replicas, then a
    # new generation of the spec) brings it back.
    decided: list[float] = []
    real_decide = policy.decide

    def counting_decide(*args: Any, **kwargs: Any) -> Any:
        decided.append(args[3])
        return real_decide(*args, **kwargs)

    monkeypatch.setattr(autoscaler_module, "decide", counting_decide)
    kube = RecordingKube(refuse=set())
    memory, fleet, made = AutoscalerMemory(), indexes(["alpha"], 2, kube), memo(kube)
    for seconds in (0, 5, 10, 15):
        autoscale_cycle(made, fleet, memory, now=NOW + seconds)
    # First cycle: decided and its conditions written; second: decided again from the written status
    # (the index now shows it), nothing to write; then skipped.
    assert decided == [NOW, NOW + 5]
    no_data = made.metrics.exposition().decode()
    assert 'llama_operator_signal_no_data_seconds{llamaservice="alpha",namespace="team"} 15.0' in no_data
    next(iter(fleet.deployments[("team", "alpha")]))["spec"]["replicas"] = (
        3  # someone scaled it (within bounds)
    )
    for seconds in (20, 25, 30, 35):
        autoscale_cycle(made, fleet, memory, now=NOW + seconds)
    # Decided at once; its status (desiredReplicas 3) written, decided again from it; then skipped.
    assert decided[-2:] == [NOW + 20, NOW + 25]
    body = next(iter(fleet.llamaservices[("team", "alpha")]))
    body["metadata"]["generation"] = 2
    body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
    autoscale_cycle(made, fleet, memory, now=NOW + 40)
    assert decided[-1] == NOW + 40


def test_the_objective_exported_is_the_services_own_else_the_platforms() -> None:
    """spec.autoscaling.slo.objective where stated, else the operator's config.sloObjective: the series the
    alerts and the dashboard read (llama_operator_slo_objective_ratio), with the service's objectiveWindow."""
    kube = RecordingKube(refuse=set())
    fleet, made = indexes(["alpha", "beta"], 2, kube), memo(kube)
    made.settings = Settings(slo_objective=0.97)
    kube.bodies["beta"]["spec"]["autoscaling"]["slo"] = {"objective": 0.9, "objectiveWindow": "7d"}
    autoscale_cycle(made, fleet, AutoscalerMemory(), now=NOW)
    exposed = made.metrics.exposition().decode()
    assert 'llama_operator_slo_objective_ratio{llamaservice="alpha",namespace="team"} 0.97' in exposed
    assert 'llama_operator_slo_objective_ratio{llamaservice="beta",namespace="team"} 0.9' in exposed
    assert (
        'llama_operator_slo_objective_window_seconds{llamaservice="alpha",namespace="team"} 2.4192e+06'
        in (exposed)
    )
    assert (
        'llama_operator_slo_objective_window_seconds{llamaservice="beta",namespace="team"} 604800.0'
        in exposed
    )
