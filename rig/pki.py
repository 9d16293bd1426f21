"""The rig cluster's certificates and keys: one CA, a serving certificate for the API server and the kubelet, a
client certificate per component, and the service-account signing key. Made fresh for every cluster with
`cryptography` (already a test dependency), kept under the cluster's state (removed by `make rig-down`).

The identities follow what Kubernetes' authorizers expect of each component (kubeadm's certificate list names the
same ones): the kubelet as `system:node:<node>` in `system:nodes` (the Node authorizer), the scheduler, controller
manager and kube-proxy by their `system:` user names (their default ClusterRoleBindings), the admin in
`system:masters`, and the API server's client to kubelets in `system:masters` too (logs, exec).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rig import layout as rig_layout
from rig.layout import Layout

VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Client:
    """A client certificate: the file stem, the user (CN) and the groups (O)."""

    stem: str
    user: str
    groups: tuple[str, ...] = ()


CLIENTS = (
    Client("admin", "kubernetes-admin", ("system:masters",)),
    Client("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)),
    Client("controller-manager", "system:kube-controller-manager"),
    Client("scheduler", "system:kube-scheduler"),
    Client("kube-proxy", "system:kube-proxy"),
    Client("kubelet", f"system:node:{rig_layout.NODE_NAME}", ("system:nodes",)),
)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _key_usage(ca: bool) -> x509.KeyUsage:
    """Signatures only; a CA also signs certificates and revocation lists."""
    return x509.KeyUsage(
        digital_signature=True,
        key_encipherment=False,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _issue(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    usage: ExtendedKeyUsageOID,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def apiserver_names(layout: Layout) -> list[x509.GeneralName]:
    """Every name a client of the rig dials the API server by: the node's address, the `kubernetes` Service's
    address and DNS names, and loopback."""
    ranges = layout.ranges
    dns = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        f"kubernetes.default.svc.{rig_layout.CLUSTER_DOMAIN}",
    ]
    ips = [ranges.node_ip, ranges.kubernetes_service_ip, ipaddress.IPv4Address("127.0.0.1")]
    return [*(x509.DNSName(name) for name in dns), *(x509.IPAddress(ip) for ip in ips)]


def write_cluster_pki(layout: Layout) -> dict[str, Path]:
    """Make the CA and every certificate into `layout.pki`; answer the paths by stem."""
    directory = layout.pki
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_subject = _name("agent-budgets-rig-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths: dict[str, Path] = {"ca.crt": directory / "ca.crt", "ca.key": directory / "ca.key"}
    _write_cert(paths["ca.crt"], ca_cert)
    _write_key(paths["ca.key"], ca_key)

    def serving(stem: str, common_name: str, sans: list[x509.GeneralName]) -> None:
        key = _key()
        cert = _issue(ca_cert, ca_key, _name(common_name), key, ExtendedKeyUsageOID.SERVER_AUTH, sans)
        paths[f"{stem}.crt"], paths[f"{stem}.key"] = directory / f"{stem}.crt", directory / f"{stem}.key"
        _write_cert(paths[f"{stem}.crt"], cert)
        _write_key(paths[f"{stem}.key"], key)

    serving("apiserver", "kube-apiserver", apiserver_names(layout))
    serving(
        "kubelet-serving",
        f"system:node:{rig_layout.NODE_NAME}",
        [x509.DNSName(rig_layout.NODE_NAME), x509.IPAddress(layout.ranges.node_ip)],
    )
    for client in CLIENTS:
        key = _key()
        cert = _issue(ca_cert, ca_key, _name(client.user, client.groups), key, ExtendedKeyUsageOID.CLIENT_AUTH)
        paths[f"{client.stem}.crt"], paths[f"{client.stem}.key"] = (
            directory / f"{client.stem}.crt",
            directory / f"{client.stem}.key",
        )
        _write_cert(paths[f"{client.stem}.crt"], cert)
        _write_key(paths[f"{client.stem}.key"], key)
    # Service-account tokens: RS256, the algorithm every JWT verifier of the program's identity sources accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    paths["sa.key"], paths["sa.pub"] = directory / "sa.key", directory / "sa.pub"
    _write_key(paths["sa.key"], sa_key)
    paths["sa.pub"].write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return paths
