"""The chart's alert rules under the real rule engine: `promtool check rules`, then `promtool test rules` on
synthetic series for each alert (firing and not), and the chart's PrometheusRule template rendering to
exactly the rules tested here.

promtool is built by the set-up step (`bash e2e/cluster.sh test-tools`; the same Prometheus version
as the local cluster's); without it these tests fail."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from llama_operator.observability import dashboard as d
from llama_operator.observability import rules as r
from support import repo_root

pytestmark = pytest.mark.beside_operators

NAMESPACE = "team-a"  # of the LlamaServices in every scenario
JOB = r.DEFAULT_OPERATOR_JOB


@pytest.fixture(scope="module")
def rule_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "llama-operator.rules.yaml"
    path.write_text(r.render_rule_file())
    return path


def _run(command: list[str | Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300, check=False)


def test_promtool_accepts_the_rules(promtool: Path, rule_file: Path) -> None:
    proc = _run([promtool, "check", "rules", rule_file])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in r.rule_groups(r.default_params()))} rules found" in (
        proc.stdout
    )


# ---- synthetic series -----------------------------------------------------------------------------------


def _labels(**labels: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def ttft_service(
    name: str, *, good: str, total: str, percentile: float = 95, slo_le: str = "0.5"
) -> list[dict[str, str]]:
    """vLLM's TTFT histogram of one replica (the SLO's bucket, a looser one that must not count, and the
    count) and the operator's SLO series for it. `good` and `total` are promtool series notations."""
    svc = {"namespace": NAMESPACE, "llamaservice": name}
    vllm = {**svc, "pod": f"{name}-0", "model_name": name}
    return [
        {"series": f"vllm:time_to_first_token_seconds_bucket{_labels(**vllm, le=slo_le)}", "values": good},
        # Every request is within 10 s: were the rules to read this bucket, nothing would ever burn.
        {"series": f"vllm:time_to_first_token_seconds_bucket{_labels(**vllm, le='10.0')}", "values": total},
        {"series": f"vllm:time_to_first_token_seconds_count{_labels(**vllm)}", "values": total},
        {"series": f"llama_operator_slo_ttft_bound_info{_labels(**svc, bound=slo_le)}", "values": "1+0x5000"},
        {
            "series": f"llama_operator_slo_objective_ratio{_labels(**svc)}",
            "values": f"{percentile / 100}+0x5000",
        },
    ]


def tpot_service(name: str, *, good: str, total: str, slo_le: str = "0.05") -> list[dict[str, str]]:
    """vLLM's inter-token latency histogram of one replica and the operator's TPOT bound for it."""
    svc = {"namespace": NAMESPACE, "llamaservice": name}
    vllm = {**svc, "pod": f"{name}-0", "model_name": name}
    return [
        {"series": f"vllm:inter_token_latency_seconds_bucket{_labels(**vllm, le=slo_le)}", "values": good},
        {"series": f"vllm:inter_token_latency_seconds_bucket{_labels(**vllm, le='1.0')}", "values": total},
        {"series": f"vllm:inter_token_latency_seconds_count{_labels(**vllm)}", "values": total},
        {"series": f"llama_operator_slo_tpot_bound_info{_labels(**svc, bound=slo_le)}", "values": "1+0x5000"},
    ]


def service_gauges(name: str, **gauges: str) -> list[dict[str, str]]:
    svc = _labels(namespace=NAMESPACE, llamaservice=name, job=JOB)
    return [{"series": f"llama_operator_{gauge}{svc}", "values": values} for gauge, values in gauges.items()]


def _rule(alert: str, window: str | None = None) -> dict[str, Any]:
    found = [
        rule
        for group in r.rule_groups(r.default_params())
        for rule in group["rules"]
        if rule.get("alert") == alert and (window is None or rule["labels"].get("window") == window)
    ]
    assert len(found) == 1, (alert, window)
    rule: dict[str, Any] = found[0]
    return rule


def expected_alert(alert: str, window: str | None = None, **labels: str) -> dict[str, Any]:
    """The alert as it should fire: the rule's labels plus the series', its annotations with the labels
    filled in (they use nothing but {{ $labels.x }})."""
    rule = _rule(alert, window)
    all_labels = {**rule["labels"], **labels}

    def fill(text: str) -> str:
        out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: all_labels[m.group(1)], text)
        assert "{{" not in out, f"{alert}: annotation uses more than $labels: {text}"
        return out

    return {
        "exp_labels": all_labels,
        "exp_annotations": {k: fill(v) for k, v in rule["annotations"].items()},
    }


