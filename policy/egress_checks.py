"""Checks of the Substrate egress policies: each actor's policy reaches only the gateway and swaps its
`Authorization` for a short-lived actor JWT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.egress import (
    AUTH_PREFIX,
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
from core.plain import dig
from core.settings import PROJECT
from policy.resources import (
    AUTHORIZATION,
    GATEWAY_AUDIENCE,
    UNKNOWN,
    Resource,
    as_dict,
    as_list,
    has_unknown,
    is_egress_policy,
    lower,
)


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
