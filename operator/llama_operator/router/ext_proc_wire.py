"""Envoy's external processing (ext_proc v3) messages as the endpoint-picker protocol uses them, behind typed
functions: the generated protobuf modules (the PyPI package xds-protos) ship no type stubs, so they are
touched here only, and the rest of the router sees `Message` and `Reply`.

The protocol (the Gateway API Inference Extension's docs/proposals/004-endpoint-picker-protocol, v1.6.0):
the gateway MAY name the endpoints the picker must choose from in the filter metadata
`envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset` (a list, or one comma-separated string);
the picker answers with the `x-gateway-destination-endpoint` header and the same value in the dynamic
metadata `envoy.lb`; it answers 503 (no eligible endpoint) or 429 (shed) as an ImmediateResponse. Gateways
run it in FULL_DUPLEX_STREAMED mode: the headers' answer waits for the end of the body, and the body is
then sent back as streamed chunks (as the extension's own picker does, at most 62,000 bytes each)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict

SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
DESTINATION_NAMESPACE = "envoy.lb"
DESTINATION_KEY = "x-gateway-destination-endpoint"
SERVED_KEY = "x-gateway-destination-endpoint-served"
CHUNK_BYTES = (
    62000  # some Envoy builds cap a streamed chunk at 64 KiB; the reference picker keeps this margin
)
SERVICE_NAME = "envoy.service.ext_proc.v3.ExternalProcessor"

Kind = Literal["request_headers", "request_body", "response_headers", "response_body", "other"]


@dataclass(frozen=True, slots=True)
class Message:
    """One ProcessingRequest: which phase, its headers (lower-cased names) or body chunk, whether the
    phase ends the stream's direction, and the endpoint subset the gateway named (None: none named)."""

    kind: Kind
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    end_of_stream: bool = False
    subset: tuple[str, ...] | None = None
    served: str | None = None  # the endpoint that served the request (the response's metadata)


@dataclass(frozen=True, slots=True)
class Reply:
    """One ProcessingResponse, opaque outside this module."""

    message: Any


def _metadata(request: Any) -> dict[str, Any]:
    filters = request.metadata_context.filter_metadata
    return {name: _plain(struct) for name, struct in filters.items()}


def _plain(struct: Any) -> dict[str, Any]:
    out: dict[str, Any] = MessageToDict(struct)
    return out


def _endpoints(value: Any) -> tuple[str, ...]:
    """The subset as the reference picker reads it: a list of strings or one string, each comma-separated."""
    items = value if isinstance(value, list) else [value]
    return tuple(
        part.strip() for item in items if isinstance(item, str) for part in item.split(",") if part.strip()
    )


def _headers(header_map: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for header in header_map.headers:
        value = header.raw_value.decode(errors="replace") if header.raw_value else header.value
        out[str(header.key).lower()] = str(value)
    return out


def parse(request: Any) -> Message:
    """A ProcessingRequest as a Message."""
    metadata = _metadata(request)
    subset_ns = metadata.get(SUBSET_NAMESPACE)
    subset = (
        _endpoints(subset_ns[SUBSET_KEY]) if isinstance(subset_ns, dict) and SUBSET_KEY in subset_ns else None
    )
    served_ns = metadata.get(DESTINATION_NAMESPACE)
    served = served_ns.get(SERVED_KEY) if isinstance(served_ns, dict) else None
    served_endpoint = served if isinstance(served, str) else None
    phase = request.WhichOneof("request")
    if phase in ("request_headers", "response_headers"):
        part = getattr(request, phase)
        return Message(phase, _headers(part.headers), b"", bool(part.end_of_stream), subset, served_endpoint)
    if phase in ("request_body", "response_body"):
        part = getattr(request, phase)
        return Message(phase, {}, bytes(part.body), bool(part.end_of_stream), subset, served_endpoint)
    return Message("other", subset=subset, served=served_endpoint)


def _set_headers(headers: Mapping[str, str]) -> Any:
    return pb.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, raw_value=v.encode()))
            for k, v in headers.items()
        ]
    )


