"""A measured accelerator profile: what `llama-bench profile` recorded from a running vLLM, and the
step-time model fitted to it, in the form the simulator uses (`ReplicaProfile`).

The file keeps the raw measurements; the coefficients are refitted on load, so a profile is judged by
its points, never by numbers typed into it. The step-time model is the simulator's
(`sim.accelerators`), with one term the data-sheet profiles leave at zero:

    t_step = base + per_sequence * decoding + per_context_token * sum(ctx) + per_prefill_token * prefill

- decode points (concurrent streams of fixed length): step time at batch b and mean context c per
  sequence, fitted by least squares on (1, b, b * c) -> base, per_sequence, per_context_token. On a
  GPU per_sequence is near zero (the step is bandwidth-bound); on a CPU each sequence costs compute.
- prefill points (one request at a time, max_tokens 1): TTFT at prompt length L, which is the engine's
  ceil(L / chunk) prefill steps plus a fixed request latency (HTTP, tokenisation, detokenisation) ->
  per_prefill_token and request_overhead by least squares on (1, L) after the steps' base time.

The request latency is added to first-token and finish times in the simulator; a constant latency
on the way in is the same as one on the way out for an engine that sees every request shifted alike.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llama_bench.sim.accelerators import MODELS, ReplicaProfile
from llama_operator.catalog.performance import StepModel

PROFILE_FORMAT = "llama-operator/accelerator-profile/v1"


@dataclass(frozen=True, slots=True)
class PrefillPoint:
    """Median TTFT of one request alone on the server, with `prompt_tokens` and max_tokens 1."""

    prompt_tokens: int
    ttft_seconds: float


@dataclass(frozen=True, slots=True)
class DecodePoint:
    """Median time between two streamed tokens with `batch` sequences decoding together, each holding
    `context_tokens` tokens of context on average."""

    batch: int
    context_tokens: float
    step_seconds: float


@dataclass(frozen=True, slots=True)
class StepFit:
    """The fitted coefficients (seconds)."""

    base: float
    per_sequence: float
    per_context_token: float
    per_prefill_token: float
    request_overhead: float

    def decode_step(self, batch: int, context_tokens: float) -> float:
        return self.base + self.per_sequence * batch + self.per_context_token * batch * context_tokens

    def ttft_alone(self, prompt_tokens: int, chunk: int) -> float:
        steps = max(1, math.ceil(prompt_tokens / chunk))
        return self.request_overhead + steps * self.base + self.per_prefill_token * prompt_tokens


@dataclass(frozen=True, slots=True)
class MeasuredProfile:
    """One model served by one vLLM on one device, as measured."""

    name: str  # what `--accelerator`-like output shows, e.g. "nvidia-l4" or "vllm-cpu"
    device: str  # the GPU name (nvidia-smi) or "cpu"
    model: str  # served model name
    measured_at: str  # ISO 8601 date and time
    max_num_seqs: int
    max_num_seqs_source: str  # "measured" (running stopped growing while requests waited) or why not
    max_num_batched_tokens: int
    kv_capacity_tokens: int
    prefill: tuple[PrefillPoint, ...]
    decode: tuple[DecodePoint, ...]
    price_per_hour: float = 0.0
    vllm_version: str = ""
    server_url: str = ""
    model_shape: str = ""  # a sim.accelerators.MODELS key when the served model has that architecture

    def fit(self) -> StepFit:
        return fit_step_model(self.decode, self.prefill, self.max_num_batched_tokens)

    def replica_profile(self) -> ReplicaProfile:
        """The simulator's replica with the fitted step times and the measured limits."""
        fitted = self.fit()
        return ReplicaProfile(
            accelerator=self.name,
            model=self.model_shape or self.model,
            price_per_hour=self.price_per_hour,
            steps=StepModel(
                weight_read_seconds=fitted.base,
                seconds_per_context_token=fitted.per_context_token,
                seconds_per_prefill_token=fitted.per_prefill_token,
                seconds_per_decode_sequence=fitted.per_sequence,
            ),
            kv_capacity_tokens=self.kv_capacity_tokens,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            request_overhead_seconds=fitted.request_overhead,
        )

    def to_json(self) -> dict[str, Any]:
        fitted = self.fit()
        return {
            "format": PROFILE_FORMAT,
            "name": self.name,
            "device": self.device,
            "model": self.model,
            "modelShape": self.model_shape,
            "measuredAt": self.measured_at,
            "vllmVersion": self.vllm_version,
            "serverUrl": self.server_url,
            "pricePerHour": self.price_per_hour,
            "maxNumSeqs": self.max_num_seqs,
            "maxNumSeqsSource": self.max_num_seqs_source,
            "maxNumBatchedTokens": self.max_num_batched_tokens,
            "kvCapacityTokens": self.kv_capacity_tokens,
            "prefill": [
                {"promptTokens": p.prompt_tokens, "ttftSeconds": p.ttft_seconds} for p in self.prefill
            ],
            "decode": [
                {"batch": d.batch, "contextTokens": d.context_tokens, "stepSeconds": d.step_seconds}
                for d in self.decode
            ],
            # For people reading the file; the loader refits from the points above.
            "fit": {
                "stepBaseSeconds": fitted.base,
                "secondsPerDecodeSequence": fitted.per_sequence,
                "secondsPerContextToken": fitted.per_context_token,
                "secondsPerPrefillToken": fitted.per_prefill_token,
                "requestOverheadSeconds": fitted.request_overhead,
                "prefillTokensPerSecond": self.replica_profile().prefill_tokens_per_second,
            },
        }


