"""The SLO recording rules and alerts: a Prometheus rule file, and the chart's PrometheusRule template.

TTFT SLO burn-rate alerts follow the SRE workbook's multi-window, multi-burn-rate pattern over a 30-day
SLO period: page when the budget burns 14.4x as fast as allowed over 1h (and still over 5m) or 6x over
6h (and 30m); open a ticket at 3x over 1d (and 2h) or 1x over 3d (and 6h). A request is bad when its
TTFT exceeds the largest vLLM histogram bound at or below the SLO (the operator's
llama_operator_slo_ttft_bucket names that bound), and the error budget is 1 - percentile/100 of the
LlamaService's own SLO, so one rule set serves every LlamaService."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import yaml

from llama_operator.api.chart_values import PrometheusRuleValues
from llama_operator.observability import names as n

CHART_RULE_TEMPLATE_FILE = "charts/llama-operator/templates/prometheusrule.yaml"
SLO_PERIOD_DAYS = 30
WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
BAD_RATIO = "llamaservice:ttft_slo_bad_ratio:rate{window}"
ERROR_BUDGET = "llamaservice:ttft_slo_error_budget:ratio"
ON = f"on ({n.BY_SERVICE})"


@dataclass(frozen=True, slots=True)
class BurnWindow:
    """One window pair of the burn-rate alert: both windows must burn at `factor` x the allowed rate."""

    long: str
    short: str
    factor: float
    pages: bool  # page, or open a ticket

    @property
    def budget_lasts_days(self) -> float:
        return SLO_PERIOD_DAYS / self.factor


BURN_WINDOWS = (
    BurnWindow("1h", "5m", 14.4, pages=True),
    BurnWindow("6h", "30m", 6, pages=True),
    BurnWindow("1d", "2h", 3, pages=False),
    BurnWindow("3d", "6h", 1, pages=False),
)

# Alert names, and their sections (anchors) in docs/runbook.md.
BUDGET_BURN = "LlamaServiceTTFTBudgetBurn"
SCALING_LIMITED = "LlamaServiceScalingLimited"
NO_METRICS = "LlamaServiceNoMetrics"
OPERATOR_DOWN = "LlamaOperatorDown"
RECONCILE_ERRORS = "LlamaOperatorReconcileErrors"
ALERTS = (BUDGET_BURN, SCALING_LIMITED, NO_METRICS, OPERATOR_DOWN, RECONCILE_ERRORS)


def runbook_anchor(alert: str) -> str:
    """The anchor GitHub gives a `## <alert>` heading."""
    return alert.lower()


@dataclass(frozen=True, slots=True)
class RuleParams:
    """What the chart's values set in the rules (the rest is fixed by the SLO pattern)."""

    operator_job: str
    runbook_url: str
    page_severity: str
    ticket_severity: str
    scaling_limited_for: str
    no_metrics_for: str
    operator_down_for: str
    reconcile_errors_for: str

    @classmethod
    def from_values(cls, values: PrometheusRuleValues, *, operator_job: str) -> RuleParams:
        """`operator_job` stands for the chart's default (<fullname>-metrics) when the value is empty."""
        return cls(
            operator_job=values.operator_job or operator_job,
            runbook_url=values.runbook_url,
            page_severity=values.page_severity,
            ticket_severity=values.ticket_severity,
            scaling_limited_for=values.scaling_limited_for,
            no_metrics_for=values.no_metrics_for,
            operator_down_for=values.operator_down_for,
            reconcile_errors_for=values.reconcile_errors_for,
        )


# The chart's default release name is the chart's name, so its default job is this.
DEFAULT_OPERATOR_JOB = "llama-operator-metrics"


def default_params() -> RuleParams:
    return RuleParams.from_values(PrometheusRuleValues(), operator_job=DEFAULT_OPERATOR_JOB)


def _by_service(expr: str, agg: str = "max") -> str:
    return f"{agg} by ({n.BY_SERVICE}) ({expr})"


def bad_ratio_expr(window: str) -> str:
    """Share of requests over `window` whose TTFT exceeded the SLO's bucket (NaN without requests)."""
    good = (
        f"rate({n.VLLM_TTFT}_bucket[{window}])\n"
        f"    * on ({n.BY_SERVICE}, le) group_left ()\n"
        # max: during a leader hand-over two operator replicas may export the series for a moment.
        f"    max by ({n.BY_SERVICE}, le) ({n.OP_SLO_BUCKET})"
    )
    return (
        f"1 - (\n  sum by ({n.BY_SERVICE}) (\n    {good}\n  )\n"
        f"  /\n  sum by ({n.BY_SERVICE}) (rate({n.VLLM_TTFT}_count[{window}]))\n)\n"
    )