def run_scenario(
    promtool: Path,
    rule_file: Path,
    tmp_path: Path,
    series: list[dict[str, str]],
    checks: list[tuple[str, str, list[dict[str, Any]]]],
) -> None:
    """One promtool test group: `series` sampled every minute, then each (time, alert, firing alerts)."""
    test = {
        "rule_files": [str(rule_file)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": at, "alertname": alert, "exp_alerts": firing}
                    for at, alert, firing in checks
                ],
            }
        ],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    proc = _run([promtool, "test", "rules", path])
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n--- test file:\n{path.read_text()}"


# ---- the TTFT burn-rate alerts --------------------------------------------------------------------------

# A healthy service beside the burning one in every scenario: 1 % of requests miss its p95 SLO (a 5 %
# budget), over the whole run, so no window ever burns it.
HEALTHY = ttft_service("healthy", good="0+99x5000", total="0+100x5000")
# And one without traffic: its ratios are NaN, which must never alert.
IDLE = ttft_service("idle", good="0+0x5000", total="0+0x5000")


def test_a_fast_burn_pages_on_the_1h_window_only(promtool: Path, rule_file: Path, tmp_path: Path) -> None:
    # A day within the SLO, then an hour where 5 of 6 requests miss it: 0.83 > 14.4 x 0.05 over 1h and 5m,
    # but the 6h (0.14 < 6 x 0.05), 1d and 3d ratios are still low.
    burning = ttft_service("chat", good="0+60x1440 86410+10x60", total="0+60x1500")
    page = expected_alert(r.BUDGET_BURN, "1h/5m", namespace=NAMESPACE, llamaservice="chat")
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        burning + HEALTHY + IDLE,
        [("1439m", r.BUDGET_BURN, []), ("1500m", r.BUDGET_BURN, [page])],
    )


def test_a_sustained_fast_burn_pages_on_both_windows_and_tickets(
    promtool: Path, rule_file: Path, tmp_path: Path
) -> None:
    # 5 of 6 requests miss the SLO from the start: after 6 h every window burns.
    burning = ttft_service("chat", good="0+10x400", total="0+60x400")
    svc = {"namespace": NAMESPACE, "llamaservice": "chat"}
    every = [expected_alert(r.BUDGET_BURN, f"{w.long}/{w.short}", **svc) for w in r.BURN_WINDOWS]
    run_scenario(promtool, rule_file, tmp_path, burning + HEALTHY, [("370m", r.BUDGET_BURN, every)])


def test_a_slow_burn_opens_a_ticket_and_does_not_page(
    promtool: Path, rule_file: Path, tmp_path: Path
) -> None:
    # 20 % of requests miss a p95 SLO for a day: 4x the budget. Over 3x (1d/2h) and 1x (3d/6h): tickets;
    # under 6x and 14.4x: no page.
    burning = ttft_service("chat", good="0+48x1500", total="0+60x1500")
    svc = {"namespace": NAMESPACE, "llamaservice": "chat"}
    tickets = [expected_alert(r.BUDGET_BURN, w, **svc) for w in ("1d/2h", "3d/6h")]
    run_scenario(promtool, rule_file, tmp_path, burning + HEALTHY + IDLE, [("1440m", r.BUDGET_BURN, tickets)])


def test_the_budget_is_the_services_own_percentile(promtool: Path, rule_file: Path, tmp_path: Path) -> None:
    # The same 3 % of requests too slow: within a p95 SLO's budget, 30x a p99.9 SLO's (every window).
    p95 = ttft_service("relaxed", good="0+97x100", total="0+100x100", percentile=95)
    p999 = ttft_service("strict", good="0+97x100", total="0+100x100", percentile=99.9)
    strict = [
        expected_alert(r.BUDGET_BURN, f"{w.long}/{w.short}", namespace=NAMESPACE, llamaservice="strict")
        for w in r.BURN_WINDOWS
    ]
    run_scenario(promtool, rule_file, tmp_path, p95 + p999, [("90m", r.BUDGET_BURN, strict)])


# ---- the TPOT burn-rate alerts --------------------------------------------------------------------------


