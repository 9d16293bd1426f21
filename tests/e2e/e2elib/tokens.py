"""A forged actor JWT for check 5: the right claims, a signature from no key the IdP holds."""

from __future__ import annotations

import base64
import json
import os
import time


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged_jwt(subject: str, issuer: str, audience: str, lifetime: int = 900, now: float | None = None) -> str:
    """An ES256-shaped token naming ``subject`` with a random 64-byte signature (key id "1", like the
    IdP's), so only the signature check can reject it."""
    issued = int(time.time() if now is None else now)
    header = {"alg": "ES256", "kid": "1", "typ": "JWT"}
    claims = {
        "iss": issuer,
        "sub": subject,
        "aud": [audience],
        "iat": issued,
        "nbf": issued - 300,
        "exp": issued + lifetime,
        "jti": _b64(os.urandom(12)),
    }
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(os.urandom(64))}"


def decode_claims(token: str) -> dict[str, object]:
    """The payload of a JWT, unverified (for tests and evidence)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
