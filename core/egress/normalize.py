"""Rules in one canonical form, and their fingerprint: what a diff compares, whatever the CLI printed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from core.egress.document import _DEFAULT_PORTS, PolicyInputs, _get, _is_int, _rule_kind, as_int, build_rules


def normalize_rules(rules: Any) -> list[Any]:
    """Rules in one canonical form, for comparison and for the resource's ``rules`` output.

    Accepts what this module builds and what ``kubectl ate get -o json`` prints (protojson:
    lowerCamel or proto names, int64 as strings, empty fields omitted). Rule order is kept (it may
    decide precedence); hostnames, ports, audiences and headers, which are sets, are sorted.
    """
    if not isinstance(rules, list):
        return []
    return [_normalize_rule(rule) for rule in rules]


def _normalize_rule(rule: Any) -> Any:
    kind, body, _ = _rule_kind(rule)
    if kind is None or not isinstance(body, Mapping):
        return rule  # unrecognised: kept verbatim so that it compares unequal to what we build
    out: dict[str, Any] = {
        "hostnames": sorted((h.lower() if isinstance(h, str) else h for h in _items(body.get("hostnames"))), key=str)
    }
    ports = body.get("ports")
    if isinstance(ports, Mapping) and "all" in ports:
        out["ports"] = {"all": {}}
    else:
        numbers = _items(ports.get("numbers")) if isinstance(ports, Mapping) else None
        if numbers:
            out["ports"] = {"numbers": sorted((as_int(n) for n in numbers), key=_sort_key)}
        else:
            default = _DEFAULT_PORTS.get(kind)
            out["ports"] = {"numbers": [default] if default else []}
    effects = body.get("effects")
    headers = _items(_get(effects, "replaceHeaders", "replace_headers")) if isinstance(effects, Mapping) else None
    if headers:
        out["effects"] = {
            "replaceHeaders": sorted(
                (_normalize_header(h) for h in headers), key=lambda h: str(h.get("header", "")).lower()
            )
        }
    return {kind: out}


def _items(value: Any) -> list[Any]:
    """A list field of a rule as written; anything else (a document that is not what Substrate prints) as none,
    so that it compares unequal to what we build instead of failing the comparison."""
    return value if isinstance(value, list) else []


def _sort_key(value: Any) -> tuple[int, int, str]:
    return (0, value, "") if _is_int(value) else (1, 0, str(value))


def _normalize_header(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        return {"header": entry}
    out: dict[str, Any] = {"header": entry.get("header", ""), "prefix": entry.get("prefix") or ""}
    jwt = _get(entry, "actorJwt", "actor_jwt")
    if isinstance(jwt, Mapping):
        out["actorJwt"] = {
            "audiences": sorted(str(a) for a in _items(jwt.get("audiences"))),
            "expirationSeconds": as_int(_get(jwt, "expirationSeconds", "expiration_seconds")),
        }
    uri = _get(entry, "credentialUri", "credential_uri")
    if uri is not None:
        out["credentialUri"] = uri
    return out


def desired_rules(inputs: PolicyInputs) -> list[Any]:
    """The normalised rules ``inputs`` asks for."""
    return normalize_rules(build_rules(inputs))


def rules_fingerprint(rules: Any) -> str:
    """A short, stable digest of rules after normalisation (``sha256:<16 hex>``).

    A shard records one per actor: the fingerprint of the rules it asks for (inputs) and of the rules
    last written or read (outputs). Equal fingerprints mean the policy needs no call; a preview lists
    the actors whose two fingerprints differ, which is how it names the policies that will change.
    """
    canonical = json.dumps(normalize_rules(rules), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
