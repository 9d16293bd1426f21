"""Checks of the budget rules: what they charge, that each actor falls in exactly one rule of each limit within
Envoy Gateway's caps, that every route reports what the rules charge, and that no route policy displaces the
budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.budget_rules import (
    ACTOR_HEADER,
    CALL_COST,
    CLASS_SLOTS_ANNOTATION,
    COST_METADATA_KEY,
    COST_METADATA_NAMESPACE,
    LIMIT_SLOTS_ANNOTATION,
    MATCHES_NOTHING,
    MAX_HEADERS_PER_SELECTOR,
    MAX_LIMIT_SLOTS,
    MAX_RULES,
    MAX_SELECTORS,
    MAX_VALUE_LENGTH,
    MODEL_HEADER,
)
from core.identity import ActorIdError, actor_header_value, parse_actor_id, parse_header_value
from core.manifests import ACTOR_ID_ANNOTATION
from core.plain import dig
from core.ratelimit_model import (
    PolicyModel,
    envoy_listener_name,
    envoy_route_name,
    header_match_error,
    regex_full_match,
    regex_is_valid,
    translation_errors,
)
from core.settings import PROJECT
from policy.identity_checks import _source_of
from policy.resources import (
    BUDGET_COST_TYPES,
    COST_MEANINGS,
    PROBE_SUBJECTS,
    ROUTE_KINDS,
    UNKNOWN,
    Resource,
    StackProblem,
    as_dict,
    as_list,
    egress_actors,
    global_rules,
    has_unknown,
    header_matches,
    is_budget_policy,
    is_egress_policy,
    keyed_on_actor,
    local_rules,
    lower,
    names_actor,
    target_keys,
    target_kinds,
)


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


# Any one Envoy route of the Gateway (the coverage check asks which rules apply, not under which key).
COVERAGE_ROUTE = envoy_route_name("<namespace>", "<route>", 0, 0)
COVERAGE_LISTENER = envoy_listener_name("<namespace>", "<gateway>", "<listener>")


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
