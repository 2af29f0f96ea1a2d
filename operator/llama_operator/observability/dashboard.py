"""The Grafana dashboard: per LlamaService (variables namespace and llamaservice) the vLLM signals against
the SLO, replicas, GPUs and cost, the autoscaler's decisions as annotations; then the operator itself."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llama_operator.observability import names as n

DASHBOARD_FILE = "charts/llama-operator/dashboards/llama-operator.json"
DASHBOARD_UID = "llama-operator"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = f'{n.NS}=~"$namespace", {n.SVC}=~"$llamaservice"'
BY = n.BY_SERVICE
WHO = "{{namespace}}/{{llamaservice}}"
RATE = "$__rate_interval"


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 12
    # Series drawn as dashed reference lines (an SLO, a limit): matched by their legend's ending.
    references: tuple[str, ...] = field(default=())


def _max(metric: str) -> str:
    return f"max by ({BY}) ({metric}{{{SEL}}})"


def _quantiles(family: str, what: str) -> tuple[Query, ...]:
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({BY}, le) (rate({family}_bucket{{{SEL}}}[{RATE}])))",
            f"{WHO} p{round(q * 100)} {what}",
        )
        for q in (0.5, 0.95, 0.99)
    )


def slo_bound_as_le(info: str, selector: str = "") -> str:
    """The operator's SLO bound series with its `bound` copied into `le`, to join vLLM's histogram on."""
    return f'label_replace(max by ({BY}, bound) ({info}{selector}), "le", "$1", "bound", "(.*)")'


def _good_ratio(window: str, family: str = n.VLLM_TTFT, bound: str = n.OP_SLO_BOUND) -> str:
    """Share of requests (tokens, for TPOT) within the objective (the operator names the SLO's bucket)."""
    return (
        f"sum by ({BY}) (rate({family}_bucket{{{SEL}}}[{window}])"
        f" * on ({BY}, le) group_left () {slo_bound_as_le(bound, '{' + SEL + '}')})"
        f" / sum by ({BY}) (rate({family}_count{{{SEL}}}[{window}]))"
    )


def _burn_rate(window: str) -> str:
    """How many times faster than the objective allows the TTFT error budget burns over `window`."""
    return f"(1 - ({_good_ratio(window)})) / on ({BY}) (1 - {_max(n.OP_SLO_OBJECTIVE)})"


def _price_times(metric_expr: str) -> str:
    return f"{metric_expr} * on ({BY}) group_left () {_max(n.OP_GPU_PRICE)}"


SERVICE_PANELS = (
    Panel(
        "TTFT vs SLO",
        "Time to first token (queue time included) from vLLM's histogram, the percentile the autoscaler "
        "observed over its window, and the SLO (spec.autoscaling.slo.ttftSeconds).",
        (
            *_quantiles(n.VLLM_TTFT, "TTFT"),
            Query(_max(n.OP_TTFT_OBSERVED), f"{WHO} observed at the SLO percentile"),
            Query(_max(n.OP_SLO_TTFT), f"{WHO} SLO"),
        ),
        unit="s",
        references=(" SLO",),
    ),
    Panel(
        "TPOT (inter-token latency)",
        "Time per output token after the first, from vLLM's inter-token latency histogram, and the TPOT "
        "objective where the LlamaService has one (spec.autoscaling.slo.tpotSeconds).",
        (*_quantiles(n.VLLM_ITL, "TPOT"), Query(_max(n.OP_SLO_TPOT), f"{WHO} SLO")),
        unit="s",
        references=(" SLO",),
    ),
    Panel(
        "Requests within the TTFT SLO",
        "Share of requests whose TTFT was within the SLO's histogram bucket, against the objective "
        "(spec.autoscaling.slo.objective, else the operator's config.sloObjective). Below the objective the "
        "error budget is being spent.",
        (
            Query(_good_ratio(RATE), f"{WHO} within SLO"),
            Query(_good_ratio(RATE, n.VLLM_ITL, n.OP_TPOT_BOUND), f"{WHO} tokens within the TPOT SLO"),
            Query(_max(n.OP_SLO_OBJECTIVE), f"{WHO} objective"),
        ),
        unit="percentunit",
        references=(" objective",),
    ),
    Panel(
        "TTFT error budget burn rate (1h)",
        "How many times faster than allowed the error budget (1 - the objective) burns, over the last hour: "
        "1 spends it exactly over the objective's window (spec.autoscaling.slo.objectiveWindow); the page "
        "alerts fire at 14.4 (1h) and 6 (6h).",
        (Query(_burn_rate("1h"), f"{WHO} burn rate"),),
    ),
    Panel(
        "TTFT error budget: days it lasts at the 1h burn",
        "The objective's window (spec.autoscaling.slo.objectiveWindow) over the last hour's burn rate: the "
        "days a whole error budget would last if requests kept missing the TTFT objective as often as they "
        "did in the last hour. Empty while nothing misses it.",
        (
            Query(
                f"({_max(n.OP_SLO_WINDOW)} / 86400) / on ({BY}) ({_burn_rate('1h')})",
                f"{WHO} days",
            ),
            Query(f"{_max(n.OP_SLO_WINDOW)} / 86400", f"{WHO} objective window"),
        ),
        unit="d",
        references=(" objective window",),
    ),
    Panel(
        "Queue depth (waiting requests)",
        f"Requests waiting for a batch slot, all replicas ({n.VLLM_WAITING}).",
        (Query(f"sum by ({BY}) ({n.VLLM_WAITING}{{{SEL}}})", f"{WHO} waiting"),),
    ),
    Panel(
        "Running requests",
        f"Requests in the running batch, all replicas ({n.VLLM_RUNNING}).",
        (Query(f"sum by ({BY}) ({n.VLLM_RUNNING}{{{SEL}}})", f"{WHO} running"),),
    ),
    Panel(
        "KV-cache usage",
        "Share of the KV cache in use: mean and fullest replica. Near 100% requests are preempted.",
        (
            Query(f'avg by ({BY}) ({{__name__=~"{n.VLLM_KV_CACHE_ANY}", {SEL}}})', f"{WHO} mean"),
            Query(f'max by ({BY}) ({{__name__=~"{n.VLLM_KV_CACHE_ANY}", {SEL}}})', f"{WHO} fullest replica"),
        ),
        unit="percentunit",
    ),
    Panel(
        "Tokens/s",
        "Prompt (prefill) and generated tokens per second, all replicas.",
        (
            Query(f"sum by ({BY}) (rate({n.VLLM_PROMPT_TOKENS}{{{SEL}}}[{RATE}]))", f"{WHO} prompt"),
            Query(f"sum by ({BY}) (rate({n.VLLM_GENERATION_TOKENS}{{{SEL}}}[{RATE}]))", f"{WHO} generated"),
        ),
    ),
    Panel(
        "Request rate",
        "Requests per second that got their first token, and preemptions per second (KV cache full).",
        (
            Query(f"sum by ({BY}) (rate({n.VLLM_TTFT}_count{{{SEL}}}[{RATE}]))", f"{WHO} requests"),
            Query(f"sum by ({BY}) (rate({n.VLLM_PREEMPTIONS}{{{SEL}}}[{RATE}]))", f"{WHO} preemptions"),
        ),
        unit="reqps",
    ),
    Panel(
        "Replicas",
        "What the autoscaler wants (desired), the Deployment's replicas (current), those ready, those "
        "starting (current - ready), and the min/max bounds.",
        (
            Query(_max(n.OP_DESIRED), f"{WHO} desired"),
            Query(_max(n.OP_CURRENT), f"{WHO} current"),
            Query(_max(n.OP_READY), f"{WHO} ready"),
            Query(f"{_max(n.OP_CURRENT)} - {_max(n.OP_READY)}", f"{WHO} starting"),
            Query(_max(n.OP_MIN), f"{WHO} min"),
            Query(_max(n.OP_MAX), f"{WHO} max"),
        ),
        references=(" min", " max"),
    ),
    Panel(
        "GPUs held and cost per hour",
        "GPUs held (replicas x GPUs per replica) and what they cost per hour at the accelerator's price.",
        (
            Query(_max(n.OP_GPUS), f"{WHO} GPUs"),
            Query(_price_times(_max(n.OP_GPUS)), f"{WHO} cost per hour"),
        ),
    ),
    Panel(
        "GPU-hours and cost over the time range",
        "GPU-hours held during the dashboard's time range, and their cost at the accelerator's price.",
        (
            Query(
                f"sum by ({BY}) (increase({n.OP_GPU_SECONDS}{{{SEL}}}[$__range])) / 3600", f"{WHO} GPU-hours"
            ),
            Query(
                _price_times(f"sum by ({BY}) (increase({n.OP_GPU_SECONDS}{{{SEL}}}[$__range])) / 3600"),
                f"{WHO} cost",
            ),
        ),
        kind="stat",
    ),
    Panel(
        "Ready and Degraded",
        "1 while the LlamaService's Ready (Degraded) condition is True; the alerts fire after 15 minutes "
        "not Ready or Degraded.",
        (
            Query(_max(n.OP_SERVICE_READY), f"{WHO} ready"),
            Query(_max(n.OP_SERVICE_DEGRADED), f"{WHO} degraded"),
        ),
    ),
    Panel(
        "Activator: held requests and wakes",
        "Requests the activator holds while a LlamaService at zero wakes, and the wake time (first request "
        "held to its first token, p95). Empty without the activator (activator.enabled).",
        (
            Query(f"sum by ({BY}) ({n.ROUTER_HELD}{{{SEL}}})", f"{WHO} held"),
            Query(
                f"histogram_quantile(0.95, sum by ({BY}, le) "
                f"(rate({n.ROUTER_ACTIVATION_SECONDS}_bucket{{{SEL}}}[$__range])))",
                f"{WHO} wake p95 (s)",
            ),
        ),
    ),
)

OPERATOR_PANELS = (
    Panel(
        "Reconciles by result",
        "Reconciles of LlamaServices per second: success, requeue (waiting on something), error.",
        (Query(f"sum by (result) (rate({n.OP_RECONCILES}[{RATE}]))", "{{result}}"),),
        unit="ops",
    ),
    Panel(
        "Reconcile and autoscaler cycle latency",
        "Time one reconcile takes (p50, p99), and one autoscaler cycle over every LlamaService (p99).",
        (
            Query(
                f"histogram_quantile(0.5, sum by (le) (rate({n.OP_RECONCILE_SECONDS}_bucket[{RATE}])))",
                "reconcile p50",
            ),
            Query(
                f"histogram_quantile(0.99, sum by (le) (rate({n.OP_RECONCILE_SECONDS}_bucket[{RATE}])))",
                "reconcile p99",
            ),
            Query(
                f"histogram_quantile(0.99, sum by (le) (rate({n.OP_CYCLE_SECONDS}_bucket[{RATE}])))",
                "autoscaler cycle p99",
            ),
        ),
        unit="s",
    ),
    Panel(
        "API errors and Prometheus errors",
        "Requests the API server refused or failed (by kind and HTTP code), and autoscaler cycles that could "
        "not read Prometheus.",
        (
            Query(f"sum by (kind, code) (rate({n.OP_API_ERRORS}[{RATE}]))", "API {{kind}} {{code}}"),
            Query(f"sum (rate({n.OP_PROMETHEUS_ERRORS}[{RATE}]))", "Prometheus"),
        ),
        unit="ops",
    ),
    Panel(
        "Writes to the API server",
        "Object writes per second, by kind.",
        (Query(f"sum by (kind) (rate({n.OP_WRITES}[{RATE}]))", "{{kind}}"),),
        unit="ops",
    ),
    Panel(
        "Work queue depth",
        "LlamaServices waiting to be reconciled, per operator replica.",
        (Query(f"max by (instance) ({n.OP_QUEUE_DEPTH})", "{{instance}}"),),
    ),
    Panel(
        "Leader",
        "1 for the replica that leads (acts), 0 for standbys. No 1 at all: nothing is reconciled.",
        (
            Query(f"max by (instance) ({n.OP_LEADER})", "{{instance}}"),
            Query(f"max by (version) ({n.OP_INFO})", "version {{version}}"),
        ),
    ),
    Panel(
        "Activator requests by outcome",
        "The activator's requests per second by outcome (held_forwarded, timed_out: 503 after the hold, "
        "rejected by a limit...). Empty without the activator.",
        (Query(f"sum by (outcome) (rate({n.ROUTER_REQUESTS}[{RATE}]))", "{{outcome}}"),),
        unit="reqps",
    ),
    Panel(
        "GPU nodes the catalog does not know",
        "Nodes whose nvidia.com/gpu.product matches no accelerator (add it under config.accelerators): "
        "accelerator.type auto cannot use them.",
        (Query(f"max by (product) ({n.OP_UNKNOWN_GPU_NODES})", "{{product}}"),),
    ),
    Panel(
        "Operator memory and CPU",
        "Resident memory and CPU of each operator replica (process_* metrics).",
        (
            # The operator's targets are those exporting its info series, whatever the job is called.
            Query(
                f"process_resident_memory_bytes * on (job, instance) group_left () {n.OP_INFO}",
                "{{instance}} RSS",
            ),
            Query(
                f"rate(process_cpu_seconds_total[{RATE}]) * on (job, instance) group_left () {n.OP_INFO}",
                "{{instance}} CPU (cores)",
            ),
        ),
    ),
    Panel(
        "Plan refusals by reason",
        "LlamaServices the planner refused (no fitting accelerator, bad input...), per condition reason.",
        (Query(f"sum by (reason) (increase({n.OP_PLAN_REFUSALS}[{RATE}]))", "{{reason}}"),),
    ),
)

DECISIONS_ANNOTATION = Query(
    f"sum by ({BY}, direction) (changes({n.OP_DECISIONS}{{{SEL}}}[1m])) > 0",
    "scaled {{direction}}: {{namespace}}/{{llamaservice}}",
)


def _panel_json(panel: Panel, panel_id: int, x: int, y: int, height: int) -> dict[str, Any]:
    refs = [chr(ord("A") + i) for i in range(len(panel.queries))]
    out: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": height},
        "targets": [
            {"refId": ref, "datasource": DATASOURCE, "expr": q.expr, "legendFormat": q.legend}
            for ref, q in zip(refs, panel.queries, strict=True)
        ],
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
    }
    if panel.kind == "stat":
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "textMode": "value_and_name"}
    for suffix in panel.references:
        out["fieldConfig"]["overrides"].append(
            {
                "matcher": {"id": "byRegexp", "options": f".*{suffix}$"},
                "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}],
            }
        )
    return out


