"""Envoy Gateway's own translator on the program's resources: `egctl x translate` v1.9.0 (tests/support/egctl.py),
the statuses the controller would write and the xDS Envoy would get, against the program's models.

Every stack file of the repository and the baseline's `full` stack (every optional feature on) are translated.
What egctl cannot show is said where it matters: Agent Router's own translation (`aigw` is not served by the module
proxy: tests/support/agent_router_routes.py stands in for its HTTPRoutes) and its extension hooks (the rig), and a
ClusterTrustBundle (egctl cannot load one: internal/gatewayapi/resource/load.go has no case for the kind), so a stack
trusting Substrate's IdP through one is also translated with the same CA in a ConfigMap (trust mode `configMap`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from envoy.config.route.v3 import route_components_pb2
from google.protobuf import json_format

from core import xds_size
from core.filter_chain import sort_http_filters
from core.ratelimit_model import translation_errors
from core.suspension import ONE_ACTOR_ID_CEL
from scripts.gen_resource_baseline import stack_inputs
from tests.support.egctl import Translation, program_objects, translate
from tests.support.egctl import cluster_objects as egctl_cluster_objects
from tests.support.program import ProgramRun, plain, run_program, stack_config
from tests.support.proto_size import import_types
from tests.support.real_tools import real_tool
from tests.support.tokens import Signer

NAMESPACE = "agent-budgets"
FIXTURES = Path(__file__).parent / "fixtures"
CLUSTER_TRUST_BUNDLE = "servicedns.podcert.ate.dev:identity:primary-bundle"
ROOT = Path(__file__).resolve().parents[1]
STACKS = sorted({p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml")} | {"full"})


def cluster_objects() -> list[dict[str, Any]]:
    """The cluster's own objects the translation needs (tests/support/egctl.py), with keys no test signs with."""
    return egctl_cluster_objects(NAMESPACE, Signer("substrate"), Signer("kubernetes"))


def stack_run(stack: str, *, trust_in_config_map: bool = False) -> ProgramRun:
    config, secrets = stack_inputs(stack) if stack in ("dev", "prod", "full") else (stack_config(stack), None)
    if trust_in_config_map:
        config = copy.deepcopy(config)
        config.setdefault("substrate", {}).setdefault("trust", {})["mode"] = "configMap"
    return run_program(config, secrets=secrets)


def trusts_a_cluster_trust_bundle(run: ProgramRun) -> bool:
    return any(
        ref.get("kind") == "ClusterTrustBundle"
        for policy in run.of_kind("BackendTLSPolicy")
        for ref in plain(policy.inputs)["spec"]["validation"].get("caCertificateRefs", [])
    )


_TRANSLATIONS: dict[tuple[str, bool], tuple[ProgramRun, Translation]] = {}


def translated(stack: str, *, trust_in_config_map: bool = False) -> tuple[ProgramRun, Translation]:
    key = (stack, trust_in_config_map)
    if key not in _TRANSLATIONS:
        run = stack_run(stack, trust_in_config_map=trust_in_config_map)
        _TRANSLATIONS[key] = (run, translate(real_tool("egctl"), program_objects(run), NAMESPACE, cluster_objects()))
    return _TRANSLATIONS[key]


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_of_every_stack_is_accepted(stack):
    """Each GatewayClass, Gateway (each listener), route and policy carries Accepted/ResolvedRefs/Programmed true.
    A stack trusting a ClusterTrustBundle is refused exactly for the bundle egctl cannot load, and accepted with the
    same trust from a ConfigMap."""
    run, translation = translated(stack)
    if trusts_a_cluster_trust_bundle(run):
        assert translation.refusals() == [
            f"SecurityPolicy/agent-budgets-jwt: Accepted Invalid: JWT: cluster trust bundle {CLUSTER_TRUST_BUNDLE} "
            "not found.",
            "BackendTLSPolicy/substrate-idp: Accepted NoValidCACertificate: Cluster trust bundle "
            f"{CLUSTER_TRUST_BUNDLE} not found.",
            "BackendTLSPolicy/substrate-idp: ResolvedRefs InvalidCACertificateRef: Cluster trust bundle "
            f"{CLUSTER_TRUST_BUNDLE} not found.",
        ]
        _, translation = translated(stack, trust_in_config_map=True)
    assert translation.refusals() == []
    kinds = {obj["kind"] for obj in translation.objects}
    assert {"Gateway", "HTTPRoute", "SecurityPolicy", "BackendTrafficPolicy", "ClientTrafficPolicy"} <= kinds


