"""Operator start-up: kopf settings (timeouts, where kopf keeps its bookkeeping) and shared clients."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from llama_operator.autoscale.promql import SignalLabels
from llama_operator.infra.config import load_settings
from llama_operator.infra.kube import Kube, load_kube_config
from llama_operator.infra.prometheus import PrometheusSignals, SignalCache

PREFIX = "llama-operator.dev"


@kopf.on.startup()
def configure(*, settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    # Bookkeeping in our own annotations, not in status (a structural schema would prune it).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    # kopf's finalizer guards the autoscaler timers (stopped before a LlamaService goes); name it ours.
    settings.persistence.finalizer = f"{PREFIX}/autoscaler"
    # Without these, a silently dropped watch connection hangs the operator (kopf issues 204, 698).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.execution.max_workers = 8
    settings.posting.level = logging.INFO

    load_kube_config()
    memo.settings = load_settings()
    memo.kube = Kube()
    mode = memo.settings.pod_monitor
    memo.pod_monitor = mode == "always" or (
        mode == "auto" and memo.kube.has_kind("monitoring.coreos.com/v1", "PodMonitor")
    )
    memo.signals = SignalCache(
        PrometheusSignals(
            memo.settings.prometheus_url,
            SignalLabels(namespace=memo.settings.namespace_label, service=memo.settings.service_label),
        ),
        max_age_seconds=memo.settings.autoscale_interval_seconds / 2,
        window_seconds=memo.settings.signal_window_seconds,
    )
    logger.info("settings: %s; PodMonitor: %s", memo.settings.model_dump(), memo.pod_monitor)
