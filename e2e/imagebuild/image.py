"""Build the operator image with buildah on a base made from Debian's packages, run it, describe it."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

from localcluster import util
from localcluster.config import REPO_ROOT, cache_dir
from localcluster.util import ClusterError, apt_install, file_lock, fmt_duration, run, run_logged, say

IMAGE_DIR = REPO_ROOT / "images" / "operator"
DOCKERFILE = IMAGE_DIR / "Dockerfile"
DIST = REPO_ROOT / "dist"
IMAGE_NAME = "llama-operator"
SOURCE_URL = "https://github.com/llama-operator/llama-operator"

# The base: what python:3.11-slim gives the Dockerfile (python, pip, useradd, CA certificates), from
# Debian's own packages at the suites' current versions (security updates included).
DEBIAN_SUITE = "bookworm"
DEBIAN_SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_PACKAGES = ("python3", "python-is-python3", "python3-pip", "passwd", "ca-certificates")
# Documentation, manuals and translations are not needed in an image.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
# Debian's python3 marks itself externally managed; the image has no other Python to protect.
BASE_ENV = ("PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
OPERATOR_UID = 65532


def log(msg: str) -> None:
    say(f"image: {msg}")


def package_version() -> str:
    return str(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"])


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def ensure_tools() -> None:
    apt_install("buildah", Path("/usr/bin/buildah"))
    apt_install("mmdebstrap", Path("/usr/bin/mmdebstrap"))


def buildah(*args: str) -> str:
    return run(["buildah", *args]).stdout.strip()


def wheelhouse() -> Path:
    """Every locked wheel, downloaded on this machine (its pip, its trust store) with the lockfiles'
    hashes checked, for the build to install without an index (cached; pip skips files it has)."""
    house = wheelhouse_dir()
    house.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:"]
    for lock in wheelhouse_missing(house):
        util.may_build(f"the image's wheels locked in {lock.name}")
        run([*pip, "-d", str(house), "-r", str(lock)], env={**os.environ, "PIP_FIND_LINKS": ""})
    return house


def wheelhouse_dir() -> Path:
    return cache_dir() / "image" / "wheelhouse"


def wheelhouse_missing(house: Path) -> list[Path]:
    """The lockfiles some pin of which has no file in `house` with one of its hashes (pip must fetch it)."""
    have = {hashlib.sha256(wheel.read_bytes()).hexdigest() for wheel in house.glob("*.whl")}
    return [
        lock
        for lock in (IMAGE_DIR / "requirements.lock", IMAGE_DIR / "build-requirements.lock")
        if not all(have & set(hashes) for _, _, hashes in _locked(lock))
    ]


def base_key() -> str:
    spec = json.dumps([DEBIAN_SUITE, DEBIAN_SOURCES, BASE_PACKAGES, DPKG_EXCLUDES, BASE_ENV])
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def image_id(name: str) -> str | None:
    done = subprocess.run(
        ["buildah", "images", "--noheading", "--no-trunc", "--format", "{{.ID}}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    ids = done.stdout.split()
    return ids[0] if done.returncode == 0 and ids else None


@dataclass(frozen=True)
class Base:
    name: str  # localhost/llama-operator-base:<key>
    image_id: str  # sha256 of its config: what the Dockerfile's FROM is pinned to
    rootfs: Path
    packages: list[tuple[str, str, str]]  # dpkg name, version, architecture


def base_rootfs() -> Path:
    """The base's root filesystem tar in the cache (its dpkg list beside it, with the suffix .dpkg.json)."""
    return cache_dir() / "image" / f"base-{DEBIAN_SUITE}-{base_key()}.tar"


def ensure_base(refresh: bool = False) -> Base:
    """The Debian base: mmdebstrap's root filesystem tar (cached), committed as a buildah image."""
    key = base_key()
    cache = cache_dir() / "image"
    rootfs = base_rootfs()
    packages_file = rootfs.with_suffix(".dpkg.json")
    name = f"localhost/{IMAGE_NAME}-base:{DEBIAN_SUITE}-{key}"
    with file_lock(cache_dir() / "locks" / "image-base.lock", "image base"):
        if refresh or not rootfs.exists() or not packages_file.exists():
            util.may_build(f"the image's Debian base {rootfs}")
            cache.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            tmp = rootfs.with_name(f".tmp{os.getpid()}-{rootfs.name}")  # mmdebstrap: a tar by its suffix
            epoch = git("log", "-1", "--format=%ct") or str(int(time.time()))
            run_logged(
                [
                    "mmdebstrap",
                    "--mode=root",
                    "--variant=essential",
                    f"--include={','.join(BASE_PACKAGES)}",
                    *[f"--dpkgopt={opt}" for opt in DPKG_EXCLUDES],
                    DEBIAN_SUITE,
                    str(tmp),
                    *DEBIAN_SOURCES,
                ],
                log=cache_dir() / "logs" / "image-base.log",
                what=f"mmdebstrap {DEBIAN_SUITE} ({', '.join(BASE_PACKAGES)})",
                env={**os.environ, "SOURCE_DATE_EPOCH": epoch},
            )
            listed = dpkg_list(tmp)
            tmp.replace(rootfs)
            packages_file.write_text(json.dumps(listed, indent=1) + "\n")
            log(f"base root filesystem {rootfs} in {fmt_duration(time.monotonic() - t0)}")
            refresh = True
        packages = [(p[0], p[1], p[2]) for p in json.loads(packages_file.read_text())]
        existing = image_id(name)
        if existing is None or refresh:
            container = buildah("from", "scratch")
            try:
                buildah("add", container, str(rootfs), "/")
                buildah(
                    "config",
                    *[arg for env in BASE_ENV for arg in ("--env", env)],
                    "--env",
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "--cmd",
                    "python3",
                    "--label",
                    f"org.opencontainers.image.description=Debian {DEBIAN_SUITE} with {' '.join(BASE_PACKAGES)}",
                    container,
                )
                buildah("commit", "--rm", container, name)
            except Exception:
                subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
                raise
            existing = image_id(name)
            assert existing is not None, name
            log(f"base image {name} ({existing[:12]})")
    return Base(name=name, image_id=existing, rootfs=rootfs, packages=packages)


