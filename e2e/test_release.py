"""A release you can install from: `make release VERSION=...` on a scratch copy of this tree builds the
operator image without Docker (buildah on a Debian base), runs it, pushes it and the packaged chart to a
real OCI registry (CNCF distribution on 127.0.0.1), and `helm install oci://...` deploys that chart into
the local cluster with the released image. The chart's image values are checked by `helm template`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import string
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagebuild import registry as oci_registry
from imagebuild.image import IMAGE_NAME, OPERATOR_UID
from imagebuild.release import CHART_DIR, changelog_section, python_version
from localcluster.util import ClusterError
from support import Cluster, repo_root, require_tool, require_tools

pytestmark = [pytest.mark.e2e, pytest.mark.beside_operators]

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


def scratch_copy(dest: Path) -> Path:
    """This tree's tracked and unignored files (as they are now), so a release can rewrite versions."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo_root(),
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        source = repo_root() / raw.decode()
        if source.is_file():
            target = dest / raw.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)  # labels name a revision; none here
    return dest


def get(url: str, accept: str = "application/json") -> tuple[dict[str, Any], dict[str, str]]:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read()), dict(reply.headers)


def helm() -> str:
    return str(require_tool("helm"))


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[oci_registry.Registry]:
    require_tool("registry")
    with oci_registry.serving(tmp_path_factory.mktemp("registry")) as served:
        yield served


