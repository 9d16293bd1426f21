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
import itertools
import re
import string
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
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
    key_base: str = field(default="", compare=False, repr=False)
    """The counter key up to its window, as the model precomputes it (derived from `entries` when empty)."""

    def window(self, now: int) -> tuple[int, int]:
        """The fixed, epoch-aligned window holding unix time `now`: (start, end), end exclusive.

        envoyproxy/ratelimit `src/limiter/cache_key.go` (start = now / divider * divider) with the dividers
        of `src/utils/utilities.go` `UnitToDivider` (Month is 30 days, Year 365).
        """
        divider = UNIT_SECONDS[self.unit]
        start = now // divider * divider
        return start, start + divider

    def counter_key(self, now: int) -> str:
        """The Redis key of this counter at unix time `now` (fixed, epoch-aligned windows)."""
        return f"{self.key_base or key_base(self.domain, self.entries)}_{self.window(now)[0]}"

    def identity(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What the counter is, independent of time: domain plus descriptor entries."""
        return self.domain, self.entries


def key_base(domain: str, entries: Sequence[tuple[str, str]]) -> str:
    """A counter's key without its window (cache_key.go): the domain, then each entry's key and value, by `_`."""
    return "_".join((domain, *itertools.chain.from_iterable(entries)))


def _key_segments(domain: str, template: Sequence[tuple[str, str]], variable: Collection[int]) -> tuple[str, ...]:
    """`key_base` cut around the entry values at the `variable` positions of `template` (the Distinct values):
    segment 0, value 0, segment 1, ... joined give the key, so a request's key costs one join."""
    tokens: list[str | None] = [domain]
    for position, (key, value) in enumerate(template):
        tokens += [key, None if position in variable else value]
    segments = [str(tokens[0])]
    for token in tokens[1:]:
        segments[-1] += "_"
        if token is None:
            segments.append("")
        else:
            segments[-1] += token
    return tuple(segments)


def shared_domain(policy_namespace: str, policy_name: str) -> str:
    """The rate-limit domain of a policy's shared rules."""
    return f"{policy_namespace}/{policy_name}"


def shared_rule_key(policy_namespace: str, policy_name: str, index: int) -> str:
    """The generic key (descriptor key and value) that opens shared rule `index`'s descriptor."""
    return f"{shared_domain(policy_namespace, policy_name)}/rule/{index}"


def shared_rule_of_key(domain: str, counter_key: str) -> int | None:
    """The index of the shared rule a Redis counter key of `domain` belongs to, or None (cache_key.go layout:
    the domain, then the rule's generic key as key and value)."""
    match = re.match(rf"{re.escape(domain)}_{re.escape(domain)}/rule/(\d+)_", counter_key)
    return int(match.group(1)) if match else None


def descriptor_key(domain_rule_index: int, position: int) -> str:
    """The descriptor key of header match `position` of a rule (index counted within its domain)."""
    return f"rule-{domain_rule_index}-match-{position}"


def header_matches(rule: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every header match of a rule, selector after selector (Envoy Gateway concatenates them)."""
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
        for position, match in enumerate(header_matches(rule)):
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


_LITERAL_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_-/ :@=,")
r"""Characters RE2 reads as themselves outside a character class (with `\` before any other ASCII punctuation)."""
LITERAL_SET_LIMIT = 1 << 20
"""The most strings a pattern may list to be answered by lookup; a larger one is matched by RE2."""
DECIDED_LIMIT = 1 << 16
"""The most combinations of passed matches a model remembers the applying rules of."""


@functools.lru_cache(maxsize=4096)
def literal_alternatives(pattern: str) -> frozenset[str] | None:
    r"""Every string `pattern` fully matches, when it only lists literal strings; None when it does anything else.

    Such a pattern is what core/budget_rules.py writes to admit or exclude actors
    (`^actor/(?:agents/(?:a|b)|lab/(?:c))$`): literal characters (letters, digits, `_-/ :@=,`, or `\` before an
    ASCII punctuation character, which RE2 reads as that character), non-capturing groups `(?:...)`,
    alternation `|`, and `^` / `$` only at the very start / end, where a full match makes them no-ops. A class,
    dot, repeat, other escape, capture, flag or inner anchor makes it None, and the pattern is matched by RE2 as
    before. tests/test_budget_rules.py holds the two to the same answers.
    """
    tokens: list[str | None] = []  # a literal character, or None for "(?:"; "|" and ")" as themselves
    position = 0
    while position < len(pattern):
        char = pattern[position]
        if char == "\\":
            escaped = pattern[position + 1 : position + 2]
            if not escaped or not escaped.isascii() or escaped.isalnum():
                return None
            tokens.append("\\" + escaped)
            position += 2
            continue
        if pattern.startswith("(?:", position):
            tokens.append(None)
            position += 3
            continue
        if char in "|)" or char in _LITERAL_CHARACTERS:
            tokens.append(char)
        elif not ((char == "^" and position == 0) or (char == "$" and position == len(pattern) - 1)):
            return None
        position += 1

    def alternation(index: int) -> tuple[set[str], int]:
        options, index = sequence(index)
        while index < len(tokens) and tokens[index] == "|":
            more, index = sequence(index + 1)
            options |= more
        return options, index

    def sequence(index: int) -> tuple[set[str], int]:
        strings = {""}
        while index < len(tokens) and tokens[index] not in ("|", ")"):
            token = tokens[index]
            if token is None:
                inner, index = alternation(index + 1)
                if index >= len(tokens) or tokens[index] != ")":
                    raise ValueError("unclosed group")
                index += 1
            else:
                inner, index = {token[-1]}, index + 1
            strings = {head + tail for head in strings for tail in inner}
            if len(strings) > LITERAL_SET_LIMIT:
                raise ValueError("too many strings")
        return strings, index

    try:
        strings, end = alternation(0)
    except ValueError:
        return None
    return frozenset(strings) if end == len(tokens) else None


_Gate = tuple[str, str, str, bool]  # (lower-cased header, Exact or RegularExpression, value, invert)
_Match = tuple[str, str, str]  # a gate without its invert: (lower-cased header, kind, value)
_Lookup = tuple[dict[str, dict[str, list[int]]], tuple[int, ...]]


@dataclass(frozen=True)
class _ModelRule:
    index: int
    requests: int
    unit: str
    domain: str
    # The descriptor entries in order: the rule's first entry, then per header match its descriptor key
    # (rule-<k>-match-<m>) with the key as value; a Distinct match's value is the request's header instead.
    template: tuple[tuple[str, str], ...]
    distinct_at: tuple[tuple[int, str], ...]  # (position in template, header) of every Distinct match
    key_segments: tuple[str, ...]  # the key without its window, cut around the Distinct values
    distinct_headers: frozenset[str]  # must all be present, or the rule sends no descriptor
    gate_set: int  # index into PolicyModel._gate_sets: the value matches that must all pass


class PolicyModel:
    """One BackendTrafficPolicy's global rules, translated once, asked many times which rules apply.

    A non-shared rule counts per Envoy route: its counter is keyed by the route's name in the listener's
    domain, so the caller names both (`envoy_route_name`, `envoy_listener_name`); without them the model
    raises ValueError rather than invent a key. Also raises ValueError when Envoy Gateway would reject
    the policy at translation (see `translation_errors`).

    Fast for many requests: a value match whose pattern only lists literal strings (`literal_alternatives`,
    which every pattern core/budget_rules.py writes does) is answered by one lookup of the header's value, and
    the rules that apply are decided once per combination of matches a request passes, so asking for 100,000
    actors costs about as much as listing them. `literal_patterns=False` matches every pattern with RE2 instead:
    the reference the tests hold the lookup to.
    """

    def __init__(
        self,
        policy_namespace: str,
        policy_name: str,
        rules: Sequence[Mapping[str, Any]],
        *,
        route_name: str | None = None,
        listener_name: str | None = None,
        literal_patterns: bool = True,
    ) -> None:
        errors = translation_errors(rules)
        if errors:
            raise ValueError(
                f"Envoy Gateway rejects BackendTrafficPolicy {policy_namespace}/{policy_name} at translation, "
                f"so the whole policy fails (its routes answer 500 and no rule applies): {'; '.join(errors)}"
            )
        unshared = [index for index, rule in enumerate(rules) if not bool(rule.get("shared", False))]
        if unshared and (route_name is None or listener_name is None):
            raise ValueError(
                f"rule(s) {', '.join(map(str, unshared))} of BackendTrafficPolicy {policy_namespace}/{policy_name} "
                "are not shared: Envoy Gateway keys their counters by the Envoy route name in the listener's domain, "
                "so each route has its own bucket. Name the route and listener (route_name=, listener_name=) to ask "
                "about one route, or make the rules shared: true"
            )
        compiled: list[_ModelRule] = []
        gate_set_ids: dict[tuple[_Gate, ...], int] = {}
        shared_seen = 0
        unshared_seen = 0
        for index, rule in enumerate(rules):
            shared = bool(rule.get("shared", False))
            domain_index = shared_seen if shared else unshared_seen
            if shared:
                shared_seen += 1
                rule_name = shared_rule_key(policy_namespace, policy_name, index)
                first_entry = (rule_name, rule_name)
                domain = shared_domain(policy_namespace, policy_name)
            else:
                assert route_name is not None and listener_name is not None  # checked above
                unshared_seen += 1
                first_entry = (route_name, route_name)
                domain = listener_name
            template: list[tuple[str, str]] = [first_entry]
            distinct_at: list[tuple[int, str]] = []
            gates: dict[_Gate, None] = {}
            for position, match in enumerate(header_matches(rule)):
                header = str(match["name"]).lower()
                kind = str(match.get("type") or "Exact")
                key = descriptor_key(domain_index, position)
                if kind == "Distinct":
                    distinct_at.append((len(template), header))
                else:
                    gates[(header, kind, str(match.get("value", "")), bool(match.get("invert", False)))] = None
                template.append((key, key))
            limit = rule.get("limit") or {}
            gate_set = gate_set_ids.setdefault(tuple(gates), len(gate_set_ids))
            compiled.append(
                _ModelRule(
                    index=index,
                    requests=int(limit.get("requests", 0)),
                    unit=str(limit.get("unit", "Second")),
                    domain=domain,
                    template=tuple(template),
                    distinct_at=tuple(distinct_at),
                    key_segments=_key_segments(domain, template, {position for position, _ in distinct_at}),
                    distinct_headers=frozenset(header for _, header in distinct_at),
                    gate_set=gate_set,
                )
            )
        self.rules: tuple[_ModelRule, ...] = tuple(compiled)
        # Rules often share their value matches (every limit of one budget does): decide each set once.
        match_ids: dict[_Match, int] = {}
        self._gate_sets: tuple[tuple[tuple[int, bool], ...], ...] = tuple(
            tuple((match_ids.setdefault(gate[:3], len(match_ids)), gate[3]) for gate in gates) for gates in gate_set_ids
        )
        self._matches: tuple[_Match, ...] = tuple(match_ids)
        self._literal_patterns = literal_patterns
        self._lookup: _Lookup | None = None  # built by the first `applied`: `charge` needs none of it
        self._headers = frozenset(header for header, _, _ in self._matches) | frozenset(
            header for rule in compiled for header in rule.distinct_headers
        )
        self._decided: dict[tuple[frozenset[str], frozenset[int]], tuple[int, ...]] = {}

    def _matches_by_lookup(self) -> _Lookup:
        """header → value → the matches that list it, and the matches evaluated for each request instead."""
        if self._lookup is None:
            listing: dict[str, dict[str, list[int]]] = {}
            evaluated: list[int] = []
            for match, (header, kind, value) in enumerate(self._matches):
                listed: Collection[str] | None = None
                if self._literal_patterns:
                    listed = (value,) if kind == "Exact" else literal_alternatives(value)
                if listed is None:
                    evaluated.append(match)
                    continue
                by_value = listing.setdefault(header, {})
                for literal in listed:
                    by_value.setdefault(literal, []).append(match)
            self._lookup = (listing, tuple(evaluated))
        return self._lookup

    def applied(self, request_headers: Mapping[str, str]) -> list[AppliedRule]:
        """Every rule whose descriptor Envoy would send for a request with these headers.

        A Distinct match contributes the header's value (no header: no descriptor); an Exact or
        RegularExpression match contributes key = value and passes when the value matches, or with
        `invert` when it does not (a missing header never matches).
        """
        headers = {name.lower(): value for name, value in request_headers.items()}
        listing, evaluated = self._matches_by_lookup()
        matched: set[int] = set()
        for header, value in headers.items():
            matched.update(listing.get(header, {}).get(value, ()))
        for match in evaluated:
            header, kind, pattern = self._matches[match]
            value = headers.get(header)
            if value is not None and (value == pattern if kind == "Exact" else regex_full_match(pattern, value)):
                matched.add(match)
        signature = (frozenset(self._headers & headers.keys()), frozenset(matched))
        applying = self._decided.get(signature)
        if applying is None:
            applying = self._decide(*signature)
            if len(self._decided) < DECIDED_LIMIT:
                self._decided[signature] = applying
        return [self._charge(self.rules[index], headers) for index in applying]

    def _decide(self, present: frozenset[str], matched: frozenset[int]) -> tuple[int, ...]:
        """The rules that apply to a request carrying the `present` headers whose values pass the `matched` value
        matches (a missing header passes no match, so only an inverted one)."""
        decided: dict[int, bool] = {}

        def passes(match: int, invert: bool) -> bool:
            if self._matches[match][0] not in present:
                return invert
            return (match in matched) != invert

        applying: list[int] = []
        for rule in self.rules:
            if not rule.distinct_headers <= present:
                continue
            ok = decided.get(rule.gate_set)
            if ok is None:
                ok = decided[rule.gate_set] = all(passes(*gate) for gate in self._gate_sets[rule.gate_set])
            if ok:
                applying.append(rule.index)
        return tuple(applying)

    def charge(self, index: int, request_headers: Mapping[str, str]) -> AppliedRule:
        """Rule `index` as it charges a request with these headers, for a caller that already knows the rule
        applies (its value matches are not evaluated): the counter key is built exactly as `applied` builds it.

        A rule without Distinct matches (a pool's) charges one counter whatever the request, so it needs no
        header at all. The spend report knows which rules charge an actor or a pool from the budget layout, and
        asks for their keys this way (tests/test_spend_core.py holds it to `applied`).
        """
        headers = {name.lower(): value for name, value in request_headers.items()}
        rule = self.rules[index]
        if not rule.distinct_headers <= headers.keys():
            missing = ", ".join(sorted(rule.distinct_headers - headers.keys()))
            raise ValueError(f"rule {index} counts per {missing}, which the request does not carry")
        return self._charge(rule, headers)

    @staticmethod
    def _charge(rule: _ModelRule, headers: Mapping[str, str]) -> AppliedRule:
        """The counter a rule charges: its first entry, then one entry per header match (Distinct: the value)."""
        entries = list(rule.template)
        values = []
        for position, header in rule.distinct_at:
            value = headers[header]
            entries[position] = (entries[position][0], value)
            values.append(value)
        base = "".join(itertools.chain.from_iterable(zip(rule.key_segments, [*values, ""], strict=True)))
        return AppliedRule(rule.index, rule.requests, rule.unit, tuple(entries), rule.domain, base)

    def for_actor(self, subject: str) -> list[AppliedRule]:
        """The rules that charge a request whose verified `x-actor-id` is `subject`."""
        return self.applied({"x-actor-id": subject})


def applied_rules(
    policy_namespace: str,
    policy_name: str,
    rules: Sequence[Mapping[str, Any]],
    request_headers: Mapping[str, str],
    *,
    route_name: str | None = None,
    listener_name: str | None = None,
) -> list[AppliedRule]:
    """Every rule whose descriptor Envoy would send for a request with these headers (see `PolicyModel`;
    for many requests against one policy, build a `PolicyModel` once instead). For one request, matching its
    values against the patterns is cheaper than listing what every pattern admits."""
    model = PolicyModel(
        policy_namespace,
        policy_name,
        rules,
        route_name=route_name,
        listener_name=listener_name,
        literal_patterns=False,
    )
    return model.applied(request_headers)


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