def dpkg_list(rootfs_tar: Path) -> list[list[str]]:
    """name, version, architecture of every package in the base, from its dpkg status file."""
    done = subprocess.run(
        ["tar", "-xOf", str(rootfs_tar), "./var/lib/dpkg/status"], capture_output=True, text=True, check=True
    )
    packages: list[list[str]] = []
    for stanza in done.stdout.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", stanza, re.MULTILINE))
        if "Package" in fields and fields.get("Status", "").endswith(" installed"):
            packages.append([fields["Package"], fields["Version"], fields["Architecture"]])
    return sorted(packages)


def labels(version: str, base: Base) -> dict[str, str]:
    epoch = int(git("log", "-1", "--format=%ct") or time.time())
    return {
        "org.opencontainers.image.title": IMAGE_NAME,
        "org.opencontainers.image.description": "Kubernetes operator that serves Llama models with vLLM",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": git("rev-parse", "HEAD") or "unknown",
        "org.opencontainers.image.created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
        "org.opencontainers.image.source": SOURCE_URL,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.base.name": base.name,
        "org.opencontainers.image.base.digest": base.image_id,
    }


@dataclass(frozen=True)
class BuildResult:
    name: str  # localhost/llama-operator:<version>
    image_id: str
    version: str
    archive: str  # OCI archive (what is pushed)
    sbom: str
    size_bytes: int  # the layers uncompressed
    compressed_bytes: int  # the layers as pushed (gzip)
    seconds: float
    version_output: str
    base_image_id: str


def build(version: str | None = None, *, refresh_base: bool = False) -> BuildResult:
    t0 = time.monotonic()
    version = version or package_version()
    ensure_tools()
    base = ensure_base(refresh_base)
    house = wheelhouse()
    name = f"localhost/{IMAGE_NAME}:{version}"
    epoch = git("log", "-1", "--format=%ct")
    label_args = [arg for k, v in labels(version, base).items() for arg in ("--label", f"{k}={v}")]
    run_logged(
        [
            "buildah",
            "bud",
            "--isolation=chroot",
            "--layers",
            "--pull=never",
            *(["--timestamp", epoch] if epoch else []),
            "--build-arg",
            f"PYTHON_IMAGE={base.image_id}",
            "--build-arg",
            "PIP_NO_INDEX=1",
            "--build-arg",
            "PIP_FIND_LINKS=/wheelhouse",
            "--volume",
            f"{house}:/wheelhouse:ro",
            *label_args,
            "-f",
            str(DOCKERFILE),
            "-t",
            name,
            str(REPO_ROOT),
        ],
        log=cache_dir() / "logs" / "image-build.log",
        what=f"buildah bud {name}",
        every=30,
    )
    built = image_id(name)
    if built is None:
        raise ClusterError(f"buildah reported success but has no image {name}")
    version_output = smoke(name)
    DIST.mkdir(exist_ok=True)
    archive = DIST / f"{IMAGE_NAME}-{version}.oci.tar"
    archive.unlink(missing_ok=True)
    buildah("push", name, f"oci-archive:{archive}:{IMAGE_NAME}:{version}")
    sbom = DIST / f"{IMAGE_NAME}-{version}.cdx.json"
    sbom.write_text(json.dumps(cyclonedx(version, base, built), indent=1) + "\n")
    compressed, size = archive_sizes(archive)
    result = BuildResult(
        name=name,
        image_id=built,
        version=version,
        archive=str(archive),
        sbom=str(sbom),
        size_bytes=size,
        compressed_bytes=compressed,
        seconds=round(time.monotonic() - t0, 1),
        version_output=version_output,
        base_image_id=base.image_id,
    )
    (DIST / f"{IMAGE_NAME}-{version}.image.json").write_text(json.dumps(asdict(result), indent=1) + "\n")
    log(
        f"{name} {built[:12]}: {size / 2**20:.0f} MiB ({compressed / 2**20:.0f} MiB compressed) "
        f"in {fmt_duration(result.seconds)}; {archive.relative_to(REPO_ROOT)}, {sbom.relative_to(REPO_ROOT)}"
    )
    return result


