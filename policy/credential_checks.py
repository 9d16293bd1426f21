"""Checks that no credential leaks: provider keys only in Secrets, the agent's JWT and API-key headers removed before
any provider."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from core.plain import dig
from policy.resources import (
    AUTHORIZATION,
    CREDENTIAL_FIELDS,
    KEY_QUALIFIERS,
    PROVIDER_KEY_PATTERN,
    SENSITIVE_ENV_SUFFIXES,
    Resource,
    StackProblem,
    as_dict,
    as_list,
    dotted,
    has_unknown,
    lower,
    target_keys,
    walk,
)


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