@pytest.fixture(scope="module")
def released(
    registry: oci_registry.Registry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, Any], Path]]:
    """`make release` as written, on a scratch copy whose CHANGELOG.md has the new version's section. The
    built image leaves buildah's storage afterwards (its layer cache stays)."""
    require_tools("buildah", "mmdebstrap", "image-base", "image-wheelhouse", "helm")  # what the release runs
    version = f"0.1.1-rc.{uuid.uuid4().int % 10**6}"
    scratch = scratch_copy(tmp_path_factory.mktemp("tree"))
    changelog = scratch / "CHANGELOG.md"
    text = changelog.read_text()
    changelog.write_text(
        text.replace("## [Unreleased]\n", f"## [Unreleased]\n\n## [{version}]\n\n- e2e\n", 1)
    )
    done = subprocess.run(
        ["make", "release", f"VERSION={version}", f"REGISTRY={registry.host}"],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    result = json.loads((scratch / "dist" / f"release-{version}.json").read_text())
    yield version, result, scratch
    subprocess.run(["buildah", "rmi", f"localhost/{IMAGE_NAME}:{version}"], capture_output=True, check=False)


def test_release_refuses_a_version_without_a_changelog_section(tmp_path: Path) -> None:
    scratch = scratch_copy(tmp_path)
    done = subprocess.run(
        ["make", "release", "VERSION=9.9.9", "REGISTRY=127.0.0.1:1"],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "CHANGELOG.md has no '## [9.9.9]' section" in done.stderr, done.stderr[-2000:]
    assert "version: 0.1.0" in (scratch / "charts/llama-operator/Chart.yaml").read_text()  # nothing rewritten
    done = subprocess.run(
        ["make", "release", "VERSION=1.2"],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "is not a release version" in done.stderr, done.stderr[-2000:]


def test_the_changelog_has_the_charts_version() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"]
    assert changelog_section(chart["version"])
    with pytest.raises(ClusterError):
        changelog_section("0.1.0", "## [0.1.0] - 2026-01-01\n\n## [0.0.9]\n- x\n")  # an empty section


def test_the_released_image_runs_and_describes_itself(released: tuple[str, dict[str, Any], Path]) -> None:
    version, result, scratch = released
    chart = yaml.safe_load((scratch / "charts/llama-operator/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (version, version)
    assert f'version = "{python_version(version)}"' in (scratch / "pyproject.toml").read_text()
    image = json.loads((scratch / "dist" / f"{IMAGE_NAME}-{version}.image.json").read_text())
    assert (
        image["version_output"] == f"llama-operator {python_version(version)}"
    )  # its entrypoint, run from the image
    assert 50 * 2**20 < image["compressed_bytes"] < 200 * 2**20, image
    assert image["size_bytes"] > image["compressed_bytes"]
    sbom = json.loads(Path(result["sbom"]).read_text())
    assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.5"
    assert sbom["metadata"]["component"]["version"] == version
    purls = {c["purl"] for c in sbom["components"]}
    lock = (repo_root() / "images/operator/requirements.lock").read_text()
    for line in lock.splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, pinned = line.split()[0].partition("==")
            assert f"pkg:pypi/{name.lower()}@{pinned}" in purls, name
    assert any(p.startswith("pkg:deb/debian/python3.11@") for p in purls), "no Debian python3.11 in the SBOM"
    assert any(p.startswith("pkg:deb/debian/libc6@") for p in purls)


def test_the_registry_serves_the_image_with_its_labels(
    registry: oci_registry.Registry, released: tuple[str, dict[str, Any], Path]
) -> None:
    version, result, _ = released
    assert result["image"] == f"{registry.host}/{IMAGE_NAME}:{version}"
    manifest, headers = get(f"http://{registry.host}/v2/{IMAGE_NAME}/manifests/{version}", MANIFEST_TYPES)
    assert headers.get("Docker-Content-Digest") == result["image_digest"]
    config, _ = get(f"http://{registry.host}/v2/{IMAGE_NAME}/blobs/{manifest['config']['digest']}")
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.title"] == IMAGE_NAME
    for key in ("revision", "created", "source", "licenses", "base.name", "base.digest"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert config["config"]["User"] == str(OPERATOR_UID)
    assert config["config"]["Entrypoint"] == ["llama-operator"]
    # Build arguments do not become the image's environment.
    assert not any(e.startswith(("PIP_NO_INDEX", "PIP_FIND_LINKS")) for e in config["config"].get("Env", []))
    tags, _ = get(f"http://{registry.host}/v2/charts/llama-operator/tags/list")
    assert version.replace("+", "_") in tags["tags"]


DOC = repo_root() / "docs" / "install.md"
DOC_MARKER = "<!-- commands: run by e2e/test_release.py -->"


def install_md_blocks() -> list[list[str]]:
    """docs/install.md's command blocks that name this test, continuation lines joined."""
    lines = DOC.read_text().splitlines()
    blocks: list[list[str]] = []
    for i, line in enumerate(lines):
        if line.strip() != DOC_MARKER:
            continue
        assert lines[i + 1].startswith("```"), f"install.md:{i + 2}: no code block after the marker"
        commands, pending = [], ""
        for body in lines[i + 2 :]:
            if body.startswith("```"):
                break
            pending += body.rstrip("\\").strip() + " "
            if not body.endswith("\\"):
                commands.append(pending.strip())
                pending = ""
        blocks.append(commands)
    return blocks


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[oci_registry.Registry]:
    require_tool("registry")
    with oci_registry.serving(tmp_path_factory.mktemp("mirror")) as served:
        yield served


def test_install_md_mirrors_the_release_and_installs_it_from_the_mirror(
    cluster: Cluster,
    registry: oci_registry.Registry,
    mirror: oci_registry.Registry,
    released: tuple[str, dict[str, Any], Path],
    tmp_path: Path,
) -> None:
    """install.md's mirror and install blocks as written, with $SOURCE the release's registry, $MIRROR a
    second one, and what a local registry and a shared cluster need: plain HTTP (skopeo's
    --src/dest-tls-verify=false, helm's --plain-http), and the install's own release name and namespace with
    crds.install=false (the session's CRD is the cluster's)."""
    version, result, _ = released
    blocks = install_md_blocks()
    assert [len(b) for b in blocks] == [3, 1], blocks
    env = {
        **os.environ,
        "SOURCE": registry.host,
        "MIRROR": mirror.host,
        "VERSION": version,
    }
    require_tool("skopeo")
    release, namespace = f"rel-{uuid.uuid4().hex[:6]}", f"e2e-release-{uuid.uuid4().hex[:6]}"
    try:
        for command in [*blocks[0], *blocks[1]]:
            argv = [string.Template(a).substitute(env) for a in shlex.split(command)]
            if argv[:2] == ["skopeo", "copy"]:
                argv[2:2] = ["--src-tls-verify=false", "--dest-tls-verify=false"]
            if argv[0] == "helm":
                argv = [helm(), *argv[1:], "--plain-http"]
                if argv[1] == "install":
                    assert argv[2] == "llama-operator" and argv[argv.index("-n") + 1] == "llama-operator"
                    argv[2] = release
                    argv[argv.index("-n") + 1] = namespace
                    argv += ["--set", "crds.install=false", f"--kubeconfig={cluster.info.kubeconfig}"]
            done = subprocess.run(
                argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
            )
            assert done.returncode == 0, f"{command}: {done.stderr[-3000:]}"
        mirrored = f"{mirror.host}/{IMAGE_NAME}:{version}"
        _, headers = get(f"http://{mirror.host}/v2/{IMAGE_NAME}/manifests/{version}", MANIFEST_TYPES)
        assert headers.get("Docker-Content-Digest") == result["image_digest"], "the mirror changed the digest"
        deployments = json.loads(cluster.kubectl("-n", namespace, "get", "deployments", "-o", "json").stdout)
        images = {
            d["metadata"]["name"]: [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
            for d in deployments["items"]
        }
        assert images == {f"{release}-llama-operator": [mirrored]}, images
        labels = {d["metadata"]["labels"].get("helm.sh/chart") for d in deployments["items"]}
        assert labels == {f"llama-operator-{version}"}
        metadata = json.loads(cluster.helm("get", "metadata", release, "-n", namespace, "-o", "json").stdout)
        assert (metadata["chart"], metadata["version"], metadata["appVersion"]) == (
            "llama-operator",
            version,
            version,
        )
    finally:
        cluster.helm("uninstall", release, "-n", namespace)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_helm_installs_the_released_chart_with_both_images(
    cluster: Cluster, registry: oci_registry.Registry, released: tuple[str, dict[str, Any], Path]
) -> None:
    """`helm install oci://` from the release's registry, the activator on: both Deployments name the
    released image."""
    version, result, _ = released
    release, namespace = f"rel-{uuid.uuid4().hex[:6]}", f"e2e-release-{uuid.uuid4().hex[:6]}"
    try:
        done = cluster.helm(
            "install",
            release,
            result["chart"],
            "--version",
            version,
            "--plain-http",
            "-n",
            namespace,
            "--create-namespace",
            "--set",
            "crds.install=false",
            "--set",
            f"image.repository={registry.host}/{IMAGE_NAME}",
            "--set",
            "activator.enabled=true",
            "--set",
            f"watchNamespaces={namespace}",
        )
        assert done.returncode == 0, done.stderr
        deployments = json.loads(cluster.kubectl("-n", namespace, "get", "deployments", "-o", "json").stdout)
        images = {
            d["metadata"]["name"]: [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
            for d in deployments["items"]
        }
        assert images == {
            f"{release}-llama-operator": [result["image"]],
            f"{release}-llama-operator-activator": [result["image"]],
        }, images
    finally:
        cluster.helm("uninstall", release, "-n", namespace)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def helm_template(*sets: str) -> dict[str, list[str]]:
    done = subprocess.run(
        [
            helm(),
            "template",
            "r",
            str(CHART_DIR),
            "--set",
            "activator.enabled=true",
            *[arg for s in sets for arg in ("--set", s)],
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        d["metadata"]["name"]: [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
        for d in yaml.safe_load_all(done.stdout)
        if d and d["kind"] == "Deployment"
    }


def test_operator_and_activator_images_are_separate_values() -> None:
    digest = "sha256:" + "a" * 64
    default = "ghcr.io/llama-operator/llama-operator:0.1.0"
    assert helm_template() == {"r-llama-operator": [default], "r-llama-operator-activator": [default]}
    assert helm_template("activator.image.tag=2.0.0")["r-llama-operator-activator"] == [
        "ghcr.io/llama-operator/llama-operator:2.0.0"
    ]
    separate = helm_template("activator.image.repository=mirror.example/act", "image.tag=1.1.0")
    assert separate == {
        "r-llama-operator": ["ghcr.io/llama-operator/llama-operator:1.1.0"],
        "r-llama-operator-activator": ["mirror.example/act:1.1.0"],
    }
    pinned = helm_template(f"activator.image.digest={digest}")
    assert pinned["r-llama-operator-activator"] == [f"ghcr.io/llama-operator/llama-operator@{digest}"]
    assert pinned["r-llama-operator"] == [default]
    both = helm_template(f"image.digest={digest}")  # the activator follows the operator's pin
    assert set(map(tuple, both.values())) == {(f"ghcr.io/llama-operator/llama-operator@{digest}",)}


def test_release_versions_are_semver_and_python_versions() -> None:
    assert python_version("1.2.3") == "1.2.3"
    assert python_version("1.2.3-rc.4") == "1.2.3rc4"
    assert python_version("0.10.0-alpha.0") == "0.10.0a0"
    for refused in ("1.2", "v1.2.3", "1.2.3-e2e.1", "01.2.3", "1.2.3+build"):
        with pytest.raises(ClusterError, match="not a release version"):
            python_version(refused)
