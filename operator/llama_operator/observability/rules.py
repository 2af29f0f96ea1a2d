"""The SLO recording rules and alerts: a Prometheus rule file, and the chart's PrometheusRule template.

TTFT (and, for services with a TPOT objective, TPOT) SLO burn-rate alerts follow the SRE workbook's multi-window, multi-burn-rate pattern over a 30-day
SLO period: page when the budget burns 14.4x as fast as allowed over 1h (and still over 5m) or 6x over
6h (and 30m); open a ticket at 3x over 1d (and 2h) or 1x over 3d (and 6h). A request is bad when its
TTFT exceeds the largest vLLM histogram bound at or below the SLO (the operator's
llama_operator_slo_ttft_bound_info names that bound; llama_operator_slo_tpot_bound_info the inter-token
latency's), and the error budget is 1 - the objective ratio of the LlamaService's own SLO, so one rule set
serves every LlamaService.

Rules that need a scrape the chart may not configure (`absent(up{job=...})`) are in groups of their own,
rendered only when that scrape is there: a rule must never page because nobody scrapes its target."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import yaml

from llama_operator.api.chart_values import PrometheusRuleValues
from llama_operator.observability import names as n

CHART_RULE_TEMPLATE_FILE = "charts/llama-operator/templates/prometheusrule.yaml"
SLO_PERIOD_DAYS = 28  # spec.autoscaling.slo.objectiveWindow's default, for the alerts' wording
WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
BAD_RATIO = "llamaservice:ttft_slo_bad_ratio:rate{window}"
TPOT_BAD_RATIO = "llamaservice:tpot_slo_bad_ratio:rate{window}"
ERROR_BUDGET = "llamaservice:ttft_slo_error_budget:ratio"  # one budget per service, TTFT and TPOT alike
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
TPOT_BUDGET_BURN = "LlamaServiceTPOTBudgetBurn"
SCALING_LIMITED = "LlamaServiceScalingLimited"
NO_METRICS = "LlamaServiceNoMetrics"
NOT_READY = "LlamaServiceNotReady"
DEGRADED = "LlamaServiceDegraded"
OPERATOR_DOWN = "LlamaOperatorDown"
RECONCILE_ERRORS = "LlamaOperatorReconcileErrors"
ELECTION_BLOCKED = "LlamaOperatorLeaderElectionBlocked"
UNKNOWN_GPUS = "LlamaOperatorUnknownGPUs"
ACTIVATOR_DOWN = "LlamaActivatorDown"
ACTIVATION_TIMEOUTS = "LlamaActivatorTimeouts"
ALERTS = (
    BUDGET_BURN,
    TPOT_BUDGET_BURN,
    SCALING_LIMITED,
    NO_METRICS,
    NOT_READY,
    DEGRADED,
    OPERATOR_DOWN,
    RECONCILE_ERRORS,
    ELECTION_BLOCKED,
    UNKNOWN_GPUS,
    ACTIVATOR_DOWN,
    ACTIVATION_TIMEOUTS,
)

# Groups rendered by the chart only when their scrape is configured (a Helm condition each).
SCRAPE_GROUP = "llama-operator.scrape"
ACTIVATOR_GROUP = "llama-operator.activator"
HELM_CONDITIONS = {
    SCRAPE_GROUP: "or .Values.metrics.serviceMonitor.enabled .Values.prometheusRule.operatorJob",
    ACTIVATOR_GROUP: "and .Values.activator.enabled (or .Values.metrics.serviceMonitor.enabled "
    ".Values.prometheusRule.activatorJob)",
}


def runbook_anchor(alert: str) -> str:
    """The anchor GitHub gives a `## <alert>` heading."""
    return alert.lower()


@dataclass(frozen=True, slots=True)
class RuleParams:
    """What the chart's values set in the rules (the rest is fixed by the SLO pattern)."""

    operator_job: str
    activator_job: str
    runbook_url: str
    page_severity: str
    ticket_severity: str
    scaling_limited_for: str
    no_metrics_for: str
    operator_down_for: str
    reconcile_errors_for: str
    not_ready_for: str
    degraded_for: str

    @classmethod
    def from_values(
        cls, values: PrometheusRuleValues, *, operator_job: str, activator_job: str = ""
    ) -> RuleParams:
        """`operator_job` (`activator_job`) stands for the chart's default (<fullname>-metrics,
        <fullname>-activator) when the value is empty."""
        return cls(
            operator_job=values.operator_job or operator_job,
            activator_job=values.activator_job or activator_job,
            runbook_url=values.runbook_url,
            page_severity=values.page_severity,
            ticket_severity=values.ticket_severity,
            scaling_limited_for=values.scaling_limited_for,
            no_metrics_for=values.no_metrics_for,
            operator_down_for=values.operator_down_for,
            reconcile_errors_for=values.reconcile_errors_for,
            not_ready_for=values.not_ready_for,
            degraded_for=values.degraded_for,
        )


