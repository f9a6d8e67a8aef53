"""The test cluster's certificates and keys, made with the `openssl` command.

A CA of the cluster's own, kube-apiserver's serving certificate signed by it (for
127.0.0.1 and `kubernetes.default.svc`, so clients verify TLS as they do in a real
cluster), and the service-account signing key pair. ECDSA P-256 throughout: a key takes
milliseconds, where RSA takes a noticeable part of a second.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVER_NAMES = ("IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local")


@dataclass(frozen=True, slots=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    sa_key: Path
    sa_pub: Path


def make_pki(directory: Path) -> Pki:
    if shutil.which("openssl") is None:
        raise RuntimeError("the test cluster makes its certificates with the `openssl` command, which is not on PATH "
                           "(Debian: apt-get install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    pki = Pki(d / "ca.crt", d / "ca.key", d / "apiserver.crt", d / "apiserver.key", d / "sa.key", d / "sa.pub")
    for key in (pki.ca_key, pki.server_key, pki.sa_key):
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    _openssl("req", "-x509", "-new", "-key", str(pki.ca_key), "-subj", "/CN=gpufleet-test-ca", "-days", "3650",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", str(pki.ca_cert))
    csr, ext = d / "apiserver.csr", d / "apiserver.ext"
    ext.write_text(f"subjectAltName={','.join(SERVER_NAMES)}\nextendedKeyUsage=serverAuth\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\n")
    _openssl("req", "-new", "-key", str(pki.server_key), "-subj", "/CN=kube-apiserver", "-out", str(csr))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key), "-CAcreateserial",
             "-days", "3650", "-extfile", str(ext), "-out", str(pki.server_cert))
    _openssl("pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
    return pki


def issue_serving_cert(pki: Pki, directory: Path, name: str,
                       names: tuple[str, ...] = ("IP:127.0.0.1", "DNS:localhost")) -> tuple[Path, Path]:
    """Another serving certificate signed by the cluster's CA (a proxy in front of kube-apiserver,
    say): `directory/name.crt` and `name.key`, valid for `names` (openssl subjectAltName syntax)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key, csr, ext = (directory / f"{name}.{suffix}" for suffix in ("crt", "key", "csr", "ext"))
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    ext.write_text(f"subjectAltName={','.join(names)}\nextendedKeyUsage=serverAuth\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\n")
    _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={name}", "-out", str(csr))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key), "-CAcreateserial",
             "-days", "3650", "-extfile", str(ext), "-out", str(cert))
    return cert, key


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")
