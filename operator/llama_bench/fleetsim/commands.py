"""The `fleet-sim` and `fleet-drive` subcommands (the CLI module wires them in with `register`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import ValidationError

from llama_bench.fleetsim.load import DEMO_LOAD, LoadSpec, check
from llama_bench.sim.accelerators import ACCELERATORS, MODELS

log = logging.getLogger(__name__)


def local_cluster_fleet_port() -> int:
    """The fleet port the local test cluster reserved: $LOCALCLUSTER_FLEET_PORT, else the `fleet_port` of
    $LOCALCLUSTER_CLUSTER_JSON or ./.cluster/cluster.json (e2e/cluster.sh writes both); 0 when none."""
    if os.environ.get("LOCALCLUSTER_FLEET_PORT"):
        return int(os.environ["LOCALCLUSTER_FLEET_PORT"])
    path = Path(os.environ.get("LOCALCLUSTER_CLUSTER_JSON") or Path(".cluster") / "cluster.json")
    try:
        return int(json.loads(path.read_text()).get("fleet_port") or 0)
    except (OSError, ValueError, AttributeError):
        return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `fleet-sim` and `fleet-drive` to the CLI's subparsers."""
    sim = subparsers.add_parser(
        "fleet-sim",
        help="simulate vLLM replicas for the pods of LlamaServices and serve their metrics",
        description="Run one simulated vLLM replica per Ready pod of every LlamaService (pods kwok runs), "
        "offer them a load, and serve each pod's metrics at /pods/<namespace>/<pod>/metrics with "
        "vLLM's names, for Prometheus. Control: PUT /load/<namespace>/<llamaservice> "
        '{"rate": 5, "prompt_tokens": 1000, "output_tokens": 100}, GET /state.',
    )
    sim.add_argument(
        "--port",
        type=int,
        default=local_cluster_fleet_port(),
        help="port to listen on (default: the local cluster's fleet port, else any free one)",
    )
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: $KUBECONFIG")
    sim.add_argument(
        "--accelerator",
        default="auto",
        choices=["auto", *sorted(ACCELERATORS)],
        help="replica hardware; auto (default): each LlamaService's plan, t4 where it names none simulated",
    )
    sim.add_argument(
        "--model",
        default="auto",
        choices=["auto", *sorted(MODELS)],
        help="model architecture; auto (default): from each LlamaService's model name, else llama-3.2-1b",
    )
    load = sim.add_mutually_exclusive_group()
    load.add_argument(
        "--load-file",
        type=Path,
        help='JSON or YAML: {"default": LOAD, "services": {"<namespace>/<name>": LOAD}}, LOAD as for PUT /load',
    )
    load.add_argument("--rate", type=float, help="requests/s offered to every LlamaService (Poisson)")
    sim.add_argument("--prompt-tokens", type=int, default=1000, help="with --rate (default 1000)")
    sim.add_argument("--output-tokens", type=int, default=100, help="with --rate (default 100)")
    sim.add_argument("--poll-interval", type=float, default=1.0, help="seconds between pod listings")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument(
        "--hardware-speed",
        type=float,
        default=1.0,
        help="replicas this many times as fast as the catalog's step model says (default 1): what the "
        "operator's step calibration measures, and re-plans the engine for where faster",
    )
    sim.add_argument("--verbose", action="store_true", help="log every HTTP request")
    sim.set_defaults(func=run_fleet_sim)

    drive_parser = subparsers.add_parser(
        "fleet-drive",
        help="replay a trace through a running fleet-sim and print the replicas following it",
        description="Set a LlamaService's load in a running fleet-sim (default: the conversation trace, "
        "an hour in three minutes, thinned to ~5-10 req/s) and print, every few seconds, the offered "
        "rate, the TTFT delivered and observed, the queue, and the desired and ready replicas.",
    )
    drive_parser.add_argument("name", help="LlamaService name")
    drive_parser.add_argument("-n", "--namespace", default="default")
    drive_parser.add_argument(
        "--fleet-url",
        default=f"http://127.0.0.1:{local_cluster_fleet_port()}",
        help="the simulator (default: the local cluster's fleet port on 127.0.0.1)",
    )
    drive_parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    drive_parser.add_argument("--trace", default=DEMO_LOAD.trace, help="bundled trace name or CSV path")
    drive_parser.add_argument("--offset", type=float, default=0.0, help="trace seconds skipped")
    drive_parser.add_argument("--duration", type=float, help="trace seconds replayed (default: all)")
    drive_parser.add_argument("--speedup", type=float, default=DEMO_LOAD.speedup)
    drive_parser.add_argument("--sample", type=float, default=DEMO_LOAD.sample)
    drive_parser.add_argument("--every", type=float, default=5.0, help="seconds between rows")
    drive_parser.add_argument(
        "--warmup", type=float, default=30.0, help="seconds of the replay's opening rate first (default 30)"
    )
    drive_parser.add_argument("--seconds", type=float, help="how long (default: the replay's length)")
    drive_parser.set_defaults(func=run_fleet_drive)


