"""The llama-operator command: run | crd | plan | render | router | activator.

The benchmark and simulation commands are `llama-bench`'s (the `llama_bench` package)."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import traceback
import uuid
from collections.abc import Iterator, Sequence
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any, NoReturn, get_args

import yaml

import llama_operator
from llama_operator.api.crd import render_crd_yaml
from llama_operator.api.resource import InvalidSpecError, parse_llamaservice, shown
from llama_operator.api.settings import PlatformName, Settings
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.inventory import Inventory, inventory_from_nodes
from llama_operator.planning.provisioning import is_nodepool
from llama_operator.reconcile.outcome import plan_llamaservice, planning_config
from llama_operator.router.commands import register_router_command

# Exit statuses: 1 for anything wrong with what the user gave (a plan that cannot work, a manifest or a
# file that cannot be read), 70 (sysexits EX_SOFTWARE) for a bug of ours, so that scripts tell them apart.
EXIT_INPUT_ERROR = 1
EXIT_INTERNAL_ERROR = 70
EXIT_INTERRUPTED = 130
INTERNAL_MESSAGE_LENGTH = 300

STDIN = "-"
STDIN_NAME = "<stdin>"
# The files `-f DIR` and `--nodes DIR` read, as `kubectl apply -f DIR` does (not recursing).
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# Manifests are a few levels deep; a limit far below Python's recursion limit turns a hostile nesting
# into an error that names the line instead of a RecursionError.
MAX_NESTING = 100
# Aliases may repeat nodes, not multiply them ("billion laughs"). Like go-yaml's guard (kubectl's YAML
# library), in a simpler form: a document may expand to 10x its own nodes, and always to 400,000.
ALIAS_EXPANSION_ALLOWANCE = 400_000
ALIAS_EXPANSION_RATIO = 10
# Input files are manifests and node lists: the API server takes at most 3 MiB per request (etcd keeps objects
# of at most 1.5 MiB). A file above this is refused before it is parsed (a 26 MB manifest took 14 s and
# 331 MiB), and `-f /dev/zero` ends at the cap instead of in a MemoryError.
MAX_INPUT_BYTES = 8 * 2**20
# Kubernetes holds integers in 64 bits; a longer literal is refused before Python converts it (int() of more
# than 4,300 digits raises ValueError, and converting a long one costs quadratic time).
MAX_INTEGER_CHARACTERS = 24
INT64 = range(-(2**63), 2**63)


class InputError(Exception):
    """A file the command was given cannot be read as manifests; the message is one line naming it."""


def _package_version() -> str:
    try:
        return package_metadata.version("llama-operator")
    except package_metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return llama_operator.__version__


class _ManifestLoader(yaml.SafeLoader):
    """YAML as kubectl reads it: safe tags, timestamps left as strings (JSON has no dates), bounded
    nesting, no alias that contains itself, no alias bomb."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._open_anchors: list[str] = []

    def _refuse(self, problem: str) -> NoReturn:
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        raise yaml.composer.ComposerError(None, None, problem, mark)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) and event.anchor in self._open_anchors:
            self._refuse(f"alias *{event.anchor} refers to a node that contains it")
        if len(self._open_anchors) >= MAX_NESTING:
            self._refuse(f"nested deeper than {MAX_NESTING} levels")
        # Every open node takes a slot (anchored or not), so the list's length is the nesting depth.
        self._open_anchors.append(getattr(event, "anchor", None) or "")
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.pop()

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        text = str(node.value).replace("_", "").lstrip("+-")
        if len(text) > MAX_INTEGER_CHARACTERS:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"an integer of {len(text)} characters: Kubernetes holds 64-bit integers",
                node.start_mark,
            )
        value: int = self.construct_yaml_int(node)
        if value not in INT64:
            raise yaml.constructor.ConstructorError(
                None, None, "an integer out of the 64-bit range Kubernetes holds", node.start_mark
            )
        return value

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # An explicit tag on a value it cannot hold (`!!int x`, `!!bool maybe`, `!!timestamp x`, `!!int ''`):
        # PyYAML's constructors raise plain Python errors there; the user gets the tag and the line.
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, KeyError, IndexError, AttributeError, TypeError, OverflowError):
            tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
            raise yaml.constructor.ConstructorError(
                None, None, f"a value tagged {tag} that is not one", node.start_mark
            ) from None

    def construct_document(self, node: yaml.Node) -> Any:
        distinct: set[int] = set()
        expanded = _expanded_size(node, {}, distinct)
        if expanded > max(ALIAS_EXPANSION_ALLOWANCE, ALIAS_EXPANSION_RATIO * len(distinct)):
            raise yaml.constructor.ConstructorError(
                None, None, f"aliases expand this document to {expanded} nodes", node.start_mark
            )
        return super().construct_document(node)


