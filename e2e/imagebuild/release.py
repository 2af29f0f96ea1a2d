"""`make release VERSION=x.y.z`: the chart and the image at one version, pushed to an OCI registry."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass

from imagebuild import image, registry
from localcluster.binaries import ensure_kubectl_helm
from localcluster.config import REPO_ROOT, cache_paths
from localcluster.util import ClusterError, run, say

CHART_DIR = REPO_ROOT / "charts" / "llama-operator"
CHART_YAML = CHART_DIR / "Chart.yaml"
PYPROJECT = REPO_ROOT / "pyproject.toml"
CHANGELOG = REPO_ROOT / "CHANGELOG.md"
# Semantic versioning, as Helm requires of chart versions, limited to what is also a Python (PEP 440) version
# for the package inside the image: x.y.z, or a pre-release x.y.z-alpha.N, -beta.N, -rc.N.
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-(alpha|beta|rc)\.(0|[1-9]\d*))?$")
PEP440_PRE = {"alpha": "a", "beta": "b", "rc": "rc"}


def python_version(version: str) -> str:
    """The package's version for a release version: 1.2.3-rc.4 -> 1.2.3rc4."""
    match = SEMVER.match(version)
    if not match:
        raise ClusterError(
            f"VERSION={version!r} is not a release version (x.y.z, or x.y.z-alpha.N, -beta.N, -rc.N)"
        )
    major, minor, patch, pre, number = match.groups()
    return f"{major}.{minor}.{patch}" + (f"{PEP440_PRE[pre]}{number}" if pre else "")


def helm() -> str:
    return shutil.which("helm") or str(ensure_kubectl_helm(cache_paths())[1])


def changelog_section(version: str, text: str | None = None) -> str:
    """The body of CHANGELOG.md's `## [version]` section; a release without one is refused."""
    text = CHANGELOG.read_text() if text is None else text
    match = re.search(
        rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL
    )
    if not match or not match.group(1).strip():
        raise ClusterError(
            f"CHANGELOG.md has no '## [{version}]' section saying what changed: write it first"
        )
    return match.group(1).strip()


def set_version(version: str) -> None:
    """Chart.yaml's version and appVersion, and pyproject.toml's version (what `--version` prints)."""
    chart = CHART_YAML.read_text()
    chart = re.sub(r"^version: .*$", f"version: {version}", chart, count=1, flags=re.MULTILINE)
    chart = re.sub(r"^appVersion: .*$", f'appVersion: "{version}"', chart, count=1, flags=re.MULTILINE)
    CHART_YAML.write_text(chart)
    project = PYPROJECT.read_text()
    PYPROJECT.write_text(
        re.sub(
            r'^version = ".*"$',
            f'version = "{python_version(version)}"',
            project,
            count=1,
            flags=re.MULTILINE,
        )
    )


@dataclass(frozen=True)
class Release:
    version: str
    registry: str
    image: str  # REGISTRY/llama-operator:VERSION
    image_digest: str  # sha256:... of the pushed manifest
    chart: str  # oci://REGISTRY/charts/llama-operator
    chart_package: str
    sbom: str


def release(version: str, registry_host: str | None = None, *, chart_repo: str = "charts") -> Release:
    package_version = python_version(version)
    changelog_section(version)
    set_version(version)
    built = image.build(version)
    if built.version_output != f"llama-operator {package_version}":
        raise ClusterError(f"the image says {built.version_output!r}, not llama-operator {package_version}")
    dist = REPO_ROOT / "dist"
    run([helm(), "lint", str(CHART_DIR)])
    packaged = run([helm(), "package", str(CHART_DIR), "--destination", str(dist)]).stdout
    package = dist / f"llama-operator-{version}.tgz"
    if not package.exists():
        raise ClusterError(f"helm package wrote no {package}: {packaged}")
    host = registry_host or registry.up().host
    plain = host.startswith(("127.", "localhost"))
    target = f"{host}/llama-operator:{version}"
    digest_file = dist / f"llama-operator-{version}.digest"
    run(
        [
            "buildah",
            "push",
            *(["--tls-verify=false"] if plain else []),
            "--digestfile",
            str(digest_file),
            built.name,
            f"docker://{target}",
        ]
    )
    chart_ref = f"oci://{host}/{chart_repo}"
    run([helm(), "push", str(package), chart_ref, *(["--plain-http"] if plain else [])])
    result = Release(
        version=version,
        registry=host,
        image=target,
        image_digest=digest_file.read_text().strip(),
        chart=f"{chart_ref}/llama-operator",
        chart_package=str(package),
        sbom=built.sbom,
    )
    (dist / f"release-{version}.json").write_text(json.dumps(asdict(result), indent=1) + "\n")
    say(f"release {version}: image {target}@{result.image_digest}, chart {result.chart} --version {version}")
    return result