def _load_file(path: Path) -> tuple[LoadSpec | None, dict[tuple[str, str], LoadSpec]]:
    data: Any = yaml.safe_load(path.read_text())  # JSON is YAML
    if not isinstance(data, dict) or not set(data) <= {"default", "services"}:
        raise ValueError(f"{path}: expected a mapping with 'default' and/or 'services'")
    default = LoadSpec.model_validate(data["default"]) if data.get("default") is not None else None
    services: dict[tuple[str, str], LoadSpec] = {}
    for key, value in (data.get("services") or {}).items():
        namespace, sep, name = str(key).partition("/")
        if not sep or not namespace or not name:
            raise ValueError(f"{path}: service keys are <namespace>/<name>, got {key!r}")
        services[(namespace, name)] = LoadSpec.model_validate(value)
    for spec in (default, *services.values()):
        if spec is not None:
            check(spec)
    return default, services


def run_fleet_sim(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        services: dict[tuple[str, str], LoadSpec] = {}
        default: LoadSpec | None = None
        if args.load_file is not None:
            default, services = _load_file(args.load_file)
        elif args.rate is not None:
            default = LoadSpec(
                rate=args.rate, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens
            )
    except (ValidationError, ValueError) as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    # Imported here: every other subcommand would pay ~3 s for the Kubernetes client.
    from llama_bench.fleetsim.engine import FleetEngine  # noqa: PLC0415
    from llama_bench.fleetsim.kube import ClusterReader  # noqa: PLC0415
    from llama_bench.fleetsim.server import FleetSimulator  # noqa: PLC0415

    engine = FleetEngine(
        accelerator=None if args.accelerator == "auto" else args.accelerator,
        model=None if args.model == "auto" else args.model,
        default_load=default,
        seed=args.seed,
        hardware_speed=args.hardware_speed,
    )
    simulator = FleetSimulator(
        engine,
        ClusterReader(args.kubeconfig),
        host=args.host,
        port=args.port,
        poll_interval=args.poll_interval,
    )
    for key, spec in services.items():
        simulator.set_load(key[0], key[1], spec)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        simulator.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    simulator.start()
    log.info("fleet simulator listening on http://%s:%d", args.host, simulator.port)
    while not simulator.wait(timeout=1.0):
        pass
    log.info("stopping")
    simulator.stop()
    return 0


def run_fleet_drive(args: argparse.Namespace) -> int:
    from llama_bench.fleetsim.drive import drive  # noqa: PLC0415 - see run_fleet_sim

    if not urlsplit(args.fleet_url).port:
        sys.stderr.write("error: no simulator to drive: give --fleet-url (no local cluster found)\n")
        return 2
    load = LoadSpec(
        trace=args.trace,
        offset=args.offset,
        duration=args.duration,
        speedup=args.speedup,
        sample=args.sample,
        seed=DEMO_LOAD.seed,
    )
    check(load)
    drive(
        args.fleet_url,
        args.namespace,
        args.name,
        load,
        seconds=args.seconds,
        warmup=args.warmup,
        every=args.every,
        kubeconfig=args.kubeconfig,
    )
    return 0
