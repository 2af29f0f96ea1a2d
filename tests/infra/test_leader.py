"""Lease expiry is judged by this instance's monotonic clock, from when it last saw the lease change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from llama_operator.infra.kube import own_namespace
from llama_operator.infra.leader import (
    BACKOFF_MAX_SECONDS,
    LeaderElection,
    LeaseObserver,
    LeaseProblem,
    LeaseRefusedError,
    describe_refusal,
)
from llama_operator.infra.metrics import Health


def test_a_lease_nobody_holds_is_free() -> None:
    assert LeaseObserver().expired("", "", 10, now=0)


def test_a_renewing_leader_keeps_it_and_a_silent_one_loses_it() -> None:
    observer = LeaseObserver()
    assert not observer.expired("a", "t1", 10, now=100)  # first sight: the clock starts now
    assert not observer.expired("a", "t1", 10, now=109)
    assert not observer.expired("a", "t2", 10, now=109.5)  # renewed: the clock restarts
    assert not observer.expired("a", "t2", 10, now=119)
    assert observer.expired("a", "t2", 10, now=119.6)


def test_the_leaders_wall_clock_is_never_compared_with_ours() -> None:
    observer = LeaseObserver()
    # A renewTime far in the past (a skewed clock) is not "expired" while it keeps changing.
    assert not observer.expired("a", "1970-01-01T00:00:00Z", 10, now=0)
    assert not observer.expired("a", "1970-01-01T00:00:02Z", 10, now=15)


# --- a refused Lease: said once, with the fix; transient errors retried with backoff -----------------


def _api_error(status: int, reason: str, message: str) -> ApiException:
    err = ApiException(status=status, reason=reason)
    err.body = json.dumps({"kind": "Status", "message": message, "reason": reason})
    err.headers = {"Audit-Id": "x" * 36}
    return err


def test_a_forbidden_lease_names_the_lease_the_namespace_and_the_missing_rbac() -> None:
    err = _api_error(403, "Forbidden", 'leases.coordination.k8s.io "llama-operator" is forbidden: User "x"')
    problem = describe_refusal(err, verb="get", namespace="default", name="llama-operator")
    assert problem.reason == "Forbidden"
    assert "\n" not in problem.message  # one line
    for part in ("Lease default/llama-operator", "cannot get", "403", "leases.coordination.k8s.io"):
        assert part in problem.message
    assert "LLAMA_OPERATOR_LEADER_ELECTION_NAMESPACE" in problem.message
    assert "Audit-Id" not in problem.message  # no HTTP dump


def test_a_missing_namespace_says_to_create_it() -> None:
    err = _api_error(404, "Not Found", 'namespaces "ops" not found')
    problem = describe_refusal(err, verb="create", namespace="ops", name="llama-operator")
    assert "create namespace 'ops'" in problem.message


class _RefusingLeases:
    def __init__(self, status: int) -> None:
        self.status, self.calls = status, 0

    def read_namespaced_lease(self, name: str, namespace: str) -> None:
        self.calls += 1
        raise _api_error(self.status, "Forbidden" if self.status == 403 else "Error", "no")


def _election(status: int, seen: list[LeaseProblem | None]) -> LeaderElection:
    election = LeaderElection(
        client.ApiClient(), namespace="default", name="llama-operator", on_problem=seen.append
    )
    election.api = _RefusingLeases(status)
    return election


@pytest.mark.parametrize(("status", "refused"), [(401, True), (403, True), (429, False), (500, False)])
def test_4xx_is_a_refusal_and_5xx_or_429_is_retried(status: int, refused: bool) -> None:
    election = _election(status, [])
    with pytest.raises(LeaseRefusedError if refused else ApiException):
        election.try_acquire_or_renew()


def test_the_problem_is_reported_once_and_cleared_when_it_is_gone() -> None:
    seen: list[LeaseProblem | None] = []
    election = _election(403, seen)
    problem = describe_refusal(_api_error(403, "Forbidden", "no"), verb="get", namespace="d", name="l")
    election._report(problem)
    election._report(problem)
    election._report(None)
    election._report(None)
    assert seen == [problem, None]


def test_failed_rounds_back_off_to_a_minute_but_a_leader_keeps_its_renew_period() -> None:
    election = _election(500, [])
    delays = [election.retry_delay(n) for n in range(12)]
    assert delays[0] == election.renew_seconds
    assert delays == sorted(delays) and delays[-1] == BACKOFF_MAX_SECONDS
    election.is_leader = True  # it must try often enough to renew before its deadline
    assert election.retry_delay(5) == election.renew_seconds


def test_the_operators_namespace_comes_from_the_pod_then_the_account_then_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = tmp_path / "namespace"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "ops"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert own_namespace({}, service_account_file=account) == ("ops", "the kubeconfig context's namespace")
    account.write_text("llama-system\n")
    assert own_namespace({}, service_account_file=account)[0] == "llama-system"
    assert own_namespace({"POD_NAMESPACE": "mine"}, service_account_file=account)[0] == "mine"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert own_namespace({}, service_account_file=tmp_path / "none")[0] == "default"


def test_an_instance_refused_its_lease_is_not_ready() -> None:
    health = Health(synced=True, controller_started=True)
    assert health.ready()[0]
    health.leader_election_problem = "leader election blocked: cannot get Lease default/x"
    assert health.ready() == (False, "leader election blocked: cannot get Lease default/x")
