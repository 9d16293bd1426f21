"""One actor's egress policy as the document ``kubectl ate`` sends: its inputs, its rules, and how a rule
is read back (protojson field names, lowerCamel; proto names accepted too)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# --- fixed values -------------------------------------------------------------------------------

GATEWAY_HOSTNAME = "agent-router.envoy-gateway-system.svc.cluster.local"
"""The model gateway's fixed Service name: the one host every actor may call over plain HTTP."""
DEFAULT_GATEWAY_PORT = 80
DEFAULT_AUDIENCES: tuple[str, ...] = ("agent-router",)
DEFAULT_EXPIRATION_SECONDS = 900
DEFAULT_KUBECTL = "kubectl"
DEFAULT_TIMEOUT_SECONDS = 30
EXTRA_HOSTNAME_PORT = 443
"""Each extra hostname becomes a ``tlsPassthrough`` rule on this port: no decryption, no effects."""

POLICY_NAME = "default"
AUTH_HEADER = "Authorization"
AUTH_PREFIX = "Bearer "

RULE_KINDS = ("http", "https", "tlsPassthrough")
_KIND_ALIASES = {
    "http": "http",
    "https": "https",
    "tlsPassthrough": "tlsPassthrough",
    "tls_passthrough": "tlsPassthrough",
}
_DEFAULT_PORTS = {"http": 80, "https": 443}

# --- inputs of one actor's policy ---------------------------------------------------------------


@dataclass(frozen=True)
class PolicyInputs:
    """Everything one actor's policy needs, as plain values (a shard holds these for each of its actors)."""

    atespace: str
    actor: str
    kube_context: str
    substrate_ref: str
    gateway_hostname: str = GATEWAY_HOSTNAME
    gateway_port: int = DEFAULT_GATEWAY_PORT
    audiences: tuple[str, ...] = DEFAULT_AUDIENCES
    expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    extra_hostnames: tuple[str, ...] = ()
    provider_hosts: tuple[str, ...] = ()
    kubectl: str = DEFAULT_KUBECTL
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> PolicyInputs:
        """Read resource properties (numbers may arrive as floats), applying the defaults."""

        def text(key: str, default: str = "") -> str:
            value = props.get(key)
            return default if value is None else str(value)

        def number(key: str, default: int) -> Any:
            value = props.get(key)
            return default if value is None else as_int(value)

        def strings(key: str, default: Iterable[str]) -> tuple[str, ...]:
            value = props.get(key)
            if value is None:
                return tuple(default)
            if isinstance(value, str):
                return (value,)
            return tuple(str(v) for v in value)

        return cls(
            atespace=text("atespace"),
            actor=text("actor"),
            kube_context=text("kube_context"),
            substrate_ref=text("substrate_ref"),
            gateway_hostname=text("gateway_hostname", GATEWAY_HOSTNAME),
            gateway_port=number("gateway_port", DEFAULT_GATEWAY_PORT),
            audiences=strings("audiences", DEFAULT_AUDIENCES),
            expiration_seconds=number("expiration_seconds", DEFAULT_EXPIRATION_SECONDS),
            extra_hostnames=strings("extra_hostnames", ()),
            provider_hosts=strings("provider_hosts", ()),
            kubectl=text("kubectl", DEFAULT_KUBECTL),
            timeout_seconds=number("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
        )

    def to_props(self) -> dict[str, Any]:
        """The resource properties (lists, not tuples), the inverse of :meth:`from_props`."""
        return {
            "atespace": self.atespace,
            "actor": self.actor,
            "kube_context": self.kube_context,
            "substrate_ref": self.substrate_ref,
            "gateway_hostname": self.gateway_hostname,
            "gateway_port": self.gateway_port,
            "audiences": list(self.audiences),
            "expiration_seconds": self.expiration_seconds,
            "extra_hostnames": list(self.extra_hostnames),
            "provider_hosts": list(self.provider_hosts),
            "kubectl": self.kubectl,
            "timeout_seconds": self.timeout_seconds,
        }

    @property
    def ref(self) -> str:
        return f"{self.atespace}/{self.actor}"


# --- building -----------------------------------------------------------------------------------


def build_rules(inputs: PolicyInputs) -> list[dict[str, Any]]:
    """The rules of an actor's policy: the one ``http`` rule with the JWT effect, then one
    ``tlsPassthrough`` rule (port 443, no effects) per extra hostname, in configured order."""
    rules: list[dict[str, Any]] = [
        {
            "http": {
                "hostnames": [inputs.gateway_hostname],
                "ports": {"numbers": [inputs.gateway_port]},
                "effects": {
                    "replaceHeaders": [
                        {
                            "header": AUTH_HEADER,
                            "prefix": AUTH_PREFIX,
                            "actorJwt": {
                                "audiences": list(inputs.audiences),
                                "expirationSeconds": inputs.expiration_seconds,
                            },
                        }
                    ]
                },
            }
        }
    ]
    for host in inputs.extra_hostnames:
        rules.append({"tlsPassthrough": {"hostnames": [host], "ports": {"numbers": [EXTRA_HOSTNAME_PORT]}}})
    return rules


def build_policy(inputs: PolicyInputs, *, uid: str | None = None, version: Any = None) -> dict[str, Any]:
    """The manifest for ``kubectl ate create|update egress-policy -f -``. ``uid`` and ``version`` are
    the preconditions an update must carry (from a fresh ``get``)."""
    metadata: dict[str, Any] = {"atespace": inputs.atespace, "name": POLICY_NAME}
    if uid is not None:
        metadata["uid"] = uid
    if version is not None:
        metadata["version"] = version
    return {"metadata": metadata, "rules": build_rules(inputs)}


def as_int(value: Any) -> Any:
    """``900``, ``900.0`` and ``"900"`` all become ``900``; anything else is returned unchanged."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value.strip())
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rule_kind(rule: Any) -> tuple[str | None, Any, list[str]]:
    """(kind, body, problems) for one rule; kind is None when the rule is not exactly one kind."""
    if not isinstance(rule, Mapping):
        return None, None, [f"must be an object with one of {', '.join(RULE_KINDS)}, got {rule!r}"]
    keys = [k for k in rule if k in _KIND_ALIASES]
    unknown = [k for k in rule if k not in _KIND_ALIASES]
    problems = [f"has unknown field {k!r}; a rule holds exactly one of {', '.join(RULE_KINDS)}" for k in unknown]
    if len(keys) != 1:
        problems.append(
            f"must set exactly one of {', '.join(RULE_KINDS)}, but sets {', '.join(keys) if keys else 'none'}"
        )
        return None, None, problems
    return _KIND_ALIASES[keys[0]], rule[keys[0]], problems


def _get(body: Mapping[str, Any], camel: str, snake: str | None = None) -> Any:
    if camel in body:
        return body[camel]
    return body.get(snake) if snake else None
