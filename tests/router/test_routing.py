"""The router's pure parts: which LlamaService a request is for and whether its caller may reach it, the
limits on holding, Retry-After, forwarded headers."""

from __future__ import annotations

import pytest

from llama_operator.router.routing import (
    SERVICE_HEADER,
    Caller,
    HoldCounts,
    Limits,
    ServiceInfo,
    admit_hold,
    forwarded_headers,
    hold_seconds,
    parse_allowed,
    resolve,
    retry_after_seconds,
    served_models,
)

SERVICES = {
    ("team-a", "chat"): ServiceInfo(uid="u1", activation_timeout_seconds=300, models=("llama-1b",)),
    ("team-b", "chat"): ServiceInfo(uid="u2", activation_timeout_seconds=300, models=("llama-1b",)),
    ("team-b", "secret"): ServiceInfo(uid="u4", activation_timeout_seconds=300, models=("secret-model",)),
    ("team-a", "code"): ServiceInfo(uid="u3", activation_timeout_seconds=60, models=("coder",)),
    ("team-c", "shared"): ServiceInfo(
        uid="u5", activation_timeout_seconds=60, models=("shared",), allowed_namespaces=frozenset({"team-a"})
    ),
}
TEAM_A = Caller("team-a")
GATEWAY = Caller("gateway", trusted=True)


def at(
    caller: Caller,
    host: str | None = None,
    explicit: str | None = None,
    model: str | None = None,
    namespace_header: str | None = None,
) -> tuple[tuple[str, str] | None, int, str]:
    r = resolve(
        caller,
        host=host,
        explicit=explicit,
        model=model,
        namespace_header=namespace_header,
        services=SERVICES,
    )
    return r.key, r.status, r.message


@pytest.mark.parametrize(
    "host",
    [
        "code.team-a.svc.cluster.local:8000",
        "code.team-a.svc.cluster.local",
        "code.team-a.svc:8000",
        "code.team-a:8000",
        "CODE.Team-A",
        "code:8000",  # a bare name: in the caller's namespace
        "code",
    ],
)
def test_every_way_a_client_in_its_namespace_names_the_service(host: str) -> None:
    key, _, message = at(TEAM_A, host=host)
    assert key == ("team-a", "code"), message


def test_model_picks_the_service_within_the_callers_namespace_only() -> None:
    assert at(TEAM_A, host="llama-router.llama-system:8000", model="coder")[0] == ("team-a", "code")
    assert at(Caller("team-b"), model="llama-1b")[0] == ("team-b", "chat")
    assert at(TEAM_A, model="llama-1b")[0] == ("team-a", "chat")
    key, status, message = at(TEAM_A, model="secret-model")
    assert key is None and status == 404 and "team-a" in message


@pytest.mark.parametrize(
    "how",
    [
        {"host": "secret.team-b:8000"},
        {"host": "secret.team-b.svc.cluster.local"},
        {"explicit": "team-b/secret"},
        {"host": "chat.team-a", "explicit": "team-b/secret"},
        {"host": "chat.team-b", "model": "llama-1b"},
        {"model": "secret-model", "namespace_header": "team-b"},  # only a trusted caller may name it
        {"explicit": "team-b/chat", "model": "llama-1b"},
    ],
)
def test_no_header_host_or_model_reaches_another_namespaces_service(how: dict[str, str]) -> None:
    key, status, message = at(TEAM_A, **how)
    assert key is None or key[0] == "team-a", f"{how} reached {key}"
    if key is None:
        assert status == 404
        # Not disclosed: the same answer as for a name that exists nowhere.
        # (`model` is echoed back: the caller's own word, nothing of team-b's)
        named = ("host", "explicit")
        absent = {
            k: v.replace("secret", "nothing").replace("team-b/chat", "team-b/nothing") if k in named else v
            for k, v in how.items()
        }
        assert (key, status, message) == at(TEAM_A, **absent), absent


def test_the_answer_for_another_tenants_service_is_the_same_as_for_none() -> None:
    exists = at(TEAM_A, explicit="team-b/secret")
    assert exists == at(TEAM_A, explicit="team-b/nothing") == at(TEAM_A, explicit="nothing")
    assert exists[1] == 404 and "secret" not in exists[2]
    # Host names another tenant's service: as a name that exists nowhere, `model` then decides.
    assert at(TEAM_A, host="secret.team-b", model="x") == at(TEAM_A, host="nothing.team-b", model="x")
    assert at(TEAM_A, host="secret.team-b", model="llama-1b")[0] == ("team-a", "chat")


def test_a_service_opened_to_a_namespace_is_reachable_from_it_by_name_only() -> None:
    assert at(TEAM_A, host="shared.team-c")[0] == ("team-c", "shared")
    assert at(TEAM_A, explicit="team-c/shared")[0] == ("team-c", "shared")
    assert at(Caller("team-b"), explicit="team-c/shared")[0] is None
    # `model` alone looks in the caller's own namespace: an opened service is named explicitly.
    assert at(TEAM_A, model="shared")[0] is None
    star = {("team-c", "open"): ServiceInfo("u", 60, ("m",), frozenset({"*"}))}
    found = resolve(
        Caller("team-z"), host=None, explicit="team-c/open", model=None, namespace_header=None, services=star
    )
    assert found.key == ("team-c", "open")


