"""The llama-bench command: simulate | bench | objectives | fleet-sim | fleet-drive | profile | replay."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata as package_metadata

import llama_operator
from llama_bench.fleetsim.commands import register as register_fleet_commands
from llama_bench.measure.commands import register as register_measure_commands
from llama_bench.sim.commands import register as register_simulator_commands
from llama_bench.sim.objectives import register as register_objectives_command
from llama_bench.sim.routingbench import register as register_routing_command
from llama_operator.cli import EXIT_INPUT_ERROR, EXIT_INTERNAL_ERROR, run_command


def package_version() -> str:
    """The installed distribution's version (the bench ships in llama-operator's, behind its `bench` extra)."""
    try:
        return package_metadata.version("llama-operator")
    except package_metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return llama_operator.__version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llama-bench",
        description=__doc__,
        epilog=f"Exit status: 0 done, {EXIT_INPUT_ERROR} the input is wrong (one line on stderr says why), "
        f"{EXIT_INTERNAL_ERROR} an internal error (a bug; --debug shows the traceback).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument(
        "--debug", action="store_true", help="on an internal error, print the traceback (for a bug report)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    register_simulator_commands(sub)
    register_fleet_commands(sub)
    register_measure_commands(sub)
    register_routing_command(sub)
    register_objectives_command(sub)
    return parser


# Subcommands that draw figures: without matplotlib they would run for minutes and fail at the first plot.
PLOTTING_COMMANDS = frozenset({"bench", "routing", "objectives"})
MISSING_PLOT_EXTRA = (
    "error: llama-bench {command} draws its figures with matplotlib, which the runtime does not install: "
    "pip install -e '.[bench]' (or make setup)\n"
)


def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401, PLC0415 - only whether it imports
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    # Every subcommand is strict: an unknown option is an error, as in `llama-operator` (but `run`).
    args = build_parser().parse_args(argv)
    if args.command in PLOTTING_COMMANDS and not has_matplotlib():
        sys.stderr.write(MISSING_PLOT_EXTRA.format(command=args.command))
        return EXIT_INPUT_ERROR
    return run_command(args)
