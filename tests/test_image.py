"""The operator image installs exactly its lockfiles: pinned versions with hashes, the base image chosen by the build,
and the lockfiles are what `make image-lock` (uv pip compile) gives for pyproject.toml."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
IMAGE_DIR = REPO / "images" / "operator"
DOCKERFILE = IMAGE_DIR / "Dockerfile"
RUNTIME_LOCK = IMAGE_DIR / "requirements.lock"
BUILD_LOCK = IMAGE_DIR / "build-requirements.lock"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

LOCK_ENTRY = re.compile(r"^([A-Za-z0-9._-]+)==([^\s\\]+)")


def locked(path: Path) -> dict[str, tuple[Version, list[str]]]:
    """name -> (version, hashes) of a pip requirements file with hashes."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    current: str | None = None
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        entry = LOCK_ENTRY.match(stripped)
        if entry:
            current = canonicalize_name(entry.group(1))
            entries[current] = (Version(entry.group(2)), [])
        elif stripped.startswith("--hash=sha256:"):
            assert current is not None, f"{path.name}: a hash before any requirement"
            entries[current][1].append(stripped.removeprefix("--hash=").rstrip(" \\"))
        else:
            pytest.fail(f"{path.name}: not a pinned requirement or a hash: {line!r}")
    return entries


def dockerfile_instructions() -> list[str]:
    """Instructions with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_base_image_is_given_by_the_build_pinned() -> None:
    """No base digest is written in the Dockerfile (the one it had was copied, never resolved): every stage
    starts from PYTHON_IMAGE, which has no default, and `make image` passes the image ID (sha256 of the
    config) of the Debian base it built itself (e2e/imagebuild/image.py). Docker users pass one they
    resolved."""
    args = {}
    for line in dockerfile_instructions():
        if line.startswith("ARG "):
            name, _, default = line.removeprefix("ARG ").partition("=")
            args[name] = default
    assert args.get("PYTHON_IMAGE") == "", "PYTHON_IMAGE has a default base: the build must choose it"
    images = [line.split()[1] for line in dockerfile_instructions() if line.startswith("FROM ")]
    assert images and all(image == "${PYTHON_IMAGE}" for image in images), images
    build = (REPO / "e2e" / "imagebuild" / "image.py").read_text()
    assert 'f"PYTHON_IMAGE={base.image_id}"' in build


def test_dockerfile_installs_exactly_the_lockfiles() -> None:
    installs = [line for line in dockerfile_instructions() if "pip install" in line or "pip wheel" in line]
    for lock in (RUNTIME_LOCK, BUILD_LOCK):
        assert any(f"--require-hashes --no-deps -r /tmp/{lock.name}" in line for line in installs), (
            f"the Dockerfile does not install {lock.name} with --require-hashes --no-deps"
        )
        assert f"COPY images/operator/{lock.name} /tmp/" in dockerfile_instructions()
    for line in installs:
        for command in re.findall(r"pip (?:install|wheel)[^&]*", line):
            # Nothing else may resolve dependencies from an index: each pip either checks hashes or
            # installs without dependencies (the package's own wheel, built from this tree).
            assert "--require-hashes" in command or "--no-deps" in command, command
            if "--require-hashes" not in command:
                assert "-r " not in command and "--upgrade" not in command, command
    assert any("pip check" in line for line in installs), "the image does not check its dependencies"


def test_the_image_holds_only_the_runtime() -> None:
    """The wheel is built from operator/llama_operator alone: the bench (operator/llama_bench) stays out."""
    sources = [
        source
        for line in dockerfile_instructions()
        if line.startswith("COPY ") and "--from=" not in line
        for source in line.split()[1:-1]
    ]
    packages = [source for source in sources if source.startswith("operator")]
    assert packages == ["operator/llama_operator"], f"the image copies {packages}, not the runtime alone"
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    bench_scripts = [name for name, target in scripts.items() if target.startswith("llama_bench")]
    for name in bench_scripts:  # declared by the distribution, their package absent: removed
        assert any(f'rm "$(command -v {name})"' in line for line in dockerfile_instructions()), name


def test_every_lock_entry_is_pinned_with_hashes() -> None:
    for lock in (RUNTIME_LOCK, BUILD_LOCK):
        entries = locked(lock)
        assert entries, f"{lock.name} is empty"
        for name, (_, hashes) in entries.items():
            assert hashes, f"{lock.name}: {name} has no --hash"
            assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), (name, hashes)


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [
        (RUNTIME_LOCK, PYPROJECT["project"]["dependencies"]),
        (BUILD_LOCK, PYPROJECT["build-system"]["requires"]),
    ],
    ids=["runtime", "build"],
)
def test_every_dependency_is_locked_within_its_range(lock: Path, requirements: list[str]) -> None:
    entries = locked(lock)
    for raw in requirements:
        requirement = Requirement(raw)
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{raw} (pyproject.toml) is not in {lock.name}: run `make image-lock`"
        version = entries[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{lock.name} has {name}=={version}, outside pyproject.toml's {raw}: run `make image-lock`"
        )


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
    except OSError:
        return False
    return True


def test_lockfiles_are_what_make_image_lock_writes(tmp_path: Path) -> None:
    """The Makefile's own uv commands, constrained to the locked versions (uv would otherwise keep the
    hashes already in its output file, unchecked), give the lockfiles again: each hash is PyPI's, nothing
    is missing or left over, and every locked version satisfies pyproject.toml."""
    if not pypi_reachable():
        if os.environ.get("CI"):
            pytest.fail("CI needs PyPI to check the lockfiles (uv pip compile)")
        pytest.skip("PyPI is unreachable: cannot recompile the lockfiles")
    assert (REPO / ".venv" / "bin" / "uv").exists() or shutil.which("uv"), "uv is missing (make setup)"
    recipe = subprocess.run(
        ["make", "-n", "-s", "image-lock", "VENV=.venv"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    commands = [line for line in recipe.replace("\\\n", "").splitlines() if "uv pip compile" in line]
    assert len(commands) == 2, recipe
    for command in commands:
        (lock,) = [lock for lock in (RUNTIME_LOCK, BUILD_LOCK) if f"images/operator/{lock.name}" in command]
        pins = tmp_path / f"{lock.name}.pins"
        pins.write_text("".join(f"{name}=={version}\n" for name, (version, _) in locked(lock).items()))
        fresh = tmp_path / lock.name
        redirected = command.replace(f"images/operator/{lock.name}", str(fresh)) + f" -c {pins}"
        done = subprocess.run(redirected, shell=True, cwd=REPO, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{lock.name}: the locked versions do not resolve: {done.stderr}"
        # Compared as pins and hashes: the fresh file's comments cite the constraints file.
        assert locked(fresh) == locked(lock), f"{lock.name} is stale: run `make image-lock` and commit it"