def test_a_source_that_is_no_pod_of_a_served_namespace_is_refused() -> None:
    for how in ({"host": "chat.team-a"}, {"model": "llama-1b"}, {"explicit": "team-a/chat"}):
        key, status, _ = at(Caller(None), **how)
        assert key is None and status == 403


def test_a_trusted_gateway_names_the_namespace() -> None:
    assert at(GATEWAY, explicit="team-b/secret")[0] == ("team-b", "secret")
    assert at(GATEWAY, host="secret.team-b")[0] == ("team-b", "secret")
    assert at(GATEWAY, model="secret-model", namespace_header="team-b")[0] == ("team-b", "secret")
    key, status, _ = at(Caller(None, trusted=True), model="secret-model")
    assert key is None and status == 400


def test_a_model_served_twice_in_a_namespace_asks_for_the_service() -> None:
    services = {**SERVICES, ("team-a", "chat-2"): ServiceInfo("u9", 300, ("llama-1b",))}
    r = resolve(TEAM_A, host=None, explicit=None, model="llama-1b", namespace_header=None, services=services)
    assert r.key is None and r.status == 409 and "chat, chat-2" in r.message and SERVICE_HEADER in r.message
    r = resolve(
        TEAM_A, host=None, explicit="chat-2", model="llama-1b", namespace_header=None, services=services
    )
    assert r.key == ("team-a", "chat-2")


@pytest.mark.parametrize("host", ["nope.team-a:8000", "nope", "a.b.c.example.com", "", None, "10.0.0.1:8000"])
def test_unknown_services_get_a_404_that_says_how_to_address_one(host: str | None) -> None:
    key, status, message = at(TEAM_A, host=host)
    assert key is None and status == 404 and "model" in message


def test_v1_models_lists_the_callers_namespace_only() -> None:
    listed = served_models(TEAM_A, None, SERVICES)
    assert listed == [(("team-a", "chat"), "llama-1b"), (("team-a", "code"), "coder")]
    assert served_models(TEAM_A, "team-b", SERVICES) == listed, "the namespace header is for trusted callers"
    assert [m for _, m in served_models(GATEWAY, "team-b", SERVICES)] == ["llama-1b", "secret-model"]
    assert served_models(Caller(None), "team-b", SERVICES) == []


def test_allowed_namespaces_annotation() -> None:
    assert parse_allowed(" team-a, ,team-b ") == frozenset({"team-a", "team-b"})
    assert parse_allowed(None) == frozenset()


def test_holding_stops_at_each_limit() -> None:
    limits = Limits(
        max_held_requests=10,
        max_held_requests_per_service=3,
        max_held_bytes_per_service=1000,
        max_buffered_bytes=10_000,
        namespace_share=0.5,
    )

    def why(
        requests: int, of_ns: int, of_service: int, bytes_of_ns: int, bytes_of_service: int, size: int
    ) -> str:
        refusal = admit_hold(
            limits, HoldCounts(requests, of_ns, of_service, bytes_of_ns, bytes_of_service), "a", size
        )
        return "" if refusal is None else f"{refusal.status} {refusal.limit} {refusal.message}"

    assert why(9, 2, 2, 0, 0, 1000) == ""
    assert why(10, 0, 0, 0, 0, 0).startswith("503 held") and "router" in why(10, 0, 0, 0, 0, 0)
    assert why(5, 5, 0, 0, 0, 0).startswith("429 namespace_held ")
    assert why(4, 3, 3, 0, 0, 0).startswith("503 held") and "per-service" in why(4, 3, 3, 0, 0, 0)
    assert why(4, 2, 1, 4900, 0, 101).startswith("429 namespace_held_bytes")
    assert why(4, 2, 1, 900, 900, 101).startswith("503 held") and "bodies" in why(4, 2, 1, 900, 900, 101)


def test_the_platform_caps_the_hold_time() -> None:
    assert hold_seconds(3600, Limits(max_hold_seconds=300)) == 300
    assert hold_seconds(60, Limits(max_hold_seconds=300)) == 60


def test_retry_after_is_bounded() -> None:
    assert retry_after_seconds(1) == 1
    assert retry_after_seconds(300) == 30
    assert retry_after_seconds(3600) == 30
    assert retry_after_seconds(60) == 6


def test_hop_by_hop_and_connection_named_headers_are_not_forwarded() -> None:
    headers = {
        "Host": "chat.team-a",
        "Connection": "keep-alive, X-Secret-Hop",
        "X-Secret-Hop": "1",
        "Keep-Alive": "timeout=5",
        "Transfer-Encoding": "chunked",
        "Content-Length": "12",
        "Authorization": "Bearer sk-1",
        "Content-Type": "application/json",
    }
    assert forwarded_headers(headers) == {"Authorization": "Bearer sk-1", "Content-Type": "application/json"}