def recording_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [
        {"record": ERROR_BUDGET, "expr": f"1 - {_by_service(n.OP_SLO_PERCENTILE)} / 100\n"},
    ]
    rules += [{"record": BAD_RATIO.format(window=w), "expr": bad_ratio_expr(w)} for w in WINDOWS]
    return rules


def _service(text: str) -> str:
    return "{{ $labels.namespace }}/{{ $labels.llamaservice }}" + text


def _annotations(p: RuleParams, alert: str, summary: str, description: str) -> dict[str, str]:
    return {
        "summary": summary,
        "description": description,
        "runbook_url": f"{p.runbook_url}#{runbook_anchor(alert)}",
    }


def burn_alert(p: RuleParams, w: BurnWindow) -> dict[str, Any]:
    threshold = f"{ON} ({w.factor:g} * {ERROR_BUDGET})"
    long_ratio, short_ratio = BAD_RATIO.format(window=w.long), BAD_RATIO.format(window=w.short)
    action = "pages" if w.pages else "opens a ticket"
    return {
        "alert": BUDGET_BURN,
        "expr": f"{long_ratio} > {threshold}\nand {ON}\n{short_ratio} > {threshold}\n",
        "labels": {
            "severity": p.page_severity if w.pages else p.ticket_severity,
            "window": f"{w.long}/{w.short}",
        },
        "annotations": _annotations(
            p,
            BUDGET_BURN,
            _service(f" burns its TTFT error budget {w.factor:g}x too fast ({w.long} and {w.short})"),
            _service(
                f": the share of requests missing the TTFT objective is over {w.factor:g}x what its "
                f"percentile allows, over the last {w.long} and still over the last {w.short}. At this rate the "
                f"{SLO_PERIOD_DAYS}-day error budget lasts {w.budget_lasts_days:.3g} days; this {action}."
            ),
        ),
    }


def alerting_rules(p: RuleParams) -> list[dict[str, Any]]:
    job = f'job="{p.operator_job}"'
    scaling_limited = {
        "alert": SCALING_LIMITED,
        "expr": (
            f"{_by_service(n.OP_DESIRED)} >= {ON} {_by_service(n.OP_MAX)}\n"
            f"and {ON}\n{_by_service(n.OP_SLO_MET)} == 0\n"
        ),
        "for": p.scaling_limited_for,
        "labels": {"severity": p.ticket_severity},
        "annotations": _annotations(
            p,
            SCALING_LIMITED,
            _service(" misses its TTFT SLO at maxReplicas"),
            _service(
                f" wants more replicas than spec.autoscaling.maxReplicas and has missed its TTFT SLO for "
                f"{p.scaling_limited_for}: raise maxReplicas, or give it a faster accelerator."
            ),
        ),
    }
    has_ready = f"{_by_service(n.OP_READY)} > 0"
    no_metrics = {
        "alert": NO_METRICS,
        "expr": (
            f"{has_ready}\nand {ON}\n(\n"
            # The autoscaler saw no signals (it holds the replica count meanwhile) ...
            f"  {_by_service(n.OP_NO_DATA)} > 0\n"
            # ... or this Prometheus has no vLLM series of the service (its PodMonitor is not selected).
            f"  or\n  {_by_service(n.OP_READY)}\n"
            f"    unless {ON} group by ({n.BY_SERVICE}) ({n.VLLM_WAITING})\n)\n"
        ),
        "for": p.no_metrics_for,
        "labels": {"severity": p.ticket_severity},
        "annotations": _annotations(
            p,
            NO_METRICS,
            _service(" has ready replicas but no metrics"),
            _service(
                f" has had ready replicas and no vLLM signals for {p.no_metrics_for}: the autoscaler holds "
                "its replica count and cannot keep the SLO. Check that Prometheus scrapes its pods."
            ),
        ),
    }
    operator_down = {
        "alert": OPERATOR_DOWN,
        "expr": f"absent({n.PROMETHEUS_UP}{{{job}}} == 1)\nor\nmax({n.OP_LEADER}{{{job}}}) == 0\n",
        "for": p.operator_down_for,
        "labels": {"severity": p.page_severity},
        "annotations": _annotations(
            p,
            OPERATOR_DOWN,
            "llama-operator is down or has no leader",
            f"For {p.operator_down_for} no replica of the operator ({job}) has been scraped up, or none has "
            "led: LlamaServices are neither reconciled nor autoscaled.",
        ),
    }
    reconcile_errors = {
        "alert": RECONCILE_ERRORS,
        "expr": f'sum by (job) (rate({n.OP_RECONCILES}{{{job}, result="error"}}[10m])) > 0\n',
        "for": p.reconcile_errors_for,
        "labels": {"severity": p.ticket_severity},
        "annotations": _annotations(
            p,
            RECONCILE_ERRORS,
            "llama-operator reconciles keep failing",
            f"Reconciles of LlamaServices have failed without pause for {p.reconcile_errors_for} "
            "(the API server refused or failed requests): changes to LlamaServices may not be applied.",
        ),
    }
    return [
        *(burn_alert(p, w) for w in BURN_WINDOWS),
        scaling_limited,
        no_metrics,
        operator_down,
        reconcile_errors,
    ]


