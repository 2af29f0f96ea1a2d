"""The operator's image and release, built without Docker: `python3 -m imagebuild` (PYTHONPATH=e2e).

- base: a Debian bookworm root filesystem from Debian's packages (mmdebstrap): python3 3.11, pip,
  passwd, ca-certificates. Cached under ~/.cache/llama-operator/image/ by its package list.
- image: images/operator/Dockerfile built by buildah (--isolation=chroot: this sandbox has no cgroup
  delegation for crun) on that base, pinned by its image ID; OCI labels; run from the built image
  (its entrypoint with --version and run --help); exported as an OCI archive; CycloneDX SBOM.
- registry: CNCF distribution's `registry` (Go module proxy), on 127.0.0.1 only.
- release: chart version/appVersion and pyproject's version, CHANGELOG section checked, `helm package`,
  chart and image pushed to an OCI registry.

Only the standard library: like e2e/localcluster, it runs before any venv exists.
"""