def route_to(endpoint: str) -> Reply:
    """The request headers' answer: go to `endpoint` (header and dynamic metadata, the same value), and the
    route recomputed (the header may decide it)."""
    destination = struct_pb2.Struct()
    destination.update({DESTINATION_NAMESPACE: {DESTINATION_KEY: endpoint}})
    return Reply(
        pb.ProcessingResponse(
            request_headers=pb.HeadersResponse(
                response=pb.CommonResponse(
                    header_mutation=_set_headers({DESTINATION_KEY: endpoint}), clear_route_cache=True
                )
            ),
            dynamic_metadata=destination,
        )
    )


def body_chunks(phase: Literal["request_body", "response_body"], data: bytes, end: bool) -> list[Reply]:
    """A body passed on unchanged, as streamed chunks of at most CHUNK_BYTES (the last one ends the stream
    when `end`)."""
    pieces = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    replies = []
    for index, piece in enumerate(pieces):
        streamed = pb.StreamedBodyResponse(body=piece, end_of_stream=end and index == len(pieces) - 1)
        common = pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=streamed))
        replies.append(Reply(pb.ProcessingResponse(**{phase: pb.BodyResponse(response=common)})))
    return replies


def response_headers_through() -> Reply:
    """The response headers' answer: unchanged."""
    return Reply(pb.ProcessingResponse(response_headers=pb.HeadersResponse(response=pb.CommonResponse())))


def immediate(status: int, body: bytes, headers: Mapping[str, str]) -> Reply:
    """Answer the client now, without any upstream: the picker's refusals (403, 404, 413, 429, 503...)."""
    return Reply(
        pb.ProcessingResponse(
            immediate_response=pb.ImmediateResponse(
                status=http_status_pb2.HttpStatus(code=status),
                headers=_set_headers(headers),
                body=body,
                details=f"llama-router-{status}",
            )
        )
    )


Processor = Callable[[AsyncIterator[Message], str], AsyncIterator[Reply]]


def add_processor(server: grpc.aio.Server, process: Processor) -> None:
    """Serve `process` as the ExternalProcessor service: each stream's messages parsed, its replies sent;
    the caller's address (the gRPC peer) passed along."""

    class Servicer(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]  # untyped generated base
        async def Process(  # noqa: N802  (the generated service's name)
            self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            async def messages() -> AsyncIterator[Message]:
                async for request in requests:
                    yield parse(request)

            async for reply in process(messages(), peer_address(context.peer())):
                yield reply.message

    pb_grpc.add_ExternalProcessorServicer_to_server(Servicer(), server)


def peer_address(peer: str) -> str:
    """The address of a gRPC peer string (`ipv4:10.0.0.1:5000`, `ipv6:[::1]:5000`); '' for others (unix)."""
    family, _, rest = peer.partition(":")
    if family == "ipv4":
        return rest.rsplit(":", 1)[0]
    if family == "ipv6":
        host = rest.rsplit(":", 1)[0].strip("[]")
        return host[7:] if host.startswith("::ffff:") else host
    return ""


# --- a client, for tests and the e2e: what a gateway sends ----------------------------------------------


def request_headers(headers: Mapping[str, str], *, end: bool, subset: Sequence[str] | None = None) -> Any:
    """The ProcessingRequest a gateway sends for a request's headers (with the subset hint, when given)."""
    message = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(
            headers=base_pb2.HeaderMap(
                headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
            ),
            end_of_stream=end,
        )
    )
    if subset is not None:
        message.metadata_context.filter_metadata[SUBSET_NAMESPACE].update({SUBSET_KEY: list(subset)})
    return message


def request_body(data: bytes, *, end: bool) -> Any:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=data, end_of_stream=end))


