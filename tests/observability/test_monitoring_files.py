"""The dashboard and the alert rules: the chart's files are what the generator writes, every metric they
read is one the operator exports, the dashboard is well formed, and every alert has its runbook section."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from llama_operator.api.chart_values import RUNBOOK_URL
from llama_operator.infra.metrics import Holding, OperatorMetrics, ServiceObservation, exported_names
from llama_operator.observability import dashboard as d
from llama_operator.observability import names, usage
from llama_operator.observability import rules as r
from tests.docs.test_links import anchors

REPO = Path(__file__).resolve().parents[2]


def used_names() -> set[str]:
    return usage.series_names()


def test_the_committed_dashboard_is_the_generated_one() -> None:
    committed = (REPO / d.DASHBOARD_FILE).read_text()
    assert committed == d.render_dashboard(), f"{d.DASHBOARD_FILE} is stale: run `make monitoring`"


def test_the_committed_rule_template_is_the_generated_one() -> None:
    committed = (REPO / r.CHART_RULE_TEMPLATE_FILE).read_text()
    assert committed == r.render_chart_template(), (
        f"{r.CHART_RULE_TEMPLATE_FILE} is stale: run `make monitoring`"
    )


def exposed_operator_series() -> set[str]:
    """Sample names a real OperatorMetrics exposes once every metric has been touched."""
    metrics = OperatorMetrics(version="test")
    metrics.observe(
        ServiceObservation(
            namespace="team-a",
            name="chat",
            desired_replicas=3,
            current_replicas=2,
            ready_replicas=2,
            min_replicas=1,
            max_replicas=4,
            ttft_seconds=0.4,
            slo_ttft_seconds=0.5,
            slo_objective=0.99,
            slo_objective_window_seconds=28 * 86400.0,
            slo_met=True,
            no_data_seconds=0.0,
            slo_tpot_seconds=0.05,
        )
    )
    metrics.hold([Holding("team-a", "chat", 2, 0.5)], now=0.0)
    metrics.service_state("team-a", "chat", ready=True, degraded=False)
    metrics.unknown_gpus({"NVIDIA-Future": 1})
    metrics.leader_election_blocked.labels(reason="Forbidden").set(1)
    metrics.reconciled("success", 0.01)
    metrics.wrote("Deployment")
    metrics.api_error("Deployment", 409)
    metrics.plan_refused("NoFit")
    metrics.scaled("team-a", "chat", current=2, replicas=3)
    metrics.prometheus_errors.inc()
    metrics.cycle_seconds.observe(0.1)
    text = metrics.exposition().decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_every_operator_series_used_is_one_the_operator_exports() -> None:
    exposed = exposed_operator_series()
    used = {name for name in used_names() if name.startswith("llama_operator_")}
    assert used, "the dashboard and rules read no operator series?"
    assert used - exposed == set(), f"not exported by infra/metrics.py: {sorted(used - exposed)}"


def test_every_operator_name_constant_is_exported() -> None:
    # Every family the registry defines, with samples or not (an optional gauge may have none yet).
    exposed = set(exported_names(OperatorMetrics().registry))
    constants = {v for k, v in vars(names).items() if k.startswith("OP_")}
    # Histograms are named by family: their series add _bucket/_sum/_count.
    missing = {c for c in constants if c not in exposed and f"{c}_bucket" not in exposed}
    assert not missing, f"names.py spells names infra/metrics.py does not export: {sorted(missing)}"


def test_every_vllm_name_used_is_spelled_in_names() -> None:
    """The real-vLLM test (e2e/vllm/test_vllm_real.py) checks names.py against a server's /metrics."""
    spelled = {v for k, v in vars(names).items() if k.startswith("VLLM_") and isinstance(v, str)}
    spelled |= {"vllm:" + part.removeprefix("vllm:") for part in names.VLLM_KV_CACHE_ANY.split("|")}
    used = {
        name.removesuffix("_bucket").removesuffix("_count")
        for name in used_names()
        if name.startswith("vllm:")
    }
    assert used and used <= spelled, sorted(used - spelled)


# ---- the dashboard ---------------------------------------------------------------------------------------


def panels() -> list[dict[str, Any]]:
    return [p for p in d.dashboard()["panels"] if p["type"] != "row"]


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    board = d.dashboard()["panels"]
    assert len({p["id"] for p in board}) == len(board)
    cells: dict[tuple[int, int], str] = {}
    for p in board:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_every_variable_a_query_uses_is_defined() -> None:
    board = d.dashboard()
    defined = {v["name"] for v in board["templating"]["list"]} | {"__rate_interval", "__range", "__interval"}
    for expr in d.expressions():
        used = set(re.findall(r"\$([A-Za-z_]\w*)", expr))  # not $1: label_replace's group
        assert used <= defined, (expr, used - defined)
    for p in panels():
        assert p["targets"], p["title"]
        assert p["datasource"]["uid"] == "${datasource}"


def test_per_service_panels_select_by_both_variables() -> None:
    service_titles = {p.title for p in d.SERVICE_PANELS}
    for p in panels():
        if p["title"] in service_titles:
            for t in p["targets"]:
                assert '=~"$namespace"' in t["expr"] and '=~"$llamaservice"' in t["expr"], t["expr"]


