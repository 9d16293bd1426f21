"""A model of how Envoy Gateway v1.9 turns a BackendTrafficPolicy's global rules into counters.

Used by the tests and the policy pack to answer, for an `x-actor-id` value: which rules apply, and
under which Redis key each one counts. It follows the translation described for Envoy Gateway v1.9.0
(internal/xds/translator/ratelimit.go) and the key layout of envoyproxy/ratelimit
(src/limiter/cache_key.go): `<domain>_<key1>_<value1>_..._<windowStart>`.

* shared rules: domain `<policyNs>/<policyName>`, first entry generic_key `<ns>/<name>/rule/<i>`;
* non-shared rules: domain = the Envoy Gateway listener name (`<gateway ns>/<gateway>/<listener>`,
  internal/gatewayapi/helpers.go `irListenerName`), first entry the Envoy route's own name as key and
  value (internal/xds/translator/ratelimit.go `getRouteDescriptor`; route names are
  `httproute/<ns>/<name>/rule/<r>/match/<m>/<host with dots as underscores>`, helpers.go `irRouteName`
  plus route.go). Each route therefore counts on its own: the model answers for one route and listener,
  named by the caller, and refuses to guess them;
* header matches of all selectors are concatenated; entry keys are `rule-<k>-match-<m>`, k counted
  separately among shared and non-shared rules;
* Distinct contributes the header value; Exact / RegularExpression contribute key = value and gate the
  rule (with `invert`, the entry exists only when the value does NOT match);
* if any match yields no entry, Envoy sends no descriptor for the rule: it does not apply.

Some header matches pass the CRD but not the translation (internal/gatewayapi/backendtrafficpolicy.go
`buildRateLimitRule`): Distinct with `invert: true` or with a `value`, Exact / RegularExpression without a
`value`. Envoy Gateway then rejects the whole BackendTrafficPolicy and its routes answer 500, so no rule of
it applies to anyone: `applied_rules` raises `ValueError` for such a policy rather than guess.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

try:  # Envoy and Envoy Gateway use RE2; prefer it when it is installed (it is in the dev requirements).
    import re2 as _regex_engine  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - the policy pack may run without it
    _regex_engine = re

UNIT_SECONDS: dict[str, int] = {
    "Second": 1,
    "Minute": 60,
    "Hour": 3600,
    "Day": 86_400,
    "Week": 7 * 86_400,
    "Month": 30 * 86_400,
    "Year": 365 * 86_400,
}


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    return _regex_engine.compile(pattern)


def regex_full_match(pattern: str, value: str) -> bool:
    """Envoy's safe_regex header match: the whole value must match."""
    return _compiled(pattern).fullmatch(value) is not None


