"""The policy pack's view of resources: plain data from the engine's props (values unknown during preview kept as
`UNKNOWN`), the `Resource` a check reads, the names and shapes every check shares, and `StackProblem`."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy.proxy import UnknownValueError

from core.budget_rules import (
    ACTOR_HEADER,
    COST_METADATA_KEY,
    KIND_TEXT,
    TOKEN_COST_TYPES,
    TOKEN_METADATA_KEYS,
)
from core.egress import (
    AUTH_HEADER,
    DEFAULT_AUDIENCES,
)
from core.identity import actor_header_value
from core.money import USD_METADATA_KEY
from core.plain import dig
from core.platform_values import ENVOY_GATEWAY_CHART
from core.settings import TOKEN_KINDS

PACK_NAME = "agent-budgets"
EGRESS_SHARD_TYPE = "pulumi-python:dynamic:EgressPolicyShard"
HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
# The chart's last path segment (`gateway-helm`): a release may name it by OCI reference or repo/chart.
ENVOY_GATEWAY_CHART_NAME = ENVOY_GATEWAY_CHART.rstrip("/").rsplit("/", 1)[-1]
DEFAULT_DEV_STACKS: tuple[str, ...] = ("dev", "dev-kubernetes")
AUTHORIZATION = AUTH_HEADER.lower()
GATEWAY_AUDIENCE = ", ".join(DEFAULT_AUDIENCES)
# Kinds whose BackendTrafficPolicy overrides a Gateway-level one unless it sets mergeType.
ROUTE_KINDS = frozenset({"HTTPRoute", "GRPCRoute"})
# One caller of each identity source in no budget class: each must land in the default budget's rules like any
# unlisted actor.
PROBE_SUBJECTS = tuple(
    actor_header_value(actor)
    for actor in ("policy-probe/unlisted-actor", "serviceaccount:policy-probe/unlisted", "apikey:policy-probe-unlisted")
)
# What a budget rule may charge, and how Agent Router must compute each (AIGatewayRoute llmRequestCosts type).
BUDGET_COST_TYPES: dict[str, str] = {
    **{TOKEN_METADATA_KEYS[kind]: TOKEN_COST_TYPES[kind] for kind in TOKEN_KINDS},
    USD_METADATA_KEY: "CEL",
}
"""Every metadata key a budget rule may charge, and the `llmRequestCosts` type that must compute it."""
COST_MEANINGS: dict[str, str] = {
    **{TOKEN_METADATA_KEYS[kind]: f"the {KIND_TEXT[kind]}" for kind in TOKEN_KINDS if kind != "total"},
    COST_METADATA_KEY: "the total tokens",
    USD_METADATA_KEY: "the price in mills",
}
"""What each charged key holds, in words (`the output tokens`)."""

# Literal values shaped like model-provider API keys (OpenAI/Anthropic/DeepSeek/OpenRouter `sk-...`,
# Google `AIza...`, Groq `gsk_...`, xAI `xai-...`). Not preceded by a letter or digit, so `task-...`
# or `disk-...` never match.
PROVIDER_KEY_PATTERN = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{30,}|gsk_[A-Za-z0-9]{20,}|xai-[A-Za-z0-9]{20,})"
)
# An env var holds a credential when its name ends in one of these words (REDIS_AUTH, GITHUB_TOKEN,
# CLIENT_SECRET), or in KEY after one of the KEY_QUALIFIERS (OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY).
# MOCK_TOTAL_TOKENS (a count), TOKEN_TTL or API_KEY_FILE (a path) do not.
SENSITIVE_ENV_SUFFIXES = frozenset(
    {"TOKEN", "PASSWORD", "PASSWD", "PASS", "SECRET", "APIKEY", "AUTH", "CREDENTIAL", "CREDENTIALS"}
)
KEY_QUALIFIERS = frozenset({"API", "SECRET", "ACCESS", "PRIVATE", "AUTH", "SIGNING"})
# BackendSecurityPolicy types that hold a key, and the field holding its reference.
CREDENTIAL_FIELDS: dict[str, str] = {
    "APIKey": "apiKey",
    "AnthropicAPIKey": "anthropicAPIKey",
    "AzureAPIKey": "azureAPIKey",
}


class _Unknown:
    """A value the engine cannot know during preview (an output of a resource not created yet)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown during preview>"


