"""The accelerator: the spec's, or auto's choice (the cheapest option present that fits and meets the TPOT
objective, a tensor-parallel one only where its GPUs pay), with the engine sized on it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from llama_operator.api.spec import (
    AcceleratorType,
    LlamaServiceSpec,
    Quantization,
)
from llama_operator.catalog.vllm import measurable_tpot_at_least
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.engine import fp8_kernel, size_engine, try_size_engine
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.inventory import Inventory
from llama_operator.planning.model import (
    MULTI_NODE_COUNTS,
    TENSOR_PARALLEL_COUNTS,
    Candidate,
    DoesNotFitError,
    Request,
    Sized,
    catalog_candidate,
    catalog_candidates,
    gib,
    multi_node_candidates,
)
from llama_operator.planning.placement import Placement, is_present, place_candidate
from llama_operator.planning.tuning import MIN_TPOT_CHUNK_TOKENS, histogram_reading, tpot_floor, tpot_tuning

# Hub ids of 8-bit checkpoints (RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8, ...-int8): planned at
# 16 bits when engine.quantization is none, so the plan says so.
INT8_CHECKPOINT_NAME = re.compile(r"w8a8|int8", re.IGNORECASE)


def _sort_key(candidate: Candidate, config: PlanningConfig) -> tuple[float, int, int, str]:
    # Cheapest first; at equal price more memory (more KV cache), then fewer devices, then by name.
    total_memory = candidate.device_memory_bytes * candidate.count
    return (round(candidate.price(config), 6), -total_memory, candidate.count, candidate.name)


def smallest_fitting(request: Request, config: PlanningConfig) -> str:
    """The smallest catalog GPU option (by memory, then price) that runs the request, for error messages."""
    fitting = [
        sized
        for c in catalog_candidates(config, include_cpu=False)
        if (sized := try_size_engine(request, c, config)) is not None
    ]
    if not fitting:
        return (
            f"no catalog option up to {config.max_gpus_per_replica} GPUs fits it; use quantization or a "
            "smaller model"
        )
    smallest = min(
        fitting,
        key=lambda s: (
            s.candidate.device_memory_bytes * s.candidate.count,
            s.candidate.price(config),
            s.candidate.name,
        ),
    ).candidate
    cheapest = min(fitting, key=lambda s: _sort_key(s.candidate, config)).candidate
    message = (
        f"the smallest catalog option that fits is {smallest.name} "
        f"({gib(smallest.device_memory_bytes * smallest.count)}, "
        f"{smallest.price(config):.2f}/h relative price)"
    )
    if cheapest != smallest:
        message += f", the cheapest {cheapest.name} ({cheapest.price(config):.2f}/h)"
    return message


def fits_on_more_hint(request: Request, candidate: Candidate, config: PlanningConfig) -> str:
    """Where a replica does not fit the spec's GPUs: the fewest more of the same GPU that hold it, on one node
    (accelerator.count) or, where no node of it does, over several (accelerator.nodes: a LeaderWorkerSet
    group, pipeline parallel across them); said before any other GPU type."""
    accel = candidate.accelerator
    if not accel.is_gpu or candidate.mig is not None or candidate.nodes > 1:
        return ""
    counts = [n for n in TENSOR_PARALLEL_COUNTS if candidate.count < n <= config.max_gpus_per_replica]
    for count in counts:
        option = catalog_candidate(accel, count=count)
        if try_size_engine(request, option, config) is not None:
            return (
                f"on {accel.type} it fits as accelerator.count {count} ({option.price(config):.2f}/h relative "
                "price); else "
            )
    per_node = max(n for n in TENSOR_PARALLEL_COUNTS if n <= config.max_gpus_per_replica)
    for nodes in MULTI_NODE_COUNTS:
        option = catalog_candidate(accel, count=per_node, nodes=nodes)
        if try_size_engine(request, option, config) is not None:
            return (
                f"on {accel.type} it fits as accelerator.count {per_node} with accelerator.nodes {nodes} "
                f"({option.name}, pipeline parallel across the nodes, {option.price(config):.2f}/h relative "
                "price); else "
            )
    return ""


def fp8_hint(request: Request, candidates: list[Candidate], config: PlanningConfig) -> str:
    """Where 16-bit weights are refused: FP8 (vLLM quantizes them as it loads them) on the first of
    `candidates` it plans on, in half the weight bytes and reads."""
    if request.quantization is not Quantization.NONE:
        return ""
    fp8 = replace(request, quantization=Quantization.FP8, quantization_in_flight=True)
    for candidate in candidates:
        kernel = fp8_kernel(candidate.accelerator)
        if kernel is not None and try_size_engine(fp8, candidate, config) is not None:
            return (
                f"engine.quantization fp8 plans on {candidate.name} (vLLM quantizes the 16-bit weights to 8 bits "
                f"as it loads them, {kernel} there); "
            )
    return ""


UNKNOWN_GPUS_NOTE = "match no accelerator in the catalog, so auto cannot use them"


def unknown_gpus_note(inventory: Inventory) -> str:
    """What auto says of GPU nodes it had to leave out: never a silent skip."""
    listed = ", ".join(
        f"{product} ({nodes} node{'s' if nodes > 1 else ''})" for product, nodes in inventory.unknown_gpus
    )
    return (
        f"GPU nodes labelled {listed} {UNKNOWN_GPUS_NOTE}: add them under the operator's config.accelerators"
    )


def _choose_auto(
    request: Request, config: PlanningConfig, inventory: Inventory | None
) -> tuple[Sized, list[str]]:
    candidates = sorted(
        catalog_candidates(config, include_cpu=config.auto_includes_cpu), key=lambda c: _sort_key(c, config)
    )
    notes: list[str] = []
    if inventory is not None:
        present = [c for c in candidates if is_present(c, inventory)]
        if inventory.unknown_gpus:
            notes.append(unknown_gpus_note(inventory))
    else:
        present = candidates
        notes.append("no node inventory: chose the cheapest catalog option; it may not exist in the cluster")
    # A replica over several nodes only where no single node present fits (and enough nodes offer one).
    multi = sorted(multi_node_candidates(config), key=lambda c: _sort_key(c, config))
    multi = [c for c in multi if inventory is None or is_present(c, inventory)]
    if request.slo is not None:
        # An autoscaled service runs as many replicas as its load needs: what it costs is its price per
        # token served within the objective, not per replica.
        ranked = _cheapest_per_token(request, present, config, inventory)
        if ranked is not None:
            return ranked[0], [*notes, *ranked[1]]
    for options in (present, multi):
        for catalog_option in options:
            # Size with the memory the nodes label, when they do.
            candidate = (
                place_candidate(catalog_option, config, inventory).candidate
                if inventory is not None
                else catalog_option
            )
            sized = try_size_engine(request, candidate, config)
            if sized is not None:
                where = "present in the cluster " if inventory is not None else ""
                tpot = request.slo.tpot_seconds if request.slo is not None else None
                meets = "" if tpot is None else f" and meets the TPOT objective {tpot:g}s"
                notes.append(
                    f"auto: {candidate.name} is the cheapest option {where}that fits{meets} "
                    f"({candidate.price(config):.2f}/h relative price)"
                )
                return sized, notes
    raise _nothing_fits(request, config, inventory, present=present, multi=multi)


def _nothing_fits(
    request: Request,
    config: PlanningConfig,
    inventory: Inventory | None,
    *,
    present: list[Candidate],
    multi: list[Candidate],
) -> PlanningError:
    """Why auto found nothing (raised at once where the TPOT objective, not memory, is the reason): what is
    present and the smallest option that would fit (with FP8 where it would plan)."""
    placed = [
        place_candidate(option, config, inventory).candidate if inventory is not None else option
        for option in present
    ]
    fp8 = fp8_hint(request, placed, config)
    try:
        _raise_if_tpot_unreachable(request, config, [*present, *multi], inventory)
    except PlanningError as error:
        if not fp8:
            raise
        raise PlanningError(f"{error.message}; {fp8.removesuffix('; ')}") from None
    if inventory is not None:
        unknown = f"; {unknown_gpus_note(inventory)}" if inventory.unknown_gpus else ""
        return PlanningError(
            f"no accelerator present in the cluster fits {request.model_name} (present: "
            f"{inventory.describe()}); "
            f"{fp8}{smallest_fitting(request, config)}{unknown}"
        )
    return PlanningError(
        f"no accelerator in the catalog fits {request.model_name}: {fp8}{smallest_fitting(request, config)}"
    )


def served_tokens_per_second(sized: Sized, request: Request, config: PlanningConfig) -> float:
    """Output tokens per second one replica serves within the objective, by the plan's step model: the TPOT
    objective's batch at its step time, else a full batch (max-num-seqs sequences, half a typical sequence
    of context each on average) at its decode step."""
    if request.slo is not None and request.slo.tpot_seconds is not None:
        return _decode_rate(sized, request, config)
    batch = sized.max_num_seqs
    return batch / sized.steps.step_seconds(batch, config.typical_sequence_tokens / 2)


def cost_per_million_tokens(sized: Sized, request: Request, config: PlanningConfig) -> float:
    """Relative price per million output tokens served within the objective."""
    return sized.candidate.price(config) / (served_tokens_per_second(sized, request, config) * 3600) * 1e6


def _cheapest_per_token(
    request: Request, options: list[Candidate], config: PlanningConfig, inventory: Inventory | None
) -> tuple[Sized, list[str]] | None:
    """The option that serves a token within the objective for the least, and notes naming it, the runner-up
    and why; None when no option fits."""
    sized_options: list[tuple[float, float, Sized]] = []
    for option in options:
        candidate = place_candidate(option, config, inventory).candidate if inventory is not None else option
        sized = try_size_engine(request, candidate, config)
        if sized is None:
            continue
        rate = served_tokens_per_second(sized, request, config)
        if rate > 0:
            sized_options.append((cost_per_million_tokens(sized, request, config), rate, sized))
    if not sized_options:
        return None
    sized_options.sort(key=lambda o: (round(o[0], 9), _sort_key(o[2].candidate, config)))
    best_cost, best_rate, best = sized_options[0]
    where = "present in the cluster " if inventory is not None else ""
    objective = (
        f"the TPOT objective {request.slo.tpot_seconds:g}s"
        if request.slo is not None and request.slo.tpot_seconds is not None
        else "a full batch"
    )
    notes = [
        f"auto: {best.candidate.name} is the option {where}that serves a token for the least: ~{best_rate:.0f} "
        f"output tokens/s per replica within {objective} at {best.candidate.price(config):.2f}/h relative "
        f"price, {best_cost:.3f} per million tokens"
    ]
    cheaper_replica = min(sized_options, key=lambda o: _sort_key(o[2].candidate, config))
    if len(sized_options) > 1:
        runner_cost, runner_rate, runner = sized_options[1]
        notes.append(
            f"auto: runner-up {runner.candidate.name}: ~{runner_rate:.0f} tokens/s at "
            f"{runner.candidate.price(config):.2f}/h, {runner_cost:.3f} per million tokens "
            f"({(runner_cost / best_cost - 1) * 100:.0f} % more per token)"
        )
    if cheaper_replica[2] is not best and cheaper_replica is not sized_options[1]:
        cost, rate, sized = cheaper_replica
        notes.append(
            f"auto: not {sized.candidate.name}, the cheapest replica ({sized.candidate.price(config):.2f}/h): "
            f"~{rate:.0f} tokens/s, {cost:.3f} per million tokens ({(cost / best_cost - 1) * 100:.0f} % more "
            "per token)"
        )
    return best, notes


def _decode_rate(sized: Sized, request: Request, config: PlanningConfig) -> float:
    """Output tokens per second a replica decodes within the TPOT objective (typical sequences)."""
    tuning = tpot_tuning(request, sized.candidate, sized.steps, config)
    assert tuning is not None  # only called with a TPOT objective
    return min(tuning.batch, sized.max_num_seqs) / tuning.step_seconds


def _raise_if_tpot_unreachable(
    request: Request, config: PlanningConfig, options: list[Candidate], inventory: Inventory | None
) -> None:
    """A PlanningError naming the TPOT objective when it, not memory, is why nothing fits."""
    slo = request.slo
    if slo is None or slo.tpot_seconds is None:
        return
    relaxed = replace(request, slo=slo.model_copy(update={"tpot_seconds": None}))
    fastest: tuple[float, Candidate] | None = None
    for option in options:
        candidate = place_candidate(option, config, inventory).candidate if inventory is not None else option
        sized = try_size_engine(relaxed, candidate, config)
        if sized is None:
            continue
        floor = tpot_floor(sized.steps, config)
        if fastest is None or floor < fastest[0]:
            fastest = (floor, candidate)
    if fastest is None:
        return  # memory is the reason: the caller says so
    where = (
        "present in the cluster"
        if inventory is not None
        else f"in the catalog (up to {config.max_gpus_per_replica} GPUs)"
    )
    read_at = histogram_reading(slo.tpot_seconds)
    raise PlanningError(
        f"autoscaling.slo.tpotSeconds {slo.tpot_seconds:g} cannot be met by any accelerator {where}: the "
        f"best achievable TPOT for {request.model_name} is ~{fastest[0] * 1000:.1f} ms per token (one "
        f"sequence of {config.typical_sequence_tokens} tokens beside a {MIN_TPOT_CHUNK_TOKENS}-token prompt "
        f"chunk on {fastest[1].name}, all-reduces included); raise autoscaling.slo.tpotSeconds to at least "
        f"{measurable_tpot_at_least(fastest[0]):g} or make a faster accelerator available{read_at}"
    )


def _explicit_candidate(spec: LlamaServiceSpec, config: PlanningConfig) -> Candidate:
    try:
        accel = config.catalog.get(spec.accelerator.type)
        mig = accel.mig_profile(spec.accelerator.mig) if spec.accelerator.mig is not None else None
    except KeyError as err:  # a type or profile the platform has not defined
        raise PlanningError(f"accelerator: {err.args[0]}") from None
    return catalog_candidate(accel, mig=mig, count=spec.accelerator.count, nodes=spec.accelerator.nodes)


def choose_and_size(
    spec: LlamaServiceSpec, request: Request, config: PlanningConfig, inventory: Inventory | None
) -> tuple[Sized, Placement, list[str]]:
    """The accelerator (auto's choice or the spec's), where it is placed, the engine sized on it, and the
    notes of all three."""
    notes: list[str] = []
    if spec.accelerator.type == AcceleratorType.AUTO:
        sized, auto_notes = _choose_auto(request, config, inventory)
        notes += auto_notes
        placement = place_candidate(sized.candidate, config, inventory, spec.accelerator.mig_strategy)
    else:
        candidate = _explicit_candidate(spec, config)
        placement = place_candidate(candidate, config, inventory, spec.accelerator.mig_strategy)
        try:
            sized = size_engine(request, placement.candidate, config)
        except DoesNotFitError as error:
            hint = fp8_hint(request, [placement.candidate], config) + fits_on_more_hint(
                request, candidate, config
            )
            raise PlanningError(f"{error.message}; {hint}{smallest_fitting(request, config)}") from None
        except PlanningError as error:
            hint = fp8_hint(request, [placement.candidate], config)
            if not hint:
                raise
            raise PlanningError(f"{error.message}; {hint.removesuffix('; ')}") from None
    notes += placement.notes + sized.notes
    if request.quantization is Quantization.NONE and INT8_CHECKPOINT_NAME.search(spec.model.name):
        notes.append(
            f"{spec.model.name} looks like an 8-bit checkpoint but engine.quantization is none: its weights are "
            "planned at 16 bits (a smaller KV cache than it gets); set engine.quantization int8 for a W8A8 "
            "INT8 checkpoint"
        )
    candidate, accel = sized.candidate, sized.candidate.accelerator
    if candidate.nodes > 1:
        notes.append(
            f"multi-node: each replica is a LeaderWorkerSet group of {candidate.nodes} pods on {candidate.nodes} "
            f"nodes with {candidate.count} {accel.type} GPUs each (tensor parallel {candidate.count}, pipeline "
            f"parallel {candidate.nodes} over Ray); replicas scale by whole groups"
        )
    return sized, placement, notes