# The chart's default release name is the chart's name, so its default job is this.
DEFAULT_OPERATOR_JOB = "llama-operator-metrics"
DEFAULT_ACTIVATOR_JOB = "llama-operator-activator"


def default_params() -> RuleParams:
    return RuleParams.from_values(
        PrometheusRuleValues(), operator_job=DEFAULT_OPERATOR_JOB, activator_job=DEFAULT_ACTIVATOR_JOB
    )


def _by_service(expr: str, agg: str = "max") -> str:
    return f"{agg} by ({n.BY_SERVICE}) ({expr})"


def bad_ratio_expr(window: str, family: str = n.VLLM_TTFT, bound: str = n.OP_SLO_BOUND) -> str:
    """Share of requests (of tokens, for TPOT) over `window` beyond the SLO's bucket (NaN without any).
    Only services with a bound series get one: TPOT's exists only where a TPOT objective is set."""
    good = (
        f"rate({family}_bucket[{window}])\n"
        f"    * on ({n.BY_SERVICE}, le) group_left ()\n"
        # max: during a leader hand-over two operator replicas may export the series for a moment. The
        # operator names the bound in `bound` (an `le` on a gauge would pose as a histogram).
        f'    label_replace(max by ({n.BY_SERVICE}, bound) ({bound}), "le", "$1", "bound", "(.*)")'
    )
    return (
        f"1 - (\n  sum by ({n.BY_SERVICE}) (\n    {good}\n  )\n"
        f"  /\n  sum by ({n.BY_SERVICE}) (rate({family}_count[{window}]))\n)\n"
    )


def recording_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [
        {"record": ERROR_BUDGET, "expr": f"1 - {_by_service(n.OP_SLO_OBJECTIVE)}\n"},
    ]
    rules += [{"record": BAD_RATIO.format(window=w), "expr": bad_ratio_expr(w)} for w in WINDOWS]
    rules += [
        {"record": TPOT_BAD_RATIO.format(window=w), "expr": bad_ratio_expr(w, n.VLLM_ITL, n.OP_TPOT_BOUND)}
        for w in WINDOWS
    ]
    return rules


def _service(text: str) -> str:
    return "{{ $labels.namespace }}/{{ $labels.llamaservice }}" + text


def _annotations(p: RuleParams, alert: str, summary: str, description: str) -> dict[str, str]:
    return {
        "summary": summary,
        "description": description,
        "runbook_url": f"{p.runbook_url}#{runbook_anchor(alert)}",
    }