def test_tpot_burns_page_for_a_service_with_a_tpot_objective(
    promtool: Path, rule_file: Path, tmp_path: Path
) -> None:
    # Its TTFT is fine, but 5 of 6 tokens are slower than its TPOT objective: every window burns. A service
    # with the same slow tokens and no TPOT objective (no bound series) is nothing to this alert.
    svc = {"namespace": NAMESPACE, "llamaservice": "chat"}
    chat = ttft_service("chat", good="0+60x400", total="0+60x400") + tpot_service(
        "chat", good="0+10x400", total="0+60x400"
    )
    no_objective = ttft_service("plain", good="0+60x400", total="0+60x400") + [
        s for s in tpot_service("plain", good="0+10x400", total="0+60x400") if "bound_info" not in s["series"]
    ]
    every = [expected_alert(r.TPOT_BUDGET_BURN, f"{w.long}/{w.short}", **svc) for w in r.BURN_WINDOWS]
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        chat + no_objective + HEALTHY,
        [("370m", r.TPOT_BUDGET_BURN, every), ("370m", r.BUDGET_BURN, [])],
    )


# ---- LlamaServiceNotReady, LlamaServiceDegraded ------------------------------------------------------------


def test_not_ready_and_degraded_fire_after_15_minutes(
    promtool: Path, rule_file: Path, tmp_path: Path
) -> None:
    series = [
        *service_gauges("down", llamaservice_ready="0+0x40", llamaservice_degraded="0+0x40"),
        # Not ready for 10 minutes (a rollout, a node drain), then ready again: never 15 in a row.
        *service_gauges("blip", llamaservice_ready="0+0x10 1+0x30", llamaservice_degraded="0+0x40"),
        *service_gauges("broken", llamaservice_ready="0+0x40", llamaservice_degraded="1+0x40"),
        *service_gauges("fine", llamaservice_ready="1+0x40", llamaservice_degraded="0+0x40"),
    ]
    not_ready = [
        expected_alert(r.NOT_READY, namespace=NAMESPACE, llamaservice=name) for name in ("broken", "down")
    ]
    degraded = expected_alert(r.DEGRADED, namespace=NAMESPACE, llamaservice="broken")
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        series,
        [
            ("14m", r.NOT_READY, []),
            ("14m", r.DEGRADED, []),
            ("20m", r.NOT_READY, not_ready),
            ("20m", r.DEGRADED, [degraded]),
        ],
    )


# ---- LlamaServiceScalingLimited -------------------------------------------------------------------------


def test_scaling_limited_fires_at_max_replicas_while_the_slo_is_missed(
    promtool: Path, rule_file: Path, tmp_path: Path
) -> None:
    series = [
        *service_gauges("at-max-missing", desired_replicas="4+0x40", max_replicas="4+0x40", slo_met="0+0x40"),
        *service_gauges("at-max-meeting", desired_replicas="4+0x40", max_replicas="4+0x40", slo_met="1+0x40"),
        *service_gauges("below-max", desired_replicas="3+0x40", max_replicas="4+0x40", slo_met="0+0x40"),
        # Missed the SLO at max for 10 minutes, then got a higher max: never 15 minutes in a row.
        *service_gauges("raised", desired_replicas="4+0x40", max_replicas="4+0x10 8+0x30", slo_met="0+0x40"),
    ]
    firing = expected_alert(r.SCALING_LIMITED, namespace=NAMESPACE, llamaservice="at-max-missing")
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        series,
        [
            ("14m", r.SCALING_LIMITED, []),
            ("16m", r.SCALING_LIMITED, [firing]),
            ("40m", r.SCALING_LIMITED, [firing]),
        ],
    )


# ---- LlamaServiceNoMetrics ------------------------------------------------------------------------------


def _waiting(name: str) -> dict[str, str]:
    return {
        "series": f"vllm:num_requests_waiting{_labels(namespace=NAMESPACE, llamaservice=name, pod=f'{name}-0')}",
        "values": "0+0x30",
    }


def test_no_metrics_fires_for_ready_replicas_without_signals(
    promtool: Path, rule_file: Path, tmp_path: Path
) -> None:
    series = [
        # The autoscaler has had no signals since the start (its own view).
        *service_gauges("blind", ready_replicas="2+0x30", signal_no_data_seconds="0+60x30"),
        _waiting("blind"),
        # The autoscaler has signals, but this Prometheus has no vLLM series of it (PodMonitor not selected).
        *service_gauges("unscraped", ready_replicas="2+0x30", signal_no_data_seconds="0+0x30"),
        # Healthy: signals, and series here.
        *service_gauges("fine", ready_replicas="2+0x30", signal_no_data_seconds="0+0x30"),
        _waiting("fine"),
        # No ready replica: nothing to measure yet.
        *service_gauges("starting", ready_replicas="0+0x30", signal_no_data_seconds="0+60x30"),
    ]
    blind = expected_alert(r.NO_METRICS, namespace=NAMESPACE, llamaservice="blind")
    unscraped = expected_alert(r.NO_METRICS, namespace=NAMESPACE, llamaservice="unscraped")
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        series,
        [("9m", r.NO_METRICS, []), ("12m", r.NO_METRICS, [blind, unscraped])],
    )


