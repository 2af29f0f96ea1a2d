"""Hypothesis strategies for hostile LlamaService manifests: valid manifests (examples/ and a few that set
every field) mutated at random paths, so that the parser, the planner and the object builders all see
wrong types, edge numbers, deep nesting, huge and odd strings and hostile vLLM extraArgs; and the bytes
of manifest files (YAML broken at random places, non-UTF-8, nesting bombs, aliases)."""

from __future__ import annotations

import copy
import json
import math
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from llama_operator.api.spec import ALL_MIG_PROFILES, AcceleratorType, DType, Quantization

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = tuple(yaml.safe_load(f.read_text()) for f in sorted((REPO / "examples").rglob("*.yaml")))
NODE_FOLDER = REPO / "e2e" / "nodes"
FLAGS: list[dict[str, Any]] = json.loads((REPO / "operator/llama_operator/data/vllm_flags.json").read_text())[
    "flags"
]

Path_ = tuple[str | int, ...]

# Manifests that set every field, valid as written: mutations of them reach every builder branch.
FULL_MANIFESTS: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {
            "name": "full",
            "namespace": "team-a",
            "uid": "0f6e2c64-1111-2222-3333-444455556666",
            "generation": 3,
            "labels": {"team": "a"},
            "annotations": {"note": "x"},
        },
        "spec": {
            "model": {
                "name": "my-org/custom-model",
                "servedName": "custom",
                "revision": "main",
                "tokenSecretRef": {"name": "hf", "key": "token"},
                "cache": {"persistentVolumeClaim": "models"},
                "architecture": {
                    "layers": 16,
                    "kvHeads": 8,
                    "headDim": 64,
                    "parameters": 1_235_814_400,
                    "maxContext": 131_072,
                },
            },
            "accelerator": {"type": "h100-80gb", "count": 2},
            "engine": {
                "image": "vllm/vllm-openai:v0.32.0",
                "dtype": "bfloat16",
                "quantization": "none",
                "maxModelLen": 4096,
                "maxNumSeqs": 64,
                "gpuMemoryUtilization": 0.85,
                "prefixCaching": False,
                "extraArgs": [
                    "--enforce-eager",
                    "--kv-cache-dtype",
                    "fp8",
                    "--num-gpu-blocks-override",
                    "512",
                ],
                "apiKeySecretRef": {"name": "api", "key": "key"},
            },
            "replicas": 2,
            "autoscaling": {
                "enabled": True,
                "minReplicas": 1,
                "maxReplicas": 4,
                "scaleDownStabilizationSeconds": 120,
                "slo": {"ttftSeconds": 0.5, "percentile": 99, "queueDepthPerReplica": 2},
            },
        },
    },
    {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": "slice"},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": {"sizeLimit": "20Gi"}},
            "accelerator": {"type": "h100-80gb", "mig": "2g.20gb"},
            "engine": {"maxNumSeqs": "auto", "gpuMemoryUtilization": "auto", "quantization": "fp8"},
            "autoscaling": {"enabled": False},
        },
    },
)
VALID_MANIFESTS = EXAMPLES + FULL_MANIFESTS

# Every field of the contract, so that mutations also create fields a base manifest leaves out.
# Hypothesis draws early entries more often: the top-level keys, which stop everything, come last.
KNOWN_PATHS: tuple[Path_, ...] = (
    *(("metadata", f) for f in ("name", "namespace", "uid", "generation", "labels", "annotations")),
    ("metadata", "labels", "app"),
    ("metadata", "annotations", "a"),
    *(("spec", f) for f in ("model", "accelerator", "engine", "replicas", "autoscaling")),
    *(("spec", "model", f) for f in ("name", "servedName", "revision", "tokenSecretRef", "cache")),
    ("spec", "model", "architecture"),
    *(("spec", "model", "tokenSecretRef", f) for f in ("name", "key")),
    *(("spec", "model", "cache", f) for f in ("persistentVolumeClaim", "sizeLimit")),
    *(
        ("spec", "model", "architecture", f)
        for f in ("layers", "kvHeads", "headDim", "parameters", "maxContext")
    ),
    *(("spec", "accelerator", f) for f in ("type", "mig", "count")),
    *(
        ("spec", "engine", f)
        for f in (
            "image",
            "dtype",
            "quantization",
            "maxModelLen",
            "maxNumSeqs",
            "gpuMemoryUtilization",
            "prefixCaching",
            "extraArgs",
            "apiKeySecretRef",
        )
    ),
    ("spec", "engine", "extraArgs", 0),
    *(("spec", "engine", "apiKeySecretRef", f) for f in ("name", "key")),
    *(
        ("spec", "autoscaling", f)
        for f in ("enabled", "minReplicas", "maxReplicas", "slo", "scaleDownStabilizationSeconds")
    ),
    *(("spec", "autoscaling", "slo", f) for f in ("ttftSeconds", "percentile", "queueDepthPerReplica")),
    ("status",),
    ("apiVersion",),
    ("kind",),
)

