"""The llama-operator command: run | crd | plan | render | simulate | bench | fleet-sim | fleet-drive."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import traceback
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from llama_operator.api.crd import render_crd_yaml
from llama_operator.api.resource import InvalidSpecError, parse_llamaservice
from llama_operator.api.settings import Settings
from llama_operator.desired.objects import build_desired_state
from llama_operator.fleetsim.commands import register as register_fleet_commands
from llama_operator.planning.inventory import Inventory, inventory_from_nodes
from llama_operator.planning.planner import PlanningError
from llama_operator.reconcile.outcome import plan_llamaservice
from llama_operator.sim.commands import register as register_simulator_commands

EX_SOFTWARE = 70  # an internal error (sysexits.h), never the same code as "this input is invalid"
MAX_INPUT_BYTES = 16 << 20


class InputError(Exception):
    """A file that cannot be read as manifests: one line for the user, exit status 1."""


class _NoAliases(yaml.SafeDumper):
    """YAML without anchors and aliases (`&id001`): every object printed whole, as kubectl prints."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _read_text(path: str) -> tuple[str, str]:
    """(the text, how to name it in messages). `-` is standard input; a folder gives its *.yaml files."""
    if path == "-":
        raw, shown_as = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1), "<stdin>"
    else:
        p = Path(path)
        if p.is_dir():
            raise InputError(f"{path} is a folder; give one manifest file, or - to read standard input")
        try:
            with p.open("rb") as f:
                raw = f.read(MAX_INPUT_BYTES + 1)
        except OSError as err:
            raise InputError(f"{path}: {err.strerror or err}") from None
        shown_as = path
    if len(raw) > MAX_INPUT_BYTES:
        raise InputError(f"{shown_as}: larger than {MAX_INPUT_BYTES >> 20} MiB; is it a manifest?")
    try:
        return raw.decode("utf-8"), shown_as
    except UnicodeDecodeError as err:
        raise InputError(
            f"{shown_as}: not UTF-8 text (byte {err.start}); save the manifest as UTF-8"
        ) from None


def _load_documents(path: str) -> list[dict[str, Any]]:
    text, shown_as = _read_text(path)
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(f"{shown_as}:{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise InputError(f"{shown_as}: YAML nested too deeply to be a manifest") from None
    for number, doc in enumerate(docs, 1):
        if not isinstance(doc, dict):
            raise InputError(
                f"{shown_as}: YAML document {number} is not a mapping (a manifest has apiVersion, kind, ...)"
            )
    return docs


def _load_inventory(paths: Sequence[str] | None) -> Inventory | None:
    if not paths:
        return None
    nodes: list[dict[str, Any]] = []
    for entry in paths:
        p = Path(entry)
        files = sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")) if p.is_dir() else [p]
        for f in files:
            for doc in _load_documents(str(f)):
                items = doc.get("items") if doc.get("kind") == "List" else [doc]
                if not isinstance(items, list):
                    raise InputError(f"{f}: items of a List must be a list")
                nodes.extend(n for n in items if isinstance(n, dict) and n.get("kind") == "Node")
    return inventory_from_nodes(nodes)


def _llamaservices(path: str) -> list[dict[str, Any]]:
    docs = [d for d in _load_documents(path) if d.get("kind") == "LlamaService"]
    if not docs:
        raise InputError(f"{path}: no LlamaService found (kind: LlamaService)")
    return docs


def _with_uid(doc: dict[str, Any]) -> dict[str, Any]:
    # Offline rendering has no stored object; a stand-in uid keeps owner references well-formed.
    meta = {"namespace": "default", **(doc.get("metadata") or {})}
    meta.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, f"{meta['namespace']}/{meta['name']}")))
    return {**doc, "metadata": meta}


def cmd_crd(args: argparse.Namespace) -> int:
    sys.stdout.write(render_crd_yaml())
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    inventory = _load_inventory(args.nodes)
    results = []
    for doc in _llamaservices(args.file):
        parse_llamaservice(doc)
        _, plan = plan_llamaservice(doc, Settings(mig_strategy=args.mig_strategy), inventory)
        results.append(plan.model_dump(by_alias=True, mode="json"))
    out: Any = results[0] if len(results) == 1 else results
    if args.output == "json":
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(out, sort_keys=False))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    inventory = _load_inventory(args.nodes)
    settings = Settings(mig_strategy=args.mig_strategy)
    documents = []
    for doc in _llamaservices(args.file):
        parse_llamaservice(doc)
        svc, plan = plan_llamaservice(_with_uid(doc), settings, inventory)
        state = build_desired_state(svc, plan, settings, pod_monitor=args.pod_monitor)
        documents.extend(state.objects)
    sys.stdout.write(yaml.dump_all(documents, Dumper=_NoAliases, sort_keys=False, explicit_start=True))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from kopf.cli import main as kopf_main  # noqa: PLC0415 - only `run` pays for importing kopf

    kopf_args = ["run", "--module", "llama_operator.handlers", *args.kopf_args]
    scoped = ("-A", "--all-namespaces", "-n", "--namespace")
    if not any(a == s or a.startswith(f"{s}=") for a in args.kopf_args for s in scoped):
        kopf_args.append("--all-namespaces")
    kopf_main.main(args=kopf_args, prog_name="llama-operator", standalone_mode=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llama-operator", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run the operator (extra options go to `kopf run`)",
        description="Run the operator. Every other option goes to `kopf run`: --standalone, --verbose, "
        "--namespace=NS (repeatable) or --all-namespaces (the default), --liveness=URL.",
    )
    run.set_defaults(func=cmd_run)

    crd = sub.add_parser("crd", help="print the generated CustomResourceDefinition")
    crd.set_defaults(func=cmd_crd)

    for name, func, help_text in (
        ("plan", cmd_plan, "print the plan for a LlamaService manifest"),
        ("render", cmd_render, "print the Kubernetes objects for a LlamaService manifest"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument(
            "-f",
            "--file",
            required=True,
            help="a LlamaService manifest file (YAML, several documents allowed), or - to read standard input",
        )
        p.add_argument(
            "--nodes", action="append", help="node inventory: Node manifests (file or folder), repeatable"
        )
        p.add_argument("--mig-strategy", choices=["mixed", "single"], default="mixed")
        if name == "plan":
            p.add_argument("-o", "--output", choices=["json", "yaml"], default="json")
        else:
            p.add_argument(
                "--pod-monitor", action="store_true", help="render a PodMonitor (Prometheus Operator)"
            )
        p.set_defaults(func=func)

    register_simulator_commands(sub)
    register_fleet_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # `run` passes every option it does not know to `kopf run`; the other commands are strict.
    args, unknown = parser.parse_known_args(argv)
    if args.command == "run":
        args.kopf_args = unknown
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        code: int = args.func(args)
    except (InvalidSpecError, PlanningError, InputError) as err:
        sys.stderr.write(f"error: {_one_line(str(err))}\n")
        return 1
    except Exception as err:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(
            f"llama-operator: internal error: {type(err).__name__}: {_one_line(str(err))[:300]} "
            "(rerun with --debug for the traceback)\n"
        )
        return EX_SOFTWARE
    return code


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _version() -> str:
    try:
        return importlib.metadata.version("llama-operator")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
