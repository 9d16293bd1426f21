"""The agent-budgets CrossGuard rules: pure checks, and the policy objects that report them.

Everything here is importable without starting the pack (`policy/__main__.py` builds the `PolicyPack`,
which blocks forever). Each check is a pure function over a `Resource` (type, name, URN and plain
props) returning one message per problem; each message names the resource and what to fix. The
`ResourceValidationPolicy` / `StackValidationPolicy` objects at the bottom only adapt these checks to
the engine: they turn the engine's props (read-only proxies that raise on values unknown during
preview) into plain data first, so an unknown value skips the check that needs it instead of
silencing the whole policy.

Resource validations see a resource's *inputs* (camelCase for Kubernetes objects, snake_case for the
egress-policy shards, the dynamic resources that each hold the policies of a group of actors); the stack
validations see *outputs* (for these objects the same shape, plus what the cluster adds).

The rules reuse the program's facts rather than restating them: Envoy Gateway's caps and the cost
metadata from `core/budget_rules.py`, the rule-translation model in
`core/ratelimit_model.py`, the gateway hostname, provider hosts and actor-JWT lifetime from
`core/egress/` (whose `build_rules` is exactly what the dynamic provider sends), the chart and
Redis names from `core/platform_values.py`. These are pure modules: importing them starts no Pulumi
program.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from core.budget_rules import (
    ACTOR_HEADER,
    CALL_COST,
    CLASS_SLOTS_ANNOTATION,
    COST_METADATA_KEY,
    COST_METADATA_NAMESPACE,
    KIND_TEXT,
    LIMIT_SLOTS_ANNOTATION,
    MATCHES_NOTHING,
    MAX_HEADERS_PER_SELECTOR,
    MAX_LIMIT_SLOTS,
    MAX_RULES,
    MAX_SELECTORS,
    MAX_VALUE_LENGTH,
    MODEL_HEADER,
    TOKEN_COST_TYPES,
    TOKEN_METADATA_KEYS,
)
from core.egress import (
    AUTH_HEADER,
    AUTH_PREFIX,
    DEFAULT_AUDIENCES,
    DEFAULT_EXPIRATION_SECONDS,
    GATEWAY_HOSTNAME,
    MAX_EXPIRATION_SECONDS,
    MIN_EXPIRATION_SECONDS,
    WELL_KNOWN_PROVIDER_HOSTS,
    PolicyInputs,
    build_rules,
    normalize_rules,
    patterns_overlap,
)
from core.filter_chain import (
    API_KEY_AUTH,
    CUSTOM_RESPONSE,
    IDENTITY_BEFORE_AGENT_ROUTER,
    JWT_AUTHN,
    identity_filters_after_agent_router,
    listener_chain,
)
from core.identity import API_KEYS, ActorIdError, SourceName, actor_header_value, parse_actor_id, parse_header_value
from core.manifests import ACTOR_ID_ANNOTATION
from core.money import USD_METADATA_KEY
from core.plain import dig
from core.platform_values import ENVOY_GATEWAY_CHART, REDIS_NAME
from core.ratelimit_model import (
    PolicyModel,
    envoy_listener_name,
    envoy_route_name,
    header_match_error,
    regex_full_match,
    regex_is_valid,
    translation_errors,
)
from core.settings import PROJECT, TOKEN_KINDS
from core.suspension import ONE_ACTOR_ID_CEL, ONE_ACTOR_ID_RULE

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


# ---------------------------------------------------------------------------------------------------------
# Plain data from the engine's props


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


# ---------------------------------------------------------------------------------------------------------
# Mandatory resource checks


def check_backend_removes_authorization(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Every AIServiceBackend removes `authorization` before the request leaves for the provider."""
    del config
    if not resource.is_kind("aigateway.envoyproxy.io", "AIServiceBackend"):
        return []
    removed = dig(resource.spec, "headerMutation", "remove")
    if has_unknown(removed):
        return []
    if any(lower(header) == AUTHORIZATION for header in as_list(removed)):
        return []
    return [
        f"{resource.describe()} does not remove the authorization header: the actor's JWT would travel on "
        "to the provider (AnthropicAPIKey sets only x-api-key and leaves it in place). Add "
        "`headerMutation: {remove: [authorization]}` to its spec (the provider key is set after the removal)"
    ]


