"""The quick-start demo: install the chart, run the operator with the chart's ServiceAccount, apply one
LlamaService per accelerator family, and show where each landed."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from localcluster import info as cluster_info  # e2e/ is on sys.path: the script runs from there
from localcluster.config import state_dir
from localcluster.util import ClusterError, http_get, one_off_port, wait_until_serving

REPO = Path(__file__).resolve().parent.parent
STATE = state_dir() / "demo"
NAMESPACE = "demo"
RELEASE, RELEASE_NS = "llama-operator", "llama-operator-system"
CRD = "customresourcedefinition/llamaservices.serving.llama-operator.dev"


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def run(*cmd: str, check: bool = True, input_text: str | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, input=input_text)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed: {done.stderr.strip()}")
    return done.stdout


class Demo:
    def __init__(self) -> None:
        loaded = cluster_info.load()
        if loaded is None:
            raise SystemExit("no local cluster: run `bash e2e/cluster.sh up` first")
        self.cluster = loaded

    def kubectl(self, *args: str, check: bool = True, input_text: str | None = None) -> str:
        return run(
            str(self.cluster.kubectl_path),
            f"--kubeconfig={self.cluster.kubeconfig}",
            *args,
            check=check,
            input_text=input_text,
        )

    def helm(self, *args: str) -> str:
        return run(str(self.cluster.helm_path), f"--kubeconfig={self.cluster.kubeconfig}", *args)

    def install_chart(self) -> None:
        say("helm install charts/llama-operator")
        if self.kubectl("get", CRD, check=False):  # left by an earlier run or the tests: let Helm adopt it
            self.kubectl("label", CRD, "app.kubernetes.io/managed-by=Helm", "--overwrite")
            self.kubectl(
                "annotate",
                CRD,
                f"meta.helm.sh/release-name={RELEASE}",
                f"meta.helm.sh/release-namespace={RELEASE_NS}",
                "--overwrite",
            )
        self.helm(
            "upgrade",
            "--install",
            RELEASE,
            str(REPO / "charts" / "llama-operator"),
            "-n",
            RELEASE_NS,
            "--create-namespace",
        )
        complaint = self.cluster.wait_crd_established(CRD.split("/", 1)[1])
        if complaint is not None:
            raise SystemExit(f"the LlamaService CRD was not established: {complaint}")

    def operator_kubeconfig(self) -> Path:
        """The chart's ServiceAccount token: the operator runs with exactly the chart's RBAC."""
        return self.cluster.service_account_kubeconfig(
            RELEASE, RELEASE_NS, STATE / "operator.kubeconfig", duration="24h"
        )

    def start_operator(self) -> None:
        pid_file = STATE / "operator.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), 0)
                say(f"operator already running (pid {pid_file.read_text().strip()})")
                return
            except (OSError, ValueError):
                pass
        health_port, metrics_port = one_off_port(), one_off_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.operator_kubeconfig()),
            "LLAMA_OPERATOR_PROMETHEUS_URL": self.cluster.prometheus_url,
            "LLAMA_OPERATOR_AUTOSCALE_INTERVAL_SECONDS": "3",
            "LLAMA_OPERATOR_LISTEN_ADDRESS": "127.0.0.1",
            "LLAMA_OPERATOR_HEALTH_PORT": str(health_port),
            "LLAMA_OPERATOR_METRICS_PORT": str(metrics_port),
        }
        # The local Prometheus scrapes the operator's /metrics, as a ServiceMonitor would in a cluster.
        (Path(self.cluster.prometheus_targets_dir) / "operator-demo.yaml").write_text(
            yaml.safe_dump([{"targets": [f"127.0.0.1:{metrics_port}"], "labels": {"pod": "llama-operator"}}])
        )
        (STATE / "ports.json").write_text(json.dumps({"health": health_port, "metrics": metrics_port}))
        log = (STATE / "operator.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_operator", "run", "--standalone", "--all-namespaces"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pid_file.write_text(str(proc.pid))
        say(
            f"operator running as pid {proc.pid} with the chart's ServiceAccount (log: {STATE / 'operator.log'})"
        )

    def apply_examples(self) -> list[str]:
        self.kubectl("create", "namespace", NAMESPACE, check=False)
        names = []
        for path in sorted((REPO / "examples").glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            names.append(doc["metadata"]["name"])
            self.kubectl("apply", "-n", NAMESPACE, "-f", str(path))
            say(
                f"applied {path.relative_to(REPO)} ({doc['spec'].get('accelerator', {}).get('type', 'auto')})"
            )
        return names

    def phases(self) -> dict[str, tuple[str | None, str]]:
        """Each LlamaService's phase and, when not Ready, the message of its first false condition."""
        items = json.loads(self.kubectl("get", "llamaservices", "-n", NAMESPACE, "-o", "json"))["items"]
        out: dict[str, tuple[str | None, str]] = {}
        for item in items:
            status = item.get("status") or {}
            why = next(
                (
                    f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}"
                    for c in status.get("conditions") or []
                    if c.get("type") == "Degraded" and c.get("status") == "True"
                ),
                "",
            )
            out[item["metadata"]["name"]] = (status.get("phase"), why)
        return out

    def wait_ready(self, names: list[str], wait_seconds: float) -> list[str]:
        """Wait until every example is Ready; the ones that are not at the deadline, with why."""
        deadline = time.monotonic() + wait_seconds
        while True:
            phases = self.phases()
            missing = [n for n in names if phases.get(n, (None, ""))[0] != "Ready"]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(2)
        return [
            f"{n}: phase {phases.get(n, (None, ''))[0] or 'none (the operator never wrote a status)'}"
            f"{'; ' + phases[n][1] if n in phases and phases[n][1] else ''}"
            for n in missing
        ]

    def show(self) -> None:
        print()
        print(self.kubectl("get", "llamaservices", "-n", NAMESPACE))
        pods = json.loads(self.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
        rows: list[tuple[str, ...]] = [("LLAMASERVICE", "POD", "NODE", "GPU PRODUCT / RESOURCE", "PHASE")]
        nodes = {
            n["metadata"]["name"]: n for n in json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        }
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            node = pod["spec"].get("nodeName") or "-"
            labels: dict[str, Any] = nodes.get(node, {}).get("metadata", {}).get("labels", {})
            limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
            gpu = ", ".join(f"{k}={v}" for k, v in limits.items() if k.startswith("nvidia.com/")) or "cpu"
            product = labels.get("nvidia.com/gpu.product", "")
            rows.append(
                (
                    pod["metadata"]["labels"].get("llama-operator.dev/llamaservice", "?"),
                    pod["metadata"]["name"],
                    node,
                    f"{product} {gpu}".strip(),
                    pod["status"].get("phase", ""),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        print()
        say(
            f"try: kubectl --kubeconfig {self.cluster.kubeconfig} -n {NAMESPACE} describe llamaservice chat-t4"
        )

    def start_fleet(self) -> None:
        """The fleet simulator: a simulated vLLM replica behind each pod kwok runs, scraped by Prometheus."""
        pid_file = STATE / "fleet.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), 0)
                return
            except (OSError, ValueError):
                pass
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)}
        log = (STATE / "fleet.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_bench", "fleet-sim", "--port", str(self.cluster.fleet_port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pid_file.write_text(str(proc.pid))
        # Up and answering before anything is sent to its port: a simulator that could not bind would
        # otherwise leave the load driver talking to whatever holds the port.
        url = f"http://127.0.0.1:{self.cluster.fleet_port}/healthz"
        try:
            wait_until_serving(
                "the fleet simulator", proc, lambda: http_get(url, timeout=2)[0] == 200, STATE / "fleet.log"
            )
        except ClusterError as failed:
            raise SystemExit(
                f"the fleet simulator did not come up on port {self.cluster.fleet_port}: {failed}"
            ) from None
        say(f"fleet simulator running as pid {proc.pid} on port {self.cluster.fleet_port}")

    def replicas(self, name: str) -> int | None:
        out = self.kubectl(
            "get", "deployment", name, "-n", NAMESPACE, "-o", "jsonpath={.spec.replicas}", check=False
        ).strip()
        return int(out) if out.isdigit() else None

    def drive_load(self, seconds: int) -> list[int]:
        """Replay the trace through chat-slo; the Deployment's replica counts seen meanwhile."""
        say(f"driving the conversation trace through chat-slo for {seconds}s: replicas follow the load")
        drive = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_bench",
                "fleet-drive",
                "chat-slo",
                "-n",
                NAMESPACE,
                "--kubeconfig",
                str(self.cluster.kubeconfig),
                "--seconds",
                str(seconds),
                "--fleet-url",
                f"http://127.0.0.1:{self.cluster.fleet_port}",
            ],
        )
        seen: list[int] = []
        while drive.poll() is None:
            count = self.replicas("chat-slo")
            if count is not None and (not seen or seen[-1] != count):
                seen.append(count)
            time.sleep(2)
        return seen

    def up(self, load_seconds: int, wait_seconds: float) -> int:
        """The demo; 1 when an example is not Ready in time or the autoscaled one never follows the load
        (a demo that shows nothing working must not say it succeeded)."""
        STATE.mkdir(parents=True, exist_ok=True)
        self.install_chart()
        self.start_fleet()
        self.start_operator()
        names = self.apply_examples()
        problems = self.wait_ready(names, wait_seconds)
        self.show()
        if load_seconds > 0 and not problems:
            seen = self.drive_load(load_seconds)
            print(self.kubectl("get", "llamaservice", "chat-slo", "-n", NAMESPACE))
            say(f"chat-slo's replicas during the replay: {' -> '.join(map(str, seen)) or 'none'}")
            if len(set(seen)) < 2:
                problems.append(
                    "chat-slo: its replicas never changed while the load did (is the operator leading? "
                    f"see {STATE / 'operator.log'})"
                )
        self.next_steps()
        if problems:
            print()
            say("the demo did NOT work:")
            for problem in problems:
                print(f"    {problem}")
            say(f"the operator's log: {STATE / 'operator.log'}; its readiness: {self.readyz()}")
            return 1
        say("every example is Ready" + (" and chat-slo followed the load" if load_seconds > 0 else ""))
        return 0

    def readyz(self) -> str:
        ports = json.loads((STATE / "ports.json").read_text())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['health']}/readyz", timeout=5) as r:
                return f"{r.status} {r.read().decode().strip()}"
        except urllib.error.HTTPError as err:
            return f"{err.code} {err.read().decode().strip()}"
        except OSError as err:
            return f"unreachable ({err})"

    def next_steps(self) -> None:
        ports = json.loads((STATE / "ports.json").read_text())
        kubeconfig = self.cluster.kubeconfig
        print()
        say("the demo keeps running (cluster, operator, fleet simulator). To look around:")
        for line in (
            f". {state_dir() / 'env'}   # kubectl and helm on PATH, KUBECONFIG={kubeconfig}",
            f"kubectl -n {NAMESPACE} get llamaservices",
            f"kubectl -n {NAMESPACE} describe llamaservice chat-slo",
            f"kubectl -n {NAMESPACE} get events --sort-by=.lastTimestamp",
            f"curl -s http://127.0.0.1:{ports['metrics']}/metrics | grep ^llama_operator   # the operator's metrics",
            f"curl -s http://127.0.0.1:{ports['health']}/readyz",
            f"open {self.cluster.prometheus_url}/graph?g0.expr=llama_operator_desired_replicas   # Prometheus",
            f"less {STATE / 'operator.log'}   # the operator's log",
        ):
            print(f"    {line}")
        say("to stop everything: make demo-down")

    def down(self) -> None:
        for what in ("operator", "fleet"):
            pid_file = STATE / f"{what}.pid"
            if pid_file.exists():
                try:
                    os.killpg(int(pid_file.read_text()), signal.SIGTERM)
                    say(f"{what} stopped")
                except (OSError, ValueError):
                    pass
                pid_file.unlink()
        info = cluster_info.load()
        if info is not None:
            (Path(info.prometheus_targets_dir) / "operator-demo.yaml").unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--load-seconds", type=int, default=180, help="how long to drive load (0: none)")
    parser.add_argument(
        "--wait-seconds", type=float, default=180, help="how long each example may take to be Ready"
    )
    args = parser.parse_args()
    if args.action == "down" and cluster_info.load() is None:
        return 0
    demo = Demo()
    if args.action == "up":
        return demo.up(args.load_seconds, args.wait_seconds)
    demo.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