_ManifestLoader.add_constructor("tag:yaml.org,2002:int", _ManifestLoader.construct_bounded_int)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], distinct: set[int]) -> int:
    """Nodes in the document once every alias is replaced by what it names (each shared node once)."""
    if id(node) in sizes:
        return sizes[id(node)]
    distinct.add(id(node))
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes, distinct) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(
            _expanded_size(key, sizes, distinct) + _expanded_size(value, sizes, distinct)
            for key, value in node.value
        )
    sizes[id(node)] = size
    return size


def _yaml_error_message(name: str, text: str, err: yaml.YAMLError) -> str:
    """One line: the file, the line and column where YAML says, and what is wrong (never "<unicode string>")."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        context = ""
        if err.context and err.context_mark is not None:
            context = f" ({err.context} at line {err.context_mark.line + 1})"
        return f"{name}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {err.problem}{context}"
    if isinstance(err, yaml.reader.ReaderError):
        line = text.count("\n", 0, err.position) + 1
        character = f"U+{err.character:04X}" if isinstance(err.character, int) else shown(err.character)
        return f"{name}:{line}: invalid YAML: character {character} is not allowed in YAML"
    return f"{name}: invalid YAML: {shown(str(err))}"


def _decode(name: str, data: bytes) -> str:
    # A UTF-16 byte order mark, as kubectl accepts; else UTF-8, with or without a byte order mark.
    encoding = "utf-16" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(
            f"{name}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); "
            "save the manifest as UTF-8"
        ) from None


def _too_large(name: str) -> InputError:
    return InputError(
        f"{name}: larger than {MAX_INPUT_BYTES // 2**20} MiB, more than manifests or a node list hold (the API "
        "server takes 3 MiB a request); split it"
    )


def _read_bytes(path: str) -> bytes:
    if path == STDIN:
        buffer = getattr(sys.stdin, "buffer", None)
        data = (
            buffer.read(MAX_INPUT_BYTES + 1)
            if buffer is not None
            else sys.stdin.read(MAX_INPUT_BYTES + 1).encode()
        )
        if len(data) > MAX_INPUT_BYTES:
            raise _too_large(STDIN_NAME)
        return bytes(data)
    try:
        mode = Path(path).stat().st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):  # /dev/zero, /dev/urandom, a disk: never a manifest
            raise InputError(f"{path}: a device, not a file of manifests")
        if not stat.S_ISREG(mode):
            # A FIFO with no writer would block the open forever, a socket cannot be opened: pipes come on stdin.
            raise InputError(f"{path}: not a regular file (a FIFO or socket); pipe it to -f - instead")
        with Path(path).open("rb") as file:
            data = file.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            raise _too_large(path)
        return data
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from None


def _manifest_files(path: str) -> list[str]:
    """The files behind a -f/--nodes argument: the file, stdin, or a folder's manifests (sorted)."""
    folder = Path(path)
    if path == STDIN or not folder.is_dir():
        return [path]
    files = sorted(str(f) for f in folder.iterdir() if f.suffix in MANIFEST_SUFFIXES and f.is_file())
    if not files:
        raise InputError(f"{path}: a directory with no {', '.join(MANIFEST_SUFFIXES)} files")
    return files


def _parse_yaml(text: str) -> list[Any]:
    loader = _ManifestLoader(text)  # checks the characters already: raises ReaderError
    try:
        documents = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            documents.append(loader.get_data())
        return documents
    finally:
        loader.dispose()