def rule_groups(p: RuleParams) -> list[dict[str, Any]]:
    return [
        {"name": "llama-operator.slo.recording", "rules": recording_rules()},
        {"name": "llama-operator.alerts", "rules": alerting_rules(p)},
    ]


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None  # PromQL as block text, readable in the chart
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


def render_rule_file(p: RuleParams | None = None) -> str:
    """A Prometheus rule file (what the chart's PrometheusRule holds with its default values)."""
    return _dump({"groups": rule_groups(p or default_params())})


# Chart values the template reads, by the placeholder that stands for each in the generated rules. The
# placeholders are plain YAML words, so the dump leaves them unquoted where they are whole values.
_HELM_VALUES = {
    "scaling_limited_for": "scalingLimitedFor",
    "no_metrics_for": "noMetricsFor",
    "operator_down_for": "operatorDownFor",
    "reconcile_errors_for": "reconcileErrorsFor",
    "page_severity": "pageSeverity",
    "ticket_severity": "ticketSeverity",
}
_JOB_TOKEN = "HELMJOBNAME"
_RUNBOOK_TOKEN = "HELMRUNBOOKURL"


def _token(field: str) -> str:
    return f"HELMVALUE{field.replace('_', '').upper()}"


def render_chart_template() -> str:
    """templates/prometheusrule.yaml: the same rules, with the values filled in by Helm."""
    params = replace(
        default_params(),
        operator_job=_JOB_TOKEN,
        runbook_url=_RUNBOOK_TOKEN,
        **{field: _token(field) for field in _HELM_VALUES},
    )
    body = _dump({"groups": rule_groups(params)})
    # Prometheus' own templates ({{ $labels.x }}) must reach the rule as written, not run in Helm.
    body = re.sub(r"\{\{|\}\}", lambda m: '{{ "' + m.group(0) + '" }}', body)
    for field, key in _HELM_VALUES.items():
        token = _token(field)
        # In a description the value is part of a sentence; as a whole YAML value it is quoted.
        body = re.sub(rf": {token}$", f": {{{{ .Values.prometheusRule.{key} | quote }}}}", body, flags=re.M)
        body = body.replace(token, f"{{{{ .Values.prometheusRule.{key} }}}}")
    body = re.sub(
        rf": {_RUNBOOK_TOKEN}#([a-z0-9-]+)$",
        r': {{ printf "%s#%s" .Values.prometheusRule.runbookUrl "\1" | quote }}',
        body,
        flags=re.M,
    )
    body = body.replace(_JOB_TOKEN, "{{ $job }}")
    leftover = re.findall(r"HELM[A-Z]+", body)
    if leftover:
        raise AssertionError(f"placeholders left in the PrometheusRule template: {sorted(set(leftover))}")
    indented = "".join(f"  {line}" if line.strip() else line for line in body.splitlines(keepends=True))
    return (
        "# Generated by `make monitoring` from operator/llama_operator/observability/rules.py: do not edit.\n"
        "{{- if .Values.prometheusRule.enabled }}\n"
        '{{- $job := .Values.prometheusRule.operatorJob | default (printf "%s-metrics" '
        '(include "llama-operator.fullname" .)) }}\n'
        "apiVersion: monitoring.coreos.com/v1\n"
        "kind: PrometheusRule\n"
        "metadata:\n"
        '  name: {{ include "llama-operator.fullname" . }}\n'
        "  namespace: {{ .Values.prometheusRule.namespace | default .Release.Namespace }}\n"
        "  labels:\n"
        '    {{- include "llama-operator.labels" . | nindent 4 }}\n'
        '    {{- with include "llama-operator.monitoringLabels" (dict "root" . "extra" '
        ".Values.prometheusRule.additionalLabels) }}\n"
        "    {{- . | nindent 4 }}\n"
        "    {{- end }}\n"
        "spec:\n"
        f"{indented}"
        "{{- end }}\n"
    )