# ---- LlamaOperatorDown ----------------------------------------------------------------------------------


def _operator(pod: str, up: str, leader: str | None) -> list[dict[str, str]]:
    labels = _labels(job=JOB, instance=f"{pod}:8081", pod=pod)
    out = [{"series": f"up{labels}", "values": up}]
    if leader is not None:
        out.append({"series": f"llama_operator_leader{labels}", "values": leader})
    return out


@pytest.mark.parametrize(
    ("case", "series"),
    [
        # Scraped but failing (crash loop): up is 0.
        ("down", _operator("op-0", up="0+0x20", leader=None)),
        # Never scraped at all (no target): no up series.
        ("never scraped", []),
        # Two replicas up, both standby (a lost Lease, a stuck election): nobody acts.
        ("no leader", _operator("op-0", "1+0x20", "0+0x20") + _operator("op-1", "1+0x20", "0+0x20")),
    ],
)
def test_operator_down_fires(
    promtool: Path,
    rule_file: Path,
    tmp_path: Path,
    case: str,
    series: list[dict[str, str]],
) -> None:
    # Another scrape job's up series is nothing to this alert.
    other = [{"series": _labels_up("kubelet"), "values": "1+0x20"}]
    firing = expected_alert(r.OPERATOR_DOWN)
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        series + other,
        [("4m", r.OPERATOR_DOWN, []), ("6m", r.OPERATOR_DOWN, [firing])],
    )


def _labels_up(job: str) -> str:
    return f"up{_labels(job=job, instance='x:1')}"


def test_operator_down_is_quiet_with_a_leader_and_a_standby(
    promtool: Path, rule_file: Path, tmp_path: Path
) -> None:
    # The leader is up; then it dies and the standby takes over within a minute: no alert. Then the
    # standby stays alone without leading: the alert fires 5 minutes later.
    series = _operator("op-0", "1+0x10 0+0x20", "1+0x10 0+0x20") + _operator(
        "op-1", "1+0x30", "0+0x11 1+0x8 0+0x10"
    )
    firing = expected_alert(r.OPERATOR_DOWN)
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        series,
        [("10m", r.OPERATOR_DOWN, []), ("22m", r.OPERATOR_DOWN, []), ("27m", r.OPERATOR_DOWN, [firing])],
    )


# ---- LlamaOperatorLeaderElectionBlocked --------------------------------------------------------------


def test_a_replica_refused_its_lease_opens_a_ticket(promtool: Path, rule_file: Path, tmp_path: Path) -> None:
    labels = {"job": JOB, "instance": "op-1:8081", "reason": "Forbidden"}
    series = [
        {"series": f"llama_operator_leader_election_blocked{_labels(**labels)}", "values": "1+0x20"},
        # A replica refused once, then allowed (the Role was fixed within a minute): nothing.
        {
            "series": f"llama_operator_leader_election_blocked{_labels(**{**labels, 'instance': 'op-2:8081'})}",
            "values": "1 0+0x19",
        },
    ]
    firing = expected_alert(r.ELECTION_BLOCKED, **labels)
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        series,
        [("4m", r.ELECTION_BLOCKED, []), ("6m", r.ELECTION_BLOCKED, [firing])],
    )


# ---- LlamaOperatorReconcileErrors -----------------------------------------------------------------------


def test_reconcile_errors_fire_only_when_they_go_on(promtool: Path, rule_file: Path, tmp_path: Path) -> None:
    labels = {"job": JOB, "instance": "op-0:8081"}
    series = [
        {
            "series": f"llama_operator_reconcile_total{_labels(**labels, result='success')}",
            "values": "0+5x60",
        },
        # One error a minute for the first 40 minutes, then none.
        {
            "series": f"llama_operator_reconcile_total{_labels(**labels, result='error')}",
            "values": "0+1x40 40+0x20",
        },
    ]
    firing = expected_alert(r.RECONCILE_ERRORS, job=JOB)
    run_scenario(
        promtool,
        rule_file,
        tmp_path,
        series,
        [
            ("14m", r.RECONCILE_ERRORS, []),
            ("30m", r.RECONCILE_ERRORS, [firing]),
            ("55m", r.RECONCILE_ERRORS, []),
        ],
    )