def check_budget_rules_charge_tokens(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Every rule keyed on `x-actor-id`: global, shared, and either a free request with the response charged in
    total tokens or price, or (a calls limit) one call charged on the request and nothing on the response; and
    no header match in the policy that Envoy Gateway refuses to translate (Distinct with invert or a value,
    Exact or RegularExpression without a value)."""
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "BackendTrafficPolicy"):
        return []
    problems: list[str] = []
    who = resource.describe()
    for index, rule in enumerate(local_rules(resource)):
        if keyed_on_actor(rule):
            problems.append(
                f"{who}: local rate-limit rule {index} is keyed on {ACTOR_HEADER}: a local limit counts per "
                "Envoy replica and forgets on restart, so it is no budget. Move it under rateLimit.global.rules"
            )
    problems.extend(_translation_problems(resource))
    slots, classes = limit_slots(resource), class_slots(resource)
    for index, rule in enumerate(global_rules(resource)):
        if not keyed_on_actor(rule):
            continue
        where = f"{who}: budget rule {index}"
        distinct = [
            m for m in header_matches(rule) if lower(m.get("name")) == ACTOR_HEADER and m.get("type") == "Distinct"
        ]
        pooled = in_pool_block(index, slots, classes)
        if not distinct and not pooled and not has_unknown(rule.get("clientSelectors")):
            problems.append(
                f"{where} has no Distinct match on {ACTOR_HEADER}: every actor it admits would share one "
                f"bucket. Add `{{name: {ACTOR_HEADER}, type: Distinct}}` (a shared bucket belongs in a pool's block "
                f"of rules, after the class blocks annotated {CLASS_SLOTS_ANNOTATION})"
            )
        shared = rule.get("shared")
        if shared is not True and shared is not UNKNOWN:
            problems.append(
                f"{where} is not `shared: true`: each model route would get its own bucket, multiplying the "
                "actor's budget by the number of routes. Set shared: true"
            )
        if has_unknown(rule.get("cost")):
            continue  # unknown during preview
        problems.extend(_cost_problems(where, rule))
    return problems


def is_call_rule(rule: Mapping[str, Any]) -> bool:
    """A calls limit's rule: one call charged on the request, nothing on the response (core/budget_rules.py)."""
    request = as_dict(dig(rule, "cost", "request"))
    return request == {"from": "Number", "number": CALL_COST} and dig(rule, "cost", "response") is None


def _cost_problems(where: str, rule: Mapping[str, Any]) -> list[str]:
    """A budget rule charges either the response's tokens or price (the request free), or one call per request."""
    if is_call_rule(rule):
        return []
    problems: list[str] = []
    request = as_dict(dig(rule, "cost", "request"))
    if not (request.get("from") == "Number" and request.get("number") == 0):
        problems.append(
            f"{where} charges the request ({request or 'no cost.request'}): the request count would eat "
            "into the token budget. Set cost.request to {from: Number, number: 0}, or, for a calls limit, "
            f"charge {CALL_COST} on the request and nothing on the response"
        )
    response = as_dict(dig(rule, "cost", "response"))
    metadata = as_dict(response.get("metadata"))
    expected = {"namespace": COST_METADATA_NAMESPACE, "key": COST_METADATA_KEY}
    if not (
        response.get("from") == "Metadata"
        and metadata.get("namespace") == COST_METADATA_NAMESPACE
        and metadata.get("key") in BUDGET_COST_TYPES
    ):
        others = ", ".join(key for key in BUDGET_COST_TYPES if key != COST_METADATA_KEY)
        problems.append(
            f"{where} does not charge the response's token count or price ({response or 'no cost.response'}): "
            f"set cost.response to {{from: Metadata, metadata: {expected}}}, the total tokens Agent Router "
            f"reports for every response and stream (or, in namespace {COST_METADATA_NAMESPACE}, one of {others}: "
            f"the input, output or cached input tokens, or the call's price in mills for a budget in dollars)"
        )
    return problems


def _translation_problems(resource: Resource) -> list[str]:
    """Header matches Envoy Gateway refuses to translate, in a policy holding budget rules.

    One such match anywhere in the policy (budget rule or not) makes Envoy Gateway reject the whole
    BackendTrafficPolicy: its routes answer 500 and no budget counts.
    """
    budget = [*global_rules(resource), *local_rules(resource)]
    if not any(keyed_on_actor(rule) for rule in budget):
        return []
    problems: list[str] = []
    for scope, scoped_rules in (("global", global_rules(resource)), ("local", local_rules(resource))):
        for index, rule in enumerate(scoped_rules):
            for position, match in enumerate(header_matches(rule)):
                if has_unknown(match):
                    continue
                problem = header_match_error(match)
                if problem is not None:
                    problems.append(
                        f"{resource.describe()}: {scope} rate-limit rule {index} header match {position} "
                        f"({match.get('name')}) is {problem}. Envoy Gateway rejects it at translation although "
                        "the CRD accepts it: the whole policy fails, its routes answer 500 and no budget counts"
                    )
    return problems


# Keys under which a header modifier changes the *response*: x-actor-id there is harmless.
_RESPONSE_KEYS = re.compile(r"response", re.IGNORECASE)


def _names_api_key_actor(resource: Resource, path: tuple[str, ...]) -> bool:
    """`spec.apiKeyAuth` of a SecurityPolicy without `jwt`: where a verified API key's client id may name the actor.

    Envoy's api_key_auth filter (order 7) writes the client id with `setCopy`, replacing a client-sent value
    (envoy api_key_auth.cc @03503b34); jwt_authn (order 10) would remove it again if the same routes had a JWT
    requirement (envoyproxy/gateway v1.9.0 internal/xds/translator/httpfilters.go, envoy jwt_authn extractor
    `sanitizeHeaders`).
    """
    return (
        resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy")
        and path == ("spec", "apiKeyAuth")
        and "jwt" not in resource.spec
    )


def check_actor_header_untouched(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Nothing but a verified identity sets `x-actor-id` (the JWT filter's claim copy, or the API-key filter's client
    id in a SecurityPolicy without jwt), and nothing removes it on the way to the provider.

    The only allowed touch is the ClientTrafficPolicy's `earlyRequestHeaders.remove`, which drops a
    client-sent value before any filter runs.
    """
    del config
    if not resource.is_kubernetes or resource.kind in ("Secret", "ConfigMap"):
        return []
    problems: list[str] = []
    who = resource.describe()
    scope = {key: value for key, value in resource.props.items() if key not in ("metadata", "apiVersion", "kind")}
    for path, node in walk(scope):
        if not isinstance(node, dict) or any(_RESPONSE_KEYS.search(part) for part in path):
            continue
        where = dotted(path) or "spec"
        early = bool(path) and path[-1] == "earlyRequestHeaders"
        if not early and any(lower(h) == ACTOR_HEADER for h in as_list(node.get("remove"))):
            problems.append(
                f"{who}: {where}.remove drops {ACTOR_HEADER} before the request is done: the rate limit reads "
                f"it again to charge the response, so nothing would be charged. Remove {ACTOR_HEADER} from "
                "that list (only ClientTrafficPolicy earlyRequestHeaders may drop it, before the JWT filter)"
            )
        for verb in ("set", "add"):
            for entry in as_list(node.get(verb)):
                if isinstance(entry, dict) and lower(entry.get("name")) == ACTOR_HEADER:
                    problems.append(
                        f"{who}: {where}.{verb} writes {ACTOR_HEADER}: only the verified JWT subject may set it, "
                        "or a request could spend another actor's budget. Remove that entry"
                    )
        if lower(node.get("forwardClientIDHeader")) == ACTOR_HEADER and not _names_api_key_actor(resource, path):
            problems.append(
                f"{who}: {where}.forwardClientIDHeader writes {ACTOR_HEADER}: only a verified identity may set it, "
                "and an API key's client id does so only from the apiKeyAuth of a SecurityPolicy without jwt (with "
                f"jwt, the JWT filter erases {ACTOR_HEADER} after the API-key filter wrote it). Forward the client ID "
                "in another header, or move apiKeyAuth to a SecurityPolicy of its own"
            )
        if any(lower(h) == ACTOR_HEADER for h in as_list(node.get("headersToBackend"))):
            problems.append(
                f"{who}: {where}.headersToBackend lets an external authorizer write {ACTOR_HEADER}: only the "
                "verified JWT subject may set it. Remove it from that list"
            )
        for entry in as_list(node.get("claimToHeaders")):
            if (
                isinstance(entry, dict)
                and lower(entry.get("header")) == ACTOR_HEADER
                and entry.get("claim") not in ("sub", UNKNOWN)
            ):
                problems.append(
                    f"{who}: {where}.claimToHeaders copies claim {entry.get('claim')!r} into {ACTOR_HEADER}: the "
                    "budget key must be the JWT subject (actor/<atespace>/<name>). Use claim: sub"
                )
    return problems


# Request fields Agent Router relies on to report usage: a stream without `stream_options.include_usage`
# ends with no usage chunk, and is charged nothing (envoyproxy/ai-gateway v1.1.0 internal/endpointspec
# ChatCompletionsEndpointSpec.ParseBody injects it; a backend bodyMutation runs after that injection).
USAGE_FIELDS = frozenset({"stream_options", "stream"})


def _body_mutations(resource: Resource) -> list[tuple[str, dict[str, Any]]]:
    """(where, bodyMutation) of an AIServiceBackend, or of every backendRef of an AIGatewayRoute."""
    if resource.is_kind("aigateway.envoyproxy.io", "AIServiceBackend"):
        mutation = resource.spec.get("bodyMutation")
        return [("spec.bodyMutation", mutation)] if isinstance(mutation, dict) else []
    if not resource.is_kind("aigateway.envoyproxy.io", "AIGatewayRoute"):
        return []
    found: list[tuple[str, dict[str, Any]]] = []
    for rule_index, rule in enumerate(as_list(resource.spec.get("rules"))):
        for ref_index, ref in enumerate(as_list(as_dict(rule).get("backendRefs"))):
            mutation = as_dict(ref).get("bodyMutation")
            if isinstance(mutation, dict):
                found.append((f"spec.rules[{rule_index}].backendRefs[{ref_index}].bodyMutation", mutation))
    return found


def check_body_mutations_keep_usage(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """No request body mutation touches the fields that make a stream report its usage."""
    del config
    problems: list[str] = []
    for where, mutation in _body_mutations(resource):
        if has_unknown(mutation):
            continue
        touched = [str(entry.get("path")) for entry in as_list(mutation.get("set")) if isinstance(entry, dict)]
        touched += [str(name) for name in as_list(mutation.get("remove"))]
        for field_name in sorted({name for name in touched if name in USAGE_FIELDS}):
            problems.append(
                f"{resource.describe()}: {where} changes {field_name!r}, which decides whether a stream reports its "
                "usage: Agent Router sets stream_options.include_usage before this mutation runs, so changing it "
                "can make every streamed call end without usage and be charged nothing. Remove that entry"
            )
    return problems


def check_suspension_keeps_the_listener(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The JWT and API-key SecurityPolicies always have an `authorization` and the budget policy always has its
    response overrides, so that suspending or lifting an actor changes route configuration only
    (core/suspension.py)."""
    del config
    who = resource.describe()
    names_by_key = lower(dig(resource.spec, "apiKeyAuth", "forwardClientIDHeader")) == ACTOR_HEADER
    if resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy") and (
        isinstance(resource.spec.get("jwt"), dict) or names_by_key
    ):
        authorization = resource.spec.get("authorization")
        if authorization is None:
            return [
                f"{who} has no authorization: the first suspension would add Envoy's RBAC filter to the listener, "
                "which drains every connection and cuts streams after 60 s. Keep `authorization: {defaultAction: "
                "Allow}` even when nobody is suspended"
            ]
    overrides = resource.spec.get("responseOverride")
    if is_budget_policy(resource) and not has_unknown(overrides) and not as_list(overrides):
        return [
            f"{who} has no responseOverride: the first suspension would add a custom_response filter to the "
            "listener, which drains every connection and cuts streams after 60 s. Keep the suspension's 403 "
            "overrides even when nobody is suspended"
        ]
    return []


# The filters of each listener the program can have (core/suspension.py): the budget policy's custom_response, the
# identity filter (the JWT filter, or on the API-key listener the API-key filter), RBAC (the kill switch) and the
# shared rate limit.
_PROGRAM_LISTENERS = tuple(
    (
        f"{CUSTOM_RESPONSE}/backendtrafficpolicy/budget",
        identity,
        "envoy.filters.http.rbac",
        "envoy.filters.http.ratelimit/budget",
    )
    for identity in (JWT_AUTHN, API_KEY_AUTH)
)


def check_agent_router_after_identity(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """An EnvoyProxy orders custom_response after the identity filters (the JWT filter, and on the API-key listener
    the API-key filter), so that Agent Router's processor (inserted before custom_response) runs after the filter
    that sets `x-actor-id` on every listener (core/filter_chain.py)."""
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "EnvoyProxy"):
        return []
    filter_order = resource.spec.get("filterOrder")
    if has_unknown(filter_order):
        return []
    # Entries Envoy Gateway could not apply (no name, or anchors that are not filter names) move nothing.
    positions = [
        position
        for position in map(as_dict, as_list(filter_order))
        if isinstance(position.get("name"), str)
        and all(isinstance(position.get(anchor), str | None) for anchor in ("before", "after"))
    ]
    late = sorted(
        {
            name
            for filters in _PROGRAM_LISTENERS
            for name in identity_filters_after_agent_router(listener_chain(filters, positions))
        }
    )
    if not late:
        return []
    return [
        f"{resource.describe()}: Agent Router's processor would run before {', '.join(late)} (Envoy Gateway puts "
        "custom_response first, and Agent Router inserts itself before it), so it would miss x-actor-id and strip "
        "it from a retried call, which is then charged nothing. Keep spec.filterOrder "
        f"{[dict(p) for p in IDENTITY_BEFORE_AGENT_ROUTER]}"
    ]


def _api_key_problems(resource: Resource, who: str) -> list[str]:
    """An API-key SecurityPolicy that names the actor: the agent's key removed before the request goes upstream,
    and the suspension rules."""
    api_key_auth = as_dict(resource.spec.get("apiKeyAuth"))
    problems: list[str] = []
    sanitize = api_key_auth.get("sanitize")
    if sanitize is not True and not has_unknown(sanitize):
        problems.append(
            f"{who}: apiKeyAuth.sanitize is not true: the agent's API key would travel upstream to the model provider "
            "(only authorization is removed by the AIServiceBackends). Set apiKeyAuth.sanitize: true"
        )
    return problems + _authorization_problems(resource, who, [])


def check_jwt_names_the_actor(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A JWT SecurityPolicy: a valid token required (neither `optional` nor `failOpen`), audiences on every
    provider, and `sub` → `x-actor-id`. An API-key SecurityPolicy naming the actor: the key removed upstream."""
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy"):
        return []
    jwt = resource.spec.get("jwt")
    if not isinstance(jwt, dict):
        if lower(dig(resource.spec, "apiKeyAuth", "forwardClientIDHeader")) == ACTOR_HEADER:
            return _api_key_problems(resource, resource.describe())
        return []
    who = resource.describe()
    problems: list[str] = []
    if jwt.get("optional") is True:
        problems.append(
            f"{who}: jwt.optional is true: a request without a token would pass with no {ACTOR_HEADER} and "
            "so with no budget. Remove optional (or set it to false)"
        )
    if jwt.get("failOpen") is True:
        problems.append(
            f"{who}: jwt.failOpen is true: a request with a missing or invalid token would pass with no "
            f"{ACTOR_HEADER} and so with no budget. Remove failOpen (or set it to false)"
        )
    providers = [p for p in as_list(jwt.get("providers")) if isinstance(p, dict)]
    if not providers:
        problems.append(f"{who}: jwt has no providers: add the Substrate IdP provider")
    for position, provider in enumerate(providers):
        label = f"JWT provider {provider.get('name', position)!r}"
        audiences = provider.get("audiences")
        if not has_unknown(audiences) and not any(isinstance(a, str) and a for a in as_list(audiences)):
            problems.append(
                f"{who}: {label} has no audiences: any token the issuer signs, for any service, would be "
                f"accepted here. Set audiences to the one the egress policies request ({GATEWAY_AUDIENCE})"
            )
        claims = provider.get("claimToHeaders")
        if not has_unknown(claims) and not copies_sub_to_actor_header(provider):
            problems.append(
                f"{who}: {label} does not copy claim sub into {ACTOR_HEADER}: requests it admits carry no "
                f"actor id, so no budget rule applies to them. Add claimToHeaders: "
                f"[{{header: {ACTOR_HEADER}, claim: sub}}]"
            )
    problems.extend(_authorization_problems(resource, who, providers))
    return problems


def _token_locations(provider: Mapping[str, Any]) -> list[str] | None:
    """Where Envoy looks for a provider's token (`header <name>`, `query <name>`, `cookie <name>`), or None when
    `extractFrom` is left out: then Envoy's defaults, the `Authorization` header *and* the `access_token` query
    parameter (envoy source/extensions/filters/http/jwt_authn/extractor.cc; envoyproxy/gateway v1.9.0
    internal/xds/translator/jwt.go renders `extractFrom` as `from_headers`/`from_params`/`from_cookies`)."""
    extract_from = provider.get("extractFrom")
    if extract_from is None:
        return None
    found = [f"header {lower(as_dict(h).get('name'))}" for h in as_list(as_dict(extract_from).get("headers"))]
    found += [f"query {p}" for p in as_list(as_dict(extract_from).get("params"))]
    return found + [f"cookie {c}" for c in as_list(as_dict(extract_from).get("cookies"))]


def _one_actor_id_rule_first(authorization: Any) -> bool:
    """Whether an `authorization` starts by denying a request without exactly one `x-actor-id` (core.suspension)."""
    rules = as_list(as_dict(authorization).get("rules"))
    first = rules[0] if rules and isinstance(rules[0], dict) else {}
    return first.get("action") == "Deny" and first.get("cel") == ONE_ACTOR_ID_CEL and not first.get("principal")


def check_one_actor_id_per_call(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A SecurityPolicy that names the actor yields exactly one `x-actor-id` per admitted call, or refuses the call:

    * each JWT provider reads its token from one place only. Envoy verifies every token it extracts and adds the
      claim header once per token (envoy jwt_authn authenticator.cc `addJWTClaimToHeader`): a token in the header
      and another in the query gave two values, the class rule's pattern matched one while its `Distinct` entry
      counted the other (review 2026-12b);
    * its authorization starts with the `one-actor-id` Deny rule: a verified token without `sub` writes no header,
      and no budget rule charges such a call;
    * an API-key policy has credentials: with `credentialRefs: []` every call on its listener fails.
    """
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy"):
        return []
    who = resource.describe()
    spec = resource.spec
    jwt = spec.get("jwt")
    api_key = as_dict(spec.get("apiKeyAuth"))
    names_actor = isinstance(jwt, dict) or lower(api_key.get("forwardClientIDHeader")) == ACTOR_HEADER
    if not names_actor or has_unknown(spec):
        return []
    problems: list[str] = []
    for position, provider in enumerate(p for p in as_list(as_dict(jwt).get("providers")) if isinstance(p, dict)):
        label = f"JWT provider {provider.get('name', position)!r}"
        locations = _token_locations(provider)
        if locations is None:
            problems.append(
                f"{who}: {label} has no extractFrom, so Envoy also takes a token from the access_token query "
                f"parameter: a second admitted token there gives the call a second {ACTOR_HEADER} value, and a class "
                "or pool limit can be escaped. Set extractFrom: {headers: [{name: Authorization, valuePrefix: "
                '"Bearer "}]}'
            )
        elif len(locations) != 1:
            problems.append(
                f"{who}: {label} reads tokens from {len(locations)} places ({', '.join(locations) or 'none'}): "
                f"each admitted token adds an {ACTOR_HEADER} value, so a call can carry two. Read the Authorization "
                'header alone: extractFrom: {headers: [{name: Authorization, valuePrefix: "Bearer "}]}'
            )
    if "apiKeyAuth" in spec and not as_list(api_key.get("credentialRefs")):
        problems.append(
            f"{who}: apiKeyAuth has no credentialRefs: no key can pass, so every call on its listener gets 401. "
            "Reference the API-key Secrets, or remove the API-key listener (drop apiKeys from identity.sources)"
        )
    if not _one_actor_id_rule_first(spec.get("authorization")):
        problems.append(
            f"{who}: authorization does not start with the {ONE_ACTOR_ID_RULE} rule: a verified token without sub "
            f"writes no {ACTOR_HEADER}, and no budget rule charges a call without one. Put first: "
            f"{{name: {ONE_ACTOR_ID_RULE}, action: Deny, cel: {ONE_ACTOR_ID_CEL!r}}}"
        )
    return problems


def _source_of(value: Any) -> SourceName | None:
    """The identity source whose verified callers carry `x-actor-id: value`, or None when none gives that value."""
    caller = parse_header_value(value) if isinstance(value, str) else None
    return caller.source if caller is not None else None


def _authorization_problems(resource: Resource, who: str, providers: list[dict[str, Any]]) -> list[str]:
    """The kill switch on a SecurityPolicy: Deny rules on the verified `sub` (JWT policy) or on the `x-actor-id` the
    API-key filter wrote (API-key policy), Allow for everyone else.

    Envoy Gateway v1.9.0 (api/v1alpha1/authorization_types.go): rules are first-match, `defaultAction` is
    Deny when left out, a JWT principal reads claims of a provider of the same policy, and a String claim (or a
    header) must equal one of the values exactly.
    """
    authorization = resource.spec.get("authorization")
    if not isinstance(authorization, dict):
        return []
    problems: list[str] = []
    default_action = authorization.get("defaultAction")
    if default_action is None:
        problems.append(
            f"{who}: authorization has no defaultAction, and Envoy Gateway's default is Deny: every actor the rules "
            "do not name would be refused with 403. Set authorization.defaultAction: Allow (the suspension rules "
            "deny the suspended actors)"
        )
    elif default_action == "Deny":
        problems.append(
            f"{who}: authorization.defaultAction is Deny: every actor no Allow rule names is refused with 403. "
            "Set it to Allow and deny only suspended actors"
        )
    # Only a string names a provider: a malformed name (a list, a number) must give a message, never a TypeError.
    names = {name for p in providers if isinstance(name := p.get("name"), str)}
    allowed_before: list[int] = []
    for index, rule in enumerate(as_list(authorization.get("rules"))):
        if not isinstance(rule, dict) or has_unknown(rule):
            continue
        where = f"{who}: authorization rule {index} ({rule.get('name', 'unnamed')})"
        if rule.get("action") == "Allow":
            allowed_before.append(index)
            continue
        jwt = as_dict(dig(rule, "principal", "jwt"))
        sub_claims = [c for c in as_list(jwt.get("claims")) if isinstance(c, dict) and c.get("name") == "sub"]
        header_values = [
            value
            for match in as_list(dig(rule, "principal", "headers"))
            if isinstance(match, dict) and lower(match.get("name")) == ACTOR_HEADER
            for value in as_list(match.get("values"))
        ]
        if header_values:
            strays = [v for v in header_values if _source_of(v) != API_KEYS]
            if strays:
                problems.append(
                    f"{where} denies {ACTOR_HEADER} values {strays[:3]} that no API key's client id carries (an API "
                    f"key names its actor {actor_header_value('apikey:ci-bot')!r}), so nobody is suspended. Write "
                    f"e.g. {actor_header_value('apikey:ci-bot')!r} ({PROJECT}:suspended lists apikey:ci-bot)"
                )
        if not sub_claims:
            if header_values and allowed_before:
                problems.append(
                    f"{where} comes after Allow rule(s) {allowed_before}: rules are first-match, so an actor an "
                    "earlier Allow rule admits is never suspended. Put the suspension rules first"
                )
            continue
        provider = jwt.get("provider")
        if not isinstance(provider, str) or provider not in names:
            problems.append(
                f"{where} reads claims of JWT provider {provider!r}, which this policy does not define "
                f"(have {sorted(names)}): the rule never matches, so nobody is "
                "suspended. Name the policy's provider"
            )
        for claim in sub_claims:
            if claim.get("valueType", "String") != "String":
                problems.append(
                    f"{where} matches sub as {claim.get('valueType')}: the subject is one string. Use valueType String"
                )
            strays = [v for v in as_list(claim.get("values")) if _source_of(v) in (None, API_KEYS)]
            if strays:
                problems.append(
                    f"{where} denies subjects {strays[:3]} that no verified token carries: a Substrate actor's subject "
                    f"is {actor_header_value('agents/actor-c')!r}, a service account's "
                    f"{actor_header_value('serviceaccount:agents/bot')!r}, so these actors are not suspended. Write "
                    f"e.g. {actor_header_value('agents/actor-c')!r} ({PROJECT}:suspended lists agents/actor-c)"
                )
        if allowed_before:
            problems.append(
                f"{where} comes after Allow rule(s) {allowed_before}: rules are first-match, so an actor an earlier "
                "Allow rule admits is never suspended. Put the suspension rules first"
            )
    return problems


def _egress_rule_documents(resource: Resource) -> list[list[Any]]:
    """The rules to check: ``rules`` when the props carry them (the outputs hold what was written), and
    the rules the settings ask for (what the provider sends: ``build_rules``), when none of those
    settings is unknown. Usually the two are the same document, checked once."""
    documents: list[list[Any]] = []
    rules = resource.props.get("rules")
    if isinstance(rules, list) and rules and not has_unknown(rules):
        documents.append(rules)
    keys = ("gateway_hostname", "gateway_port", "audiences", "expiration_seconds", "extra_hostnames")
    if not any(has_unknown(resource.props.get(key)) for key in keys):
        built = build_rules(PolicyInputs.from_props(resource.props))
        if not documents or normalize_rules(built) != normalize_rules(documents[0]):
            documents.append(built)
    return documents


# The settings of a shard that `PolicyInputs.from_props` reads as lists of text: a list (or one text) is a
# setting, anything else is not one the provider could have been given.
_LIST_SETTINGS = ("audiences", "extra_hostnames", "provider_hosts")


def _unreadable_settings(resource: Resource) -> list[str]:
    """The shard settings that are no list of text, so neither the provider nor this rule can build rules."""
    return [
        key
        for key in _LIST_SETTINGS
        if not (
            resource.props.get(key) is None
            or isinstance(value := resource.props[key], str)
            or (isinstance(value, list) and not has_unknown(value))
        )
        and resource.props.get(key) is not UNKNOWN
    ]


def _rule_kind(rule: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(rule, dict) or len(rule) != 1:
        return "", {}
    [(kind, body)] = rule.items()
    kind = {"tls_passthrough": "tlsPassthrough"}.get(kind, kind)
    return kind, as_dict(body)


def provider_hosts(resource: Resource) -> list[str]:
    """Model-provider host patterns no actor may reach: the configured ones and every well-known one."""
    configured = [h for h in as_list(resource.props.get("provider_hosts")) if isinstance(h, str)]
    hosts: list[str] = []
    for host in (*configured, *WELL_KNOWN_PROVIDER_HOSTS):
        if host not in hosts:
            hosts.append(host)
    return hosts


def check_egress_reaches_only_the_gateway(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """An actor's egress policy: one http rule for the gateway swapping Authorization for a short-lived
    actor JWT, and nothing else. Only with the pack config `allowExtraHostnames: true` may other rules
    exist, each an effect-free tlsPassthrough toward a host that is neither a model provider nor the gateway."""
    if not is_egress_policy(resource):
        return []
    unreadable = _unreadable_settings(resource)
    if unreadable:
        return [
            f"{resource.describe()}: {', '.join(unreadable)} must each be a list of host names or audiences, got "
            f"{', '.join(repr(resource.props[key])[:80] for key in unreadable)}: the egress-policy provider cannot "
            "build the actors' rules from them. Restore the shard's inputs as the program declares them"
        ]
    problems: list[str] = []
    for rules in _egress_rule_documents(resource):
        problems += [p for p in _egress_document_problems(resource, rules, config) if p not in problems]
    return problems


def _egress_document_problems(resource: Resource, rules: list[Any], config: Mapping[str, Any]) -> list[str]:
    gateway = str(config.get("gatewayHostname") or GATEWAY_HOSTNAME)
    allow_extra = config.get("allowExtraHostnames") is True
    who = resource.describe()
    problems: list[str] = []
    jwt_rules = 0
    providers = provider_hosts(resource)
    for index, rule in enumerate(rules):
        kind, body = _rule_kind(rule)
        where = f"{who}: egress rule {index + 1}" + (f" ({kind})" if kind else "")
        hosts = [h for h in as_list(body.get("hostnames")) if isinstance(h, str)]
        headers = [h for h in as_list(dig(body, "effects", "replaceHeaders")) if isinstance(h, dict)]
        if headers:
            jwt_rules += 1
            problems.extend(_jwt_rule_problems(where, kind, hosts, headers, gateway))
            continue
        if not allow_extra:
            problems.append(
                f"{where} for {hosts} is not the gateway rule: every egress policy holds only the http rule for "
                f"{gateway} (this pack's allowExtraHostnames is false). Remove {hosts} from "
                f"{PROJECT}:substrate.egress.extraHostnames"
            )
            continue
        if kind != "tlsPassthrough":
            problems.append(
                f"{where} for {hosts} has no actor-JWT effect: besides the gateway rule only tlsPassthrough "
                f"rules ({PROJECT}:substrate.egress.extraHostnames) are allowed. Remove it"
            )
            continue
        for host in hosts:
            clashes = [p for p in providers if patterns_overlap(host, p)]
            if clashes:
                problems.append(
                    f"{where} lets the actor reach model provider host {clashes[0]!r} through {host!r} "
                    f"directly, around the gateway and its budget. Remove {host!r} from "
                    f"{PROJECT}:substrate.egress.extraHostnames"
                )
            elif host == gateway:
                problems.append(
                    f"{where} names the gateway {gateway!r} without the actor JWT: remove {host!r} from "
                    f"{PROJECT}:substrate.egress.extraHostnames"
                )
    if jwt_rules == 0:
        problems.append(
            f"{who} has no http rule for {gateway} that replaces Authorization with the actor JWT: the "
            "actor's model calls would carry no identity and be refused. Restore the gateway rule"
        )
    elif jwt_rules > 1:
        problems.append(
            f"{who} has {jwt_rules} rules with header effects: exactly one, the http rule for {gateway}, "
            "may carry the actor JWT"
        )
    return problems


def _jwt_rule_problems(
    where: str, kind: str, hosts: list[str], headers: list[dict[str, Any]], gateway: str
) -> list[str]:
    problems: list[str] = []
    if kind != "http":
        problems.append(
            f"{where} carries header effects: only the http rule for {gateway} may (Envoy Gateway listens "
            "in plain HTTP; Substrate's https rules decrypt traffic). Make it an http rule"
        )
    if hosts != [gateway]:
        problems.append(
            f"{where} sends the actor JWT to {hosts}: the rule with the actorJwt effect must name only "
            f"{gateway!r}, or the token (and the actor's calls) reach other hosts"
        )
    if [lower(h.get("header")) for h in headers] != [AUTHORIZATION]:
        names = [h.get("header") for h in headers]
        problems.append(
            f"{where} replaces headers {names}: it must replace exactly Authorization, which the gateway verifies"
        )
    for entry in headers:
        if "credentialUri" in entry or "credential_uri" in entry:
            problems.append(
                f"{where} injects a stored credential (credentialUri) into the actor's traffic: actors get "
                "only their own actor JWT; provider keys stay in the gateway's Secrets"
            )
            continue
        jwt = as_dict(entry.get("actorJwt") or entry.get("actor_jwt"))
        if not jwt:
            problems.append(f"{where} replaces {entry.get('header')!r} without an actorJwt source: use actorJwt")
            continue
        if entry.get("prefix") != AUTH_PREFIX:
            problems.append(
                f"{where} uses prefix {entry.get('prefix')!r}: the gateway's JWT filter reads "
                f"'Authorization: Bearer <token>', so the prefix must be {AUTH_PREFIX!r}"
            )
        if not any(isinstance(a, str) and a for a in as_list(jwt.get("audiences"))):
            problems.append(
                f"{where} requests an actor JWT without audiences: request the gateway's ({GATEWAY_AUDIENCE})"
            )
        seconds = jwt.get("expirationSeconds", jwt.get("expiration_seconds"))
        if isinstance(seconds, str) and seconds.strip().isdigit():
            seconds = int(seconds)
        if isinstance(seconds, float) and seconds.is_integer():
            seconds = int(seconds)
        valid = isinstance(seconds, int) and not isinstance(seconds, bool)
        if not valid or not MIN_EXPIRATION_SECONDS <= seconds <= MAX_EXPIRATION_SECONDS:
            problems.append(
                f"{where}: actorJwt.expirationSeconds is {seconds!r}: it must be a whole number from "
                f"{MIN_EXPIRATION_SECONDS} to {MAX_EXPIRATION_SECONDS} (Substrate refuses others; "
                f"{DEFAULT_EXPIRATION_SECONDS} is the default). Fix {PROJECT}:substrate.egress.expirationSeconds"
            )
    return problems


def sensitive_env_name(name: str) -> bool:
    """Whether an env var of this name carries a credential (so must come from a Secret)."""
    segments = [s for s in re.split(r"[^A-Z0-9]+", name.upper()) if s]
    if not segments:
        return False
    last = segments[-1]
    if last in SENSITIVE_ENV_SUFFIXES or last.endswith("APIKEY"):
        return True
    return last == "KEY" and len(segments) > 1 and segments[-2] in KEY_QUALIFIERS


def check_provider_keys_in_secrets(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Provider keys reach the cluster only as Secrets: credential references, no literals anywhere else."""
    del config
    if not resource.is_kubernetes or resource.kind == "Secret":
        return []
    who = resource.describe()
    problems: list[str] = []
    if resource.is_kind("aigateway.envoyproxy.io", "BackendSecurityPolicy"):
        problems.extend(_credential_reference_problems(resource, who))
    scope = {key: value for key, value in resource.props.items() if key not in ("apiVersion", "kind")}
    for path, node in walk(scope):
        if isinstance(node, str) and PROVIDER_KEY_PATTERN.search(node):
            problems.append(
                f"{who}: {dotted(path)} holds a literal that looks like a model-provider API key: keys live only "
                "in a Secret (from `pulumi config set --secret`). Reference the Secret instead, and rotate the key"
            )
        if path and path[-1] == "env":
            for entry in as_list(node):
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    continue
                if sensitive_env_name(entry["name"]) and "value" in entry and entry["value"] not in ("", None):
                    problems.append(
                        f"{who}: {dotted(path)} sets {entry['name']} to a literal value: credentials reach "
                        "containers only from a Secret. Use valueFrom.secretKeyRef"
                    )
    return problems


def _credential_reference_problems(resource: Resource, who: str) -> list[str]:
    spec = resource.spec
    kind = spec.get("type")
    problems: list[str] = []
    for field_name in CREDENTIAL_FIELDS.values():
        block = spec.get(field_name)
        if block is None or has_unknown(block):
            continue
        if not isinstance(block, dict):
            problems.append(f"{who}: spec.{field_name} is not a secretRef: reference the provider key's Secret")
            continue
        inline = sorted(key for key in block if key != "secretRef")
        if inline:
            problems.append(
                f"{who}: spec.{field_name} carries {inline} besides secretRef: the key must come only from a "
                "Secret. Remove them and keep secretRef"
            )
        ref = block.get("secretRef")
        if not isinstance(ref, dict) or not ref.get("name"):
            problems.append(
                f"{who}: spec.{field_name} has no secretRef.name: reference the Secret holding the provider key"
            )
        elif ref.get("kind") not in (None, "Secret"):
            problems.append(f"{who}: spec.{field_name}.secretRef points at a {ref['kind']}: it must be a Secret")
    expected = CREDENTIAL_FIELDS.get(kind) if isinstance(kind, str) else None
    if expected and spec.get(expected) is None:
        problems.append(f"{who}: type {kind} needs spec.{expected}.secretRef naming the provider key's Secret")
    return problems


# ---------------------------------------------------------------------------------------------------------
# Advisory resource checks


def check_fails_closed_outside_dev(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Envoy Gateway's rate limiting fails closed on every stack but the dev ones."""
    if resource.type != HELM_RELEASE_TYPE:
        return []
    chart = resource.props.get("chart")
    if not isinstance(chart, str) or chart.rstrip("/").rsplit("/", 1)[-1] != ENVOY_GATEWAY_CHART_NAME:
        return []
    stack = stack_of_urn(resource.urn)
    dev_stacks = config.get("devStacks")
    if not isinstance(dev_stacks, list):
        dev_stacks = list(DEFAULT_DEV_STACKS)
    if not stack or stack in dev_stacks:
        return []
    fail_closed = dig(resource.props, "values", "config", "envoyGateway", "rateLimit", "failClosed")
    if fail_closed is True or fail_closed is UNKNOWN:
        return []
    return [
        f"{resource.describe()}: stack {stack!r} fails open: when Redis or the rate-limit service is down, "
        f"every agent calls the models with no budget at all. Set {PROJECT}:rateLimit.failClosed: true "
        f"(or list {stack!r} in this policy's devStacks if it is a throwaway stack)"
    ]


def check_idp_trust_verifies(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The Backend Envoy Gateway fetches the actor JWKS through verifies the IdP's certificate."""
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "Backend"):
        return []
    if dig(resource.spec, "tls", "insecureSkipVerify") is not True:
        return []
    return [
        f"{resource.describe()} skips TLS verification: whoever can answer for the IdP's name can serve "
        "their own signing keys and mint any actor's identity (and spend its budget). Set "
        f"{PROJECT}:substrate.trust.mode to clusterTrustBundle or configMap"
    ]


# ---------------------------------------------------------------------------------------------------------
# Stack checks


# Any one Envoy route of the Gateway (the coverage check asks which rules apply, not under which key).
COVERAGE_ROUTE = envoy_route_name("<namespace>", "<route>", 0, 0)
COVERAGE_LISTENER = envoy_listener_name("<namespace>", "<gateway>", "<listener>")


@dataclass
class StackProblem:
    """A stack-level violation, attached to one resource when there is one to blame."""

    message: str
    urn: str = ""


@dataclass
class _BudgetPolicy:
    resource: Resource
    rules: list[dict[str, Any]] = field(default_factory=list)


def check_budget_coverage(resources: Sequence[Resource], config: Mapping[str, Any]) -> list[StackProblem]:
    """Every actor falls in exactly one budget rule; the budget policy stays within Envoy Gateway's caps;
    exactly one budget policy per target; and a JWT SecurityPolicy on that target sets x-actor-id."""
    del config
    budget_policies = [_BudgetPolicy(r, global_rules(r)) for r in resources if is_budget_policy(r)]
    if not budget_policies:
        return [
            StackProblem(
                f"no BackendTrafficPolicy has a global rate-limit rule keyed on {ACTOR_HEADER}: no agent has a "
                "token budget. The program's Budgets component declares one; restore it"
            )
        ]
    problems: list[StackProblem] = []
    owners: dict[tuple[str, str, str], Resource] = {}
    for policy in budget_policies:
        for key in sorted(target_keys(policy.resource)):
            if key in owners:
                problems.append(
                    StackProblem(
                        f"{policy.resource.describe()} and {owners[key].describe()} both hold budget rules for "
                        f"{key[1]} {key[0]}/{key[2]}: Envoy Gateway applies only the oldest and ignores the "
                        "other. Keep every budget rule in one policy",
                        policy.resource.urn,
                    )
                )
            else:
                owners[key] = policy.resource
        problems.extend(_cap_problems(policy))
    problems.extend(_jwt_presence_problems(resources, budget_policies))
    subjects = known_subjects(resources)
    for policy in budget_policies:
        if not all(well_formed(rule) for rule in policy.rules):
            continue  # the API server refuses it by its CRD schema
        if any(has_unknown(rule) for rule in policy.rules) or not _regexes_valid(policy.rules):
            continue  # unknown during preview, or already reported as an invalid pattern
        namespace = policy.resource.namespace
        name = str(dig(policy.resource.props, "metadata", "name") or policy.resource.name)
        if translation_errors(policy.rules):
            continue  # Envoy Gateway rejects the whole policy: reported by budget-rules-charge-llm-tokens
        # A non-shared rule charges per Envoy route; the pack only counts which rules apply, so any one
        # route and listener stand for all (their names only matter for the counter key). Which actors a rule
        # admits does not depend on the model, so per-model rules are asked about without their model match:
        # whatever model a call names, its actor must fall in one budget.
        actor_rules = [without_model_matches(rule) for rule in policy.rules]
        model = PolicyModel(namespace, name, actor_rules, route_name=COVERAGE_ROUTE, listener_name=COVERAGE_LISTENER)
        slots, classes = limit_slots(policy.resource), class_slots(policy.resource)
        # Each distinct admission as a small number, so comparing two per actor costs nothing.
        admission_ids: dict[tuple[tuple[str, str, str, bool], ...], int] = {}
        admission_of_rule = [
            admission_ids.setdefault(admitted_actors(rule), len(admission_ids)) for rule in actor_rules
        ]
        probe_reported = False
        for subject in [*subjects, *PROBE_SUBJECTS]:
            if probe_reported and subject in PROBE_SUBJECTS:
                continue  # one message for callers in no class, whichever source shows it first
            # A pool's rules charge its members on top of their own budget: they are not one of its budgets.
            applied = [rule for rule in model.for_actor(subject) if not in_pool_block(rule.index, slots, classes)]
            blocks = {rule.index // slots for rule in applied}
            admissions = {admission_of_rule[rule.index] for rule in applied}
            budgets = max(len(blocks), len(admissions))
            if budgets == 1:
                continue  # one budget: all its limits (its windows, tokens and usd) apply, as they should
            caller = parse_header_value(subject)
            named = caller.actor_id if caller is not None else subject
            who = "an actor in no budget class" if subject in PROBE_SUBJECTS else f"actor {named}"
            probe_reported = probe_reported or subject in PROBE_SUBJECTS
            if not applied:
                message = (
                    f"{policy.resource.describe()}: {who} falls in no budget rule, so its calls are not "
                    "counted at all. The default rule must admit every actor not in a class"
                )
            else:
                indexes = ", ".join(str(rule.index) for rule in applied)
                message = (
                    f"{policy.resource.describe()}: {who} falls in the rules of {budgets} budgets ({indexes}): "
                    "each one charges it, and the smallest budget wins. Exclude class members from the default "
                    "rule and keep each actor in at most one class"
                )
            problems.append(StackProblem(message, policy.resource.urn))
    return problems


def known_subjects(resources: Sequence[Resource]) -> list[str]:
    """The `x-actor-id` of every actor the stack names: each Substrate actor of an egress-policy shard, each
    service account a JWT policy's Allow rule admits, each API-key actor a Secret is annotated with."""
    subjects: set[str] = set()
    for resource in resources:
        if is_egress_policy(resource):
            subjects.update(actor_header_value(actor) for actor in egress_actors(resource) if _is_actor_id(actor))
        elif resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy"):
            for rule in as_list(dig(resource.spec, "authorization", "rules")):
                if isinstance(rule, dict) and rule.get("action") == "Allow":
                    for claim in as_list(dig(rule, "principal", "jwt", "claims")):
                        if isinstance(claim, dict) and claim.get("name") == "sub":
                            subjects.update(v for v in as_list(claim.get("values")) if _source_of(v) is not None)
        elif resource.is_kubernetes and resource.kind == "Secret":
            actor = dig(resource.props, "metadata", "annotations", ACTOR_ID_ANNOTATION)
            if isinstance(actor, str) and _is_actor_id(actor):
                subjects.add(actor_header_value(actor))
    return sorted(subjects)


def _is_actor_id(text: str) -> bool:
    try:
        parse_actor_id(text)
    except ActorIdError:
        return False
    return True


def limit_slots(resource: Resource) -> int:
    """How many consecutive rules form one budget (the program's budgetPolicy.limitSlots, annotated on the
    policy; rule b * slots + j is budget b's j-th limit). Missing or unreadable: 1, the strictest reading."""
    text = dig(resource.props, "metadata", "annotations", LIMIT_SLOTS_ANNOTATION)
    if isinstance(text, str) and text.isdigit() and 1 <= int(text) <= MAX_LIMIT_SLOTS:
        return int(text)
    return 1


def class_slots(resource: Resource) -> int | None:
    """How many blocks after the default budget's are the classes' when the policy has pools (the program's
    budgetPolicy.classSlots, annotated on the policy only then): every later block is a pool's. Missing or
    unreadable: None, the strictest reading (no pools: every rule is a budget's)."""
    text = dig(resource.props, "metadata", "annotations", CLASS_SLOTS_ANNOTATION)
    if isinstance(text, str) and text.isdigit() and int(text) <= MAX_RULES:
        return int(text)
    return None


def in_pool_block(index: int, slots: int, classes: int | None) -> bool:
    """Whether rule `index` is in a pool's block: any block after the default's and `classes` class blocks of
    `slots` rules each (none when the policy has no pools)."""
    return classes is not None and index // slots > classes


def without_model_matches(rule: Mapping[str, Any]) -> dict[str, Any]:
    """The rule with its `x-ai-eg-model` matches left out: which actors it admits, whatever model they call."""
    selectors = [
        {**selector, "headers": [m for m in as_list(selector.get("headers")) if lower(m.get("name")) != MODEL_HEADER]}
        for selector in as_list(rule.get("clientSelectors"))
        if isinstance(selector, dict)
    ]
    return {**rule, "clientSelectors": selectors}


def admitted_actors(rule: Mapping[str, Any]) -> tuple[tuple[str, str, str, bool], ...]:
    """Which actors a rule admits, as its value matches (Distinct and always-true matches left out).

    Every limit of one budget admits the same actors (a usd limit only adds an always-true match), so two
    rules with different admissions that both apply to one actor are two budgets, whatever the slots say.
    """
    admission = {
        (lower(m.get("name")), str(m.get("type") or "Exact"), str(m.get("value")), m.get("invert") is True)
        for m in header_matches(rule)
        if m.get("type") != "Distinct" and not (m.get("value") == MATCHES_NOTHING and m.get("invert") is True)
    }
    return tuple(sorted(admission))


def well_formed(rule: Mapping[str, Any]) -> bool:
    """Whether a rate-limit rule has the shape its CRD requires wherever the rule-translation model reads it:
    selectors and header matches are maps, a match has a text name (type and value text, invert a boolean), the
    limit a whole number of requests in a unit. Anything else never reaches Envoy Gateway: the API server refuses
    the policy by its schema, so the coverage rule has nothing to model."""
    selectors = rule.get("clientSelectors")
    if selectors is not None and not isinstance(selectors, list):
        return False
    for selector in selectors or []:
        headers = selector.get("headers") if isinstance(selector, dict) else ()
        if not isinstance(headers, list | None):
            return False
        for match in headers or []:
            if not (
                isinstance(match, dict)
                and isinstance(match.get("name"), str)
                and isinstance(match.get("type", "Exact"), str | None)
                and isinstance(match.get("value", ""), str | None)
                and isinstance(match.get("invert", False), bool)
            ):
                return False
    limit = rule.get("limit")
    requests = limit.get("requests") if isinstance(limit, dict) else None
    return (
        isinstance(requests, int)
        and not isinstance(requests, bool)
        and isinstance(limit.get("unit"), str)
        and isinstance(rule.get("shared", False), bool)
    )


def _regexes_valid(budget_rules: list[dict[str, Any]]) -> bool:
    return all(
        regex_is_valid(match["value"])
        for rule in budget_rules
        for match in header_matches(rule)
        if match.get("type") == "RegularExpression" and isinstance(match.get("value"), str)
    )


def _cap_problems(policy: _BudgetPolicy) -> list[StackProblem]:
    who = policy.resource.describe()
    urn = policy.resource.urn
    problems: list[StackProblem] = []
    if len(policy.rules) > MAX_RULES:
        problems.append(
            StackProblem(
                f"{who} has {len(policy.rules)} rate-limit rules, over Envoy Gateway's {MAX_RULES}: it would be "
                "rejected. Merge budget classes that share tokens and per",
                urn,
            )
        )
    for index, rule in enumerate(policy.rules):
        selectors = as_list(rule.get("clientSelectors"))
        if len(selectors) > MAX_SELECTORS:
            problems.append(
                StackProblem(
                    f"{who}: rule {index} has {len(selectors)} client selectors, over Envoy Gateway's "
                    f"{MAX_SELECTORS}: lower {PROJECT}:budgetPolicy.exclusionSlots",
                    urn,
                )
            )
        for position, selector in enumerate(selectors):
            headers = as_list(as_dict(selector).get("headers"))
            if len(headers) > MAX_HEADERS_PER_SELECTOR:
                problems.append(
                    StackProblem(
                        f"{who}: rule {index} selector {position} has {len(headers)} header matches, over Envoy "
                        f"Gateway's {MAX_HEADERS_PER_SELECTOR}",
                        urn,
                    )
                )
        for position, match in enumerate(header_matches(rule)):
            value = match.get("value")
            if not isinstance(value, str):
                continue
            if len(value) > MAX_VALUE_LENGTH:
                problems.append(
                    StackProblem(
                        f"{who}: rule {index} match {position} is {len(value)} characters, over Envoy Gateway's "
                        f"{MAX_VALUE_LENGTH}: split the class",
                        urn,
                    )
                )
            if match.get("type") == "RegularExpression" and not regex_is_valid(value):
                problems.append(
                    StackProblem(f"{who}: rule {index} match {position} is not a valid RE2 pattern: {value!r}", urn)
                )
    return problems


def names_actor(resource: Resource) -> bool:
    """A SecurityPolicy that sets `x-actor-id` from a verified identity on every request it admits: JWT providers
    that all copy `sub` into it, or an `apiKeyAuth` (in a policy without jwt) forwarding the client id into it."""
    if not resource.is_kind("gateway.envoyproxy.io", "SecurityPolicy"):
        return False
    providers = [p for p in as_list(dig(resource.spec, "jwt", "providers")) if isinstance(p, dict)]
    if providers:
        return all(copies_sub_to_actor_header(p) for p in providers)
    return lower(dig(resource.spec, "apiKeyAuth", "forwardClientIDHeader")) == ACTOR_HEADER


def _jwt_presence_problems(resources: Sequence[Resource], budget_policies: list[_BudgetPolicy]) -> list[StackProblem]:
    covered: set[tuple[str, str, str]] = set()
    for resource in resources:
        if names_actor(resource):
            covered |= target_keys(resource)
    problems: list[StackProblem] = []
    for policy in budget_policies:
        missing = sorted(target_keys(policy.resource) - covered)
        for namespace, kind, name in missing:
            problems.append(
                StackProblem(
                    f"{policy.resource.describe()} targets {kind} {namespace}/{name}, but no SecurityPolicy there "
                    f"sets {ACTOR_HEADER} from a verified identity (a JWT provider copying sub, or an apiKeyAuth "
                    "forwarding the client id): no request carries an actor id, so no budget applies. Attach the "
                    "program's SecurityPolicies to the same target",
                    policy.resource.urn,
                )
            )
    return problems


def _reported_costs(resource: Resource, field_name: str) -> dict[str, str] | None:
    """metadataKey → type of an AIGatewayRoute's `llmRequestCosts` (or a GatewayConfig's global ones)."""
    entries = resource.spec.get(field_name)
    if has_unknown(entries):
        return None
    return {
        str(entry.get("metadataKey")): str(entry.get("type"))
        for entry in as_list(entries)
        if isinstance(entry, dict) and isinstance(entry.get("metadataKey"), str)
    }


def _route_models(resource: Resource) -> tuple[set[str], set[str]]:
    """(the model names an AIGatewayRoute matches, exactly as agents send them; its `modelNameOverride`s)."""
    served: set[str] = set()
    overrides: set[str] = set()
    for rule in as_list(resource.spec.get("rules")):
        for match in as_list(as_dict(rule).get("matches")):
            for header in as_list(as_dict(match).get("headers")):
                header = as_dict(header)
                exact = lower(header.get("name")) == MODEL_HEADER and header.get("type", "Exact") == "Exact"
                if exact and isinstance(header.get("value"), str):
                    served.add(header["value"])
        for ref in as_list(as_dict(rule).get("backendRefs")):
            override = as_dict(ref).get("modelNameOverride")
            if isinstance(override, str):
                overrides.add(override)
    return served, overrides


def check_budget_models_served(resources: Sequence[Resource], config: Mapping[str, Any]) -> list[StackProblem]:
    """A per-model budget rule names models the budget's Gateway serves, as agents send them.

    The rate-limit filter sees `x-ai-eg-model` as Agent Router's router filter set it from the request body,
    before any `modelNameOverride` (envoyproxy/ai-gateway v1.1.0 `internal/extproc/processor_impl.go`), and a
    name no AIGatewayRoute matches is answered `route-not-found` before any rate limit: a rule matching only
    other names never counts a call.
    """
    del config
    served: dict[tuple[str, str], set[str]] = {}
    overrides: dict[tuple[str, str], set[str]] = {}
    for resource in resources:
        if not resource.is_kind("aigateway.envoyproxy.io", "AIGatewayRoute") or has_unknown(resource.spec):
            continue
        names, targets = _route_models(resource)
        for ref in as_list(resource.spec.get("parentRefs")):
            if isinstance(ref, dict) and ref.get("kind", "Gateway") == "Gateway":
                gateway = (str(ref.get("namespace") or resource.namespace), str(ref.get("name")))
                served.setdefault(gateway, set()).update(names)
                overrides.setdefault(gateway, set()).update(targets)
    problems: list[StackProblem] = []
    for policy in (r for r in resources if is_budget_policy(r)):
        for _namespace, kind, name in sorted(target_keys(policy)):
            if kind != "Gateway" or (policy.namespace, name) not in served:
                continue
            models, targets = served[(policy.namespace, name)], overrides[(policy.namespace, name)]
            for index, rule in enumerate(global_rules(policy)):
                for match in header_matches(rule):
                    if lower(match.get("name")) != MODEL_HEADER or has_unknown(match):
                        continue
                    value, kind_of = match.get("value"), match.get("type") or "Exact"
                    if not isinstance(value, str) or (kind_of == "RegularExpression" and not regex_is_valid(value)):
                        continue
                    admitted = {m for m in models if _model_matches(kind_of, value, m)}
                    overridden = sorted(t for t in targets - models if _model_matches(kind_of, value, t))
                    if admitted and not overridden:
                        continue
                    reason = (
                        f"matches {', '.join(map(repr, overridden))}, which only a modelNameOverride sends upstream: "
                        "the rate limit sees the name the agent sent"
                        if overridden
                        else "matches no model any AIGatewayRoute on the Gateway serves"
                    )
                    problems.append(
                        StackProblem(
                            f"{policy.describe()}: budget rule {index}'s {MODEL_HEADER} match {value!r} {reason}, so "
                            f"it never counts a call. Name the models of the routes' {MODEL_HEADER} matches",
                            policy.urn,
                        )
                    )
    return problems


def _model_matches(kind: str, value: str, model: str) -> bool:
    return model == value if kind == "Exact" else regex_full_match(value, model)


def check_budget_costs_reported(resources: Sequence[Resource], config: Mapping[str, Any]) -> list[StackProblem]:
    """Every metadata key a budget rule charges is reported by every AIGatewayRoute on the budget's Gateway,
    computed the right way: `llm_total_token` as TotalToken, `agent_budgets_usd_mills` as a CEL cost.

    A route without the key sends no value: Envoy charges nothing for it (ratelimit_config.cc drops a
    descriptor whose hits_addend is missing), so its calls would be free for that limit.
    """
    del config
    charged: dict[tuple[str, str], dict[str, list[int]]] = {}  # (namespace, gateway) → key → rule indexes
    for policy in (r for r in resources if is_budget_policy(r)):
        for _namespace, kind, name in target_keys(policy):
            if kind != "Gateway":
                continue
            keys = charged.setdefault((policy.namespace, name), {})
            for index, rule in enumerate(global_rules(policy)):
                metadata = as_dict(dig(rule, "cost", "response", "metadata"))
                key = metadata.get("key")
                if keyed_on_actor(rule) and isinstance(key, str) and key in BUDGET_COST_TYPES:
                    keys.setdefault(key, []).append(index)
    global_costs: dict[str, str] = {}
    for resource in resources:
        if resource.is_kind("aigateway.envoyproxy.io", "GatewayConfig"):
            global_costs.update(_reported_costs(resource, "globalLLMRequestCosts") or {})
    problems: list[StackProblem] = []
    for resource in resources:
        if not resource.is_kind("aigateway.envoyproxy.io", "AIGatewayRoute"):
            continue
        costs = _reported_costs(resource, "llmRequestCosts")
        if costs is None:
            continue
        for ref in as_list(resource.spec.get("parentRefs")):
            if not isinstance(ref, dict) or ref.get("kind", "Gateway") != "Gateway":
                continue
            namespace = ref.get("namespace") or resource.namespace
            for key, indexes in sorted(charged.get((namespace, str(ref.get("name"))), {}).items()):
                reported = costs.get(key, global_costs.get(key))
                expected = BUDGET_COST_TYPES[key]
                if reported is None:
                    problems.append(
                        StackProblem(
                            f"{resource.describe()} reports no {key} in llmRequestCosts, but budget rule(s) "
                            f"{indexes} charge it: calls through this route would cost nothing against those limits. "
                            f"Add {{metadataKey: {key}, type: {expected}}} (the program adds it to every route)",
                            resource.urn,
                        )
                    )
                elif reported != expected:
                    problems.append(
                        StackProblem(
                            f"{resource.describe()} computes {key} as {reported}, but budget rule(s) {indexes} read it "
                            f"as {COST_MEANINGS[key]}: use "
                            f"type {expected}",
                            resource.urn,
                        )
                    )
    return problems


def target_kinds(resource: Resource) -> set[str]:
    """Kinds a policy attaches to, through targetRef, targetRefs or targetSelectors."""
    refs = [resource.spec.get("targetRef"), *as_list(resource.spec.get("targetRefs"))]
    refs += as_list(resource.spec.get("targetSelectors"))
    return {ref["kind"] for ref in refs if isinstance(ref, dict) and isinstance(ref.get("kind"), str)}


def check_route_policies_merge(resources: Sequence[Resource], config: Mapping[str, Any]) -> list[StackProblem]:
    """While a budget policy targets a Gateway, every BackendTrafficPolicy on an HTTPRoute or GRPCRoute sets
    `mergeType`: without it the route's policy replaces the Gateway's, budget rules included."""
    del config
    budget_policies = [r for r in resources if is_budget_policy(r) and target_kinds(r) & {"Gateway", "ListenerSet"}]
    if not budget_policies:
        return []
    budget = budget_policies[0]
    problems: list[StackProblem] = []
    for resource in resources:
        if not resource.is_kind("gateway.envoyproxy.io", "BackendTrafficPolicy") or resource in budget_policies:
            continue
        routes = sorted(target_kinds(resource) & ROUTE_KINDS)
        merge_type = resource.spec.get("mergeType")
        if not routes or merge_type is UNKNOWN or (isinstance(merge_type, str) and merge_type):
            continue
        problems.append(
            StackProblem(
                f"{resource.describe()} targets {' and '.join(routes)} without mergeType: on those routes it "
                f"replaces {budget.describe()}, so their calls count against no budget. Set "
                "spec.mergeType: StrategicMerge (merged into the Gateway's policy), or move its settings "
                "into the Gateway-level policy",
                resource.urn,
            )
        )
    return problems


API_KEY_AUTH_KINDS = frozenset({"Gateway", "HTTPRoute"})


def _api_key_headers(resource: Resource) -> set[str] | None:
    """The lowercased headers an `apiKeyAuth` reads its keys from (`apiKeyAuth.extractFrom[].headers`, envoyproxy/
    gateway v1.9.0 api/v1alpha1 APIKeyAuth; an entry holds headers, params or cookies), None while unknown."""
    extract_from = dig(resource.spec, "apiKeyAuth", "extractFrom")
    if has_unknown(extract_from):
        return None
    return {
        lower(header)
        for source in as_list(extract_from)
        for header in as_list(as_dict(source).get("headers"))
        if lower(header)
    }


def _routes_under(resources: Sequence[Resource], target: tuple[str, str, str]) -> list[Resource]:
    """The AIGatewayRoutes a policy target covers: those attached to a targeted Gateway, or the one whose
    generated HTTPRoute (same name, same namespace) is targeted."""
    namespace, kind, name = target
    routes: list[Resource] = []
    for route in resources:
        if not route.is_kind("aigateway.envoyproxy.io", "AIGatewayRoute"):
            continue
        if kind == "HTTPRoute":
            if route.namespace == namespace and dig(route.props, "metadata", "name") == name:
                routes.append(route)
            continue
        for ref in as_list(route.spec.get("parentRefs")):
            ref = as_dict(ref)
            on_target = ref.get("kind", "Gateway") == "Gateway" and ref.get("name") == name
            if on_target and (ref.get("namespace") or route.namespace) == namespace:
                routes.append(route)
                break
    return routes


def _backend_refs(route: Resource) -> Iterator[tuple[tuple[str, str], set[str] | None]]:
    """((namespace, name) of each AIServiceBackend a route's rules use, the lowercased headers that backendRef's own
    `headerMutation.remove` drops, None while unknown). Agent Router merges a backendRef's header mutation with its
    AIServiceBackend's (envoyproxy/ai-gateway v1.1.0 internal/controller/gateway.go `mergeHeaderMutations`), so a
    removal on either side keeps the header from the provider. An InferencePool ref (group and kind set) is no
    AIServiceBackend."""
    for rule in as_list(route.spec.get("rules")):
        for ref in as_list(as_dict(rule).get("backendRefs")):
            ref = as_dict(ref)
            if ref.get("kind", "AIServiceBackend") != "AIServiceBackend" or not isinstance(ref.get("name"), str):
                continue
            namespace = ref.get("namespace") or route.namespace
            if not isinstance(namespace, str):
                continue
            removed = dig(ref, "headerMutation", "remove")
            headers = None if has_unknown(removed) else {lower(h) for h in as_list(removed) if lower(h)}
            yield (namespace, ref["name"]), headers


def check_backends_remove_api_key_headers(
    resources: Sequence[Resource], config: Mapping[str, Any]
) -> list[StackProblem]:
    """While a SecurityPolicy reads API keys from headers, every AIServiceBackend its Gateway's routes use removes
    `authorization` and each of those headers (compared case-insensitively): `sanitize` removes the keys only on
    the policy's own listener, so a key sent beside a JWT on another listener, or as a bearer token, would
    otherwise reach the provider."""
    del config
    backends = {
        (r.namespace, str(dig(r.props, "metadata", "name"))): r
        for r in resources
        if r.is_kind("aigateway.envoyproxy.io", "AIServiceBackend")
    }
    missing: dict[tuple[str, str], set[str]] = {}
    reasons: dict[tuple[str, str], set[str]] = {}
    for policy in resources:
        if not policy.is_kind("gateway.envoyproxy.io", "SecurityPolicy") or "apiKeyAuth" not in policy.spec:
            continue
        key_headers = _api_key_headers(policy)
        if key_headers is None:
            continue
        required = key_headers | {AUTHORIZATION}
        for target in sorted(t for t in target_keys(policy) if t[1] in API_KEY_AUTH_KINDS):
            for route in _routes_under(resources, target):
                for key, ref_removed in _backend_refs(route):
                    backend = backends.get(key)
                    removed = dig(backend.spec, "headerMutation", "remove") if backend else None
                    if backend is None or ref_removed is None or has_unknown(removed):
                        continue  # another rule's subject, or unknown during preview
                    kept = required - ref_removed - {lower(h) for h in as_list(removed)}
                    if kept:
                        missing.setdefault(key, set()).update(kept)
                        reasons.setdefault(key, set()).add(f"{policy.kind} {policy.object_name}")
    return [
        StackProblem(
            f"{backends[key].describe()} does not remove {', '.join(sorted(headers))} although "
            f"{' and '.join(sorted(reasons[key]))} reads API keys from headers: an agent's key (or token) sent in "
            "them would reach the provider, since sanitize strips the keys only on that policy's listener. List "
            "each in the backend's spec.headerMutation.remove (the program lists authorization and every header "
            "of identity.apiKeys.headers)",
            backends[key].urn,
        )
        for key, headers in sorted(missing.items())
    ]


# `appendonly yes` as a redis.conf line (also inside a heredoc) or `--appendonly yes` on the command line.
_APPENDONLY = re.compile(r"(?:^[ \t]*|--)appendonly[ \t=]+\"?(yes|no)\b", re.IGNORECASE | re.MULTILINE)


def check_redis_persistence(resources: Sequence[Resource], config: Mapping[str, Any]) -> list[StackProblem]:
    """The in-cluster Redis keeps its counters across restarts: a mounted volume claim and `appendonly yes`."""
    del config
    config_maps: dict[tuple[str, str], str] = {}
    for resource in resources:
        if resource.is_kubernetes and resource.type.endswith("core/v1:ConfigMap"):
            name = dig(resource.props, "metadata", "name")
            data = as_dict(resource.props.get("data"))
            config_maps[(resource.namespace, str(name))] = "\n".join(v for v in data.values() if isinstance(v, str))
    problems: list[StackProblem] = []
    for resource in resources:
        if not resource.is_kubernetes or resource.kind not in ("StatefulSet", "Deployment"):
            continue
        if dig(resource.props, "metadata", "name") != REDIS_NAME:
            continue
        who = resource.describe()
        if resource.kind == "Deployment":
            problems.append(
                StackProblem(
                    f"{who} is a Deployment: its counters live in the pod, so a restart hands every agent a "
                    "fresh budget. Run Redis as a StatefulSet with a volume claim and appendonly yes",
                    resource.urn,
                )
            )
            continue
        pod = as_dict(dig(resource.spec, "template", "spec"))
        claims = {dig(claim, "metadata", "name") for claim in as_list(resource.spec.get("volumeClaimTemplates"))} - {
            None
        }
        containers = [c for c in as_list(pod.get("containers")) if isinstance(c, dict)]
        mounted = {m.get("name") for c in containers for m in as_list(c.get("volumeMounts")) if isinstance(m, dict)}
        if not claims & mounted:
            problems.append(
                StackProblem(
                    f"{who} mounts no volumeClaimTemplate: its data dies with the pod, so a restart hands every "
                    "agent a fresh budget. Add a volumeClaimTemplate and mount it at Redis's data dir",
                    resource.urn,
                )
            )
        texts: list[str] = []
        for volume in as_list(pod.get("volumes")):
            name = dig(volume, "configMap", "name")
            if isinstance(name, str):
                texts.append(config_maps.get((resource.namespace, name), ""))
        for container in containers:
            argv = [*as_list(container.get("command")), *as_list(container.get("args"))]
            texts.append(" ".join(a for a in argv if isinstance(a, str)))
        settings = [m.group(1).lower() for text in texts for m in _APPENDONLY.finditer(text)]
        if not settings or settings[-1] != "yes":
            problems.append(
                StackProblem(
                    f"{who} does not turn on appendonly: only periodic snapshots survive a restart, so agents "
                    "regain what they spent since the last one. Put `appendonly yes` in its redis.conf or args",
                    resource.urn,
                )
            )
    return problems


# ---------------------------------------------------------------------------------------------------------
# Adapters to the engine

ResourceCheck = Callable[[Resource, Mapping[str, Any]], list[str]]
StackCheck = Callable[[Sequence[Resource], Mapping[str, Any]], list[StackProblem]]


def _resource_validation(check: ResourceCheck) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        resource = Resource(args.resource_type, args.name, as_dict(plain(args.props)), args.urn)
        for message in check(resource, args.get_config() or {}):
            report_violation(message, None)

    validate.__name__ = check.__name__
    return validate


def _stack_validation(check: StackCheck) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [Resource(r.resource_type, r.name, as_dict(plain(r.props)), r.urn) for r in args.resources]
        for problem in check(resources, args.get_config() or {}):
            report_violation(problem.message, problem.urn or None)

    validate.__name__ = check.__name__
    return validate


ai_service_backend_removes_authorization = ResourceValidationPolicy(
    name="ai-service-backend-removes-authorization",
    description="Every AIServiceBackend removes the authorization header, so the actor JWT never reaches a provider.",
    validate=_resource_validation(check_backend_removes_authorization),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

budget_rules_charge_llm_tokens = ResourceValidationPolicy(
    name="budget-rules-charge-llm-tokens",
    description=(
        "Every rate-limit rule keyed on x-actor-id is global, shared, Distinct per actor (outside the pools' "
        "blocks), free on the request and charged the response's io.envoy.ai_gateway/llm_total_token (or "
        "llm_input_token, llm_output_token, llm_cached_input_token, or agent_budgets_usd_mills for a budget in "
        "dollars), or, for a calls limit, charged one call on the request and nothing on the response; no "
        "header match of the budget policy "
        "is one Envoy Gateway rejects at translation (Distinct with invert or a value, Exact or "
        "RegularExpression without a value)."
    ),
    validate=_resource_validation(check_budget_rules_charge_tokens),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

actor_header_untouched = ResourceValidationPolicy(
    name="actor-header-untouched",
    description=(
        "Only a verified identity sets x-actor-id (a JWT subject, or an API key's client id from a SecurityPolicy "
        "without jwt), and nothing removes it on the way to the provider."
    ),
    validate=_resource_validation(check_actor_header_untouched),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

jwt_names_the_actor = ResourceValidationPolicy(
    name="jwt-names-the-actor",
    description=(
        "The JWT SecurityPolicy requires a valid token (neither optional nor failOpen), checks its audiences "
        "and copies its sub into x-actor-id; its suspension rules deny actor subjects of its own provider, and "
        "its authorization allows everyone else. An API-key SecurityPolicy that writes x-actor-id removes the key "
        "before the request goes upstream (sanitize) and suspends on API-key client ids only."
    ),
    validate=_resource_validation(check_jwt_names_the_actor),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

one_actor_id_per_call = ResourceValidationPolicy(
    name="one-actor-id-per-call",
    description=(
        "A SecurityPolicy that names the actor gives every admitted call exactly one x-actor-id: each JWT provider "
        "reads its token from the Authorization header alone (extractFrom; Envoy's default also reads the "
        "access_token query parameter), its authorization starts by denying a call without exactly one x-actor-id "
        "(a token without sub), and an API-key policy references at least one credential."
    ),
    validate=_resource_validation(check_one_actor_id_per_call),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

egress_reaches_only_the_gateway = ResourceValidationPolicy(
    name="egress-reaches-only-the-gateway",
    description=(
        f"Each actor's egress policy holds only the http rule for the gateway, swapping Authorization for a "
        f"{MIN_EXPIRATION_SECONDS}-{MAX_EXPIRATION_SECONDS} s actor JWT; any other rule is a violation. Config "
        "allowExtraHostnames (default false) set to true also admits effect-free tlsPassthrough rules toward "
        "hosts that are neither model providers nor the gateway."
    ),
    validate=_resource_validation(check_egress_reaches_only_the_gateway),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
    config_schema=PolicyConfigSchema(
        properties={
            "gatewayHostname": {"type": "string", "default": GATEWAY_HOSTNAME},
            "allowExtraHostnames": {"type": "boolean", "default": False},
        },
    ),
)

provider_keys_only_in_secrets = ResourceValidationPolicy(
    name="provider-keys-only-in-secrets",
    description="Provider keys reach the cluster only through Secrets: secretRef credentials, no literal keys.",
    validate=_resource_validation(check_provider_keys_in_secrets),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

budget_rules_cover_each_actor_once = StackValidationPolicy(
    name="budget-rules-cover-each-actor-once",
    description=(
        "Every actor falls in the rules of exactly one budget (one rule per limit, whatever model it calls; pools "
        "come on top) of one budget policy, set by a JWT SecurityPolicy, within Envoy Gateway's caps."
    ),
    validate=_stack_validation(check_budget_coverage),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

budget_costs_reported_by_every_route = StackValidationPolicy(
    name="budget-costs-reported-by-every-route",
    description=(
        "Every AIGatewayRoute on the budget's Gateway reports each metadata key a budget rule charges: "
        "llm_total_token as TotalToken, llm_input_token as InputToken, llm_output_token as OutputToken, "
        "llm_cached_input_token as CachedInputToken, agent_budgets_usd_mills (a call's price in mills) as a CEL cost."
    ),
    validate=_stack_validation(check_budget_costs_reported),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

ai_service_backends_remove_api_key_headers = StackValidationPolicy(
    name="ai-service-backends-remove-api-key-headers",
    description=(
        "While a SecurityPolicy has an apiKeyAuth, every AIServiceBackend its Gateway's routes use removes "
        "authorization and each header the apiKeyAuth reads keys from, so no agent's key reaches a provider."
    ),
    validate=_stack_validation(check_backends_remove_api_key_headers),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.CRITICAL,
)

budget_models_served_by_a_route = StackValidationPolicy(
    name="budget-models-served-by-a-route",
    description=(
        "Every per-model budget rule's x-ai-eg-model match names models an AIGatewayRoute on the budget's Gateway "
        "serves, as agents send them (not only a modelNameOverride), so the limit can count a call."
    ),
    validate=_stack_validation(check_budget_models_served),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

route_policies_merge_with_the_budget = StackValidationPolicy(
    name="route-policies-merge-with-the-budget",
    description=(
        "While a budget policy targets the Gateway, every BackendTrafficPolicy on an HTTPRoute or GRPCRoute "
        "(such as the HTTPRoute an AIGatewayRoute generates) sets mergeType, so it does not replace the budget."
    ),
    validate=_stack_validation(check_route_policies_merge),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

body_mutations_keep_usage = ResourceValidationPolicy(
    name="body-mutations-keep-usage",
    description=(
        "No request body mutation changes stream or stream_options, which decide whether a stream reports usage."
    ),
    validate=_resource_validation(check_body_mutations_keep_usage),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

agent_router_after_identity = ResourceValidationPolicy(
    name="agent-router-after-identity",
    description=(
        "The EnvoyProxy orders custom_response after jwt_authn, so Agent Router's processor runs after the filter "
        "that sets x-actor-id and a retried call is still charged."
    ),
    validate=_resource_validation(check_agent_router_after_identity),
    enforcement_level=EnforcementLevel.MANDATORY,
    severity=Severity.HIGH,
)

suspension_keeps_the_listener = ResourceValidationPolicy(
    name="suspension-keeps-the-listener",
    description=(
        "The JWT SecurityPolicy always has an authorization and the budget policy its 403 response overrides, so "
        "suspending an actor never changes the listener (which would drain connections)."
    ),
    validate=_resource_validation(check_suspension_keeps_the_listener),
    enforcement_level=EnforcementLevel.ADVISORY,
    severity=Severity.MEDIUM,
)

rate_limit_fails_closed_outside_dev = ResourceValidationPolicy(
    name="rate-limit-fails-closed-outside-dev",
    description="Outside dev stacks, Envoy Gateway refuses calls rather than lifting every budget when Redis is down.",
    validate=_resource_validation(check_fails_closed_outside_dev),
    enforcement_level=EnforcementLevel.ADVISORY,
    severity=Severity.MEDIUM,
    config_schema=PolicyConfigSchema(
        properties={
            "devStacks": {"type": "array", "items": {"type": "string"}, "default": list(DEFAULT_DEV_STACKS)},
        },
    ),
)

redis_persists_counters = StackValidationPolicy(
    name="redis-persists-counters",
    description="The in-cluster Redis keeps spent budgets across restarts (a mounted volume claim, appendonly yes).",
    validate=_stack_validation(check_redis_persistence),
    enforcement_level=EnforcementLevel.ADVISORY,
    severity=Severity.MEDIUM,
)

idp_trust_verifies_certificates = ResourceValidationPolicy(
    name="idp-trust-verifies-certificates",
    description="Envoy Gateway verifies the Substrate IdP's certificate when it fetches the actor JWKS.",
    validate=_resource_validation(check_idp_trust_verifies),
    enforcement_level=EnforcementLevel.ADVISORY,
    severity=Severity.MEDIUM,
)

MANDATORY_POLICIES: list[Policy] = [
    ai_service_backend_removes_authorization,
    ai_service_backends_remove_api_key_headers,
    budget_rules_charge_llm_tokens,
    actor_header_untouched,
    jwt_names_the_actor,
    one_actor_id_per_call,
    egress_reaches_only_the_gateway,
    budget_rules_cover_each_actor_once,
    budget_costs_reported_by_every_route,
    budget_models_served_by_a_route,
    route_policies_merge_with_the_budget,
    provider_keys_only_in_secrets,
    body_mutations_keep_usage,
    agent_router_after_identity,
]
ADVISORY_POLICIES: list[Policy] = [
    rate_limit_fails_closed_outside_dev,
    redis_persists_counters,
    idp_trust_verifies_certificates,
    suspension_keeps_the_listener,
]
POLICIES: list[Policy] = [*MANDATORY_POLICIES, *ADVISORY_POLICIES]
