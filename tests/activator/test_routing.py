"""The activator's pure parts: which LlamaService a request is for, Retry-After, forwarded headers."""

from __future__ import annotations

import pytest

from llama_operator.activator.routing import (
    SERVICE_HEADER,
    HeldService,
    forwarded_headers,
    resolve,
    retry_after_seconds,
)

SERVICES = {
    ("team-a", "chat"): HeldService(uid="u1", activation_timeout_seconds=300),
    ("team-b", "chat"): HeldService(uid="u2", activation_timeout_seconds=300),
    ("team-a", "code"): HeldService(uid="u3", activation_timeout_seconds=60),
}


@pytest.mark.parametrize(
    "host",
    [
        "code.team-a.svc.cluster.local:8000",
        "code.team-a.svc.cluster.local",
        "code.team-a.svc:8000",
        "code.team-a:8000",
        "CODE.Team-A",
        "code:8000",  # unique name: from the same namespace
        "code",
    ],
)
def test_every_way_a_client_in_the_cluster_names_the_service(host: str) -> None:
    resolution = resolve(host, None, SERVICES)
    assert resolution.key == ("team-a", "code"), resolution.message


def test_a_bare_name_used_in_several_namespaces_is_refused_with_the_fix() -> None:
    resolution = resolve("chat:8000", None, SERVICES)
    assert resolution.key is None and resolution.status == 421
    assert "team-a, team-b" in resolution.message and "chat.<namespace>" in resolution.message
    assert resolve("chat.team-b:8000", None, SERVICES).key == ("team-b", "chat")


def test_the_explicit_header_wins_over_host() -> None:
    assert resolve("gateway.example.com", "team-b/chat", SERVICES).key == ("team-b", "chat")
    missing = resolve("code.team-a", "team-c/chat", SERVICES)
    assert missing.key is None and missing.status == 404 and SERVICE_HEADER in missing.message


@pytest.mark.parametrize("host", ["nope.team-a:8000", "nope", "a.b.c.example.com", "", None, "10.0.0.1:8000"])
def test_unknown_services_get_a_404_that_says_how_to_address_one(host: str | None) -> None:
    resolution = resolve(host, None, SERVICES)
    assert resolution.key is None and resolution.status == 404
    assert resolution.message


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
