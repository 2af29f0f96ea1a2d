"""The LlamaService CRD's life with real helm on the local cluster, as docs/install.md tells it: a CRD
applied by hand first is adopted with --take-ownership (and --force-conflicts on the first upgrade that
changes it); `helm upgrade` updates the CRD; uninstall
keeps the CRD and the LlamaServices; another release name installs after an uninstall with
--take-ownership; crds.install=false leaves the CRD alone. The session shares the CRD: the test ends
with it installed and equal to crds/ again."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import Cluster, eventually, llamaservice_manifest, repo_root

pytestmark = pytest.mark.e2e

CRD_NAME = "llamaservices.serving.llama-operator.dev"
CRD = f"customresourcedefinition/{CRD_NAME}"
CRD_FILE = repo_root() / "crds" / f"{CRD_NAME}.yaml"
CHART = repo_root() / "charts" / "llama-operator"
OWNER_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")
EXTRA_COLUMN = {"name": "Upgraded", "type": "string", "jsonPath": ".spec.model.name", "priority": 1}


def live_crd(cluster: Cluster) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(cluster.kubectl("get", CRD, "-o", "yaml").stdout)
    return crd


def columns(crd: dict[str, Any]) -> list[str]:
    return [c["name"] for c in crd["spec"]["versions"][0].get("additionalPrinterColumns") or []]


def owner(crd: dict[str, Any]) -> tuple[str | None, str | None]:
    annotations = crd["metadata"].get("annotations") or {}
    return annotations.get(OWNER_ANNOTATIONS[0]), annotations.get(OWNER_ANNOTATIONS[1])


def apply_crd_by_hand(cluster: Cluster) -> None:
    """crds/ applied with kubectl, as a platform team that manages CRDs apart from releases does."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    cluster.kubectl("label", CRD, "app.kubernetes.io/managed-by-")
    cluster.kubectl("annotate", CRD, *(f"{key}-" for key in OWNER_ANNOTATIONS))


def chart_with_changed_crd(tmp_path: Path) -> Path:
    """The chart as a later version with one more printer column on the CRD."""
    chart = tmp_path / "llama-operator"
    shutil.copytree(CHART, chart)
    template = chart / "templates" / "crd.yaml"
    header, body = template.read_text().split("{{- if .Values.crds.install }}\n", 1)
    crd = yaml.safe_load(body.removesuffix("{{- end }}\n"))
    crd["spec"]["versions"][0]["additionalPrinterColumns"].append(EXTRA_COLUMN)
    template.write_text(
        header + "{{- if .Values.crds.install }}\n" + yaml.safe_dump(crd, sort_keys=False) + "{{- end }}\n"
    )
    return chart


@pytest.fixture
def release_namespace(cluster: Cluster) -> Iterator[str]:
    name = f"crd-life-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    for release in cluster.helm("list", "-n", name, "-q").stdout.split():
        cluster.helm("uninstall", release, "-n", name)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    # Whatever happened above, the session's CRD is the one in crds/ again.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))


def test_crd_lifecycle_across_install_upgrade_uninstall_and_a_new_release(
    cluster: Cluster, release_namespace: str, tmp_path: Path
) -> None:
    ns = release_namespace
    install = ("install", "-n", ns)

    # 1. A CRD applied by hand: helm refuses to take it over silently...
    apply_crd_by_hand(cluster)
    refused = cluster.helm(*install, "first", str(CHART))
    assert refused.returncode != 0
    assert "invalid ownership metadata" in refused.stderr, refused.stderr
    # ...and --take-ownership adopts it.
    done = cluster.helm(*install, "--take-ownership", "first", str(CHART))
    assert done.returncode == 0, done.stderr
    assert owner(live_crd(cluster)) == ("first", ns)

    cluster.apply(llamaservice_manifest("kept"), ns)
    assert cluster.llamaservice("kept", ns) is not None

    # 2. A later chart's CRD reaches the cluster on `helm upgrade` (a template, not crds/). Helm 4 applies
    # server-side, and kubectl still co-owns the versions it applied: the first upgrade after adopting
    # a hand-applied CRD takes them over with --force-conflicts, as documented.
    later_chart = str(chart_with_changed_crd(tmp_path))
    refused = cluster.helm("upgrade", "first", later_chart, "-n", ns)
    assert refused.returncode != 0
    assert 'conflict with "kubectl": .spec.versions' in refused.stderr, refused.stderr
    done = cluster.helm("upgrade", "first", later_chart, "-n", ns, "--force-conflicts")
    assert done.returncode == 0, done.stderr
    eventually(
        "the upgraded CRD's new printer column", lambda: EXTRA_COLUMN["name"] in columns(live_crd(cluster))
    )

    # 3. Uninstall keeps the CRD (helm.sh/resource-policy: keep) and so every LlamaService.
    done = cluster.helm("uninstall", "first", "-n", ns)
    assert done.returncode == 0, done.stderr
    assert "kept" in done.stdout + done.stderr, "helm says it kept the CRD"
    assert cluster.llamaservice("kept", ns) is not None
    assert EXTRA_COLUMN["name"] in columns(live_crd(cluster))

    # 4. Another release name: refused, naming the old owner; --take-ownership installs it.
    refused = cluster.helm(*install, "second", str(CHART))
    assert refused.returncode != 0
    assert 'must equal "second": current value is "first"' in refused.stderr, refused.stderr
    done = cluster.helm(*install, "--take-ownership", "second", str(CHART))
    assert done.returncode == 0, done.stderr
    crd = live_crd(cluster)
    assert owner(crd) == ("second", ns)
    # Its CRD is this chart's: the column only the later chart had is gone (helm owned it).
    expected = yaml.safe_load(CRD_FILE.read_text())
    assert columns(crd) == columns(expected)
    assert cluster.llamaservice("kept", ns) is not None

    # 5. crds.install=false: a release that leaves the CRD to whoever manages it.
    done = cluster.helm(*install, "--set", "crds.install=false", "third", str(CHART))
    assert done.returncode == 0, done.stderr
    assert owner(live_crd(cluster)) == ("second", ns)
    done = cluster.helm("uninstall", "third", "-n", ns)
    assert done.returncode == 0, done.stderr
    assert cluster.get("crd", CRD_NAME, "default") is not None

    # The session's CRD, as crds/ has it.
    live = live_crd(cluster)
    assert live["spec"]["versions"] == expected["spec"]["versions"]