def test_a_broken_policy_is_refused_by_envoy_gateway_as_the_model_says():
    """A budget rule whose Distinct match is inverted passes the CRD but not Envoy Gateway's translation
    (internal/gatewayapi/backendtrafficpolicy.go `buildRateLimitRule`): the whole policy is refused. The rate-limit
    model (`translation_errors`) says the same; both are needed for the check above to mean anything."""
    run, _ = translated("rig")
    broken = copy.deepcopy(program_objects(run))
    [policy] = [o for o in broken if o["kind"] == "BackendTrafficPolicy"]
    rules = policy["spec"]["rateLimit"]["global"]["rules"]
    rules[0]["clientSelectors"][0]["headers"][0]["invert"] = True
    assert translation_errors(rules) != []
    translation = translate(real_tool("egctl"), broken, NAMESPACE, cluster_objects())
    [refusal] = [line for line in translation.refusals() if line.startswith("BackendTrafficPolicy/")]
    assert "Accepted" in refusal and "invert" in refusal.lower()


def test_the_parsed_one_actor_id_expression_is_egctl_s():
    """tests/fixtures/one-actor-id.parsed-expr.json (which tests/test_xds_size.py and core.xds_size use) is the
    expression exactly as Envoy Gateway v1.9.0 parses it (cel-go), taken from its route configuration."""
    _, translation = translated("rig")
    route = translation.routes(f"{NAMESPACE}/agent-router/http")[0]
    matchers = route["typedPerFilterConfig"]["envoy.filters.http.rbac"]["rbac"]["matcher"]["matcherList"]["matchers"]
    custom = matchers[0]["predicate"]["singlePredicate"]["customMatch"]["typedConfig"]
    parsed = custom["exprMatch"]["celExprParsed"]
    assert parsed == json.loads((FIXTURES / "one-actor-id.parsed-expr.json").read_text())
    assert ONE_ACTOR_ID_CEL in xds_size.PARSED_CEL_BYTES


def test_each_listener_s_filters_are_in_the_order_core_filter_chain_computes():
    """The HTTP filters of both listeners, as Envoy Gateway orders them with the program's EnvoyProxy filterOrder
    (internal/xds/translator/httpfilters.go), equal core.filter_chain.sort_http_filters of the same names. (Agent
    Router's processor is inserted later, by its extension hook, which egctl does not run.)"""
    run, translation = translated("rig")
    filter_order = plain(run.one("EnvoyProxy").inputs)["spec"].get("filterOrder") or []
    for listener in (f"{NAMESPACE}/agent-router/http", f"{NAMESPACE}/agent-router/apikeys"):
        names = [f["name"] for f in translation.http_filters(listener)]
        assert names == sort_http_filters(names, filter_order), listener
        assert names.index("envoy.filters.http.custom_response/backendtrafficpolicy/agent-budgets/agent-budgets") > 0


def test_every_jwt_provider_reads_only_the_authorization_header_and_writes_the_actor_id():
    """jwt_authn as Envoy Gateway renders the program's providers (internal/xds/translator/jwt.go): the token from
    `Authorization: Bearer` only (no `from_params`, so not the query), `sub` into `x-actor-id`."""
    _, translation = translated("rig")
    [jwt] = [
        f["typedConfig"]
        for f in translation.http_filters(f"{NAMESPACE}/agent-router/http")
        if f["name"] == "envoy.filters.http.jwt_authn"
    ]
    assert len(jwt["providers"]) == 2
    for provider in jwt["providers"].values():
        assert provider["fromHeaders"] == [{"name": "Authorization", "valuePrefix": "Bearer "}]
        assert "fromParams" not in provider and "fromCookies" not in provider
        assert provider["claimToHeaders"] == [{"claimName": "sub", "headerName": "x-actor-id"}]


