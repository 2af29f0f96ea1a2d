"""The platform team's image policy: which registries and repositories `spec.engine.image` may name."""

from __future__ import annotations

from collections.abc import Sequence

from llama_operator.planning.errors import PlanningError

# After a prefix such as "registry.example.com/vllm", only these may follow, so that the prefix cannot be
# stretched into a different repository ("registry.example.com/vllm-evil").
_REFERENCE_SEPARATORS = "/:@"


def image_allowed(image: str, allowed_prefixes: Sequence[str]) -> bool:
    if not allowed_prefixes:
        return True
    for prefix in allowed_prefixes:
        if not prefix or not image.startswith(prefix):
            continue
        if len(image) == len(prefix) or prefix[-1] in _REFERENCE_SEPARATORS:
            return True
        if image[len(prefix)] in _REFERENCE_SEPARATORS:
            return True
    return False


def check_engine_image(image: str | None, allowed_prefixes: Sequence[str]) -> None:
    """Raise PlanningError when the LlamaService names an image the policy does not allow."""
    if image is None or image_allowed(image, allowed_prefixes):
        return
    raise PlanningError(
        f"spec.engine.image {image!r} is not allowed by this cluster's image policy (allowed prefixes: "
        f"{', '.join(allowed_prefixes)}); use an image under one of them, or remove engine.image to run the "
        "operator's default vLLM image"
    )