def burn_alert(p: RuleParams, w: BurnWindow, *, tpot: bool = False) -> dict[str, Any]:
    threshold = f"{ON} ({w.factor:g} * {ERROR_BUDGET})"
    ratio = TPOT_BAD_RATIO if tpot else BAD_RATIO
    long_ratio, short_ratio = ratio.format(window=w.long), ratio.format(window=w.short)
    action = "pages" if w.pages else "opens a ticket"
    if tpot:
        return {
            "alert": TPOT_BUDGET_BURN,
            "expr": f"{long_ratio} > {threshold}\nand {ON}\n{short_ratio} > {threshold}\n",
            "labels": {
                "severity": p.page_severity if w.pages else p.ticket_severity,
                "window": f"{w.long}/{w.short}",
            },
            "annotations": _annotations(
                p,
                TPOT_BUDGET_BURN,
                _service(f" burns its TPOT error budget {w.factor:g}x too fast ({w.long} and {w.short})"),
                _service(
                    f": the share of output tokens slower than the TPOT objective is over {w.factor:g}x what "
                    f"its objective allows, over the last {w.long} and still over the last {w.short}. At this "
                    f"rate the error budget of a {SLO_PERIOD_DAYS}-day objectiveWindow lasts "
                    f"{w.budget_lasts_days:.3g} days; this {action}."
                ),
            ),
        }
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
                f"objective allows, over the last {w.long} and still over the last {w.short}. At this rate "
                f"the error budget of a {SLO_PERIOD_DAYS}-day objectiveWindow lasts {w.budget_lasts_days:.3g} "
                f"days; this {action}."
            ),
        ),
    }


def _ticket(
    p: RuleParams, name: str, *, expr: str, for_: str, summary: str, description: str
) -> dict[str, Any]:
    """An alert at the ticket severity: each of the service and operator alerts below."""
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": p.ticket_severity},
        "annotations": _annotations(p, name, summary, description),
    }


def _service_alerts(p: RuleParams) -> list[dict[str, Any]]:
    """One LlamaService's trouble: at its maximum and missing the SLO, blind, down, or unservable."""
    has_ready = f"{_by_service(n.OP_READY)} > 0"
    scaling_limited = _ticket(
        p,
        SCALING_LIMITED,
        expr=f"{_by_service(n.OP_DESIRED)} >= {ON} {_by_service(n.OP_MAX)}\nand {ON}\n{_by_service(n.OP_SLO_MET)} == 0\n",
        for_=p.scaling_limited_for,
        summary=_service(" misses its TTFT SLO at maxReplicas"),
        description=_service(
            f" wants more replicas than spec.autoscaling.maxReplicas and has missed its TTFT SLO for "
            f"{p.scaling_limited_for}: raise maxReplicas, or give it a faster accelerator."
        ),
    )
    no_metrics = _ticket(
        p,
        NO_METRICS,
        expr=(
            f"{has_ready}\nand {ON}\n(\n"
            # The autoscaler saw no signals (it holds the replica count meanwhile) ...
            f"  {_by_service(n.OP_NO_DATA)} > 0\n"
            # ... or this Prometheus has no vLLM series of the service (its PodMonitor is not selected).
            f"  or\n  {_by_service(n.OP_READY)}\n"
            f"    unless {ON} group by ({n.BY_SERVICE}) ({n.VLLM_WAITING})\n)\n"
        ),
        for_=p.no_metrics_for,
        summary=_service(" has ready replicas but no metrics"),
        description=_service(
            f" has had ready replicas and no vLLM signals for {p.no_metrics_for}: the autoscaler holds "
            "its replica count and cannot keep the SLO. Check that Prometheus scrapes its pods."
        ),
    )
    not_ready = _ticket(
        p,
        NOT_READY,
        # The operator reports a service at zero on purpose as ready: only a real outage counts.
        expr=f"{_by_service(n.OP_SERVICE_READY)} == 0\n",
        for_=p.not_ready_for,
        summary=_service(" is not Ready"),
        description=_service(
            f" has had no ready replica for {p.not_ready_for}: its requests fail. `kubectl describe "
            "llamaservice` shows the Ready condition's reason (pods pending, crash-looping, no GPU free)."
        ),
    )
    degraded = _ticket(
        p,
        DEGRADED,
        expr=f"{_by_service(n.OP_SERVICE_DEGRADED)} == 1\n",
        for_=p.degraded_for,
        summary=_service(" is Degraded"),
        description=_service(
            f" has been Degraded for {p.degraded_for}: its spec cannot be served as written (no fitting "
            "accelerator, a refused image or flag). The Degraded condition's message says what to change."
        ),
    )
    return [scaling_limited, no_metrics, not_ready, degraded]


