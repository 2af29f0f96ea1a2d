"""Operator start-up: kopf settings (timeouts, where kopf keeps its bookkeeping) and shared clients."""

from __future__ import annotations

import logging
import os
import re
import tracemalloc
from pathlib import Path
from typing import Any

import kopf

from llama_operator.autoscale.promql import SignalLabels
from llama_operator.desired.labels import DEMAND_LABEL, SERVICE_LABEL
from llama_operator.handlers.controller import (
    INFERENCE_POOL_CRD,
    Controller,
    ControllerMemo,
    served_inference_pool,
    start_controller,
)
from llama_operator.handlers.indexes import Indexes
from llama_operator.handlers.memo import OperatorMemo
from llama_operator.infra.config import load_settings
from llama_operator.infra.kube import Kube, load_kube_config
from llama_operator.infra.metrics import HEALTH, METRICS
from llama_operator.infra.prometheus import PrometheusConnection, PrometheusSignals

PREFIX = "llama-operator.dev"
WATCH_CHUNK_SIZE = 200
WORKER_IDLE_SECONDS = 0.5
# The kinds the operator only ever watches for its own objects (each handler filters on SERVICE_LABEL).
# Not EndpointSlices: the activator Service's own are watched too, and they carry no label of ours.
LABELLED_KINDS: tuple[tuple[str, str, str], ...] = (
    ("", "v1", "pods"),
    ("apps", "v1", "deployments"),
    ("apps", "v1", "daemonsets"),
    ("", "v1", "services"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("monitoring.coreos.com", "v1", "podmonitors"),
    ("inference.networking.k8s.io", "v1", "inferencepools"),
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
)
TRACEMALLOC_ENV = "LLAMA_OPERATOR_TRACEMALLOC_FILE"  # a path; "{pid}" in it is replaced
_ROUTINE = re.compile(r"^(Handler|Indexer|Timer) '[^']*' succeeded\.$")


class RoutineAtDebug(logging.Filter):
    """kopf logs every handler and indexer success at INFO: one line per watch event, hundreds a second
    with many LlamaServices. Those are routine: shown at DEBUG (--verbose) only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and _ROUTINE.match(record.getMessage()):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger("kopf").isEnabledFor(logging.DEBUG)
        return True


@kopf.on.startup()
def configure(*, settings: kopf.OperatorSettings, memo: OperatorMemo, logger: kopf.Logger, **_: Any) -> None:
    # Bookkeeping in our own annotations, not in status (a structural schema would prune it).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    # No handler of ours needs a finalizer (no timers or daemons: one autoscaler loop, and deletion is the
    # garbage collector's); should kopf ever add one, it carries our name.
    settings.persistence.finalizer = f"{PREFIX}/autoscaler"
    # Without these, a silently dropped watch connection hangs the operator (kopf issues 204, 698).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.execution.max_workers = 8
    # Memory with 1,000 LlamaServices. kopf lists each watched kind in one response unless chunked, and
    # each object's worker keeps that object's last event (the whole body) until it idles out. (At a
    # restart every worker also waits with its body until all kinds are indexed: 136 MiB of parsed JSON
    # in the scale benchmark's profile, which neither setting changes; see the README's Scale section.)
    settings.watching.chunk_size = WATCH_CHUNK_SIZE
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    # Only our objects come over the wire (kopf's `labels=` filters are applied after the whole body was
    # received and parsed): a cluster's other pods and Deployments cost the operator nothing.
    for kind in LABELLED_KINDS:
        settings.watching.label_selectors[kind] = SERVICE_LABEL
    settings.watching.label_selectors[("coordination.k8s.io", "v1", "leases")] = DEMAND_LABEL  # the router's
    settings.posting.level = logging.INFO

    if os.environ.get(TRACEMALLOC_ENV):
        tracemalloc.start(8)  # where memory goes, for the scale benchmark (costs CPU: off by default)
    objects_logger = logging.getLogger("kopf.objects")
    if not any(isinstance(f, RoutineAtDebug) for f in objects_logger.filters):
        objects_logger.addFilter(RoutineAtDebug())
    memo.metrics, memo.health = METRICS, HEALTH
    load_kube_config()
    memo.settings = load_settings()
    memo.kube = Kube()
    mode = memo.settings.pod_monitor
    memo.pod_monitor = mode == "always" or (
        mode == "auto" and memo.kube.has_kind("monitoring.coreos.com/v1", "PodMonitor")
    )
    memo.prometheus = PrometheusSignals(
        PrometheusConnection.from_settings(memo.settings),
        SignalLabels(namespace=memo.settings.namespace_label, service=memo.settings.service_label),
    )
    crd = (
        memo.kube.get(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", namespace="", name=INFERENCE_POOL_CRD
        )
        if memo.settings.inference_pool == "auto"
        else None
    )
    memo.inference_pool = served_inference_pool(None, crd) if crd is not None else None
    logger.info(
        "settings: %s; PodMonitor: %s; InferencePool: %s",
        memo.settings.model_dump(),
        memo.pod_monitor,
        memo.inference_pool or False,
    )


# Registered after `configure` (kopf runs startup handlers in order): the controller needs the settings.
@kopf.on.startup()
async def run_controller(*, memo: ControllerMemo, logger: kopf.Logger, **kwargs: Any) -> None:
    indexes = Indexes(
        llamaservices=kwargs["llamaservice_index"],
        nodes=kwargs["node_index"],
        pods=kwargs["pod_index"],
        deployments=kwargs["deployment_index"],
        services=kwargs["service_index"],
        pdbs=kwargs["pdb_index"],
        pod_monitors=kwargs["pod_monitor_index"],
        endpoint_slices=kwargs["endpoint_slice_index"],
        inference_pools=kwargs["inference_pool_index"],
        leader_worker_sets=kwargs["leader_worker_set_index"],
        daemon_sets=kwargs["daemon_set_index"],
        nodepools=kwargs["nodepool_index"],
        nodeclaims=kwargs["nodeclaim_index"],
    )
    memo.controller = start_controller(memo, indexes)
    settings = memo.settings
    logger.info(
        "controller: %d workers, resync every %.0fs, leader election %s",
        settings.reconcile_workers,
        settings.resync_seconds,
        "on" if settings.leader_election else "off",
    )


@kopf.on.cleanup()
async def stop_controller(*, memo: ControllerMemo, **_: Any) -> None:
    controller: Controller | None = getattr(memo, "controller", None)
    if controller is not None:
        await controller.stop()
    path = os.environ.get(TRACEMALLOC_ENV)
    if path and tracemalloc.is_tracing():
        write_memory_profile(Path(path.replace("{pid}", str(os.getpid()))))


def write_memory_profile(path: Path, top: int = 30) -> None:
    """The largest live allocations by source line, as tracemalloc sees them now."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        ]
    )
    stats = snapshot.statistics("lineno")
    total = sum(stat.size for stat in stats)
    lines = [
        f"traced Python memory: {total / 2**20:.1f} MiB in {len(stats)} source lines; the largest {top}:"
    ]
    lines += [
        f"{stat.size / 2**20:8.2f} MiB {stat.count:9d} blocks  {stat.traceback}" for stat in stats[:top]
    ]
    path.write_text("\n".join(lines) + "\n")
