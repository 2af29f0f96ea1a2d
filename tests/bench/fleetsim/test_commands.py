"""The fleet-sim / fleet-drive command lines, the load file and the demo table."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from llama_bench.cli import build_parser
from llama_bench.fleetsim.commands import _load_file
from llama_bench.fleetsim.drive import HEADER, DriveRow, _replay_seconds, format_row, opening_load
from llama_bench.fleetsim.load import DEMO_LOAD, LoadSpec, cached_trace


def test_registered_in_the_cli() -> None:
    args = build_parser().parse_args(["fleet-sim", "--port", "9", "--rate", "2", "--accelerator", "a10g"])
    assert (args.port, args.rate, args.accelerator) == (9, 2.0, "a10g")
    drive = build_parser().parse_args(["fleet-drive", "chat", "-n", "team", "--sample", "0.1"])
    assert (drive.name, drive.namespace, drive.sample, drive.trace) == ("chat", "team", 0.1, "conversation")


def test_rate_and_load_file_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fleet-sim", "--rate", "2", "--load-file", "x.yaml"])
    assert "not allowed with" in capsys.readouterr().err


def test_load_file(tmp_path: Path) -> None:
    path = tmp_path / "load.yaml"
    path.write_text(
        "default: {rate: 1.5}\n"
        "services:\n"
        "  team/chat: {trace: conversation, speedup: 10, sample: 0.2}\n"
        "  team/code: {rate: 3, lengths: code}\n"
    )
    default, services = _load_file(path)
    assert default == LoadSpec(rate=1.5)
    assert services[("team", "chat")].speedup == 10.0
    assert services[("team", "code")].lengths == "code"
    path.write_text("services: {chat: {rate: 1}}\n")
    with pytest.raises(ValueError, match="<namespace>/<name>"):
        _load_file(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        _load_file(path)


def test_demo_load_and_table() -> None:
    # The bundled conversation trace lasts ~58 minutes: three minutes at speedup 20.
    assert 170 < _replay_seconds(DEMO_LOAD) < 180
    assert _replay_seconds(LoadSpec(rate=3.0)) == 60.0
    row = DriveRow(12.3, 8.25, 0.4567, None, 3, 2, 2, 1)
    line = format_row(row)
    assert line.split() == ["12", "8.2", "0.46", "-", "3", "2", "2", "1"]
    assert len(line) == len(HEADER)


def test_help_mentions_the_control_endpoint() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "PUT /load/<namespace>/<llamaservice>" in (sub.choices["fleet-sim"].description or "")


def test_warmup_offers_the_replays_opening_rate() -> None:
    first_minute = sum(1 for r in cached_trace("conversation").requests if r.arrival < 60.0)
    warm = opening_load(DEMO_LOAD)
    assert warm.rate == pytest.approx(first_minute * DEMO_LOAD.sample * DEMO_LOAD.speedup / 60.0)
    assert warm.lengths == "conversation" and warm.trace is None
    steady = LoadSpec(rate=4.0)
    assert opening_load(steady) is steady


def test_the_local_clusters_fleet_port_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCALCLUSTER_FLEET_PORT", raising=False)
    monkeypatch.setenv("LOCALCLUSTER_CLUSTER_JSON", str(tmp_path / "cluster.json"))
    (tmp_path / "cluster.json").write_text('{"fleet_port": 41234}')
    assert build_parser().parse_args(["fleet-drive", "chat"]).fleet_url == "http://127.0.0.1:41234"
    assert build_parser().parse_args(["fleet-sim"]).port == 41234
    monkeypatch.setenv("LOCALCLUSTER_FLEET_PORT", "40001")
    assert build_parser().parse_args(["fleet-sim"]).port == 40001


def test_drive_needs_a_simulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCALCLUSTER_FLEET_PORT", raising=False)
    monkeypatch.setenv("LOCALCLUSTER_CLUSTER_JSON", str(tmp_path / "absent.json"))
    args = build_parser().parse_args(["fleet-drive", "chat"])
    assert args.func(args) == 2
    assert "--fleet-url" in capsys.readouterr().err
