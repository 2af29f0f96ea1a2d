"""One hardware model: the planner, the policy's priors and the simulator read the same catalog and the same
step-time model, so no hardware constant (a bandwidth efficiency, a price, a memory reserve...) is defined
in two places. The simulator once had its own accelerators with other constants (0.8 against 0.75)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import llama_bench
import llama_operator
from llama_operator.catalog import accelerators as catalog_accelerators

# Names of constants that describe hardware or the step-time model.
HARDWARE_CONSTANT = re.compile(
    r"BANDWIDTH|TFLOPS|FLOPS|EFFICIENCY|PRICE_PER|MEMORY_UTILIZATION|STEP_OVERHEAD|ACTIVATION_(BASE|FRACTION|RESERVE)"
    r"|CUDA_GRAPH_BYTES|KV_BLOCK"
)
# Fields of a class that describes a device.
HARDWARE_FIELD = re.compile(r"bandwidth|tflops|flops|efficiency")
# Where the one model lives: the catalog (devices, step times) and the planner's memory sizing.
HARDWARE_HOME = ("llama_operator.catalog.", "llama_operator.planning.")


def modules() -> dict[str, ast.Module]:
    found: dict[str, ast.Module] = {}
    for package in (llama_operator, llama_bench):
        root = Path(package.__path__[0])
        for path in sorted(root.rglob("*.py")):
            name = ".".join((package.__name__, *path.relative_to(root).with_suffix("").parts))
            found[name] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return found


def constant_definitions(tree: ast.Module) -> set[str]:
    """UPPER_CASE names assigned at module level or in a class body, that name hardware."""
    names: set[str] = set()
    bodies = [tree.body, *(node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef))]
    for body in bodies:
        for statement in body:
            targets = (
                statement.targets
                if isinstance(statement, ast.Assign)
                else [statement.target]
                if isinstance(statement, ast.AnnAssign)
                else []
            )
            for target in targets:
                if (
                    isinstance(target, ast.Name)
                    and target.id.isupper()
                    and HARDWARE_CONSTANT.search(target.id)
                ):
                    names.add(target.id)
    return names


def device_fields(tree: ast.Module) -> set[str]:
    """`Class.field` of annotated class fields that describe a device (bandwidth, FLOPS, efficiency)."""
    return {
        f"{node.name}.{statement.target.id}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for statement in node.body
        if isinstance(statement, ast.AnnAssign)
        and isinstance(statement.target, ast.Name)
        and HARDWARE_FIELD.search(statement.target.id)
    }


def float_constants(tree: ast.AST) -> set[float]:
    return {
        node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and type(node.value) is float
    }


def catalog_prices() -> set[float]:
    """The float literals the catalog's prices are written with (0.526, 32.77 of 32.77 / 8, ...)."""
    tree = ast.parse(Path(str(catalog_accelerators.__file__)).read_text(encoding="utf-8"))
    return {
        value
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and node.arg == "price_per_hour"
        for value in float_constants(node.value)
    }


def duplicates(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Each hardware constant defined in more than one module, or outside the model's home."""
    where: dict[str, list[str]] = defaultdict(list)
    for module, tree in trees.items():
        for name in constant_definitions(tree):
            where[name].append(module)
    return {
        name: modules
        for name, modules in where.items()
        if len(modules) > 1 or not all(m.startswith(HARDWARE_HOME) for m in modules)
    }


def test_every_hardware_constant_is_defined_once_in_the_runtime_model() -> None:
    assert duplicates(modules()) == {}


# The platform's configuration of an accelerator (config.accelerators) is input, not a second model: the
# catalog turns it into its own Accelerator (catalog.accelerators.configured_accelerator).
# Likewise status.autoscaling.state.stepCalibration reports the calibrated factors beside the catalog's
# (autoscale.calibration fills it from catalog.performance): a report, not a definition; and
# status.plan.measuredSteps records which of those measured factors the engine was planned with.
CONFIGURATION_SCHEMAS = {
    "llama_operator.api.plan": {"MeasuredSteps.bandwidth_efficiency", "MeasuredSteps.compute_efficiency"},
    "llama_operator.api.settings": {"AcceleratorSettings.bandwidth_gbps", "AcceleratorSettings.fp16_tflops"},
    "llama_operator.api.autoscaling": {
        "StepCalibration.bandwidth_efficiency",
        "StepCalibration.compute_efficiency",
        "StepCalibration.catalog_bandwidth_efficiency",
        "StepCalibration.catalog_compute_efficiency",
    },
}


def test_only_the_catalog_describes_a_device() -> None:
    outside = {
        module: fields
        for module, tree in modules().items()
        if not module.startswith("llama_operator.catalog.")
        and (fields := device_fields(tree) - CONFIGURATION_SCHEMAS.get(module, set()))
    }
    assert outside == {}


def test_no_catalog_price_is_written_again() -> None:
    prices = catalog_prices()
    assert {0.526, 1.006, 32.77} <= prices  # T4, A10G, the A100 40GB's instance: the scan reads them
    copies = {
        module: sorted(found)
        for module, tree in modules().items()
        if module != catalog_accelerators.__name__ and (found := float_constants(tree) & prices)
    }
    assert copies == {}


def test_the_simulator_runs_the_planners_step_times() -> None:
    from llama_bench.sim.accelerators import planned_engine, replica_profile  # noqa: PLC0415

    for accelerator in ("t4", "a10g", "a100-80gb-1g.10gb"):
        plan = planned_engine(accelerator, "llama-3.2-1b")
        replica = replica_profile(accelerator, "llama-3.2-1b")
        assert (
            replica.steps.weight_read_seconds,
            replica.steps.seconds_per_context_token,
            replica.steps.seconds_per_prefill_token,
            replica.steps.seconds_per_step_token,
        ) == (
            plan.decode_step_seconds,
            plan.decode_seconds_per_context_token,
            plan.prefill_seconds_per_token,
            plan.seconds_per_step_token,
        )
        assert (replica.kv_capacity_tokens, replica.price_per_hour) == (
            plan.kv_cache_tokens,
            plan.price_per_hour,
        )


# The scans themselves: what the simulator once had is found.
SECOND_MODEL = """
from dataclasses import dataclass

DECODE_BANDWIDTH_EFFICIENCY = 0.8

@dataclass
class Accelerator:
    name: str
    bandwidth_gbps: float
    bandwidth_efficiency: float
    price_per_hour: float

T4 = Accelerator("t4", 320, 0.8, 0.526)
"""


def test_the_scans_find_a_second_model() -> None:
    trees = modules()
    second = ast.parse(SECOND_MODEL)
    assert duplicates({**trees, "llama_bench.sim.second": second}) == {
        "DECODE_BANDWIDTH_EFFICIENCY": ["llama_operator.catalog.performance", "llama_bench.sim.second"]
    }
    assert device_fields(second) == {"Accelerator.bandwidth_gbps", "Accelerator.bandwidth_efficiency"}
    assert float_constants(second) & catalog_prices() == {0.526}