def _operator_alerts(p: RuleParams) -> list[dict[str, Any]]:
    """The operator's own trouble: failing reconciles, a replica locked out of election, unknown GPUs."""
    job = f'job="{p.operator_job}"'
    reconcile_errors = _ticket(
        p,
        RECONCILE_ERRORS,
        expr=f'sum by (job) (rate({n.OP_RECONCILES}{{{job}, result="error"}}[10m])) > 0\n',
        for_=p.reconcile_errors_for,
        summary="llama-operator reconciles keep failing",
        description=f"Reconciles of LlamaServices have failed without pause for {p.reconcile_errors_for} "
        "(the API server refused or failed requests): changes to LlamaServices may not be applied.",
    )
    election_blocked = _ticket(
        p,
        ELECTION_BLOCKED,
        # A replica the API server refuses its Lease for good can never take over: the failover it is
        # there for is gone, though the leader may still run.
        expr=f"max by (job, instance, reason) ({n.OP_LEADER_ELECTION_BLOCKED}) > 0\n",
        for_=p.operator_down_for,
        summary="an operator replica cannot take part in leader election ({{ $labels.reason }})",
        description="{{ $labels.instance }} has been refused its leader Lease (reason {{ $labels.reason }}) for "
        f"{p.operator_down_for}: it is not ready and can never take over. Its pod's Warning Event "
        "LeaderElectionBlocked and its log name the Lease, the namespace and the missing RBAC.",
    )
    unknown_gpus = _ticket(
        p,
        UNKNOWN_GPUS,
        expr=f"max by (product) ({n.OP_UNKNOWN_GPU_NODES}) > 0\n",
        for_="1h",
        summary="GPU nodes of product {{ $labels.product }} match no accelerator",
        description="{{ $value }} node(s) label their GPUs {{ $labels.product }}, which no accelerator of the catalog "
        "matches: accelerator.type auto cannot use them. Add it under the chart's config.accelerators.",
    )
    return [reconcile_errors, election_blocked, unknown_gpus]


def alerting_rules(p: RuleParams) -> list[dict[str, Any]]:
    return [
        *(burn_alert(p, w) for w in BURN_WINDOWS),
        *(burn_alert(p, w, tpot=True) for w in BURN_WINDOWS),
        *_service_alerts(p),
        *_operator_alerts(p),
    ]


def scrape_rules(p: RuleParams) -> list[dict[str, Any]]:
    """Alerts on the operator's own scrape: only where it is configured (else absent() always fires)."""
    job = f'job="{p.operator_job}"'
    return [
        {
            "alert": OPERATOR_DOWN,
            "expr": f"absent({n.PROMETHEUS_UP}{{{job}}} == 1)\nor\nmax({n.OP_LEADER}{{{job}}}) == 0\n",
            "for": p.operator_down_for,
            "labels": {"severity": p.page_severity},
            "annotations": _annotations(
                p,
                OPERATOR_DOWN,
                "llama-operator is down or has no leader",
                f"For {p.operator_down_for} no replica of the operator ({job}) has been scraped up, or none "
                "has led: LlamaServices are neither reconciled nor autoscaled.",
            ),
        }
    ]