# Built once: generating these sizes per example would dominate the run time.
HUGE_STRING = "x" * 50_000
HUGE_FLAG = "--" + "a" * 5_000
NESTING_DEPTHS = (50, 200, 600)

_BOUNDARY_NUMBERS: tuple[int | float, ...] = (
    0,
    -1,
    1,
    2,
    7,
    8,
    9,
    127,
    128,
    4096,
    4097,
    1_000_000,
    10**12,
    10**30,
    -(10**30),
    0.0,
    -0.0,
    0.5,
    0.98,
    0.99,
    1.5,
    99.9,
    1e-300,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
)
_PLAUSIBLE_STRINGS: tuple[str, ...] = (
    "",
    " ",
    "auto",
    "none",
    "true",
    "0",
    "-1",
    "1.5",
    "20Gi",
    "0Gi",
    "-1Gi",
    "1e3",
    "1Ei",
    "999999999999999999999Ei",
    "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
    "/models/local",
    "chat",
    "Chat",
    "a" * 64,
    "a\nb",
    "x: y",
    "${HOME}",
    "$(rm -rf /)",
    "ünïcødé",
    "\u202egnp.exe",
    "\x00",
    "\ud800",
    "vllm/vllm-openai:v0.32.0",
    "docker.io/evil/image",
    *[t.value for t in AcceleratorType],
    *[d.value for d in DType],
    *[q.value for q in Quantization],
    *ALL_MIG_PROFILES,
    "9g.99gb",
)


def deep_nesting(depth: int, leaf: Any = "x") -> Any:
    """A list/mapping nested `depth` levels (built in a loop: no recursion)."""
    value: Any = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def json_like(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.sampled_from(_PLAUSIBLE_STRINGS),
        st.sampled_from(_BOUNDARY_NUMBERS),
        st.none(),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(
                st.one_of(st.text(max_size=8), st.sampled_from(("name", "type", "0"))), children, max_size=3
            ),
        ),
        max_leaves=max_leaves,
    )