@dataclass(frozen=True, slots=True)
class HostSpeed:
    """A short probe of the server, taken beside a replay: the median TTFT of a prompt of `prompt_tokens`
    alone, and the step of `batch` sequences decoding with short prompts; the profile holds both points,
    so their ratios to it say how much faster or slower the host runs now than when it was profiled."""

    prompt_tokens: int
    prefill_seconds: float
    batch: int
    decode_step_seconds: float

    def ratios(self, profile: MeasuredProfile) -> tuple[float, float]:
        """(prefill, decode): this probe's times over the profile's at the same points."""
        prefill = next(p for p in profile.prefill if p.prompt_tokens == self.prompt_tokens)
        decode = min((d for d in profile.decode if d.batch == self.batch), key=lambda d: d.context_tokens)
        return self.prefill_seconds / prefill.ttft_seconds, self.decode_step_seconds / decode.step_seconds


def speed_probe_points(profile: MeasuredProfile) -> tuple[int, int]:
    """The points a speed probe measures: the profile's longest prompt within one chunk (a prefill that
    takes long enough to time) and its largest decode batch (short prompts)."""
    within = [p.prompt_tokens for p in profile.prefill if p.prompt_tokens <= profile.max_num_batched_tokens]
    prompt = max(within or [p.prompt_tokens for p in profile.prefill])
    return prompt, max(d.batch for d in profile.decode)


def drift(before: HostSpeed, after: HostSpeed) -> float:
    """How far the host's speed moved between two probes (the larger relative change of the two points)."""
    return max(
        abs(after.prefill_seconds / before.prefill_seconds - 1),
        abs(after.decode_step_seconds / before.decode_step_seconds - 1),
    )


def at_speed(profile: MeasuredProfile, probes: Sequence[HostSpeed]) -> MeasuredProfile:
    """The profile as the host ran during the probes: its prefill points scaled by the probes' mean prefill
    ratio to it, its decode points by the mean decode ratio. The profile's shape (how step time grows with
    batch, context and prompt) is kept; only its speed is taken from the moment of the replay."""
    if not probes:
        return profile
    ratios = [probe.ratios(profile) for probe in probes]
    prefill = statistics.fmean(r[0] for r in ratios)
    decode = statistics.fmean(r[1] for r in ratios)
    return replace(
        profile,
        prefill=tuple(replace(p, ttft_seconds=p.ttft_seconds * prefill) for p in profile.prefill),
        decode=tuple(replace(d, step_seconds=d.step_seconds * decode) for d in profile.decode),
    )


