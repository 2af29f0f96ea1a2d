"""Which series the dashboard and the rules read: what the tests check against the operator's registry
and a real vLLM server's /metrics."""

from __future__ import annotations

import re

from llama_operator.observability import dashboard, rules

# A metric name in PromQL: the operator's, or vLLM's (also inside a {__name__=~"a|b"} matcher).
_NAME = re.compile(r"(?<![\w:])(llama_operator_[a-z0-9_]+|vllm:[a-z0-9_:]+)")


def expressions() -> list[str]:
    """Every PromQL expression of the dashboard and of the rules (with the default values)."""
    rule_exprs = [
        rule["expr"] for group in rules.rule_groups(rules.default_params()) for rule in group["rules"]
    ]
    return [*dashboard.expressions(), *rule_exprs]


def series_names() -> set[str]:
    """The operator and vLLM series names they read, as exposed (with _total, _bucket, _count)."""
    return {name for expr in expressions() for name in _NAME.findall(expr)}
