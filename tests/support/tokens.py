"""Real signed JWTs for a real Envoy: an RSA key pair, its JWKS, and RS256 tokens with the claims a test chooses.

Stands in for the two signers the gateway trusts (Substrate's IdP, which signs actor JWTs, and the Kubernetes API
server, which signs projected service-account tokens): Envoy's jwt_authn verifies the signature against the JWKS it
is given (RFC 7515 §A.2 RS256, RFC 7517 key set; envoy source/extensions/filters/http/jwt_authn), so a token here
is accepted or refused exactly as one of theirs would be.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@dataclass
class Signer:
    """One signing key and the JWKS that publishes it."""

    key_id: str
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    def jwks(self) -> str:
        numbers = self.key.public_key().public_numbers()
        entry = {
            "kty": "RSA",
            "alg": "RS256",
            "use": "sig",
            "kid": self.key_id,
            "n": _uint(numbers.n),
            "e": _uint(numbers.e),
        }
        return json.dumps({"keys": [entry]})

    def token(self, claims: dict[str, Any], lifetime: int = 900) -> str:
        """An RS256 JWT of `claims` (a None value leaves that claim out), valid from now for `lifetime` seconds."""
        now = int(time.time())
        payload = {"iat": now, "nbf": now - 5, "exp": now + lifetime, **claims}
        payload = {name: value for name, value in payload.items() if value is not None}
        header = {"alg": "RS256", "typ": "JWT", "kid": self.key_id}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"


def jwks_config_map(name: str, namespace: str, signer: Signer) -> dict[str, Any]:
    """A ConfigMap holding `signer`'s JWKS under `jwks`, where a `localJWKS` ValueRef reads it (envoyproxy/gateway
    v1.9.0 internal/gatewayapi/securitypolicy.go)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"jwks": signer.jwks()},
    }