def archive_sizes(archive: Path) -> tuple[int, int]:
    """(compressed, uncompressed) bytes of the layers of the one image in an OCI archive."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None, digest
            return member.read()

        index = json.loads(blob_text(tar, "index.json"))
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        compressed = uncompressed = 0
        for layer in manifest["layers"]:
            data = blob(layer["digest"])
            compressed += len(data)
            uncompressed += len(gzip.decompress(data)) if layer["mediaType"].endswith("gzip") else len(data)
    return compressed, uncompressed


def blob_text(tar: tarfile.TarFile, name: str) -> str:
    member = tar.extractfile(name)
    assert member is not None, name
    return member.read().decode()


def image_config(name: str) -> dict[str, object]:
    inspect = json.loads(buildah("inspect", "--type", "image", name))
    config = inspect["OCIv1"]["config"]
    assert isinstance(config, dict)
    return config


def run_in_image(name: str, args: list[str], *, entrypoint: bool = True) -> subprocess.CompletedProcess[str]:
    """The image's entrypoint (from its config) with `args`, as the image's user, in a container made
    from the image (chroot isolation); the container is removed afterwards."""
    config = image_config(name)
    command = [*(config.get("Entrypoint") or []), *args] if entrypoint else args  # type: ignore[misc]
    container = buildah("from", "--pull=never", name)
    try:
        return subprocess.run(
            [
                "buildah",
                "run",
                "--isolation=chroot",
                "--user",
                str(config.get("User", "")),
                container,
                "--",
                *command,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def smoke(name: str) -> str:
    """Run the entrypoint: --version and run --help must work as the image's non-root user."""
    config = image_config(name)
    if str(config.get("User")) != str(OPERATOR_UID):
        raise ClusterError(f"{name} runs as {config.get('User')!r}, not {OPERATOR_UID}")
    version = run_in_image(name, ["--version"])
    if version.returncode != 0:
        raise ClusterError(f"{name}: --version exited {version.returncode}: {version.stderr[-2000:]}")
    helped = run_in_image(name, ["run", "--help"])
    if helped.returncode != 0 or "--standalone" not in helped.stdout:
        raise ClusterError(f"{name}: run --help exited {helped.returncode}: {helped.stderr[-2000:]}")
    log(f"{name}: {version.stdout.strip()}; run --help ok")
    return version.stdout.strip()


def _locked(path: Path) -> list[tuple[str, str, list[str]]]:
    entries: list[tuple[str, str, list[str]]] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if m := re.match(r"^([A-Za-z0-9._-]+)==([^\s\\]+)", line):
            entries.append((m.group(1).lower(), m.group(2), []))
        elif line.startswith("--hash=sha256:") and entries:
            entries[-1][2].append(line.removeprefix("--hash=sha256:").rstrip(" \\"))
    return entries


def component(kind: str, name: str, version: str, purl: str, **more: object) -> dict[str, object]:
    """A CycloneDX component, referred to by its package URL."""
    return {"type": kind, "bom-ref": purl, "name": name, "version": version, "purl": purl, **more}


def cyclonedx(version: str, base: Base, built_id: str) -> dict[str, object]:
    """CycloneDX 1.5 JSON: the image, its Python packages (the lockfile's pins and hashes) and the base's
    Debian packages (dpkg's status), each with a package URL."""
    components = [component("application", "llama-operator", version, f"pkg:pypi/llama-operator@{version}")]
    for name, pinned, hashes in _locked(IMAGE_DIR / "requirements.lock"):
        components.append(
            component(
                "library",
                name,
                pinned,
                f"pkg:pypi/{name}@{pinned}",
                hashes=[{"alg": "SHA-256", "content": h} for h in hashes],
            )
        )
    for name, pinned, arch in base.packages:
        purl = f"pkg:deb/debian/{name}@{pinned}?arch={arch}&distro=debian-12"
        components.append(component("library", name, pinned, purl, group="debian"))
    epoch = int(git("log", "-1", "--format=%ct") or time.time())
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{_uuid_from(built_id)}",
        "version": 1,
        "metadata": {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
            "tools": {"components": [{"type": "application", "name": "llama-operator e2e/imagebuild"}]},
            "component": {
                "type": "container",
                "bom-ref": f"{IMAGE_NAME}@{built_id}",
                "name": IMAGE_NAME,
                "version": version,
                "hashes": [{"alg": "SHA-256", "content": built_id.removeprefix("sha256:")}],
            },
        },
        "components": components,
    }


def _uuid_from(digest: str) -> str:
    h = hashlib.sha256(digest.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-8{h[17:20]}-{h[20:32]}"