@pytest.mark.parametrize(
    "title",
    [
        "TTFT vs SLO",
        "TPOT (inter-token latency)",
        "Queue depth (waiting requests)",
        "Running requests",
        "KV-cache usage",
        "Tokens/s",
        "Replicas",
        "GPUs held and cost per hour",
        "GPU-hours and cost over the time range",
        "Reconciles by result",
        "Leader",
    ],
)
def test_the_dashboard_has_the_panel(title: str) -> None:
    assert title in {p["title"] for p in panels()}


def test_autoscaler_decisions_are_annotations() -> None:
    annotations = d.dashboard()["annotations"]["list"]
    (decisions,) = [a for a in annotations if a["name"] == "Autoscaler decisions"]
    assert names.OP_DECISIONS in decisions["expr"]


def test_the_dashboard_is_json_grafana_can_read() -> None:
    board = json.loads((REPO / d.DASHBOARD_FILE).read_text())
    assert board["uid"] == d.DASHBOARD_UID and board["schemaVersion"] >= 36


# ---- the rules -------------------------------------------------------------------------------------------


def test_every_alert_links_its_runbook_section() -> None:
    sections = anchors(REPO / "docs" / "runbook.md")
    alerts = [rule for g in r.rule_groups(r.default_params()) for rule in g["rules"] if "alert" in rule]
    assert {a["alert"] for a in alerts} == set(r.ALERTS)
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == RUNBOOK_URL
        assert anchor in sections, f"docs/runbook.md has no section for {alert['alert']} (#{anchor})"
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_the_burn_windows_are_the_sre_workbooks() -> None:
    pairs = {(w.long, w.short, w.factor, w.pages) for w in r.BURN_WINDOWS}
    assert pairs == {
        ("1h", "5m", 14.4, True),
        ("6h", "30m", 6, True),
        ("1d", "2h", 3, False),
        ("3d", "6h", 1, False),
    }
    recorded = {rule["record"] for rule in r.recording_rules()}
    for w in r.BURN_WINDOWS:
        assert (
            r.BAD_RATIO.format(window=w.long) in recorded and r.BAD_RATIO.format(window=w.short) in recorded
        )


def test_the_alerts_and_the_dashboard_read_the_services_own_objective() -> None:
    """One objective per service (spec.autoscaling.slo.objective, exported by the operator): the burn-rate
    alerts' error budget and the dashboard's attainment, burn-rate and budget panels all read that series,
    and the budget panel the service's own objectiveWindow; no rule or panel states an objective of its own."""
    (budget,) = [rule for rule in r.recording_rules() if rule.get("record") == r.ERROR_BUDGET]
    assert budget["expr"].strip() == f"1 - max by ({names.BY_SERVICE}) ({names.OP_SLO_OBJECTIVE})"
    for alert in r.alerting_rules(r.default_params()):
        if alert["alert"] in (r.BUDGET_BURN, r.TPOT_BUDGET_BURN):
            assert (
                r.ERROR_BUDGET in alert["expr"] and "objective allows" in alert["annotations"]["description"]
            )
    by_title = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels()}
    for title in ("Requests within the TTFT SLO", "TTFT error budget burn rate (1h)"):
        assert names.OP_SLO_OBJECTIVE in by_title[title], title
    lasts = by_title["TTFT error budget: days it lasts at the 1h burn"]
    assert names.OP_SLO_OBJECTIVE in lasts and names.OP_SLO_WINDOW in lasts
    budget_panels = [
        lasts,
        by_title["Requests within the TTFT SLO"],
        by_title["TTFT error budget burn rate (1h)"],
    ]
    assert not re.search(r"0\.9[59]\b", " ".join(budget_panels))


def test_the_rule_file_is_yaml_of_the_generated_groups() -> None:
    assert yaml.safe_load(r.render_rule_file()) == {"groups": r.rule_groups(r.default_params())}


def test_tpot_burn_alerts_sit_beside_the_ttft_ones() -> None:
    alerts = r.alerting_rules(r.default_params())
    ttft = [a["labels"]["window"] for a in alerts if a["alert"] == r.BUDGET_BURN]
    tpot = [a for a in alerts if a["alert"] == r.TPOT_BUDGET_BURN]
    assert [a["labels"]["window"] for a in tpot] == ttft
    recorded = {rule["record"] for rule in r.recording_rules()}
    for a in tpot:
        assert r.TPOT_BAD_RATIO.split("{")[0] in a["expr"]
    assert {r.TPOT_BAD_RATIO.format(window=w) for w in r.WINDOWS} <= recorded


def test_no_operator_series_poses_as_a_histogram() -> None:
    """An `le` label or a _bucket name belongs to histograms only (promtool check metrics says so)."""
    metrics = OperatorMetrics()
    metrics.observe(
        ServiceObservation(
            "team-a", "chat", 1, 1, 1, 1, 2, 0.4, 0.5, 0.99, 28 * 86400.0, True, 0.0, slo_tpot_seconds=0.05
        )
    )
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if family.type != "histogram":
                assert "le" not in sample.labels and not sample.name.endswith("_bucket"), sample