def activator_rules(p: RuleParams) -> list[dict[str, Any]]:
    """The activator's alerts: only with the activator deployed and scraped."""
    job = f'job="{p.activator_job}"'
    return [
        {
            "alert": ACTIVATOR_DOWN,
            "expr": f"absent({n.PROMETHEUS_UP}{{{job}}} == 1)\n",
            "for": p.operator_down_for,
            "labels": {"severity": p.page_severity},
            "annotations": _annotations(
                p,
                ACTIVATOR_DOWN,
                "the llama-operator activator is down",
                f"For {p.operator_down_for} no activator replica ({job}) has been scraped up: requests to "
                "LlamaServices at zero fail, and the operator keeps one replica of each instead.",
            ),
        },
        {
            "alert": ACTIVATION_TIMEOUTS,
            "expr": (f'sum by (job) (rate({n.ROUTER_REQUESTS}{{{job}, outcome="timed_out"}}[10m])) > 0\n'),
            "for": "10m",
            "labels": {"severity": p.ticket_severity},
            "annotations": _annotations(
                p,
                ACTIVATION_TIMEOUTS,
                "held requests time out before a replica is ready",
                "For 10m requests held by the activator have been answered 503 after their hold time: "
                "replicas take longer to start than activationTimeoutSeconds allows.",
            ),
        },
    ]


def rule_groups(p: RuleParams) -> list[dict[str, Any]]:
    return [
        {"name": "llama-operator.slo.recording", "rules": recording_rules()},
        {"name": "llama-operator.alerts", "rules": alerting_rules(p)},
        {"name": SCRAPE_GROUP, "rules": scrape_rules(p)},
        {"name": ACTIVATOR_GROUP, "rules": activator_rules(p)},
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
    "not_ready_for": "notReadyFor",
    "degraded_for": "degradedFor",
    "page_severity": "pageSeverity",
    "ticket_severity": "ticketSeverity",
}
_JOB_TOKEN = "HELMJOBNAME"
_ACTIVATOR_JOB_TOKEN = "HELMACTIVATORJOB"
_RUNBOOK_TOKEN = "HELMRUNBOOKURL"


def _token(field: str) -> str:
    return f"HELMVALUE{field.replace('_', '').upper()}"


# The PrometheusRule template around its groups: the chart's switch, its job names and metadata.
_CHART_HEADER = (
    "# Generated by `make monitoring` from operator/llama_operator/observability/rules.py: do not edit.\n"
    "{{- if .Values.prometheusRule.enabled }}\n"
    '{{- $job := .Values.prometheusRule.operatorJob | default (printf "%s-metrics" '
    '(include "llama-operator.fullname" .)) }}\n'
    '{{- $activatorJob := .Values.prometheusRule.activatorJob | default (printf "%s-activator" '
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
    "  groups:\n"
)


def render_chart_template() -> str:
    """templates/prometheusrule.yaml: the same rules, with the values filled in by Helm."""
    params = replace(
        default_params(),
        operator_job=_JOB_TOKEN,
        activator_job=_ACTIVATOR_JOB_TOKEN,
        runbook_url=_RUNBOOK_TOKEN,
        **{field: _token(field) for field in _HELM_VALUES},
    )
    # One dump per group: the groups that need a scrape the chart may not configure get a Helm condition.
    body = ""
    for group in rule_groups(params):
        dumped = _dump([group])
        condition = HELM_CONDITIONS.get(group["name"])
        body += f"HELMIF{group['name']}\n{dumped}HELMEND\n" if condition else dumped
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
    body = body.replace(_ACTIVATOR_JOB_TOKEN, "{{ $activatorJob }}")
    body = body.replace(_JOB_TOKEN, "{{ $job }}")
    for name, condition in HELM_CONDITIONS.items():
        body = body.replace(f"HELMIF{name}\n", f"{{{{- if {condition} }}}}\n")
    body = body.replace("HELMEND\n", "{{- end }}\n")
    leftover = re.findall(r"HELM[A-Z]+", body)
    if leftover:
        raise AssertionError(f"placeholders left in the PrometheusRule template: {sorted(set(leftover))}")
    indented = "".join(
        f"  {line}" if line.strip() and not line.startswith("{{-") else line
        for line in body.splitlines(keepends=True)
    )
    return f"{_CHART_HEADER}{indented}{{{{- end }}}}\n"