def response_headers(status: int) -> Any:
    return pb.ProcessingRequest(
        response_headers=pb.HttpHeaders(
            headers=base_pb2.HeaderMap(
                headers=[base_pb2.HeaderValue(key=":status", raw_value=str(status).encode())]
            )
        )
    )


def response_body(data: bytes, *, end: bool) -> Any:
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=data, end_of_stream=end))


@dataclass(frozen=True, slots=True)
class Answer:
    """What a gateway reads from one ProcessingResponse."""

    phase: str  # request_headers, request_body, response_headers, response_body, immediate_response
    destination: str | None = None  # x-gateway-destination-endpoint (the header)
    metadata_destination: str | None = None  # the same in the dynamic metadata envoy.lb
    status: int = 0  # an immediate response's
    body: bytes = b""  # an immediate response's body, or a streamed body chunk
    end_of_stream: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)


def read_answer(response: Any) -> Answer:
    phase = response.WhichOneof("response")
    if phase == "immediate_response":
        im = response.immediate_response
        headers = {h.header.key: h.header.raw_value.decode() for h in im.headers.set_headers}
        return Answer(phase, status=int(im.status.code), body=bytes(im.body), headers=headers)
    common = getattr(response, phase).response
    headers = {h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers}
    metadata = _plain(response.dynamic_metadata) if response.HasField("dynamic_metadata") else {}
    streamed = common.body_mutation.streamed_response
    return Answer(
        phase,
        destination=headers.get(DESTINATION_KEY),
        metadata_destination=(metadata.get(DESTINATION_NAMESPACE) or {}).get(DESTINATION_KEY),
        body=bytes(streamed.body),
        end_of_stream=bool(streamed.end_of_stream),
        headers=headers,
    )


def process_stream(channel: grpc.aio.Channel) -> Callable[[AsyncIterator[Any]], AsyncIterator[Any]]:
    """The bidirectional Process call on `channel`, as a gateway makes it."""
    stub = pb_grpc.ExternalProcessorStub(channel)
    call: Callable[[AsyncIterator[Any]], AsyncIterator[Any]] = stub.Process
    return call


async def ask_picker(
    channel: grpc.aio.Channel,
    body: bytes,
    *,
    headers: Mapping[str, str] | None = None,
    subset: Sequence[str] | None = None,
    response: bytes = b'data: {"i": 0}\n\ndata: [DONE]\n\n',
) -> list[Answer]:
    """One request through the picker as a gateway in FULL_DUPLEX_STREAMED mode sends it (headers, then
    the body in two chunks; once answered, the response's headers and body relayed through it); the
    answers in order, up to an immediate response or the end of the response body."""
    sent: asyncio.Queue[Any] = asyncio.Queue()
    for message in (
        request_headers(
            {":method": "POST", ":path": "/v1/chat/completions", **(headers or {})}, end=False, subset=subset
        ),
        request_body(body[: len(body) // 2], end=False),
        request_body(body[len(body) // 2 :], end=True),
    ):
        sent.put_nowait(message)

    async def requests() -> AsyncIterator[Any]:
        while (message := await sent.get()) is not None:
            yield message

    answers: list[Answer] = []
    async for raw in process_stream(channel)(requests()):
        answer = read_answer(raw)
        answers.append(answer)
        if answer.phase == "immediate_response" or (answer.phase == "response_body" and answer.end_of_stream):
            sent.put_nowait(None)
        elif answer.phase == "request_body" and answer.end_of_stream:
            # The gateway sends the request to the pod, and relays its response through the picker.
            sent.put_nowait(response_headers(200))
            sent.put_nowait(response_body(response, end=True))
    return answers


def destination(answers: Sequence[Answer]) -> str | None:
    """The endpoint the picker chose (None: it refused); the header and the metadata must agree."""
    first = answers[0] if answers else None
    if first is None or first.phase != "request_headers":
        return None
    if first.destination != first.metadata_destination:
        raise ValueError(f"header {first.destination} and metadata {first.metadata_destination} differ")
    return first.destination
