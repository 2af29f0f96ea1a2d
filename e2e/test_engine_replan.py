"""An engine planned for the hardware it runs on, end to end: the fleet simulator's replicas run 2.5x as
fast as the catalog's step model says; the operator's autoscaler fits the step model to their vLLM series
through the real Prometheus, and once the fit holds, the reconciler re-plans the engine with the measured
factors (reconcile/engine.py): status.plan.measuredSteps, a larger --max-num-batched-tokens in the
Deployment, an EngineReplanned Event, and the Deployment rolled to it, the autoscaler's state following
the new plan.

One LlamaService on a 1g.10gb slice of the MIG node, TTFT 1 s and TPOT 50 ms at p95, a steady load its
replica serves without a queue (the fit only takes steady windows), autoscaling every 2 s, and
config.engineReplanMinObservations 12 (production waits for 50).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from fleet import FleetProcess, Kube, closed_loop_operator, running_fleet
from llama_bench.fleetsim.load import LoadSpec
from llama_operator.api.settings import Settings
from llama_operator.reconcile.engine import ENGINE_REPLANNED
from llama_operator.reconcile.outcome import plan_llamaservice
from support import Cluster, OperatorProcess, eventually, llamaservice_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

NAME = "faster-hardware"
INTERVAL = 2.0  # LLAMA_OPERATOR_AUTOSCALE_INTERVAL_SECONDS: one calibration observation per evaluation
WINDOW = 20.0  # LLAMA_OPERATOR_SIGNAL_WINDOW_SECONDS
SPEED = 2.5  # the simulated replicas' hardware against the catalog's step model
# config.engineReplanMinObservations: a few minutes of evaluations here, where production waits for 50.
MIN_OBSERVATIONS = 12
MANIFEST = llamaservice_manifest(
    NAME,
    accelerator={"type": "a100-80gb", "mig": "1g.10gb"},
    autoscaling={
        "minReplicas": 1,
        "maxReplicas": 1,
        "slo": {"ttftSeconds": 1, "tpotSeconds": 0.05, "percentile": 95},
    },
)
_, CATALOG_PLAN = plan_llamaservice(
    {**MANIFEST, "metadata": {"name": NAME, "namespace": "e2e"}}, Settings(), None
)
# Prompt-heavy enough that the fit sees the prompt chunks (compute efficiency), light enough that the
# replica never queues (~20 % of its prefill), with answers long enough that a sequence or more is
# decoding at most scrapes (the fit takes no window whose running gauge reads under one per replica).
LOAD = LoadSpec(
    rate=round(0.2 * CATALOG_PLAN.prefill_tokens_per_second / 1000, 1),
    prompt_tokens=1000,
    output_tokens=256,
    seed=21,
)


@pytest.fixture(scope="module")
def fast_fleet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetProcess]:
    with running_fleet(cluster.info, tmp_path_factory.mktemp("fleet"), f"--hardware-speed={SPEED:g}") as proc:
        yield proc


@pytest.fixture(scope="module")
def autoscaling_operator(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    with closed_loop_operator(
        cluster,
        tmp_path_factory.mktemp("operator"),
        interval=INTERVAL,
        window=WINDOW,
        cold_start="5s",
        LLAMA_OPERATOR_ENGINE_REPLAN_MIN_OBSERVATIONS=f"{MIN_OBSERVATIONS}",
        # The reconciler reads the calibration the autoscaler writes at its periodic resync (status writes
        # do not wake it): 300 s in production, where engines change at most hourly.
        LLAMA_OPERATOR_RESYNC_SECONDS="20",
    ) as proc:
        yield proc


@pytest.fixture
def cleanup(cluster: Cluster, autoscaling_operator: OperatorProcess, namespace: str) -> Iterator[None]:
    """Delete the LlamaService while the operator still runs (its finalizer needs the operator)."""
    yield
    cluster.kubectl(
        "delete", "llamaservice", NAME, "-n", namespace, "--wait=true", "--timeout=60s", check=False
    )


def flag(args: list[str], name: str) -> int:
    return int(args[args.index(name) + 1])


def test_replicas_faster_than_the_catalog_get_an_engine_planned_for_them(
    cluster: Cluster,
    fast_fleet: FleetProcess,
    autoscaling_operator: OperatorProcess,
    namespace: str,
    cleanup: None,
) -> None:
    kube = Kube(cluster.info)
    started = time.monotonic()
    fast_fleet.client.set_load(namespace, NAME, LOAD)
    assert cluster.apply(MANIFEST, namespace).returncode == 0

    def context() -> str:
        state = kube.autoscaling(namespace, NAME).get("state") or {}
        return (
            f"\nafter {time.monotonic() - started:.0f}s; calibration: {state.get('stepCalibration')}"
            f"\nplan: {kube.llamaservice(namespace, NAME).get('status', {}).get('plan')}"
            f"\nfleet: {fast_fleet.service(namespace, NAME)}\noperator log:\n{autoscaling_operator.tail(30)}"
        )

    def deployment_args() -> list[str]:
        """The vLLM container's arguments ([] until the operator has created the Deployment)."""
        spec = kube.deployment(namespace, NAME).get("spec") or {}
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or [{}]
        return list(containers[0].get("args") or [])

    eventually("the catalog's engine", lambda: "--max-num-batched-tokens" in deployment_args(), timeout=60)
    before = flag(deployment_args(), "--max-num-batched-tokens")
    assert before == CATALOG_PLAN.max_num_batched_tokens

    def measured() -> dict[str, Any] | None:
        plan = kube.llamaservice(namespace, NAME).get("status", {}).get("plan") or {}
        steps: dict[str, Any] | None = plan.get("measuredSteps")
        if steps is None and int(time.monotonic() - started) % 30 == 0:
            print(context().splitlines()[1], flush=True)
        return steps

    # The fit's observations (one per steady evaluation), then the reconcile that reads them.
    try:
        steps = eventually("status.plan.measuredSteps", measured, timeout=300)
    except pytest.fail.Exception as err:
        raise AssertionError(f"{err}{context()}") from None
    status = kube.llamaservice(namespace, NAME)["status"]
    assert steps["accelerator"] == status["plan"]["displayName"] == CATALOG_PLAN.display_name
    calibration = status["autoscaling"]["state"]["stepCalibration"]
    assert calibration["observations"] >= MIN_OBSERVATIONS
    # Planned on the slow side of the fit, yet faster than the catalog's estimates.
    assert calibration["catalogBandwidthEfficiency"] < steps["bandwidthEfficiency"]
    assert steps["bandwidthEfficiency"] <= calibration["bandwidthEfficiency"]
    assert steps["computeEfficiency"] <= calibration["computeEfficiency"]
    after = status["plan"]["maxNumBatchedTokens"]
    assert after >= 1.1 * before, context()

    # The Deployment runs the new engine and has rolled to it; the autoscaler's state follows the plan.
    eventually(
        "the new engine's flag", lambda: flag(deployment_args(), "--max-num-batched-tokens") == after, 30
    )

    def rolled() -> bool:
        deployment = kube.deployment(namespace, NAME)
        observed = deployment.get("status") or {}
        return (
            observed.get("observedGeneration") == deployment["metadata"]["generation"]
            and observed.get("updatedReplicas") == 1
            and observed.get("readyReplicas") == 1
            and observed.get("replicas") == 1
        )

    eventually("the rollout to the new engine", rolled, timeout=90)
    eventually(
        "the autoscaler's state following the plan",
        lambda: (
            (kube.autoscaling(namespace, NAME).get("state") or {}).get("planFactors")
            == [steps["bandwidthEfficiency"], steps["computeEfficiency"], steps["stepOverheadSeconds"]]
        ),
        timeout=4 * INTERVAL + 5,
    )
    eventually(
        f"an {ENGINE_REPLANNED} Event", lambda: ENGINE_REPLANNED in kube.event_reasons(namespace, NAME), 15
    )
    print(f"re-planned after {time.monotonic() - started:.0f}s: {before} -> {after} tokens; {steps}")