# ---- the chart ------------------------------------------------------------------------------------------


def _helm_template(helm: Path, *values: str) -> list[dict[str, Any]]:
    proc = _run([helm, "template", "llama-operator", repo_root() / "charts" / "llama-operator", *values])
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def test_the_chart_renders_the_tested_rules(helm: Path) -> None:
    docs = _helm_template(
        helm,
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.additionalLabels.release=kps",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "activator.enabled=true",
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(r.render_rule_file())


def _without(spec: dict[str, Any], *groups: str) -> dict[str, Any]:
    return {"groups": [g for g in spec["groups"] if g["name"] not in groups]}


def test_no_rule_pages_for_a_scrape_the_chart_does_not_configure(helm: Path) -> None:
    """PrometheusRule without the ServiceMonitor: no absent(up{...}) rule (it would page for certain)."""
    docs = _helm_template(helm, "--set", "prometheusRule.enabled=true", "--set", "activator.enabled=true")
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert "absent(" not in yaml.safe_dump(rule["spec"])
    assert rule["spec"] == _without(yaml.safe_load(r.render_rule_file()), r.SCRAPE_GROUP, r.ACTIVATOR_GROUP)
    # Scraped by the chart: the operator's alert is there; the activator's only with the activator.
    docs = _helm_template(
        helm, "--set", "prometheusRule.enabled=true", "--set", "metrics.serviceMonitor.enabled=true"
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == _without(yaml.safe_load(r.render_rule_file()), r.ACTIVATOR_GROUP)


def test_the_chart_fills_in_its_values(helm: Path) -> None:
    values = {
        "operatorJob": "custom-job",
        "runbookUrl": "https://wiki.example.com/llama:runbook",
        "pageSeverity": "page",
        "ticketSeverity": "ticket",
        "scalingLimitedFor": "30m",
        "noMetricsFor": "20m",
        "operatorDownFor": "2m",
        "reconcileErrorsFor": "1h",
        "notReadyFor": "20m",
        "degradedFor": "30m",
    }
    sets = [arg for k, v in values.items() for arg in ("--set-string", f"prometheusRule.{k}={v}")]
    docs = _helm_template(
        helm, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.namespace=monitoring", *sets
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["namespace"] == "monitoring"
    params = r.RuleParams(
        operator_job="custom-job",
        activator_job="llama-operator-activator",
        runbook_url=values["runbookUrl"],
        page_severity="page",
        ticket_severity="ticket",
        scaling_limited_for="30m",
        no_metrics_for="20m",
        operator_down_for="2m",
        reconcile_errors_for="1h",
        not_ready_for="20m",
        degraded_for="30m",
    )
    # The operator's job given: its scrape alert is rendered; no activator, so none of its alerts.
    assert rule["spec"] == _without(yaml.safe_load(r.render_rule_file(params)), r.ACTIVATOR_GROUP)


def test_the_rules_are_off_by_default_and_the_dashboard_on(helm: Path) -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in _helm_template(helm)}
    assert not any(kind == "PrometheusRule" for kind, _ in kinds)
    assert ("ConfigMap", "llama-operator-dashboard") in kinds


# ---- the dashboard's queries on the real Prometheus ------------------------------------------------------

# What Grafana puts in place of its variables before it sends a query.
GRAFANA_VARIABLES = {"$namespace": ".*", "$llamaservice": ".*", "$__rate_interval": "1m", "$__range": "1h"}


def as_grafana_sends(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    inner = re.fullmatch(
        r"label_values\((.*), \w+\)", expr
    )  # a variable's query: Grafana asks for the series
    return inner.group(1) if inner else expr


@pytest.mark.e2e
def test_prometheus_runs_every_dashboard_query(cluster: Any) -> None:
    """Each panel, annotation and variable query parses and evaluates on the local cluster's Prometheus
    (the version the chart is tested with): a typo in PromQL, a bad grouping or matcher fails here."""
    failures = []
    for expr in d.expressions():
        sent = as_grafana_sends(expr)
        assert not re.search(r"\$[A-Za-z_]", sent), sent  # a variable left; $1 is label_replace's group
        url = f"{cluster.info.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': sent})}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                status = json.loads(response.read())["status"]
        except urllib.error.HTTPError as err:
            status = f"{err.code}: {err.read().decode()}"
        if status != "success":
            failures.append(f"{sent}\n  -> {status}")
    assert not failures, "\n".join(failures)