def _flag_tokens() -> st.SearchStrategy[str]:
    names = [name for flag in FLAGS for name in flag["names"]]
    choices = [c for flag in FLAGS for c in flag["choices"] or ()]
    dotted = [f"{flag['names'][0]}.{key}" for flag in FLAGS for key in flag["fields"] or ()]
    hostile = (
        "--model.x",
        "--model",
        "--mod",
        "--por",
        "--port=1",
        "--help",
        "-h",
        "--help=all",
        "--version",
        "--api-key=secret",
        "--hf-token",
        "--my-token",
        "-tp",
        "-tp=2",
        "-O3",
        "-O",
        "--optimization-level",
        "-",
        "--",
        "---x",
        "=",
        "--=x",
        "--x=",
        "--kv-cache-dtype=",
        "--num-gpu-blocks-override",
        "--attention-backend",
        "--attention-config.backend",
        "-ac.backend",
        "--no-enable-prefix-caching",
        "--enable-prefix-caching",
        "--max_model_len",
        "--MAX-MODEL-LEN",
        "--mödel",
        "—model",
        "\uff0d\uff0dmodel",  # fullwidth hyphens
        "--enforce-eager\n--port 1",
        "--port 1",
        "{}",
        '{"a": 1}',
        "[1, 2]",
        "null",
        "None",
        "-1",
        "-1e5",
        "1e400",
        "9" * 5000,
        "nan",
        "inf",
        "",
        HUGE_FLAG,
        "\x00",
        "\ud800",
    )
    prefixes = [name[: max(3, len(name) // 2)] for name in names[::7]]
    return st.one_of(
        st.sampled_from(names),
        st.sampled_from(hostile),
        st.sampled_from(choices or ["auto"]),
        st.sampled_from(dotted or ["--x.y"]),
        st.sampled_from(prefixes),
        st.builds(
            lambda n, v: f"{n}={v}",
            st.sampled_from(names),
            st.sampled_from((*_PLAUSIBLE_STRINGS[:20], *choices[:20])),
        ),
        st.sampled_from(_PLAUSIBLE_STRINGS),
        st.text(max_size=12),
        st.builds(lambda t: "--" + t, st.text(max_size=12)),
    )


def extra_args() -> st.SearchStrategy[list[str]]:
    """Hostile `spec.engine.extraArgs`: real flags, abbreviations, dotted keys, = forms, odd text."""
    return st.lists(_flag_tokens(), max_size=8)


def hostile_values() -> st.SearchStrategy[Any]:
    """A value to put anywhere: wrong types, edge numbers, huge or odd strings, deep nesting."""
    return st.one_of(
        json_like(),
        st.sampled_from(_BOUNDARY_NUMBERS),
        st.sampled_from(_PLAUSIBLE_STRINGS),
        st.just(HUGE_STRING),
        st.sampled_from(NESTING_DEPTHS).map(deep_nesting),
        st.sampled_from((date(2024, 1, 1), datetime(2024, 1, 1, 12, 0), b"\xff\xfe bytes", b"ok")),
        st.just({1: "a number as a key", 2.5: "x", None: "null key"}),
        extra_args(),
        st.lists(json_like(max_leaves=2), min_size=1, max_size=3),
    )


# Values the contract accepts, per field: combinations of these pass the parser and exercise the planner's
# choices (accelerator, MIG, dtype, quantization, lengths, KV cache) and the builders.
_MODEL_NAMES = (
    "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-3.2-3B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-405B",
    "meta-llama/Llama-2-13b-chat-hf",
    "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
    "/models/local",
    "unknown/model",
)
IN_CONTRACT: dict[Path_, st.SearchStrategy[Any]] = {
    ("metadata", "name"): st.sampled_from(("a", "chat", "a" * 63, "x-1")),
    ("metadata", "namespace"): st.sampled_from(("default", "team-a", "")),
    ("spec", "model", "name"): st.sampled_from(_MODEL_NAMES),
    ("spec", "model", "servedName"): st.sampled_from(("x", "a" * 256)),
    ("spec", "model", "cache", "sizeLimit"): st.sampled_from(("1", "20Gi", "1Ei", "0.5Mi", "1e3")),
    ("spec", "model", "architecture"): st.fixed_dictionaries(
        {
            "layers": st.integers(1, 1024),
            "kvHeads": st.integers(1, 1024),
            "headDim": st.integers(8, 1024),
            "parameters": st.integers(1_000_000, 10**13),
            "maxContext": st.integers(128, 10_000_000),
        }
    ),
    ("spec", "accelerator", "type"): st.sampled_from([t.value for t in AcceleratorType]),
    ("spec", "accelerator", "mig"): st.sampled_from((*ALL_MIG_PROFILES, None)),
    ("spec", "accelerator", "count"): st.integers(1, 8),
    ("spec", "engine", "dtype"): st.sampled_from([d.value for d in DType]),
    ("spec", "engine", "quantization"): st.sampled_from([q.value for q in Quantization]),
    ("spec", "engine", "maxModelLen"): st.one_of(
        st.integers(128, 10_000_000), st.sampled_from((128, 2048, 8192))
    ),
    ("spec", "engine", "maxNumSeqs"): st.one_of(st.just("auto"), st.integers(1, 4096)),
    ("spec", "engine", "gpuMemoryUtilization"): st.one_of(st.floats(0.5, 0.98), st.just("auto")),
    ("spec", "engine", "prefixCaching"): st.booleans(),
    ("spec", "engine", "image"): st.sampled_from(("vllm/vllm-openai:v0.32.0", "a", "x" * 1000)),
    ("spec", "replicas"): st.integers(0, 1000),
    ("spec", "autoscaling", "enabled"): st.booleans(),
    ("spec", "autoscaling", "minReplicas"): st.integers(1, 1000),
    ("spec", "autoscaling", "maxReplicas"): st.integers(1, 1000),
    ("spec", "autoscaling", "scaleDownStabilizationSeconds"): st.integers(0, 3600),
    ("spec", "autoscaling", "slo", "ttftSeconds"): st.floats(1e-9, 600),
    ("spec", "autoscaling", "slo", "percentile"): st.floats(50, 99.9),
    ("spec", "autoscaling", "slo", "queueDepthPerReplica"): st.floats(1e-9, 10_000),
}
_IN_CONTRACT_PATHS = tuple(IN_CONTRACT)


def plausible_values() -> st.SearchStrategy[Any]:
    """A value of a type the contract may accept somewhere: enum words, edge numbers, small counts,
    fractions, booleans. Most pass the parser at one field or another and reach the planner."""
    return st.one_of(
        st.sampled_from(_BOUNDARY_NUMBERS),
        st.sampled_from(_PLAUSIBLE_STRINGS),
        st.integers(min_value=0, max_value=10),
        st.floats(min_value=0, max_value=1),
        st.booleans(),
        st.none(),
    )


def _paths(value: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every path to a value inside a manifest (the root excluded), depth-first."""
    found: list[Path_] = []
    stack: list[tuple[Path_, Any]] = [(prefix, value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            children: list[tuple[str | int, Any]] = [(k, v) for k, v in node.items() if isinstance(k, str)]
        elif isinstance(node, list):
            children = list(enumerate(node))
        else:
            continue
        for key, child in children:
            found.append((*path, key))
            if len(found) < 500:
                stack.append(((*path, key), child))
    return found[::-1]  # deepest first: hypothesis favours early entries, and the top-level keys stop all


def _set(document: Any, path: Path_, value: Any) -> Any:
    """Put `value` at `path`, creating mappings on the way; a path through a scalar replaces it."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items: list[Any] = document if isinstance(document, list) else []
        while len(items) <= head:
            items.append(None)
        items[head] = _set(items[head], rest, value)
        return items
    mapping: dict[str, Any] = document if isinstance(document, dict) else {}
    mapping[head] = _set(mapping.get(head), rest, value)
    return mapping


def _delete(document: Any, path: Path_) -> None:
    """Remove what `path` names, if it is there (an earlier mutation may have replaced a parent)."""
    parent = document
    for key in path[:-1]:
        present = (isinstance(parent, dict) and key in parent) or (
            isinstance(parent, list) and isinstance(key, int) and key < len(parent)
        )
        if not present:
            return
        parent = parent[key]
    last = path[-1]
    if isinstance(parent, dict):
        parent.pop(last, None)
    elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        del parent[last]


@st.composite
def hostile_manifests(draw: st.DrawFn) -> Any:
    """A valid manifest with 0 to 3 changes the contract accepts (other models, accelerators, MIG
    profiles, lengths, ...) and then, half the time, 1 or 2 hostile ones: a value replaced by a wrong
    type, an edge number or an odd string, a key removed, hostile extraArgs, rarely a document that is
    not a mapping. So about half reach the planner and the builders, the rest the parser's every level."""
    document: Any = copy.deepcopy(draw(st.sampled_from(VALID_MANIFESTS)))
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_IN_CONTRACT_PATHS))
        document = _set(document, path, draw(IN_CONTRACT[path]))
    if draw(st.booleans()):
        return document
    for _ in range(draw(st.integers(1, 2))):
        action = draw(st.sampled_from(("replace", "known", "plausible", "extra-args", "delete", "root")))
        if action == "root":
            if draw(st.integers(0, 9)) == 0:  # rarely: the whole document is not a mapping
                document = draw(hostile_values())
        elif action == "extra-args":
            document = _set(document, ("spec", "engine", "extraArgs"), draw(extra_args()))
        elif action in {"known", "plausible"}:
            values = plausible_values() if action == "plausible" else hostile_values()
            document = _set(document, draw(st.sampled_from(KNOWN_PATHS)), draw(values))
        elif paths := _paths(document):
            path = draw(st.sampled_from(paths))
            if action == "delete":
                _delete(document, path)
            else:
                document = _set(document, path, draw(hostile_values()))
    return document


def _yaml_text(document: Any) -> str:
    try:
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, RecursionError):
        return str(document)  # not every Python value is YAML; its repr is a hostile file too


_BREAKERS = (
    "[",
    "]",
    "{",
    "}",
    ":",
    "- ",
    "&a ",
    "*a",
    "*b",
    "!!binary ",
    "!!python/object ",
    "'",
    '"',
    "\t",
    "\n",
    "---\n",
    "? ",
    "%YAML 1.1\n",
    "\\u0000",
    "|",
    ">",
)


@st.composite
def manifest_files(draw: st.DrawFn) -> bytes:
    """The bytes of a manifest file: a hostile manifest as YAML, maybe several documents, maybe broken
    at random places, maybe not UTF-8, maybe an alias or nesting bomb."""
    kind = draw(st.sampled_from(("manifest", "manifest", "manifest", "broken", "documents", "bomb", "bytes")))
    if kind == "bomb":
        depth = draw(st.sampled_from((99, 100, 101, 300, 2_000, 50_000)))
        bomb = draw(
            st.sampled_from(
                (
                    "spec: " + "[" * depth + "]" * depth,
                    "spec:\n" + "".join(" " * i + "a:\n" for i in range(min(depth, 3_000))),
                    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                    + "".join(
                        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "*a"] * 10) + "]\n"
                        for i in range(9)
                    ),
                    "a: &a [*a]\n",
                    "a: &a {b: *a}\n",
                    "- " * depth + "x",
                )
            )
        )
        text = f"apiVersion: serving.llama-operator.dev/v1alpha1\nkind: LlamaService\nmetadata: {{name: x}}\n{bomb}\n"
        return text.encode()
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    count = draw(st.integers(1, 3)) if kind == "documents" else 1
    text = "---\n".join(_yaml_text(draw(hostile_manifests())) for _ in range(count))
    if kind == "broken":
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(_BREAKERS)) + text[at:]
    data = text.encode("utf-8", errors="surrogatepass")  # a lone surrogate makes the file non-UTF-8
    if draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(data)))
        data = (
            data[:at]
            + draw(st.sampled_from((b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80", b"\x00")))
            + data[at:]
        )
    return data


NODES = tuple(yaml.safe_load(f.read_text()) for f in sorted(NODE_FOLDER.glob("*.yaml")))
NODE_PATHS: tuple[Path_, ...] = (
    ("metadata", "labels"),
    ("metadata", "labels", "nvidia.com/gpu.product"),
    ("metadata", "labels", "nvidia.com/gpu.memory"),
    ("metadata", "labels", "nvidia.com/mig.config.state"),
    ("metadata", "labels", "nvidia.com/mig-1g.10gb.memory"),
    ("status", "allocatable"),
    ("status", "allocatable", "nvidia.com/gpu"),
    ("status", "allocatable", "nvidia.com/mig-1g.10gb"),
    ("status", "allocatable", "cpu"),
    ("status", "capacity"),
    ("spec", "unschedulable"),
    ("metadata", "name"),
    ("metadata",),
    ("status",),
    ("spec",),
    ("kind",),
)


@st.composite
def node_files(draw: st.DrawFn) -> bytes:
    """The bytes of a hand-written node inventory: the e2e Node manifests (one, or a kind: List of
    them) with 1 to 3 values replaced or removed."""
    nodes = copy.deepcopy(list(draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=3))))
    document: Any = {"apiVersion": "v1", "kind": "List", "items": nodes} if len(nodes) > 1 else nodes[0]
    for _ in range(draw(st.integers(1, 3))):
        # The fields the inventory reads, or any path at all.
        node_path = draw(st.sampled_from(NODE_PATHS))
        path = (*(("items", 0) if len(nodes) > 1 else ()), *node_path)
        if draw(st.booleans()) and (paths := _paths(document)):
            path = draw(st.sampled_from(paths))
        if draw(st.booleans()):
            _delete(document, path)
        else:
            values = draw(st.sampled_from((plausible_values(), hostile_values())))
            document = _set(document, path, draw(values))
    return _yaml_text(document).encode("utf-8", errors="surrogatepass")