def _row(title: str, panel_id: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
        "panels": [],
    }


def _layout(rows: list[tuple[str, tuple[Panel, ...]]], height: int = 8) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    panel_id, y = 1, 0
    for title, panels in rows:
        out.append(_row(title, panel_id, y))
        panel_id, y, x = panel_id + 1, y + 1, 0
        for panel in panels:
            if x + panel.width > 24:
                x, y = 0, y + height
            out.append(_panel_json(panel, panel_id, x, y, height))
            panel_id, x = panel_id + 1, x + panel.width
        y += height
    return out


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,  # on time range change: new LlamaServices appear
        "multi": True,
        "includeAll": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


# Grafana's own annotation and the autoscaler's decisions, marked on every time panel.
ANNOTATIONS: dict[str, Any] = {
    "list": [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        },
        {
            "name": "Autoscaler decisions",
            "datasource": DATASOURCE,
            "enable": True,
            "iconColor": "orange",
            "expr": DECISIONS_ANNOTATION.expr,
            "step": "1m",
            "titleFormat": DECISIONS_ANNOTATION.legend,
            "textFormat": "the autoscaler changed the replica count",
            "tagKeys": "direction",
            "useValueForTime": False,
        },
    ]
}


def dashboard() -> dict[str, Any]:
    # `up` of the vLLM targets carries both labels even while a replica is down or has served nothing.
    scraped = f'{n.PROMETHEUS_UP}{{{n.SVC}!=""}}'
    return {
        "uid": DASHBOARD_UID,
        "title": "llama-operator",
        "description": "LlamaServices against their TTFT SLO, their replicas and GPU cost; the operator's health.",
        "tags": ["llama-operator", "vllm", "slo"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                _variable("namespace", "Namespace", f"label_values({scraped}, {n.NS})"),
                _variable(
                    "llamaservice",
                    "LlamaService",
                    f'label_values({n.PROMETHEUS_UP}{{{n.SVC}!="", {n.NS}=~"$namespace"}}, {n.SVC})',
                ),
            ]
        },
        "annotations": ANNOTATIONS,
        "panels": _layout([("LlamaService", SERVICE_PANELS), ("Operator", OPERATOR_PANELS)]),
    }


def render_dashboard() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def expressions() -> list[str]:
    """Every PromQL expression the dashboard runs (panels, annotations, variables)."""
    board = dashboard()
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in board["annotations"]["list"] if "expr" in a]
    exprs += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    return exprs