def _documents_in_file(path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    name = STDIN_NAME if path == STDIN else path
    text = _decode(name, _read_bytes(path))
    try:
        documents = _parse_yaml(text)
    except yaml.YAMLError as err:
        raise InputError(_yaml_error_message(name, text, err)) from None
    except RecursionError:  # a limit above missed a shape; still the file's fault, not ours
        raise InputError(f"{name}: invalid YAML: nested too deeply") from None
    for number, document in enumerate(documents, start=1):
        where = f"{name}: document {number}" if len(documents) > 1 else name
        if document is None:
            continue
        if not isinstance(document, dict):
            raise InputError(
                f"{where}: a manifest must be a mapping (apiVersion, kind, ...), not {_kind_of(document)}"
            )
        if document.get("kind") == "List":  # `kubectl get -o yaml` output
            items = document.get("items") or []
            if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
                raise InputError(f"{where}: items of a List must be a list of mappings")
            for item in items:
                yield where, item
        else:
            yield where, document


def _kind_of(value: object) -> str:
    return "a list" if isinstance(value, list) else f"a {type(value).__name__} ({shown(value)})"


def _load_documents(path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every manifest in a file, stdin or folder, with where it came from (for error messages)."""
    return [found for file in _manifest_files(path) for found in _documents_in_file(file)]


def _check_node(where: str, node: dict[str, Any]) -> None:
    # The inventory reads these fields; the API server guarantees their types, a file does not.
    for field in ("metadata", "spec", "status"):
        if not isinstance(node.get(field) or {}, dict):
            raise InputError(f"{where}: Node {field} must be a mapping")
    labels = (node.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise InputError(f"{where}: Node metadata.labels must map names to strings")
    status = node.get("status") or {}
    for field in ("allocatable", "capacity"):
        counts = status.get(field) or {}
        if not isinstance(counts, dict) or not all(isinstance(k, str) for k in counts):
            raise InputError(f"{where}: Node status.{field} must map resource names to quantities")


def _load_inventory(paths: Sequence[str] | None, settings: Settings) -> Inventory | None:
    if not paths:
        return None
    nodes: list[dict[str, Any]] = []
    for path in paths:
        for where, document in _load_documents(path):
            if document.get("kind") == "Node":
                _check_node(where, document)
                nodes.append(document)
            elif is_nodepool(document):  # GPUs a Karpenter NodePool can create count as available
                nodes.append(document)
    # The nodes as the operator reads them: its catalog (config.accelerators) and config.podNodeSelector.
    return inventory_from_nodes(
        nodes, planning_config(settings).catalog, settings.pod_node_selector, settings.platform
    )


def _offline_settings(args: argparse.Namespace) -> Settings:
    """The operator's configuration for plan/render: --config's file (the operator's, or a chart values
    file's `config:`), with --mig-strategy over it; neither given, the defaults."""
    overrides = {"mig_strategy": args.mig_strategy} if args.mig_strategy else {}
    if args.platform:
        overrides["platform"] = args.platform
    if not args.config:
        return Settings(**overrides)
    from llama_operator.infra.config import ConfigError, load_settings_file  # noqa: PLC0415

    try:
        return load_settings_file(args.config, overrides)
    except ConfigError as err:
        raise InputError(str(err)) from None


def _llamaservices(path: str) -> list[tuple[str, dict[str, Any]]]:
    found = [(where, d) for where, d in _load_documents(path) if d.get("kind") == "LlamaService"]
    if not found:
        raise InputError(
            f"{STDIN_NAME if path == STDIN else path}: no LlamaService found (kind: LlamaService)"
        )
    return found


def with_stand_in_uid(doc: dict[str, Any]) -> dict[str, Any]:
    """The manifest with a uid derived from its namespace and name, for a manifest parse_llamaservice
    accepted. Offline rendering has no stored object; a stand-in uid keeps owner references well-formed."""
    meta = {"namespace": "default", **(doc.get("metadata") or {})}
    if not meta.get("uid"):
        meta["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{meta['namespace']}/{meta['name']}"))
    return {**doc, "metadata": meta}


class _NoAliasDumper(yaml.SafeDumper):
    """Output for people and `kubectl apply`: an object shared between places is written out each time,
    never as an anchor (&id001) and an alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(documents: Sequence[Any]) -> str:
    """Documents as `---`-separated YAML, in the order of their keys, without anchors."""
    return yaml.dump_all(documents, Dumper=_NoAliasDumper, sort_keys=False, explicit_start=True)


def cmd_crd(args: argparse.Namespace) -> int:
    sys.stdout.write(render_crd_yaml())
    return 0


class ManifestError(Exception):
    """A manifest the planner refused, with the file (and document) it came from."""

    def __init__(self, where: str, error: InvalidSpecError | PlanningError) -> None:
        super().__init__(f"{where}: {error}")


def _planned(args: argparse.Namespace, settings: Settings, *, with_uid: bool) -> Iterator[tuple[Any, Any]]:
    inventory = _load_inventory(args.nodes, settings)
    for where, doc in _llamaservices(args.file):
        try:
            parse_llamaservice(doc)
            yield plan_llamaservice(with_stand_in_uid(doc) if with_uid else doc, settings, inventory)
        except (InvalidSpecError, PlanningError) as err:
            raise ManifestError(where, err) from None


def cmd_plan(args: argparse.Namespace) -> int:
    planned = list(_planned(args, _offline_settings(args), with_uid=False))
    out: Any
    if len(planned) == 1:
        out = planned[0][1].model_dump(by_alias=True, mode="json")
    else:
        # Several manifests (a directory, a List, ---): each plan under the LlamaService it is for.
        out = [
            {
                "name": svc.metadata.name,
                "namespace": svc.metadata.namespace,
                "plan": plan.model_dump(by_alias=True, mode="json"),
            }
            for svc, plan in planned
        ]
    if args.output == "json":
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.dump(out, Dumper=_NoAliasDumper, sort_keys=False))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    settings = _offline_settings(args)
    documents = []
    for svc, plan in _planned(args, settings, with_uid=True):
        state = build_desired_state(svc, plan, settings, pod_monitor=args.pod_monitor)
        documents.extend(state.objects)
    sys.stdout.write(dump_yaml(documents))
    return 0


def start_probe_servers() -> None:
    """/healthz, /readyz and /metrics, up before kopf starts: a probe answers while start-up retries.
    A configuration that cannot load stops here, with its error, instead of retrying forever."""
    from llama_operator.infra import metrics  # noqa: PLC0415 - prometheus_client only for `run`
    from llama_operator.infra.config import ConfigError, load_settings  # noqa: PLC0415

    try:
        settings = load_settings()
    except ConfigError as err:
        raise InputError(str(err)) from None
    metrics.METRICS.info.clear()
    metrics.METRICS.info.labels(version=_package_version()).set(1)
    for port in {settings.health_port, settings.metrics_port} - {0}:
        try:
            metrics.serve(settings.listen_address, port, metrics.METRICS, metrics.HEALTH)
        except OSError as err:
            raise InputError(
                f"cannot listen on {settings.listen_address}:{port} ({err.strerror}); set healthPort / "
                "metricsPort (LLAMA_OPERATOR_HEALTH_PORT, LLAMA_OPERATOR_METRICS_PORT) to a free port"
            ) from None


def cmd_run(args: argparse.Namespace) -> int:
    from kopf.cli import main as kopf_main  # noqa: PLC0415 - only `run` pays for importing kopf

    from llama_operator.infra.kube import NoClusterError, load_kube_config  # noqa: PLC0415

    if args.leader_election_namespace:
        os.environ["LLAMA_OPERATOR_LEADER_ELECTION_NAMESPACE"] = args.leader_election_namespace
    try:  # kopf would retry a missing cluster forever, a traceback a minute: say it once and stop
        load_kube_config()
    except NoClusterError as err:
        raise InputError(str(err)) from None
    start_probe_servers()
    kopf_main.main(args=kopf_run_args(args.kopf_args), prog_name="llama-operator", standalone_mode=True)
    return 0


def kopf_run_args(passed: Sequence[str]) -> list[str]:
    """kopf's command line for `llama-operator run PASSED...`: our handlers, every namespace unless
    PASSED names some."""
    kopf_args = ["run", "--module", "llama_operator.handlers", *passed]
    scoped = ("-A", "--all-namespaces", "-n", "--namespace")
    if not any(a == s or a.startswith(f"{s}=") for a in passed for s in scoped):
        kopf_args.append("--all-namespaces")
    return kopf_args


# `kopf run` options that llama-operator sets itself (the handlers' module) and so does not list.
KOPF_OPTIONS_SET_BY_US = ("modules", "paths")


def kopf_run_options_help() -> str:
    """`kopf run`'s own options, from its click command, as click's help prints them."""
    import click  # noqa: PLC0415 - kopf's CLI library, imported with kopf only for `run`
    from kopf.cli import run as kopf_run  # noqa: PLC0415

    context = click.Context(kopf_run, info_name="kopf run")
    records = [
        record
        for param in kopf_run.params
        if param.name not in KOPF_OPTIONS_SET_BY_US and (record := param.get_help_record(context))
    ]
    formatter = click.HelpFormatter()
    with formatter.section(f"options of `kopf run` (kopf {_distribution_version('kopf')}), passed through"):
        formatter.write_dl(records)
    return formatter.getvalue()


def _distribution_version(name: str) -> str:
    try:
        return package_metadata.version(name)
    except package_metadata.PackageNotFoundError:
        return "?"


class _RunHelpAction(argparse.Action):
    """`run --help`: our options, then kopf's (imported only when asked: kopf is slow to import)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        parser.print_help()
        sys.stdout.write("\n" + kopf_run_options_help())
        parser.exit()


FILE_HELP = (
    "LlamaService manifests: a YAML or JSON file (several documents separated by ---, or a kind: List), "
    "a directory (its *.yaml, *.yml and *.json files, as kubectl apply -f DIR reads them; not "
    "recursive), or - to read standard input"
)


def _add_run_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        help="run the operator (extra options go to `kopf run`)",
        description="Run the operator. Every other option goes to `kopf run` (listed below): e.g. "
        "--standalone, --namespace=NS (repeatable) or --all-namespaces (the default), --log-format=json.",
        add_help=False,
    )
    run.add_argument("-h", "--help", action=_RunHelpAction, help="show this help message and exit")
    run.add_argument(
        "--leader-election-namespace",
        metavar="NS",
        help="namespace of the leader-election Lease (LLAMA_OPERATOR_LEADER_ELECTION_NAMESPACE); default: "
        "the operator's own (POD_NAMESPACE in a pod, else the kubeconfig context's namespace)",
    )
    run.set_defaults(func=cmd_run)


def _add_plan_and_render_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, func, help_text in (
        ("plan", cmd_plan, "print the plan for a LlamaService manifest"),
        ("render", cmd_render, "print the Kubernetes objects for a LlamaService manifest"),
    ):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("-f", "--file", required=True, metavar="FILE|DIR|-", help=FILE_HELP)
        p.add_argument(
            "--nodes",
            action="append",
            metavar="FILE|DIR|-",
            help="node inventory: Node manifests (a file, a directory of them, or a kind: List as "
            "`kubectl get nodes -o yaml` prints), and Karpenter NodePools (the GPUs they can create), repeatable",
        )
        p.add_argument(
            "--config",
            metavar="FILE",
            help="the operator's configuration (its config.yaml, or a chart values file's config:), e.g. a "
            "GPU added under accelerators; default: the operator's defaults",
        )
        p.add_argument(
            "--mig-strategy",
            choices=["mixed", "single"],
            help="as the GPU Operator is configured (default: the config's migStrategy, else mixed)",
        )
        p.add_argument(
            "--platform",
            choices=get_args(PlatformName),
            help="whose node labels GPU pods select (default: the config's platform, else auto: the nodes' cloud)",
        )
        # Also accepted after the command; SUPPRESS keeps the global flag's value when not given here.
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if name == "plan":
            p.add_argument("-o", "--output", choices=["json", "yaml"], default="json")
        else:
            p.add_argument(
                "--pod-monitor", action="store_true", help="render a PodMonitor (Prometheus Operator)"
            )
        p.set_defaults(func=func)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llama-operator",
        description=__doc__,
        epilog=f"Exit status: 0 done, {EXIT_INPUT_ERROR} the input is wrong (a manifest, a file, a plan "
        f"that cannot work; one line on stderr says why), {EXIT_INTERNAL_ERROR} an internal error "
        "(a bug; --debug shows the traceback).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_package_version()}")
    parser.add_argument(
        "--debug", action="store_true", help="on an internal error, print the traceback (for a bug report)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    _add_run_command(sub)
    crd = sub.add_parser("crd", help="print the generated CustomResourceDefinition")
    crd.set_defaults(func=cmd_crd)

    _add_plan_and_render_commands(sub)
    register_router_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # `run` passes every option it does not know to `kopf run`; the other commands are strict.
    args, unknown = parser.parse_known_args(argv)
    if args.command == "run":
        args.kopf_args = unknown
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command: a user's error is one line and status 1; anything else is a bug of ours,
    one line and status 70, with the traceback under --debug."""
    try:
        code: int = args.func(args)
    except (InputError, ManifestError) as err:
        sys.stderr.write(f"error: {err}\n")
        return EXIT_INPUT_ERROR
    except OSError as err:  # a file another command reads or writes (a trace, --out): the environment's
        sys.stderr.write(f"error: {err}\n")
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:
        if getattr(args, "debug", False):
            traceback.print_exc()
        message = " ".join(str(err).split())  # one line, whatever the exception says
        if len(message) > INTERNAL_MESSAGE_LENGTH:
            message = message[:INTERNAL_MESSAGE_LENGTH] + "..."
        sys.stderr.write(
            f"llama-operator: internal error: {type(err).__name__}: {message} "
            "(rerun with --debug for the traceback)\n"
        )
        return EXIT_INTERNAL_ERROR
    return code
