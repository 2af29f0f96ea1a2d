"""Synthetic request traces for robustness: a seeded generator and the named families (development, holdout).

A trace is a rate profile times an arrival process, with prompt and output lengths drawn per request:
- the rate profile multiplies a base rate (requests/s) by a diurnal cycle (sinusoid of any period, so a
  day can be compressed into minutes), flash crowds (a 2-8x step with a ramp), a two-state
  Markov-modulated burst process (MMPP: calm and burst states with exponential holding times) and
  on/off periods (idle gaps of zero traffic);
- arrivals are Poisson in that profile or, for burstier-than-Poisson traffic, a Gamma renewal process
  with a coefficient of variation above 1 (BurstGPT's fit of ChatGPT/GPT-4 API arrivals), both through
  the same time change: unit-mean gaps in cumulative-rate time, mapped back to seconds;
- lengths are lognormal (sigma up to 1.5: light to heavy tail) or Pareto (shape near 1: very heavy),
  clipped to a model's context.

Pure and deterministic: everything comes from the spec and its seed (`random.Random`), no I/O, so the
families are committed as parameters (`DEV_FAMILY`, `HOLDOUT_FAMILY`), not as files, and regenerate identically."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from llama_bench.sim.trace import Trace, TraceRequest, load_trace

GRID_SECONDS = 1.0  # the rate profile is piecewise constant on this grid


@dataclass(frozen=True, slots=True)
class Lengths:
    """A token-length distribution: lognormal (`scale` is the median, `shape` sigma) or Pareto
    (`scale` is the minimum x_m, `shape` alpha), clipped to [low, high]."""

    kind: Literal["lognormal", "pareto"]
    scale: float
    shape: float
    low: int = 1
    high: int = 8192

    def __post_init__(self) -> None:
        if self.scale <= 0 or self.shape <= 0 or not 1 <= self.low <= self.high:
            raise ValueError(f"bad length distribution {self}")

    def sample(self, rng: random.Random) -> int:
        if self.kind == "lognormal":
            value = rng.lognormvariate(math.log(self.scale), self.shape)
        else:
            value = self.scale * rng.paretovariate(self.shape)
        return min(max(round(value), self.low), self.high)

    def describe(self) -> str:
        if self.kind == "lognormal":
            return f"lognormal(median {self.scale:g}, sigma {self.shape:g})"
        return f"Pareto(x_m {self.scale:g}, alpha {self.shape:g})"


@dataclass(frozen=True, slots=True)
class Diurnal:
    """rate x (1 + amplitude * sin(2 pi (t / period) + phase)); amplitude in [0, 1]."""

    period_seconds: float
    amplitude: float
    phase: float = -math.pi / 2  # start at the trough

    def factor(self, t: float) -> float:
        return 1.0 + self.amplitude * math.sin(2 * math.pi * t / self.period_seconds + self.phase)


@dataclass(frozen=True, slots=True)
class FlashCrowd:
    """rate x `factor` from `start` for `duration` seconds, reached linearly over `ramp` seconds (and left
    the same way)."""

    start: float
    duration: float
    factor: float
    ramp: float = 10.0

    def factor_at(self, t: float) -> float:
        if t < self.start or t > self.start + self.duration + self.ramp:
            return 1.0
        rising = min(1.0, (t - self.start) / self.ramp) if self.ramp > 0 else 1.0
        falling = min(1.0, (self.start + self.duration + self.ramp - t) / self.ramp) if self.ramp > 0 else 1.0
        return 1.0 + (self.factor - 1.0) * min(rising, falling)


@dataclass(frozen=True, slots=True)
class Mmpp:
    """A two-state Markov-modulated process: calm (x1) and burst (x `factor`) states held for exponential
    times of the given means."""

    factor: float
    mean_calm_seconds: float
    mean_burst_seconds: float


@dataclass(frozen=True, slots=True)
class OnOff:
    """Traffic on for `on_seconds`, then idle (zero requests) for `off_seconds`, repeated; each period's
    length is drawn uniformly within +-`jitter` of its mean. Starts on."""

    on_seconds: float
    off_seconds: float
    jitter: float = 0.3


@dataclass(frozen=True, slots=True)
class TraceSpec:
    name: str
    seed: int
    minutes: float
    rate: float  # mean requests/s before the modulations
    prompt: Lengths
    output: Lengths
    diurnal: tuple[Diurnal, ...] = ()
    flash_crowds: tuple[FlashCrowd, ...] = ()
    mmpp: Mmpp | None = None
    on_off: OnOff | None = None
    arrival_cv: float = 1.0  # 1: Poisson; above 1: Gamma renewal gaps with this coefficient of variation
    description: str = ""
    tags: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.minutes <= 0 or self.rate <= 0 or self.arrival_cv <= 0:
            raise ValueError(f"{self.name}: minutes, rate and arrival_cv must be positive")


def _state_changes(
    rng: random.Random, duration: float, first: float, second: float, jitter: float | None
) -> list[float]:
    """Alternating holding times (state 0 first) as the times each state starts, until `duration`.
    `jitter` None: exponential holding times (Markov); otherwise uniform within +-jitter of the mean."""
    starts = [0.0]
    t = 0.0
    state = 0
    while t < duration:
        mean = first if state == 0 else second
        hold = rng.expovariate(1.0 / mean) if jitter is None else mean * rng.uniform(1 - jitter, 1 + jitter)
        t += max(hold, GRID_SECONDS)
        starts.append(t)
        state = 1 - state
    return starts


def _in_second_state(starts: Sequence[float], t: float) -> bool:
    return (bisect.bisect_right(starts, t) - 1) % 2 == 1


def rate_profile(spec: TraceSpec, rng: random.Random) -> list[float]:
    """Requests/s on each GRID_SECONDS step of the trace (the modulations drawn from `rng`)."""
    duration = spec.minutes * 60.0
    steps = math.ceil(duration / GRID_SECONDS)
    mmpp = spec.mmpp
    bursts = (
        _state_changes(rng, duration, mmpp.mean_calm_seconds, mmpp.mean_burst_seconds, None) if mmpp else []
    )
    on_off = spec.on_off
    idles = (
        _state_changes(rng, duration, on_off.on_seconds, on_off.off_seconds, on_off.jitter) if on_off else []
    )
    rates: list[float] = []
    for step in range(steps):
        t = (step + 0.5) * GRID_SECONDS
        rate = spec.rate
        for cycle in spec.diurnal:
            rate *= cycle.factor(t)
        for crowd in spec.flash_crowds:
            rate *= crowd.factor_at(t)
        if mmpp is not None and _in_second_state(bursts, t):
            rate *= mmpp.factor
        if on_off is not None and _in_second_state(idles, t):
            rate = 0.0
        rates.append(max(rate, 0.0))
    return rates


def _arrivals(rates: Sequence[float], cv: float, rng: random.Random) -> list[float]:
    """Arrival times: unit-mean gaps (exponential, or Gamma with coefficient of variation `cv`) in
    cumulative-rate time, mapped back through the piecewise-constant profile."""
    arrivals: list[float] = []
    shape = 1.0 / (cv * cv)
    target = 0.0
    cumulative = 0.0  # integral of the rate up to the start of `step`
    step = 0
    while True:
        target += rng.expovariate(1.0) if cv == 1.0 else rng.gammavariate(shape, 1.0 / shape)
        while step < len(rates) and cumulative + rates[step] * GRID_SECONDS < target:
            cumulative += rates[step] * GRID_SECONDS
            step += 1
        if step >= len(rates):
            return arrivals
        arrivals.append(step * GRID_SECONDS + (target - cumulative) / rates[step])


def generate(spec: TraceSpec) -> Trace:
    """The trace `spec` describes; the same spec gives the same trace."""
    rng = random.Random(spec.seed)
    rates = rate_profile(spec, rng)
    times = _arrivals(rates, spec.arrival_cv, rng)
    requests = tuple(TraceRequest(t, spec.prompt.sample(rng), spec.output.sample(rng)) for t in times)
    if not requests:
        raise ValueError(f"{spec.name}: the profile produced no requests")
    return Trace(spec.name, requests)


MIN = 60.0
# Chat-like lengths (Azure conversation: prompt median ~1000, output ~130) and code-like ones.
CHAT = Lengths("lognormal", 900, 0.8)
CHAT_OUT = Lengths("lognormal", 150, 0.9, high=2048)
# The development family: shapes the bundled Azure traces lack, at loads of a few to ~15 T4 replicas
# of Llama 3.2 1B (prefill ~10k tokens/s each: the catalog's step-time model; the family was drawn when the
# simulator assumed ~13k). Fixed seeds; 30-60 minutes each.
DEV_FAMILY: tuple[TraceSpec, ...] = (
    TraceSpec("poisson-steady", 101, 40, 6.0, CHAT, CHAT_OUT, description="Poisson, constant rate"),
    TraceSpec(
        "poisson-heavy-prompts",
        102,
        45,
        3.0,
        Lengths("lognormal", 700, 1.5),
        CHAT_OUT,
        description="Poisson; prompts lognormal sigma 1.5 (heavy tail)",
    ),
    TraceSpec(
        "pareto-prompts",
        103,
        40,
        3.5,
        Lengths("pareto", 400, 1.3),
        Lengths("pareto", 60, 1.5, high=2048),
        description="Poisson; prompts and outputs Pareto (alpha 1.3 / 1.5)",
    ),
    TraceSpec(
        "long-context",
        104,
        45,
        1.2,
        Lengths("lognormal", 3500, 0.9),
        Lengths("lognormal", 300, 1.0, high=2048),
        diurnal=(Diurnal(30 * MIN, 0.4),),
        description="long prompts (median 3.5k tokens), slow swell",
    ),
    TraceSpec(
        "mmpp-bursts",
        105,
        50,
        2.5,
        CHAT,
        CHAT_OUT,
        mmpp=Mmpp(4.0, 240, 60),
        description="MMPP: 4x bursts of ~1 min every ~4 min",
    ),
    TraceSpec(
        "mmpp-short-bursts",
        106,
        40,
        3.0,
        Lengths("lognormal", 1200, 1.1),
        CHAT_OUT,
        mmpp=Mmpp(3.0, 120, 20),
        description="MMPP: 3x bursts of ~20 s every ~2 min; prompts sigma 1.1",
    ),
    TraceSpec(
        "flash-2x",
        107,
        45,
        4.0,
        CHAT,
        CHAT_OUT,
        flash_crowds=(FlashCrowd(20 * MIN, 8 * MIN, 2.0, ramp=30),),
        description="flash crowd 2x for 8 min at minute 20",
    ),
    TraceSpec(
        "flash-4x",
        108,
        45,
        2.5,
        CHAT,
        CHAT_OUT,
        flash_crowds=(FlashCrowd(15 * MIN, 5 * MIN, 4.0, ramp=10),),
        description="flash crowd 4x for 5 min at minute 15",
    ),
    TraceSpec(
        "flash-8x",
        109,
        50,
        1.0,
        CHAT,
        CHAT_OUT,
        flash_crowds=(FlashCrowd(25 * MIN, 3 * MIN, 8.0, ramp=5),),
        description="flash crowd 8x for 3 min at minute 25, 5 s ramp",
    ),
    TraceSpec(
        "diurnal-compressed",
        110,
        60,
        4.0,
        CHAT,
        CHAT_OUT,
        diurnal=(Diurnal(30 * MIN, 0.8),),
        description="two diurnal cycles in an hour, trough 0.2x",
    ),
    TraceSpec(
        "diurnal-half-day",
        111,
        60,
        4.0,
        Lengths("lognormal", 1000, 1.0),
        CHAT_OUT,
        diurnal=(Diurnal(120 * MIN, 0.6),),
        description="half a day's ramp compressed to an hour",
    ),
    TraceSpec(
        "on-off-idle",
        112,
        45,
        5.0,
        CHAT,
        CHAT_OUT,
        on_off=OnOff(5 * MIN, 3 * MIN),
        description="5 min on, 3 min idle",
    ),
    TraceSpec(
        "on-off-spiky",
        113,
        40,
        6.0,
        Lengths("lognormal", 1500, 1.0),
        Lengths("lognormal", 30, 1.0, high=1024),
        on_off=OnOff(90, 150, jitter=0.5),
        description="code-like: 90 s of traffic after 2.5 idle minutes",
    ),
    TraceSpec(
        "compressed-day-gaps",
        114,
        60,
        3.5,
        CHAT,
        CHAT_OUT,
        diurnal=(Diurnal(30 * MIN, 0.7),),
        mmpp=Mmpp(3.0, 300, 30),
        on_off=OnOff(12 * MIN, 3 * MIN),
        description="two cycles, idle gaps, short 3x bursts",
    ),
    TraceSpec(
        "gamma-bursty",
        115,
        60,
        3.0,
        Lengths("pareto", 250, 1.1),
        Lengths("lognormal", 200, 1.2, high=2048),
        arrival_cv=3.0,
        description="Gamma arrivals CV 3 (BurstGPT-like); Zipf-like prompts (Pareto alpha 1.1)",
    ),
    TraceSpec(
        "mixed",
        116,
        60,
        3.0,
        Lengths("lognormal", 1100, 1.2),
        Lengths("pareto", 80, 1.4, high=2048),
        diurnal=(Diurnal(40 * MIN, 0.5),),
        mmpp=Mmpp(2.5, 180, 40),
        flash_crowds=(FlashCrowd(35 * MIN, 4 * MIN, 3.0, ramp=20),),
        arrival_cv=1.5,
        description="diurnal, MMPP, a 3x flash crowd, Gamma CV 1.5, heavy tails",
    ),
)

# The holdout family: shapes and seeds the policy was never tuned on (none of its knobs was chosen while
# looking at these), for an honest estimate of how it does on traffic it has not seen. Judge a policy
# change on `dev`; run `holdout` once it is settled, and report both.
HOLDOUT_FAMILY: tuple[TraceSpec, ...] = (
    TraceSpec(
        "steady-high",
        301,
        40,
        14.0,
        Lengths("lognormal", 600, 0.7),
        Lengths("lognormal", 120, 0.8, high=2048),
        description="Poisson at 14 req/s: about ten replicas, steady",
    ),
    TraceSpec(
        "trickle-long-prompts",
        302,
        45,
        0.3,
        Lengths("lognormal", 2500, 0.8),
        CHAT_OUT,
        description="0.3 req/s of long prompts (median 2.5k tokens): a window holds a handful of requests",
    ),
    TraceSpec(
        "long-outputs",
        303,
        40,
        2.0,
        Lengths("lognormal", 500, 0.8),
        Lengths("lognormal", 900, 0.7, high=4096),
        description="decode-heavy: outputs median 900 tokens, prompts 500",
    ),
    TraceSpec(
        "steep-ramp",
        304,
        60,
        4.0,
        CHAT,
        CHAT_OUT,
        diurnal=(Diurnal(120 * MIN, 0.9),),
        description="a ramp from 0.1x to 1.9x over the hour",
    ),
    TraceSpec(
        "flash-6x-slow-ramp",
        305,
        45,
        1.5,
        CHAT,
        CHAT_OUT,
        flash_crowds=(FlashCrowd(18 * MIN, 6 * MIN, 6.0, ramp=120),),
        description="flash crowd 6x for 6 min at minute 18, reached over 2 minutes",
    ),
    TraceSpec(
        "double-flash",
        306,
        50,
        2.0,
        CHAT,
        CHAT_OUT,
        flash_crowds=(
            FlashCrowd(12 * MIN, 3 * MIN, 3.0, ramp=10),
            FlashCrowd(22 * MIN, 3 * MIN, 3.0, ramp=10),
        ),
        description="two 3x flash crowds of 3 min, 10 min apart",
    ),
    TraceSpec(
        "mmpp-long-surges",
        307,
        60,
        2.5,
        Lengths("lognormal", 800, 1.0),
        CHAT_OUT,
        mmpp=Mmpp(2.0, 600, 300),
        description="MMPP: 2x surges of ~5 min every ~10 min",
    ),
    TraceSpec(
        "on-off-fast",
        308,
        40,
        4.0,
        CHAT,
        CHAT_OUT,
        on_off=OnOff(60, 40, jitter=0.4),
        description="1 min on, 40 s idle",
    ),
    TraceSpec(
        "gamma-diurnal-pareto",
        309,
        60,
        3.0,
        Lengths("pareto", 300, 1.2),
        Lengths("pareto", 50, 1.3, high=2048),
        diurnal=(Diurnal(20 * MIN, 0.6),),
        arrival_cv=2.0,
        description="Gamma arrivals CV 2, three 20-minute cycles, Pareto prompts and outputs",
    ),
)

FAMILIES: dict[str, tuple[TraceSpec, ...]] = {"dev": DEV_FAMILY, "holdout": HOLDOUT_FAMILY}

# Traces for scale to zero (`bench --scale-to-zero`), outside the family (whose figures they would move):
# the family's idle periods last minutes, below the default scaleToZeroAfterSeconds of 600.
IDLE_HOURS = TraceSpec(
    "idle-hours",
    201,
    8 * 60,
    1.5,
    CHAT,
    CHAT_OUT,
    diurnal=(Diurnal(8 * 60 * MIN, 0.5),),
    on_off=OnOff(40 * MIN, 60 * MIN, jitter=0.5),
    description="a working day in 8 hours: 20-60 minutes of chat traffic between idle hours",
)
# Every generated trace by name: the family's (for `bench --traces`, `simulate`, `replay`) and the others.
GENERATED_TRACES: dict[str, TraceSpec] = {
    spec.name: spec for spec in (*DEV_FAMILY, *HOLDOUT_FAMILY, IDLE_HOURS)
}


# Another draw of a family: the same shapes from other seeds (`reseeded`). A family's fixed seeds are one
# sample of each shape; policies tuned while looking at them can fit that sample's bursts. Seeds of draw k
# are the family's plus k * DRAW_SEED_STRIDE, far from every committed seed.
DRAW_SEED_STRIDE = 1000
DRAW_MARK = "#"  # `mmpp-bursts#2`: the shape mmpp-bursts, draw 2


def reseeded(spec: TraceSpec, draw: int) -> TraceSpec:
    """`spec`'s shape from draw `draw`'s seed (draw 0: `spec` itself), named `name#draw`."""
    if draw < 0:
        raise ValueError(f"draw must be 0 or more, got {draw}")
    if draw == 0:
        return spec
    return replace(spec, name=f"{spec.name}{DRAW_MARK}{draw}", seed=spec.seed + draw * DRAW_SEED_STRIDE)


def shape_of(trace_name: str) -> str:
    """The shape a (possibly reseeded) trace was drawn from: `mmpp-bursts#2` -> `mmpp-bursts`."""
    return trace_name.split(DRAW_MARK, 1)[0]


def draw_of(trace_name: str) -> int:
    """The draw a trace comes from: `mmpp-bursts#2` -> 2, `mmpp-bursts` (or a bundled trace) -> 0."""
    _, _, draw = trace_name.partition(DRAW_MARK)
    return int(draw) if draw else 0


def family(name: str) -> tuple[TraceSpec, ...]:
    if name not in FAMILIES:
        raise ValueError(f"unknown trace family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def load_named(source: str, rate_scale: float = 1.0, time_scale: float = 1.0) -> Trace:
    """A generated trace by name (GENERATED_TRACES), or a bundled one or a CSV file (`load_trace`);
    `rate_scale` and `time_scale` as in `parse_trace`."""
    if source not in GENERATED_TRACES:
        return load_trace(source, rate_scale, time_scale)
    if rate_scale <= 0 or time_scale <= 0:
        raise ValueError("rate_scale and time_scale must be positive")
    trace = generate(GENERATED_TRACES[source])
    if rate_scale == 1.0 and time_scale == 1.0:
        return trace
    factor = time_scale / rate_scale
    return Trace(
        trace.name,
        tuple(replace(r, arrival=r.arrival * factor) for r in trace.requests),
    )


def head(trace: Trace, minutes: float) -> Trace:
    """The first `minutes` of a trace (short slices for tests and quick looks)."""
    cut = minutes * 60.0
    return Trace(trace.name, tuple(r for r in trace.requests if r.arrival < cut))
