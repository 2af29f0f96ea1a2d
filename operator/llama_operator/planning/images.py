"""The platform team's image policy: which registries and repositories `spec.engine.image` may name.

References are parsed as container runtimes read them (the distribution/reference grammar: an optional
registry host with its port, a repository path, a tag, a digest) before any comparison: a prefix string match
would let `registry.example.com:5000/evil` pass a `registry.example.com` policy, or `vllm:5000/evil` (a
registry named vllm, on port 5000) pass a `vllm` one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from llama_operator.planning.errors import PlanningError

DOCKER_HUB = "docker.io"
# The names Docker Hub answers to; a reference without a registry means Docker Hub.
_DOCKER_HUB_ALIASES = frozenset(
    {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
)
_HOST_LABEL = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_HOST = re.compile(rf"^(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?$")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
MAX_REFERENCE_LENGTH = 4096


class InvalidImageReferenceError(ValueError):
    """Not an image reference a container runtime would pull; the message says which part, never the text."""


@dataclass(frozen=True)
class ImageReference:
    host: str  # lower-cased, with its port; docker.io for Docker Hub
    path: tuple[str, ...]  # repository path components
    tag: str | None = None
    digest: str | None = None


def _split_host(text: str) -> tuple[str | None, str]:
    """The registry host, when the first component names one (Docker's rule: it holds a '.' or ':', is
    localhost, or has upper-case letters), and the rest."""
    first, slash, rest = text.partition("/")
    if slash and (any(c in first for c in ".:[") or first == "localhost" or first.lower() != first):
        return first, rest
    return None, text


def _host(raw: str | None) -> str:
    if raw is None:
        return DOCKER_HUB
    if not _HOST.match(raw):
        raise InvalidImageReferenceError("its registry host is not a host name (with an optional port)")
    host = raw.lower()
    return DOCKER_HUB if host in _DOCKER_HUB_ALIASES else host


def _path(raw: str) -> tuple[str, ...]:
    components = tuple(raw.split("/")) if raw else ()
    if not components or not all(_PATH_COMPONENT.match(c) for c in components):
        raise InvalidImageReferenceError(
            "its repository path must be lower-case letters, digits and separators (. _ __ -) between slashes"
        )
    return components


def parse_image_reference(text: str) -> ImageReference:
    """[host[:port]/]path[:tag][@digest], normalised: Docker Hub's aliases to docker.io, its one-component
    official images under library/."""
    if not text or len(text) > MAX_REFERENCE_LENGTH or any(c.isspace() for c in text):
        raise InvalidImageReferenceError("it is empty, too long or holds white space")
    rest, at, digest = text.partition("@")
    if at and not _DIGEST.match(digest):
        raise InvalidImageReferenceError(
            "its digest is not algorithm:hex (such as sha256: and 64 hex digits)"
        )
    raw_host, remainder = _split_host(rest)
    # A ':' after the last '/' starts the tag (one before it belongs to the host's port).
    name, colon, tag = (
        remainder.rpartition(":") if ":" in remainder.rsplit("/", 1)[-1] else (remainder, "", "")
    )
    if colon and not _TAG.match(tag):
        raise InvalidImageReferenceError("its tag is not letters, digits, '_', '.' and '-' (at most 128)")
    host = _host(raw_host)
    path = _path(name)
    if host == DOCKER_HUB and len(path) == 1:
        path = ("library", *path)
    return ImageReference(host=host, path=path, tag=tag or None, digest=digest or None)


@dataclass(frozen=True)
class ImagePrefix:
    """An allowed prefix: a registry (`registry.example.com`, `registry.example.com:5000/`), a repository
    path under one (`registry.example.com/vllm`, matched whole components), or one exact reference with its
    tag or digest (`registry.example.com/vllm/vllm-openai:v0.32.0`)."""

    host: str
    path: tuple[str, ...]
    tag: str | None = None
    digest: str | None = None
    exact_repository: bool = False  # `repo:` or `repo@`: that repository, any tag or digest, nothing under it

    @classmethod
    def parse(cls, text: str) -> ImagePrefix:
        if text.endswith((":", "@")) and not text.endswith("/:"):
            raw_host, remainder = _split_host(text[:-1])
            return cls(host=_host(raw_host), path=_path(remainder), exact_repository=True)
        stripped = text.rstrip("/")
        if "/" not in stripped and (any(c in stripped for c in ".:[") or stripped == "localhost"):
            return cls(host=_host(stripped), path=())  # a registry only
        if ("@" in stripped or ":" in stripped.rsplit("/", 1)[-1]) and not text.endswith("/"):
            exact = parse_image_reference(stripped)
            return cls(host=exact.host, path=exact.path, tag=exact.tag, digest=exact.digest)
        raw_host, remainder = _split_host(stripped)
        return cls(host=_host(raw_host), path=_path(remainder) if remainder else ())

    def admits(self, image: ImageReference) -> bool:
        if image.host != self.host:
            return False
        if self.tag is not None or self.digest is not None:
            return image.path == self.path and (
                (self.digest is not None and image.digest == self.digest)
                or (self.digest is None and image.tag == self.tag and image.digest is None)
            )
        if self.exact_repository:
            return image.path == self.path or (
                self.host == DOCKER_HUB and image.path == ("library", *self.path)
            )
        if image.path[: len(self.path)] == self.path:
            return True
        # A Docker Hub prefix naming an official image ("ubuntu") admits it under library/.
        return self.host == DOCKER_HUB and image.path[: len(self.path) + 1] == ("library", *self.path)


def image_allowed(image: str, allowed_prefixes: Sequence[str]) -> bool:
    """Whether the policy admits the image; a reference that does not parse is admitted by no policy."""
    if not allowed_prefixes:
        return True
    try:
        reference = parse_image_reference(image)
    except InvalidImageReferenceError:
        return False
    for prefix in allowed_prefixes:
        try:
            if prefix and ImagePrefix.parse(prefix).admits(reference):
                return True
        except InvalidImageReferenceError:
            continue  # a malformed prefix admits nothing (the chart's schema reports it)
    return False


def check_engine_image(image: str | None, allowed_prefixes: Sequence[str]) -> None:
    """Raise PlanningError when the LlamaService names an image the policy does not allow, or one that is no
    image reference at all (the pod could never pull it)."""
    if image is None:
        return
    try:
        parse_image_reference(image)
    except InvalidImageReferenceError as error:
        raise PlanningError(
            f"spec.engine.image is not a valid image reference: {error}; give [registry[:port]/]repository"
            "[:tag][@digest]"
        ) from None
    if image_allowed(image, allowed_prefixes):
        return
    raise PlanningError(
        f"spec.engine.image is not allowed by this cluster's image policy (allowed: {', '.join(allowed_prefixes)}; "
        "compared by registry host and port, then whole repository path components); use an image under one "
        "of them, or remove engine.image to run the operator's default vLLM image"
    )
