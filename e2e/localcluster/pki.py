"""Certificates and keys for the control plane, made with the openssl command line.

One CA signs the apiserver's serving cert and every client cert; the service-account
signing key pair is separate, as in envtest and kubeadm.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from localcluster.util import ClusterError, apt_install, run, say

SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path


@dataclass(frozen=True)
class PKI:
    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def client(self, name: str) -> ClientCert:
        return ClientCert(self.dir / f"{name}.crt", self.dir / f"{name}.key")


# Client identities: (file name, CN, O). system:masters bypasses RBAC; the controller
# manager and scheduler get their own users, which RBAC's bootstrap policy already binds.
CLIENTS: tuple[tuple[str, str, str | None], ...] = (
    ("admin", "localcluster-admin", "system:masters"),
    ("kube-controller-manager", "system:kube-controller-manager", None),
    ("kube-scheduler", "system:kube-scheduler", None),
    # The apiserver's aggregation-layer proxy identity; giving the apiserver a
    # request-header CA also stops every component logging that it is missing.
    ("front-proxy-client", "front-proxy-client", None),
)


def _openssl() -> str:
    path = shutil.which("openssl")
    if path is None:
        apt_install("openssl", Path("/usr/bin/openssl"))
        path = shutil.which("openssl")
    if path is None:
        raise ClusterError("openssl is not installed (apt-get install openssl)")
    return path


def _sign(pki: PKI, csr: Path, out: Path, ext: str, days: int = 3650) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".ext", delete=False) as fh:
        fh.write(ext)
        ext_file = Path(fh.name)
    try:
        run(
            [
                _openssl(),
                "x509",
                "-req",
                "-in",
                csr,
                "-CA",
                pki.ca_cert,
                "-CAkey",
                pki.ca_key,
                "-CAcreateserial",
                "-out",
                out,
                "-days",
                str(days),
                "-sha256",
                "-extfile",
                ext_file,
            ]
        )
    finally:
        ext_file.unlink(missing_ok=True)


def _new_key(key: Path) -> None:
    """ECDSA P-256: as good as RSA here and generated in milliseconds, not seconds."""
    run([_openssl(), "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
    key.chmod(0o600)


def _key_and_csr(key: Path, csr: Path, subject: str) -> None:
    _new_key(key)
    run([_openssl(), "req", "-new", "-key", key, "-subj", subject, "-out", csr])


def ensure_pki(directory: Path) -> PKI:
    """Create whatever is missing; existing files are kept so restarts keep trusting them."""
    pki = PKI(directory)
    directory.mkdir(parents=True, exist_ok=True)
    openssl = _openssl()
    made = False
    if not (pki.ca_cert.exists() and pki.ca_key.exists()):
        _new_key(pki.ca_key)
        run(
            [
                openssl,
                "req",
                "-x509",
                "-new",
                "-nodes",
                "-key",
                pki.ca_key,
                "-sha256",
                "-days",
                "3650",
                "-subj",
                "/CN=localcluster-ca",
                "-out",
                pki.ca_cert,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            ]
        )
        made = True
    if not pki.apiserver_cert.exists():
        csr = directory / "apiserver.csr"
        _key_and_csr(pki.apiserver_key, csr, "/CN=kube-apiserver")
        sans = ",".join(
            [
                "IP:127.0.0.1",
                f"IP:{KUBERNETES_SERVICE_IP}",
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
            ]
        )
        _sign(
            pki,
            csr,
            pki.apiserver_cert,
            (
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n"
            ),
        )
        csr.unlink()
        made = True
    for name, cn, org in CLIENTS:
        client = pki.client(name)
        if client.cert.exists():
            continue
        csr = directory / f"{name}.csr"
        subject = f"/CN={cn}" + (f"/O={org}" if org else "")
        _key_and_csr(client.key, csr, subject)
        _sign(
            pki,
            csr,
            client.cert,
            ("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"),
        )
        csr.unlink()
        made = True
    if not (pki.sa_key.exists() and pki.sa_pub.exists()):
        _new_key(pki.sa_key)  # service-account tokens are then signed ES256
        run([openssl, "pkey", "-in", pki.sa_key, "-pubout", "-out", pki.sa_pub])
        made = True
    if made:
        say(f"pki: CA, apiserver serving cert, client certs and service-account keys in {directory}")
    return pki


def kubeconfig(server: str, pki: PKI, client: ClientCert, user: str) -> str:
    """A kubeconfig with absolute file references (JSON is valid YAML; no PyYAML needed)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "localcluster",
                "cluster": {"server": server, "certificate-authority": str(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(client.cert), "client-key": str(client.key)},
            }
        ],
        "contexts": [
            {
                "name": "localcluster",
                "context": {"cluster": "localcluster", "user": user, "namespace": "default"},
            }
        ],
        "current-context": "localcluster",
        "preferences": {},
    }
    return json.dumps(doc, indent=2) + "\n"
