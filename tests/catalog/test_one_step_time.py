"""One step-time function: the planner, the policy and the simulator time an engine step with
catalog/performance.py's StepModel, from the plan's four step coefficients. The simulator once had its own
formula (llama_bench/sim/accelerators.py) and the plan exported three of the four coefficients, so with
tensor parallelism the policy and the simulator rebuilt another model than the one the planner sized with."""

from __future__ import annotations

import ast
from pathlib import Path

import llama_bench
import llama_operator
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.autoscale.calibration import calibrated_model, plan_step_model
from llama_operator.catalog.performance import StepModel, planned_step_model
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.planner import plan_service
from llama_operator.reconcile.autoscaling import autoscaler_state

# The coefficient a step starts from (the weights read once, the fixed overhead), under each of its names:
# StepModel's, the plan's, and the simulator's former one.
WEIGHT_READ = frozenset({"weight_read_seconds", "decode_step_seconds", "step_base_seconds"})
# The coefficients per token or per sequence a step adds to it.
PER_TOKEN = frozenset(
    {
        "seconds_per_context_token",
        "seconds_per_prefill_token",
        "seconds_per_step_token",
        "seconds_per_decode_sequence",
        "decode_seconds_per_context_token",
        "prefill_seconds_per_token",
    }
)


def _read(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def step_time_formulas(tree: ast.AST) -> list[int]:
    """Lines of the arithmetic that adds per-token coefficients to the weight-read one: a step-time formula.
    Only the outermost arithmetic of an expression counts (its parts are the same formula)."""
    found: list[int] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.BinOp):
            read = _read(node)
            if read & WEIGHT_READ and read & PER_TOKEN:
                found.append(node.lineno)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_exactly_one_step_time_formula_in_the_runtime_and_the_bench() -> None:
    formulas = {
        f"{package.__name__}/{path.relative_to(root).as_posix()}:{line}"
        for package in (llama_operator, llama_bench)
        for root in [Path(package.__path__[0])]
        for path in sorted(root.rglob("*.py"))
        for line in step_time_formulas(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert len(formulas) == 1, formulas
    (where,) = formulas
    assert where.startswith("llama_operator/catalog/performance.py:")


def test_the_count_sees_a_second_formula() -> None:
    tree = ast.parse(
        "t = p.step_base_seconds + p.seconds_per_context_token * ctx\nu = p.weight_read_seconds * 2\n"
    )
    assert step_time_formulas(tree) == [1]


TENSOR_PARALLEL = LlamaServiceSpec.model_validate(
    {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "accelerator": {"type": "a100-80gb", "count": 2},
        "autoscaling": {"enabled": True, "slo": {"ttftSeconds": 1, "tpotSeconds": 0.05}},
    }
)


def test_the_plan_carries_the_all_reduce_term_of_tensor_parallelism() -> None:
    planned = planned_step_model(plan_service(TENSOR_PARALLEL, name="tp", config=PlanningConfig()))
    assert planned.seconds_per_step_token > 0
    assert planned.step_seconds(8, 2048, 256) > StepModel(
        planned.weight_read_seconds, planned.seconds_per_context_token, planned.seconds_per_prefill_token
    ).step_seconds(8, 2048, 256)


def test_the_policy_rebuilds_the_planners_model_with_tensor_parallelism() -> None:
    plan = plan_service(TENSOR_PARALLEL, name="tp", config=PlanningConfig())
    state = autoscaler_state({"plan": plan.to_wire()})
    assert plan_step_model(state) == planned_step_model(plan)
    assert calibrated_model(state) == planned_step_model(plan)  # nothing calibrated yet
