"""The keys a deployed stack's SecurityPolicy verifies with, published the way `make up` publishes them.

A stack with the `substrate` identity source in `substrate.trust.mode: localJwks` reads the actor JWKS from a
ConfigMap beside the SecurityPolicy (`substrate.trust.jwksConfigMap`). The rig has no Substrate, so it is the IdP:
one RSA key of the run signs the actor JWTs (`iss` = `substrate.issuer`, `aud` = `substrate.audience`, `sub` = the
actor's `x-actor-id` value `actor/<atespace>/<name>`, the claim the SecurityPolicy copies into that header), and its
JWKS goes into that ConfigMap, as step `jwks-sync` of scripts/up.sh copies Substrate's. A stack with the
`kubernetes` source in `jwks: configMap` gets the API server's own keys, as step `service-account-keys` does. The
key is kept in the run's engine directory (mode 0600), so `python -m rig engine` and `python -m rig e2e` sign with
the key the stack trusts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from core.identity import KUBERNETES, SUBSTRATE, actor_header_value
from core.settings import StackSettings
from rig.engine import Engine
from rig.node import Node
from tests.support.tokens import Signer, jwks_config_map

KEY_ID = "agent-budgets-rig-actor-key"


def signing_key_path(engine: Engine) -> Path:
    return engine.directory / "actor-signing-key.pem"


def actor_signer(engine: Engine) -> Signer:
    """The run's actor-signing key: made on first use, then read back."""
    path = signing_key_path(engine)
    if path.exists():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        return Signer(KEY_ID, key=key)  # type: ignore[arg-type]
    signer = Signer(KEY_ID)
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = signer.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    return signer


def actor_token(engine: Engine, settings: StackSettings, actor: str, **overrides: Any) -> str:
    """An actor JWT as Substrate's IdP signs it for `actor` (`atespace/name`); `overrides` replace or (with None)
    drop claims."""
    claims: dict[str, Any] = {
        "iss": settings.substrate.issuer,
        "aud": settings.substrate.audience,
        "sub": actor_header_value(actor),
        **overrides,
    }
    return actor_signer(engine).token(claims)


def publish_keys(node: Node, engine: Engine, stack: str) -> dict[str, str]:
    """Each ConfigMap of keys the stack's identity sources read, filled; what was published where."""
    return publish_keys_of(node, engine, engine.stack_settings(stack))


def publish_keys_of(node: Node, engine: Engine, settings: StackSettings) -> dict[str, str]:
    """`publish_keys` for settings given (a component's arguments, which no stack file holds)."""
    namespace = settings.gateway.namespace
    published: dict[str, str] = {}
    if SUBSTRATE in settings.identity.sources and settings.substrate.trust.mode == "localJwks":
        name = settings.substrate.trust.jwks_config_map
        node.apply([jwks_config_map(name, namespace, actor_signer(engine))])
        published[f"{namespace}/{name}"] = f"the rig's actor key {KEY_ID}"
    if KUBERNETES in settings.identity.sources and settings.identity.kubernetes.jwks == "configMap":
        name = settings.identity.kubernetes.jwks_config_map
        jwks = node.kubectl("get", "--raw", "/openid/v1/jwks")
        node.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace},
                    "data": {"jwks": jwks},
                }
            ]
        )
        published[f"{namespace}/{name}"] = "the API server's /openid/v1/jwks"
    return published