UNKNOWN = _Unknown()


def plain(value: Any) -> Any:
    """Engine props (proxies that raise on unknowns) as plain dicts and lists, unknowns as UNKNOWN.

    Whole numbers arriving as floats (protobuf Struct has only doubles) become ints.
    """
    if isinstance(value, str | bytes | bool) or value is None:
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in value:
            try:
                out[str(key)] = plain(value[key])
            except UnknownValueError:
                out[str(key)] = UNKNOWN
        return out
    if isinstance(value, Sequence):
        items: list[Any] = []
        for index in range(len(value)):
            try:
                items.append(plain(value[index]))
            except UnknownValueError:
                items.append(UNKNOWN)
        return items
    return value


def has_unknown(value: Any) -> bool:
    """Whether any part of a plain value is unknown."""
    if value is UNKNOWN:
        return True
    if isinstance(value, dict):
        return any(has_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(has_unknown(v) for v in value)
    return False


def as_list(value: Any) -> list[Any]:
    """A list value, or [] for anything else (missing, unknown, scalar)."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """A mapping value, or {} for anything else."""
    return value if isinstance(value, dict) else {}


def lower(value: Any) -> str:
    """A string compared case-insensitively (header names); '' for non-strings."""
    return value.lower() if isinstance(value, str) else ""


@dataclass(frozen=True)
class Resource:
    """One resource as a check sees it: plain props, whatever the engine handed over."""

    type: str
    name: str
    props: dict[str, Any]
    urn: str = ""

    @property
    def kind(self) -> str:
        """`kubernetes:gateway.envoyproxy.io/v1alpha1:Backend` → `Backend`."""
        return self.type.rsplit(":", 1)[-1]

    @property
    def group(self) -> str:
        """`kubernetes:gateway.envoyproxy.io/v1alpha1:Backend` → `gateway.envoyproxy.io` (`core` for core)."""
        if not self.type.startswith("kubernetes:"):
            return ""
        api_version = self.type.split(":")[1]
        return api_version.split("/")[0] if "/" in api_version else ""

    @property
    def is_kubernetes(self) -> bool:
        return self.type.startswith("kubernetes:")

    def is_kind(self, group: str, kind: str) -> bool:
        """A Kubernetes object of this API group and kind."""
        return self.is_kubernetes and self.group == group and self.kind == kind

    @property
    def object_name(self) -> str:
        """`namespace/name` of a Kubernetes object (or the Pulumi name when metadata is missing)."""
        meta = as_dict(self.props.get("metadata"))
        name = meta.get("name")
        if not isinstance(name, str):
            return self.name
        namespace = meta.get("namespace")
        return f"{namespace}/{name}" if isinstance(namespace, str) else name

    @property
    def namespace(self) -> str:
        namespace = dig(self.props, "metadata", "namespace")
        return namespace if isinstance(namespace, str) else ""

    @property
    def spec(self) -> dict[str, Any]:
        return as_dict(self.props.get("spec"))

    def describe(self) -> str:
        """How messages name the resource: its kind and object name, and the Pulumi name."""
        if is_egress_policy(self):
            actors = egress_actors(self)
            shown = ", ".join(actors[:3]) + (f" and {len(actors) - 3} more" if len(actors) > 3 else "")
            return f"egress policies of {shown} (Pulumi resource {self.name!r})"
        if self.type == HELM_RELEASE_TYPE and isinstance(self.props.get("name"), str):
            release = f"{self.props.get('namespace')}/{self.props['name']}"
            return f"Helm release {release} (Pulumi resource {self.name!r})"
        if self.is_kubernetes:
            return f"{self.kind} {self.object_name} (Pulumi resource {self.name!r})"
        return f"{self.type} {self.name!r}"


def stack_of_urn(urn: str) -> str:
    """`urn:pulumi:<stack>::<project>::<type>::<name>` → `<stack>` ('' when the URN has another shape)."""
    if not urn.startswith("urn:pulumi:"):
        return ""
    return urn.removeprefix("urn:pulumi:").split("::", 1)[0]


def is_egress_policy(resource: Resource) -> bool:
    """A shard of Substrate egress policies (a Pulumi dynamic resource with our input names): the same
    rules for each of its actors."""
    return resource.type == EGRESS_SHARD_TYPE and all(key in resource.props for key in ("actors", "gateway_hostname"))


def egress_actors(resource: Resource) -> list[str]:
    """The actors (``<atespace>/<name>``) whose egress policies a shard holds: the keys of ``actors``."""
    actors = resource.props.get("actors")
    refs = actors.keys() if isinstance(actors, dict) else as_list(actors)
    return sorted(ref for ref in refs if isinstance(ref, str))


def header_matches(rule: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every header match of a rate-limit rule, selector after selector."""
    matches: list[dict[str, Any]] = []
    for selector in as_list(rule.get("clientSelectors")):
        matches.extend(m for m in as_list(as_dict(selector).get("headers")) if isinstance(m, dict))
    return matches


def keyed_on_actor(rule: Mapping[str, Any]) -> bool:
    """A rate-limit rule that selects on `x-actor-id`: a budget rule."""
    return any(lower(m.get("name")) == ACTOR_HEADER for m in header_matches(rule))


def global_rules(resource: Resource) -> list[dict[str, Any]]:
    rules = dig(resource.spec, "rateLimit", "global", "rules")
    return [r for r in as_list(rules) if isinstance(r, dict)]


def local_rules(resource: Resource) -> list[dict[str, Any]]:
    rules = dig(resource.spec, "rateLimit", "local", "rules")
    return [r for r in as_list(rules) if isinstance(r, dict)]


def is_budget_policy(resource: Resource) -> bool:
    """A BackendTrafficPolicy with a global rule keyed on `x-actor-id`."""
    return resource.is_kind("gateway.envoyproxy.io", "BackendTrafficPolicy") and any(
        keyed_on_actor(rule) for rule in global_rules(resource)
    )


def copies_sub_to_actor_header(provider: Mapping[str, Any]) -> bool:
    """A JWT provider with `claimToHeaders: [{claim: sub, header: x-actor-id}]`."""
    return any(
        lower(entry.get("header")) == ACTOR_HEADER and entry.get("claim") == "sub"
        for entry in as_list(provider.get("claimToHeaders"))
        if isinstance(entry, dict)
    )


def target_keys(resource: Resource) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) of everything a policy attaches to."""
    keys: set[tuple[str, str, str]] = set()
    for ref in as_list(resource.spec.get("targetRefs")):
        if isinstance(ref, dict) and isinstance(ref.get("name"), str):
            keys.add((resource.namespace, str(ref.get("kind", "")), ref["name"]))
    ref = resource.spec.get("targetRef")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        keys.add((resource.namespace, str(ref.get("kind", "")), ref["name"]))
    return keys


def walk(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (path, node) of a plain value, depth first; list indexes appear as `[i]`."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, (*path, f"[{index}]"))


def dotted(path: Sequence[str]) -> str:
    """`('spec', 'env', '[0]', 'value')` → `spec.env[0].value`."""
    text = ""
    for part in path:
        text += part if part.startswith("[") or not text else f".{part}"
    return text


@dataclass
class StackProblem:
    """A stack-level violation, attached to one resource when there is one to blame."""

    message: str
    urn: str = ""


def names_actor(resource: Resource) -> bool:
    """A SecurityPolicy that sets `x-actor-id` from a verified identity on every request it admits: JWT providers
    that all copy `sub` into it, or an `apiKeyAuth` (in a policy without jwt) forwarding the client id into it."""
    if not resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy"):
        return False
    providers = [p for p in as_list(dig(resource.spec, "jwt", "providers")) if isinstance(p, dict)]
    if providers:
        return all(copies_sub_to_actor_header(p) for p in providers)
    return lower(dig(resource.spec, "apiKeyAuth", "forwardClientIDHeader")) == ACTOR_HEADER


def target_kinds(resource: Resource) -> set[str]:
    """Kinds a policy attaches to, through targetRef, targetRefs or targetSelectors."""
    refs = [resource.spec.get("targetRef"), *as_list(resource.spec.get("targetRefs"))]
    refs += as_list(resource.spec.get("targetSelectors"))
    return {ref["kind"] for ref in refs if isinstance(ref, dict) and isinstance(ref.get("kind"), str)}