@dataclass(frozen=True)
class AppliedRule:
    """A rule that applies to a request, with the counter it charges."""

    index: int
    requests: int
    unit: str
    entries: tuple[tuple[str, str], ...]
    domain: str

    def counter_key(self, now: int) -> str:
        """The Redis key of this counter at unix time `now` (fixed, epoch-aligned windows)."""
        divider = UNIT_SECONDS[self.unit]
        parts = [self.domain]
        for key, value in self.entries:
            parts.extend([key, value])
        parts.append(str(now // divider * divider))
        return "_".join(parts)

    def identity(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What the counter is, independent of time: domain plus descriptor entries."""
        return self.domain, self.entries


def _header_matches(rule: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    headers: list[Mapping[str, Any]] = []
    for selector in rule.get("clientSelectors") or []:
        headers.extend(selector.get("headers") or [])
    return headers


def header_match_error(match: Mapping[str, Any]) -> str | None:
    """Why Envoy Gateway's translation refuses this header match, or None when it accepts it.

    Mirrors the `switch` over header matches in `buildRateLimitRule`: a missing type is Exact; Exact
    and RegularExpression need a value; Distinct takes neither a value nor `invert: true`. (The pattern
    of a RegularExpression is checked separately, by `regex_is_valid`.)
    """
    kind = match.get("type") or "Exact"
    has_value = match.get("value") is not None
    if kind == "Distinct":
        if match.get("invert") is True:
            return (
                'a Distinct match with invert: true (Envoy Gateway: "Invert is not applicable for distinct '
                'header match type"); drop invert, or exclude actors with an inverted Exact or '
                "RegularExpression match on the same header"
            )
        if has_value:
            return (
                f"a Distinct match with a value ({match.get('value')!r}): Distinct counts every value "
                "separately and must not name one; drop the value, or use type Exact"
            )
        return None
    if kind in ("Exact", "RegularExpression"):
        return None if has_value else f"a{'n' if kind == 'Exact' else ''} {kind} match without a value"
    return f"a match of unknown type {kind!r} (Exact, RegularExpression or Distinct)"


def translation_errors(rules: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every header match Envoy Gateway refuses to translate, one message each (rule and match named)."""
    errors: list[str] = []
    for index, rule in enumerate(rules):
        for position, match in enumerate(_header_matches(rule)):
            problem = header_match_error(match)
            if problem is not None:
                errors.append(f"rule {index} match {position} ({match.get('name')}) is {problem}")
    return errors


def envoy_route_name(namespace: str, route: str, rule_index: int, match_index: int, hostname: str = "*") -> str:
    """The name Envoy Gateway gives the Envoy route of one HTTPRoute rule match on one listener hostname
    (v1.9.0 internal/gatewayapi/helpers.go `irRouteName`; route.go appends the hostname, dots → `_`)."""
    return f"httproute/{namespace}/{route}/rule/{rule_index}/match/{match_index}/{hostname.replace('.', '_')}"


def envoy_listener_name(gateway_namespace: str, gateway: str, listener: str) -> str:
    """The name Envoy Gateway gives a Gateway listener (v1.9.0 helpers.go `irListenerName`)."""
    return f"{gateway_namespace}/{gateway}/{listener}"


def applied_rules(
    policy_namespace: str,
    policy_name: str,
    rules: Sequence[Mapping[str, Any]],
    request_headers: Mapping[str, str],
    *,
    route_name: str | None = None,
    listener_name: str | None = None,
) -> list[AppliedRule]:
    """Every rule whose descriptor Envoy would send for a request with these headers.

    A non-shared rule counts per Envoy route: its counter is keyed by the route's name in the listener's
    domain, so the caller names both (`envoy_route_name`, `envoy_listener_name`); without them the model
    raises ValueError rather than invent a key. Also raises ValueError when Envoy Gateway would reject
    the policy at translation (see `translation_errors`).
    """
    unshared = [index for index, rule in enumerate(rules) if not bool(rule.get("shared", False))]
    if unshared and (route_name is None or listener_name is None):
        raise ValueError(
            f"rule(s) {', '.join(map(str, unshared))} of BackendTrafficPolicy {policy_namespace}/{policy_name} are "
            "not shared: Envoy Gateway keys their counters by the Envoy route name in the listener's domain, so "
            "each route has its own bucket. Name the route and listener (route_name=, listener_name=) to ask "
            "about one route, or make the rules shared: true"
        )
    errors = translation_errors(rules)
    if errors:
        raise ValueError(
            f"Envoy Gateway rejects BackendTrafficPolicy {policy_namespace}/{policy_name} at translation, so "
            f"the whole policy fails (its routes answer 500 and no rule applies): {'; '.join(errors)}"
        )
    headers = {name.lower(): value for name, value in request_headers.items()}
    applied: list[AppliedRule] = []
    shared_seen = 0
    unshared_seen = 0
    for index, rule in enumerate(rules):
        shared = bool(rule.get("shared", False))
        domain_index = shared_seen if shared else unshared_seen
        if shared:
            shared_seen += 1
        else:
            unshared_seen += 1
        entries: list[tuple[str, str]] = []
        if shared:
            rule_name = f"{policy_namespace}/{policy_name}/rule/{index}"
            entries.append((rule_name, rule_name))
        else:
            assert route_name is not None  # checked above
            entries.append((route_name, route_name))
        applies = True
        for position, match in enumerate(_header_matches(rule)):
            key = f"rule-{domain_index}-match-{position}"
            value = headers.get(str(match["name"]).lower())
            kind = match.get("type") or "Exact"
            if kind == "Distinct":
                if value is None:  # no header, no descriptor entry
                    applies = False
                    break
                entries.append((key, value))
                continue
            if value is None:
                matched = False
            elif kind == "Exact":
                matched = value == match["value"]
            else:
                matched = regex_full_match(str(match["value"]), value)
            if matched == bool(match.get("invert", False)):
                applies = False
                break
            entries.append((key, key))
        if not applies:
            continue
        domain = f"{policy_namespace}/{policy_name}" if shared else str(listener_name)
        limit = rule.get("limit") or {}
        applied.append(
            AppliedRule(
                index=index,
                requests=int(limit.get("requests", 0)),
                unit=str(limit.get("unit", "Second")),
                entries=tuple(entries),
                domain=domain,
            )
        )
    return applied


def rules_for_actor(
    policy_namespace: str,
    policy_name: str,
    rules: Sequence[Mapping[str, Any]],
    subject: str,
    *,
    route_name: str | None = None,
    listener_name: str | None = None,
) -> list[AppliedRule]:
    """The rules that charge a request whose verified `x-actor-id` is `subject` (on the named Envoy
    route and listener, which matter only for non-shared rules)."""
    return applied_rules(
        policy_namespace,
        policy_name,
        rules,
        {"x-actor-id": subject},
        route_name=route_name,
        listener_name=listener_name,
    )


def regex_is_valid(pattern: str) -> bool:
    """Whether the RE2 engine (as Envoy Gateway's Go RE2 check) accepts the pattern."""
    try:
        _compiled(pattern)
    except Exception:
        return False
    return True
