"""The release workflow (.github/workflows/release.yml) for the project's CI host: actionlint (with
shellcheck on its scripts) finds nothing, it builds the image for amd64 and arm64 with an SBOM and signs it
without a key, pushes the chart as an OCI artefact, and its version check passes on the versions this
checkout holds and refuses any other tag. actionlint is built by the set-up step (`e2e/cluster.sh test-tools`),
never by this test."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import repo_root, require_tool

pytestmark = pytest.mark.beside_operators

WORKFLOW = repo_root() / ".github" / "workflows" / "release.yml"


@pytest.fixture(scope="module")
def actionlint() -> Path:
    return require_tool("actionlint")


def lint(actionlint: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(actionlint), "-no-color", *map(str, files)],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def test_actionlint_finds_nothing(actionlint: Path) -> None:
    done = lint(actionlint, WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_would_say_so(actionlint: Path, tmp_path: Path) -> None:
    # The same workflow with a job output that names a step it does not have: actionlint must refuse it.
    broken = tmp_path / "release.yml"
    broken.write_text(
        WORKFLOW.read_text().replace(
            "steps.build.outputs.digest }}\n", "steps.nobuild.outputs.digest }}\n", 1
        )
    )
    done = lint(actionlint, broken)
    assert done.returncode != 0 and "nobuild" in done.stdout, done.stdout


def steps(job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow()["jobs"][job]["steps"]
    return found


def test_the_image_is_multi_arch_with_an_sbom_and_a_keyless_signature() -> None:
    image = workflow()["jobs"]["image"]
    assert image["permissions"]["id-token"] == "write"  # Sigstore's OIDC identity, no key
    (build,) = [s for s in steps("image") if str(s.get("uses", "")).startswith("docker/build-push-action@")]
    assert set(build["with"]["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["with"]["file"] == "images/operator/Dockerfile" and build["with"]["sbom"] is True
    scripts = "\n".join(str(s.get("run", "")) for s in steps("image"))
    assert 'cosign sign --yes "${IMAGE}"' in scripts and "cosign attest --yes --type cyclonedx" in scripts
    assert any(str(s.get("uses", "")).startswith("anchore/sbom-action@") for s in steps("image"))


def test_the_chart_is_pushed_as_an_oci_artefact_and_signed() -> None:
    (script,) = [str(s["run"]) for s in steps("chart") if "run" in s]
    assert 'helm push "dist/llama-operator-${VERSION}.tgz" "oci://${repository}"' in script
    assert "cosign sign --yes" in script


def version_check(tag: str) -> subprocess.CompletedProcess[str]:
    (check,) = [s for s in steps("version") if s.get("id") == "version"]
    output = repo_root() / ".pytest-github-output"
    try:
        return subprocess.run(
            ["bash", "-eo", "pipefail", "-c", check["run"]],
            cwd=repo_root(),
            env={**os.environ, "GITHUB_REF_NAME": tag, "GITHUB_OUTPUT": str(output)},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        output.unlink(missing_ok=True)


def test_the_version_check_takes_this_checkouts_version_and_refuses_another() -> None:
    chart = yaml.safe_load((repo_root() / "charts" / "llama-operator" / "Chart.yaml").read_text())
    assert version_check(f"v{chart['version']}").returncode == 0
    assert version_check("v9.9.9").returncode != 0
