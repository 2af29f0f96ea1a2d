"""What the operator's code can put in a condition or an Event, read from its source (AST), so that the
status reference cannot fall behind the code.

A condition is recognised where a `ConditionType.X` starts a tuple or a call's arguments (the
`(type, status, reason, message)` shape `set_conditions` takes, and helpers called that way) or is a
`type=` keyword beside `reason=`. An Event is a call of `Event(...)` (its first argument or `reason=`,
and `warning=`, default True) or of `post_event(..., reason=...)`. A reason must resolve to string
literals: a literal, a conditional expression of them, or a name bound to them (a module-level
constant anywhere in the package, a class attribute, or a local assignment in the same function).
Anything else is reported as unresolved, so a new f-string reason fails the test instead of slipping
past it. An Event that re-posts a condition's reason (`reason=cond.reason`) is allowed only in the
functions listed in FORWARDED_REASONS.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from llama_operator.api.conditions import ConditionStatus, ConditionType

# Functions whose Event re-posts a condition's own reason: function name -> (condition type, status).
FORWARDED_REASONS = {
    "degraded_event": ("Degraded", "True"),
    "inference_pool_event": ("InferencePoolReady", "False"),
}
# Where Events already built are handed to the API (`reason=event.reason`): not a new reason.
FORWARDING_CALLS = {"post_event"}


@dataclass
class Emitted:
    conditions: set[tuple[str, str]] = field(default_factory=set)  # (condition type, reason)
    condition_statuses: set[tuple[str, str, str]] = field(default_factory=set)  # where the status is known
    events: set[tuple[str, str]] = field(default_factory=set)  # (reason, Normal|Warning)
    forwarded: set[tuple[str, str, str]] = field(default_factory=set)  # (function, type, status)
    unresolved: list[str] = field(default_factory=list)  # "file:line: what"


class _Constants:
    """String constants of the whole package: module-level names and class attributes."""

    def __init__(self, trees: dict[Path, ast.Module]) -> None:
        self.names: dict[str, set[str]] = {}
        self.attributes: dict[tuple[str, str], str] = {}
        for tree in trees.values():
            for node in tree.body:
                for target, value in _assignments(node):
                    strings = _literal_strings(value)
                    if strings is not None:
                        self.names.setdefault(target, set()).update(strings)
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        for target, value in _assignments(item):
                            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                                self.attributes[(node.name, target)] = value.value


def _assignments(node: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name):
                yield target.id, node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        yield node.target.id, node.value


def _literal_strings(node: ast.expr) -> set[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        body, orelse = _literal_strings(node.body), _literal_strings(node.orelse)
        return None if body is None or orelse is None else body | orelse
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str, constants: _Constants, out: Emitted) -> None:
        self.path = path
        self.constants = constants
        self.out = out
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []

    # --- resolving an expression to the strings it can be -------------------------------------------

    def resolve(self, node: ast.expr, seen: frozenset[str] = frozenset()) -> set[str] | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.IfExp):
            body, orelse = self.resolve(node.body, seen), self.resolve(node.orelse, seen)
            return None if body is None or orelse is None else body | orelse
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            value = self.constants.attributes.get((node.value.id, node.attr))
            return None if value is None else {value}
        if isinstance(node, ast.Name) and node.id not in seen:
            local = self._local_values(node.id)
            if local:
                values: set[str] = set()
                for expr in local:
                    resolved = self.resolve(expr, seen | {node.id})
                    if resolved is None:
                        return None
                    values |= resolved
                return values
            return self.constants.names.get(node.id)
        return None

    def _local_values(self, name: str) -> list[ast.expr]:
        if not self.functions:
            return []
        return [
            value
            for node in ast.walk(self.functions[-1])
            for target, value in _assignments(node)
            if target == name
        ]

    def _status(self, node: ast.expr | None) -> set[str] | None:
        if node is None:
            return None
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "ConditionStatus"
        ):
            return {node.attr}
        if isinstance(node, ast.IfExp):
            body, orelse = self._status(node.body), self._status(node.orelse)
            return None if body is None or orelse is None else body | orelse
        if isinstance(node, ast.Name):
            local = self._local_values(node.id)
            statuses: set[str] = set()
            for expr in local:
                resolved = self._status(expr)
                if resolved is None:
                    return None
                statuses |= resolved
            return statuses or None
        return None

    def unresolved(self, node: ast.AST, what: str) -> None:
        self.out.unresolved.append(f"{self.path}:{getattr(node, 'lineno', '?')}: {what}")

    # --- conditions -----------------------------------------------------------------------------------

    def condition(self, node: ast.AST, type_: ast.expr, status: ast.expr | None, reason: ast.expr) -> None:
        assert isinstance(type_, ast.Attribute)
        condition_type = _condition_type_value(type_.attr)
        reasons = self.resolve(reason)
        if reasons is None:
            self.unresolved(node, f"the reason of a {condition_type} condition is not a string literal")
            return
        statuses = self._status(status)
        for value in reasons:
            self.out.conditions.add((condition_type, value))
            # Two choices of status beside two of reason need not pair up: then neither is recorded.
            if statuses is not None and (len(statuses) == 1 or len(reasons) == 1):
                for s in statuses:
                    self.out.condition_statuses.add((condition_type, _status_value(s), value))

    def visit_Tuple(self, node: ast.Tuple) -> None:
        if len(node.elts) >= 3 and _is_condition_type(node.elts[0]):
            self.condition(node, node.elts[0], node.elts[1], node.elts[2])
        self.generic_visit(node)

    # --- Events and condition-setting calls ---------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        name = _callee(node)
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        if len(node.args) >= 3 and _is_condition_type(node.args[0]):
            self.condition(node, node.args[0], node.args[1], node.args[2])
        elif "type" in keywords and _is_condition_type(keywords["type"]) and "reason" in keywords:
            self.condition(node, keywords["type"], keywords.get("status"), keywords["reason"])
        if name == "Event" and (node.args or keywords):  # asyncio.Event() and threading.Event() take none
            self.event(node, node.args[0] if node.args else keywords.get("reason"), node, keywords)
        elif name in FORWARDING_CALLS and "reason" in keywords:
            reason = keywords["reason"]
            if not (isinstance(reason, ast.Attribute) and reason.attr == "reason"):
                self.event(node, reason, node, keywords)
        self.generic_visit(node)

    def event(
        self, node: ast.AST, reason: ast.expr | None, call: ast.Call, keywords: dict[str, ast.expr]
    ) -> None:
        warning_expr = call.args[2] if len(call.args) >= 3 else keywords.get("warning")
        if warning_expr is None:
            warning = True
        elif isinstance(warning_expr, ast.Constant) and isinstance(warning_expr.value, bool):
            warning = warning_expr.value
        else:
            self.unresolved(node, "an Event's warning= is not a literal True or False")
            return
        kind = "Warning" if warning else "Normal"
        if isinstance(reason, ast.Attribute) and reason.attr == "reason":
            function = self.functions[-1].name if self.functions else "<module>"
            forwarded = FORWARDED_REASONS.get(function)
            if forwarded is None:
                self.unresolved(
                    node,
                    f"an Event in {function} re-posts some object's reason: list it in FORWARDED_REASONS",
                )
                return
            self.out.forwarded.add((function, *forwarded))
            return
        reasons = None if reason is None else self.resolve(reason)
        if reasons is None:
            self.unresolved(node, "an Event's reason is not a string literal")
            return
        for value in reasons:
            self.out.events.add((value, kind))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node)
        self.generic_visit(node)
        self.functions.pop()

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.functions.append(node)
        self.generic_visit(node)
        self.functions.pop()


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _is_condition_type(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ConditionType"
    )


def _condition_type_value(member: str) -> str:
    return ConditionType[member].value


def _status_value(member: str) -> str:
    return ConditionStatus[member].value


def scan_sources(sources: dict[str, str]) -> Emitted:
    """Conditions and Events that these sources (path -> Python text) can emit."""
    trees = {Path(path): ast.parse(text, filename=path) for path, text in sources.items()}
    constants = _Constants(trees)
    out = Emitted()
    for path, tree in trees.items():
        _Scanner(str(path), constants, out).visit(tree)
    # An Event that re-posts a condition's reason can carry every reason that condition has with that
    # status; those Events are Warnings (degraded_event builds them with the default).
    for _function, condition_type, status in out.forwarded:
        for type_, s, reason in out.condition_statuses:
            if (type_, s) == (condition_type, status):
                out.events.add((reason, "Warning"))
    return out


def scan_package(root: Path) -> Emitted:
    return scan_sources({str(p.relative_to(root.parent)): p.read_text() for p in sorted(root.rglob("*.py"))})