def _route_message(route: dict[str, Any]) -> route_components_pb2.Route:
    """A translated route as the protobuf Envoy receives. The xds-protos release here predates
    `CelExpression.cel_expr_parsed` (field 3), so that field is read as the older `parsed_expr` (field 1): the same
    message type on the wire (authorization.go `parseCELToProto`), and a field number of the same size."""
    import_types(route)
    import google.api.expr.v1alpha1.syntax_pb2  # noqa: F401 (the parsed_expr message)

    text = json.dumps(route).replace('"celExprParsed"', '"parsedExpr"')
    return json_format.Parse(text, route_components_pb2.Route())


@pytest.mark.parametrize("stack", ["rig", "full"])
def test_each_route_s_rate_limit_and_rbac_bytes_are_what_core_xds_size_computes(stack):
    """The per-route parts core/xds_size.py computes byte for byte (the budget policy's rate limits, the JWT
    policy's RBAC config) equal the serialized size of the same parts in Envoy Gateway's real route configuration.
    Seen failing with the parsed expression's size one byte off (core.xds_size.PARSED_CEL_BYTES)."""
    run, translation = translated(stack, trust_in_config_map=True)
    policy = plain(run.one("BackendTrafficPolicy").inputs)
    rules = policy["spec"]["rateLimit"]["global"]["rules"]
    domains = xds_size.rate_limit_domains(NAMESPACE, policy["metadata"]["name"], rules)
    [jwt_policy] = [p for p in run.of_kind("SecurityPolicy") if "jwt" in p.inputs["spec"]]
    authorization = plain(jwt_policy.inputs)["spec"]["authorization"]
    model_routes = [r for r in translation.routes(f"{NAMESPACE}/agent-router/http") if "route" in r]
    assert model_routes
    for route in model_routes:
        message = _route_message(route)
        for name, predicted in domains.items():
            entry = route_components_pb2.Route()
            entry.typed_per_filter_config[f"envoy.filters.http.ratelimit/{name}"].CopyFrom(
                message.typed_per_filter_config[f"envoy.filters.http.ratelimit/{name}"]
            )
            assert entry.ByteSize() == predicted, (route["name"], name)
        rbac = route_components_pb2.Route()
        rbac.typed_per_filter_config["envoy.filters.http.rbac"].CopyFrom(
            message.typed_per_filter_config["envoy.filters.http.rbac"]
        )
        assert rbac.ByteSize() == xds_size.authorization_route_bytes(authorization), route["name"]


def test_each_listener_has_the_filters_core_suspension_predicts():
    """core/suspension.py `listener_http_filters` (which decides that suspending an actor never changes a listener)
    names the filters Envoy Gateway puts on each listener for the program's SecurityPolicy and budget policy. It
    disagreed once: it added the listener-domain rate-limit filter only for non-shared rules, and Envoy Gateway
    v1.9.0 adds it always (internal/xds/translator/ratelimit.go `buildRateLimitFilter`); fixed. The Lua filter of
    the duplicate-key guard comes from a third policy, which that function does not cover."""
    from core.suspension import listener_http_filters

    run, translation = translated("rig")
    budget = plain(run.one("BackendTrafficPolicy").as_object())
    traffic = {"namespace": budget["metadata"]["namespace"], "name": budget["metadata"]["name"], "spec": budget["spec"]}
    for policy in run.of_kind("SecurityPolicy"):
        spec = plain(policy.inputs)["spec"]
        listener = f"{NAMESPACE}/agent-router/{'apikeys' if 'apiKeyAuth' in spec else 'http'}"
        real = {
            f["name"]
            for f in translation.http_filters(listener)
            if f["name"] != "envoy.filters.http.router" and not f["name"].startswith("envoy.filters.http.lua/")
        }
        assert set(listener_http_filters({"spec": spec}, traffic)) == real, listener