def _field(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in data:
        raise ValueError(f"{where}: missing field {key!r}")
    value = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def profile_from_json(data: Any, where: str = "profile") -> MeasuredProfile:
    """Parse and check a profile document; ValueError names the field."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object")
    if data.get("format") != PROFILE_FORMAT:
        raise ValueError(f"{where}: field 'format' must be {PROFILE_FORMAT!r}, got {data.get('format')!r}")
    prefill: list[PrefillPoint] = []
    for i, raw in enumerate(_field(data, "prefill", list, where)):
        at = f"{where}: prefill[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{at}: expected an object")
        point = PrefillPoint(_field(raw, "promptTokens", int, at), _field(raw, "ttftSeconds", float, at))
        if point.prompt_tokens < 1 or not point.ttft_seconds > 0:
            raise ValueError(f"{at}: promptTokens >= 1 and ttftSeconds > 0 expected")
        prefill.append(point)
    decode: list[DecodePoint] = []
    for i, raw in enumerate(_field(data, "decode", list, where)):
        at = f"{where}: decode[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{at}: expected an object")
        d = DecodePoint(
            _field(raw, "batch", int, at),
            _field(raw, "contextTokens", float, at),
            _field(raw, "stepSeconds", float, at),
        )
        if d.batch < 1 or d.context_tokens < 0 or not d.step_seconds > 0:
            raise ValueError(f"{at}: batch >= 1, contextTokens >= 0 and stepSeconds > 0 expected")
        decode.append(d)
    if len(prefill) < 2 or len({p.prompt_tokens for p in prefill}) < 2:
        raise ValueError(f"{where}: prefill needs points at two prompt lengths at least")
    if not decode:
        raise ValueError(f"{where}: decode needs one point at least")
    profile = MeasuredProfile(
        name=_field(data, "name", str, where),
        device=_field(data, "device", str, where),
        model=_field(data, "model", str, where),
        measured_at=_field(data, "measuredAt", str, where),
        max_num_seqs=_field(data, "maxNumSeqs", int, where),
        max_num_seqs_source=str(data.get("maxNumSeqsSource", "")),
        max_num_batched_tokens=_field(data, "maxNumBatchedTokens", int, where),
        kv_capacity_tokens=_field(data, "kvCapacityTokens", int, where),
        prefill=tuple(prefill),
        decode=tuple(decode),
        price_per_hour=float(data.get("pricePerHour", 0.0)),
        vllm_version=str(data.get("vllmVersion", "")),
        server_url=str(data.get("serverUrl", "")),
        model_shape=str(data.get("modelShape", "")),
    )
    if profile.max_num_seqs < 1 or profile.max_num_batched_tokens < 1 or profile.kv_capacity_tokens < 1:
        raise ValueError(f"{where}: maxNumSeqs, maxNumBatchedTokens and kvCapacityTokens must be >= 1")
    if profile.model_shape and profile.model_shape not in MODELS:
        raise ValueError(f"{where}: modelShape {profile.model_shape!r} is not one of {', '.join(MODELS)}")
    return profile


def load_profile(path: str | Path) -> MeasuredProfile:
    """Read a profile written by `llama-bench profile`; ValueError names the file and the field."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"profile {file}: {error.strerror or error}") from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"profile {file}: line {error.lineno}: {error.msg}") from error
    return profile_from_json(data, f"profile {file}")


# -- fitting ---------------------------------------------------------------------------------------


def _least_squares(
    rows: Sequence[Sequence[float]], ys: Sequence[float], weights: Sequence[float]
) -> list[float]:
    """Weighted least squares by the normal equations (Gaussian elimination with pivoting); columns
    whose coefficient comes out negative are dropped and the rest refitted (non-negative fit)."""
    n = len(rows[0])
    active = list(range(n))
    while True:
        k = len(active)
        a = [[0.0] * (k + 1) for _ in range(k)]
        for row, y, w in zip(rows, ys, weights, strict=True):
            for i, ci in enumerate(active):
                for j, cj in enumerate(active):
                    a[i][j] += w * row[ci] * row[cj]
                a[i][k] += w * row[ci] * y
        for col in range(k):
            pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
            a[col], a[pivot] = a[pivot], a[col]
            if abs(a[col][col]) < 1e-300:
                a[col][col] = 1e-300
            for r in range(k):
                if r != col:
                    f = a[r][col] / a[col][col]
                    for c in range(col, k + 1):
                        a[r][c] -= f * a[col][c]
        solution = [a[i][k] / a[i][i] for i in range(k)]
        coefficients = [0.0] * n
        for i, ci in enumerate(active):
            coefficients[ci] = solution[i]
        negative = [ci for ci in active if coefficients[ci] < 0]
        if not negative or len(active) == 1:
            return [max(0.0, c) for c in coefficients]
        active.remove(min(negative, key=lambda ci: coefficients[ci]))


def fit_step_model(decode: Sequence[DecodePoint], prefill: Sequence[PrefillPoint], chunk: int) -> StepFit:
    """Fit the step-time model to the measurements (relative error weighting: each point counts by
    its share, so the small batch-1 steps are not drowned by the large ones)."""
    if any(d.step_seconds <= 0 for d in decode) or any(p.ttft_seconds <= 0 for p in prefill):
        raise ValueError("step and TTFT times must be positive")
    d_rows = [(1.0, float(d.batch), d.batch * d.context_tokens) for d in decode]
    d_ys = [d.step_seconds for d in decode]
    if len({(d.batch, round(d.context_tokens)) for d in decode}) < 3:
        # Too few distinct points for three coefficients: a constant step time.
        base = sorted(d_ys)[len(d_ys) // 2]
        base_c, per_seq, per_ctx = base, 0.0, 0.0
    else:
        base_c, per_seq, per_ctx = _least_squares(d_rows, d_ys, [1.0 / y**2 for y in d_ys])
    p_rows = [(1.0, float(p.prompt_tokens)) for p in prefill]
    p_ys = [p.ttft_seconds - max(1, math.ceil(p.prompt_tokens / chunk)) * base_c for p in prefill]
    overhead, per_prefill = _least_squares(p_rows, p_ys, [1.0 / p.ttft_seconds**2 for p in prefill])
    return StepFit(
        base=base_c,
        per_sequence=per_seq,
        per_context_token=per_ctx,
        per_prefill_token=per_prefill,
        request_overhead=overhead,
    )