def test_a_route_with_the_most_model_names_the_settings_accept_is_accepted():
    """A route serving MAX_MODELS_PER_ROUTE model names: its AIGatewayRoute rule has one match per name, which Agent
    Router copies into one HTTPRoute rule (ai-gateway v1.1.0 `newHTTPRoute`), and egctl validates that HTTPRoute as
    the API server does. Found by this test: the settings took 128 names (the AIGatewayRoute cap) and the Gateway API
    caps an HTTPRoute rule at 64 matches, so egctl (and a cluster's API server) refused the HTTPRoute: "matches: Too
    many: 128: must have at most 64 items". One name more is refused by the settings, naming the key."""
    from core.settings import MAX_MODELS_PER_ROUTE, ConfigError
    from core.validation import parse_settings

    config = copy.deepcopy(stack_config("rig"))
    names = [f"model-{i:03d}" for i in range(MAX_MODELS_PER_ROUTE + 1)]
    config["routes"] = [{"name": "mock-small", "models": names[:MAX_MODELS_PER_ROUTE], "provider": "mock"}]
    config["prices"] = {name: {"input": 1.0, "output": 2.0} for name in names}
    run = run_program(config)
    translation = translate(real_tool("egctl"), program_objects(run), NAMESPACE, cluster_objects())
    assert translation.refusals() == []
    assert len(translation.routes(f"{NAMESPACE}/agent-router/http")) == MAX_MODELS_PER_ROUTE + 1  # + not-found
    config["routes"][0]["models"] = names
    with pytest.raises(ConfigError) as refused:
        parse_settings(config)
    assert "agent-budgets:routes[0].models" in str(refused.value)


def _many_models(models: int) -> dict[str, Any]:
    """The rig stack serving `models` model names, in as few routes as hold them (MAX_MODELS_PER_ROUTE a route), at
    the smallest message limit."""
    from core.settings import MAX_MODELS_PER_ROUTE

    config = copy.deepcopy(stack_config("rig"))
    config["platform"] = {"extensionMessageLimit": "4Mi"}
    names = [f"model-{i:04d}" for i in range(models)]
    config["routes"] = [
        {"name": f"route-{r:02d}", "models": names[start : start + MAX_MODELS_PER_ROUTE], "provider": "mock"}
        for r, start in enumerate(range(0, models, MAX_MODELS_PER_ROUTE))
    ]
    config["prices"] = {name: {"input": 1.0, "output": 2.0} for name in names}
    return config


def test_the_real_message_at_the_largest_accepted_layout_is_within_the_estimate():
    """The extension-server message the preview guards (core/xds_size.py; docs/message-size.md) at the largest layout
    the validation accepts: the rig stack (every identity source, a class, a pool, usd and calls limits, a
    suspended actor) serving as many model names as fit the smallest limit, 4Mi (64 a route). Envoy Gateway's real
    route configurations and clusters are serialized with Envoy's protos (tests/support/proto_size.py) and its
    listeners counted by their JSON text, which is longer than their wire form; the sum must be within the estimate
    the validation computed, with the margin stated here. Seen failing when the estimate counted the rate limits on
    one listener only (the validation then accepted 132 names, whose real message outgrew the estimate)."""
    from core.settings import ConfigError
    from core.validation import stack_message_estimate, validate_stack
    from rig import cache
    from tests.support.proto_size import side_python, wire_sizes

    def accepted(models: int) -> bool:
        try:
            validate_stack(_many_models(models), lambda key: (True, True))
        except ConfigError:
            return False
        return True

    low, high = 1, 2
    while accepted(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if accepted(middle) else (low, middle)
    config = _many_models(low)
    validated = validate_stack(config, lambda key: (True, True))
    estimate = stack_message_estimate(validated)
    run = run_program(config)
    translation = translate(real_tool("egctl"), program_objects(run), NAMESPACE, cluster_objects())
    assert translation.refusals() == []
    sizes = wire_sizes(
        side_python(cache.root()), list(translation.route_configs().values()), list(translation.clusters().values())
    )
    listeners = sum(len(json.dumps(listener)) for listener in translation.listeners().values())
    real = sizes["routes"] + sizes["clusters"] + listeners
    assert real <= estimate.total_bytes, (low, real, estimate.total_bytes)
    # The margin this layout leaves (the allowances are generous by design): recorded in docs/message-size.md.
    assert 1.0 < estimate.total_bytes / real < 2.0, (low, real, estimate.total_bytes)
