"""The extension-server message-size model (core/xds_size.py), checked against the real Envoy protos.

The reference encoder (tests/support/envoy_routes.py) builds the messages Envoy Gateway v1.9.0 builds for a
Gateway-wide global rate-limit policy with the generated Envoy API classes of `xds-protos`; these tests serialize
them and compare the byte counts with the model's arithmetic.
"""

from __future__ import annotations

import pytest
from envoy.config.route.v3 import route_components_pb2 as route_pb
from envoy.type.matcher.v3 import string_pb2
from google.protobuf import any_pb2, wrappers_pb2

from core import xds_size
from core.budget_rules import compile_budget_rules
from core.settings import BudgetsConfig, message_size_bytes
from scripts import measure_exclusion_slots
from tests.support.envoy_routes import NAME, NS, budget_rule, rbac_per_route, reference_route


def rate_limit_bytes(rules):
    """The bytes the rate limits add to a route: the route with them minus the route without."""
    bare = route_pb.Route(name="httproute/agent-budgets/mock/rule/0/match/0/*")
    return reference_route(rules).ByteSize() - bare.ByteSize()


def _budgets(classes):
    return BudgetsConfig.model_validate({"default": {"tokens": 500, "per": "Day"}, "classes": classes})


def _many_actors(actors, classes):
    """`actors` actors spread over `classes` classes (every actor in a class), names like agents/actor-00042."""
    members = [f"agents/actor-{n:05d}" for n in range(actors)]
    size = -(-actors // classes)
    return [
        {"name": f"class-{c:03d}", "tokens": 5000, "per": "Day", "actors": members[c * size : (c + 1) * size]}
        for c in range(classes)
    ]


@pytest.mark.parametrize(
    "rules",
    [
        pytest.param(compile_budget_rules(_budgets([]), 127).specs(), id="default-only-127-empty-slots"),
        pytest.param(compile_budget_rules(_budgets([]), 1).specs(), id="default-only-1-slot"),
        pytest.param(
            compile_budget_rules(
                _budgets([{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}]), 127
            ).specs(),
            id="one-class",
        ),
        pytest.param(compile_budget_rules(_budgets(_many_actors(3000, 40)), 127).specs(), id="3000-actors-40-classes"),
        pytest.param(
            compile_budget_rules(
                BudgetsConfig.model_validate(
                    {
                        "default": {
                            "limits": [
                                {"tokens": 500, "per": "Day"},
                                {"usd": 5, "per": "Day"},
                                {"calls": 60, "per": "Minute"},
                            ]
                        },
                        "classes": [
                            {
                                "name": "paced",
                                "limits": [{"calls": 10, "per": "Hour"}, {"tokens": 9, "per": "Hour"}],
                                "actors": ["agents/actor-b"],
                            }
                        ],
                    }
                ),
                8,
                limit_slots=3,
            ).specs(),
            id="tokens-usd-and-calls-limits",
        ),
        pytest.param(
            compile_budget_rules(
                BudgetsConfig.model_validate(
                    {
                        "default": {
                            "limits": [
                                {"tokens": 500, "per": "Day"},
                                {"usd": 2, "per": "Day", "models": ["gpt-4.1"]},
                                {"tokens": 900, "per": "Hour", "count": "output"},
                            ]
                        },
                        "classes": [{"name": "c", "tokens": 9, "per": "Hour", "actors": ["agents/actor-b"]}],
                        "pools": [
                            {
                                "name": "research",
                                "atespaces": ["research"],
                                "members": ["agents/actor-b"],
                                "limits": [
                                    {"usd": 200, "per": "Day"},
                                    {
                                        "tokens": 5000,
                                        "per": "Hour",
                                        "count": "cachedInput",
                                        "models": ["o3", "gpt-4.1"],
                                    },
                                    {"calls": 100, "per": "Minute"},
                                ],
                            }
                        ],
                    }
                ),
                8,
                limit_slots=3,
                class_slots=2,
            ).specs(),
            id="pools-per-model-limits-and-token-kinds",
        ),
        pytest.param(
            [
                budget_rule(
                    [{"name": "x-actor-id", "type": "Distinct"}, {"name": "x-actor-id", "type": "Exact", "value": ""}]
                )
            ],
            id="exact-empty-value",
        ),
        pytest.param(
            [
                budget_rule(
                    [{"name": "x-actor-id", "type": "Exact", "value": "actor/agents/é" * 40, "invert": True}],
                    limit={"requests": 1, "unit": "Hour", "fromMetadata": {"namespace": "ns.x", "key": "limit"}},
                )
            ],
            id="from-metadata-inverted-exact-utf8",
        ),
        pytest.param(
            [
                {
                    "limit": {"requests": 7, "unit": "Second"},
                    "shared": True,
                    "cost": {"request": {"number": 300, "from": "Number"}},
                }
            ],
            id="no-match-request-cost-only",
        ),
        pytest.param([{"limit": {"requests": 7, "unit": "Second"}, "shared": True}], id="no-cost-at-all"),
    ],
)
def test_rate_limit_bytes_match_the_real_protos(rules):
    [model] = xds_size.rate_limit_domains(NS, NAME, rules).values()
    assert model == rate_limit_bytes(rules)


def test_ten_thousand_actors_in_250_classes_is_about_620_kb_per_route():
    """The review's figure (issue 10): one route's rate-limit config for 10,000 actors in 250 classes."""
    rules = compile_budget_rules(_budgets(_many_actors(10_000, 250)), 127).specs()
    per_route = sum(xds_size.rate_limit_domains(NS, NAME, rules).values())
    assert per_route == rate_limit_bytes(rules)
    assert 550_000 < per_route < 700_000
    layout = xds_size.RouteLayout(model_routes=7, catch_all_routes=1, providers=1)
    assert xds_size.estimate_message(NS, NAME, rules, layout).total_bytes > xds_size.GRPC_DEFAULT_MAX_MESSAGE


def test_the_route_allowance_covers_a_representative_route_four_times():
    """An Envoy route as Envoy Gateway builds one per model name, without its rate limits: name, prefix and
    model-header match, route action with a cluster and timeout, and two per-filter configs."""
    route = route_pb.Route(name="httproute/agent-budgets/a-rather-long-route-name/rule/0/match/127/*")
    route.match.prefix = "/"
    route.match.headers.add(name="x-ai-eg-model", string_match=string_pb2.StringMatcher(exact="m" * 120))
    route.route.cluster = "httproute/agent-budgets/a-rather-long-route-name/rule/0"
    route.route.timeout.seconds = 60
    for name in ("envoy.filters.http.jwt_authn", "envoy.filters.http.ext_proc/aigateway"):
        blob = any_pb2.Any(type_url="type.googleapis.com/" + "x" * 80, value=b"\x0a" * 200)
        route.typed_per_filter_config[name].CopyFrom(blob)
    assert route.ByteSize() * 4 <= xds_size.ROUTE_ALLOWANCE


def test_estimate_adds_up_its_terms():
    rules = compile_budget_rules(_budgets([]), 16).specs()
    layout = xds_size.RouteLayout(model_routes=3, catch_all_routes=2, providers=2)
    estimate = xds_size.estimate_message(NS, NAME, rules, layout)
    per_route = rate_limit_bytes(rules)
    assert estimate.rate_limit_bytes_per_route == per_route
    assert estimate.total_bytes == (
        xds_size.BASE_ALLOWANCE + 2 * xds_size.PROVIDER_ALLOWANCE + 5 * xds_size.ROUTE_ALLOWANCE + 3 * per_route
    )
    assert estimate.required_limit() == -(-estimate.total_bytes * 5 // 4)
    assert "3 model route(s) x" in estimate.describe() and "5 Envoy route(s), 2 provider(s)" in estimate.describe()


def test_the_layout_counts_one_envoy_route_per_model_name_and_a_catch_all_per_route():
    class Route:
        def __init__(self, *models):
            self.models = list(models)

    assert xds_size.route_layout([Route("a", "b", "c"), Route("d")], providers=2) == xds_size.RouteLayout(4, 2, 2)


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        ({**budget_rule([{"name": "x-actor-id", "type": "Distinct"}]), "shared": False}, "rule 0 is not shared"),
        (
            {**budget_rule([]), "clientSelectors": [{"sourceCIDR": {"type": "Distinct", "value": "0.0.0.0/0"}}]},
            "client selector fields ['sourceCIDR'] are not in the size model",
        ),
    ],
)
def test_the_model_refuses_what_it_does_not_cover(rule, reason):
    with pytest.raises(ValueError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        xds_size.rate_limit_domains(NS, NAME, [rule])


@pytest.mark.parametrize(
    ("value", "size"),
    [(0, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (2**21, 4), (2**63, 10)],
)
def test_varint_size(value, size):
    wrapped = wrappers_pb2.UInt64Value(value=value).ByteSize() - 1 if value else 1
    assert xds_size.varint_size(value) == size == wrapped


@pytest.mark.parametrize(
    ("quantity", "size"),
    [("16Mi", 16 * 1024 * 1024), ("4M", 4_000_000), ("8388608", 8_388_608), ("64Ki", 65_536), ("1Gi", 1024**3)],
)
def test_message_size_bytes(quantity, size):
    assert message_size_bytes(quantity) == size


@pytest.mark.parametrize("quantity", ["", "16MiB", "0", "016Mi", "1.5Mi", "-1"])
def test_message_size_bytes_refuses(quantity):
    assert message_size_bytes(quantity) is None


def test_format_bytes():
    assert [xds_size.format_bytes(n) for n in (512, 1536, 3 * 1024 * 1024)] == ["512 B", "1.5 KiB", "3.00 MiB"]


def test_each_exclusion_slot_lengthens_every_default_counter_key():
    small, large = measure_exclusion_slots.exclusion_slot_cost(8), measure_exclusion_slots.exclusion_slot_cost(16)
    per_slot_key = (large.counter_key_bytes - small.counter_key_bytes) / 8
    assert len("_rule-0-match-9_rule-0-match-9") <= per_slot_key <= len("_rule-0-match-16_rule-0-match-16")
    assert large.route_bytes > small.route_bytes and large.members_capacity == 2 * small.members_capacity


# --- the suspension's RBAC per-route config ------------------------------------------------------------


@pytest.mark.parametrize("suspended", [0, 1, 2, 128, 300])
def test_the_suspension_s_rbac_config_matches_the_real_protos(suspended):
    """With nobody suspended the RBAC config holds only the default action (Allow); it is on every route."""
    from core.suspension import suspension_authorization

    actors = [f"agents/actor-{i:04d}" for i in range(suspended)]
    authorization = suspension_authorization(actors, "agent-substrate")
    route = route_pb.Route()
    route.typed_per_filter_config["envoy.filters.http.rbac"].Pack(rbac_per_route(authorization))
    assert xds_size.authorization_route_bytes(authorization) == route.ByteSize()
    assert xds_size.authorization_route_bytes(None) == 0


def test_suspensions_count_on_every_envoy_route_of_the_message():
    from core.suspension import suspension_authorization

    rules = compile_budget_rules(BudgetsConfig.model_validate({"default": {"tokens": 500, "per": "Day"}}), 32)
    layout = xds_size.RouteLayout(model_routes=40, catch_all_routes=4, providers=2)
    plain = xds_size.estimate_message(NS, NAME, rules.specs(), layout)
    authorization = suspension_authorization([f"agents/a-{i}" for i in range(50)], "agent-substrate")
    suspended = xds_size.estimate_message(NS, NAME, rules.specs(), layout, authorization)
    per_route = xds_size.authorization_route_bytes(authorization)
    assert suspended.total_bytes - plain.total_bytes == 44 * per_route
    assert "44 route(s) x" in suspended.describe() and "of suspension rules" in suspended.describe()


@pytest.mark.parametrize("accounts", [0, 1, 129])
def test_the_jwt_policy_s_rbac_config_with_service_accounts_matches_the_real_protos(accounts):
    """Suspended Substrate actors and service accounts, the allowlist and the rule on the issuer (core.suspension)."""
    from core.suspension import jwt_authorization

    listed = [f"serviceaccount:team/bot-{i:03d}" for i in range(accounts)]
    authorization = jwt_authorization(
        ["substrate", "kubernetes"], listed, ["agents/a", *listed[:2]], "https://kubernetes.default.svc.cluster.local"
    )
    route = route_pb.Route()
    route.typed_per_filter_config["envoy.filters.http.rbac"].Pack(rbac_per_route(authorization))
    assert xds_size.authorization_route_bytes(authorization) == route.ByteSize()


@pytest.mark.parametrize("suspended", [0, 1, 3, 300])
def test_the_api_key_policy_s_rbac_config_matches_the_real_protos(suspended):
    from core.suspension import api_key_authorization

    authorization = api_key_authorization([f"apikey:bot-{i:03d}" for i in range(suspended)])
    route = route_pb.Route()
    route.typed_per_filter_config["envoy.filters.http.rbac"].Pack(rbac_per_route(authorization))
    assert xds_size.authorization_route_bytes(authorization) == route.ByteSize()


def _api_key_auth_per_route_class():
    """ApiKeyAuthPerRoute with its `forwarding` field: envoy api/envoy/extensions/filters/http/api_key_auth/v3/
    api_key_auth.proto (Credential{key=1, client=2}, KeySource{header=1, query=2, cookie=3}, ApiKeyAuthPerRoute{
    credentials=1, key_sources=2, allowed_clients=3, forwarding=4}, Forwarding{header=1, hide_credentials=2}).
    xds-protos 1.71 predates `forwarding`, so the message is built from those field numbers with protobuf's own
    descriptor pool and encoder."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    FieldProto = descriptor_pb2.FieldDescriptorProto  # noqa: N806
    string, boolean, message = FieldProto.TYPE_STRING, FieldProto.TYPE_BOOL, FieldProto.TYPE_MESSAGE
    optional, repeated = FieldProto.LABEL_OPTIONAL, FieldProto.LABEL_REPEATED

    def message_type(name, *fields):
        proto = descriptor_pb2.DescriptorProto(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = proto.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name
        return proto

    package = "model.api_key_auth"
    file = descriptor_pb2.FileDescriptorProto(name="model_api_key_auth.proto", package=package, syntax="proto3")
    file.message_type.extend(
        [
            message_type("Credential", ("key", 1, string, optional, ""), ("client", 2, string, optional, "")),
            message_type("KeySource", ("header", 1, string, optional, ""), ("query", 2, string, optional, "")),
            message_type(
                "Forwarding", ("header", 1, string, optional, ""), ("hide_credentials", 2, boolean, optional, "")
            ),
            message_type(
                "ApiKeyAuthPerRoute",
                ("credentials", 1, message, repeated, f".{package}.Credential"),
                ("key_sources", 2, message, repeated, f".{package}.KeySource"),
                ("allowed_clients", 3, string, repeated, ""),
                ("forwarding", 4, message, optional, f".{package}.Forwarding"),
            ),
        ]
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.ApiKeyAuthPerRoute"))


@pytest.mark.parametrize("keys", [0, 1, 50])
def test_the_api_key_auth_per_route_config_matches_the_protobuf_encoding(keys):
    """Every credential of every Secret is inlined in every route of the API-key listener (envoyproxy/gateway
    v1.9.0 internal/xds/translator/api_key_auth.go `buildAPIKeyAuthFilterPerRouteConfig`)."""
    from envoy.extensions.filters.http.api_key_auth.v3 import api_key_auth_pb2

    per_route_class = _api_key_auth_per_route_class()
    credentials = [(f"apikey.bot-{i:03d}", "k" * 48) for i in range(keys)]
    headers = ["authorization", "x-api-key"]
    per_route = per_route_class(
        credentials=[{"key": key, "client": client} for client, key in credentials],
        key_sources=[{"header": header} for header in headers],
        forwarding={"header": "x-actor-id", "hide_credentials": True},
    )
    # The fields xds-protos 1.71 knows encode the same with the generated class.
    known = api_key_auth_pb2.ApiKeyAuthPerRoute(
        credentials=[api_key_auth_pb2.Credential(key=key, client=client) for client, key in credentials],
        key_sources=[api_key_auth_pb2.KeySource(header=header) for header in headers],
    )
    forwarding_bytes = per_route.ByteSize() - known.ByteSize()
    assert forwarding_bytes == len(per_route_class(forwarding=per_route.forwarding).SerializeToString())
    route = route_pb.Route()
    packed = route.typed_per_filter_config["envoy.filters.http.api_key_auth"]
    packed.type_url = "type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute"
    packed.value = per_route.SerializeToString()
    lengths = [(client, len(key)) for client, key in credentials]
    assert xds_size.api_key_auth_route_bytes(lengths, headers, "x-actor-id", True) == route.ByteSize()


def test_the_api_key_listener_doubles_the_routes_and_carries_every_key_on_each():
    rules = compile_budget_rules(BudgetsConfig.model_validate({"default": {"tokens": 500, "per": "Day"}}), 32)
    layout = xds_size.RouteLayout(model_routes=10, catch_all_routes=2, providers=1)
    jwt_only = xds_size.estimate_message(NS, NAME, rules.specs(), layout)
    api_key_bytes = xds_size.api_key_auth_route_bytes([("apikey.bot", 48)] * 100, ["authorization"], "x-actor-id", True)
    both = xds_size.estimate_message(NS, NAME, rules.specs(), layout, None, api_key_bytes)
    per_route = xds_size.ROUTE_ALLOWANCE
    assert both.listeners == 2
    assert (
        both.total_bytes - jwt_only.total_bytes
        == 12 * (per_route + api_key_bytes) + 10 * jwt_only.rate_limit_bytes_per_route
    )
    alone = xds_size.estimate_message(NS, NAME, rules.specs(), layout, None, api_key_bytes, jwt_listener=False)
    assert alone.listeners == 1 and alone.total_bytes == both.total_bytes - (
        jwt_only.total_bytes - xds_size.BASE_ALLOWANCE - xds_size.PROVIDER_ALLOWANCE
    )
    assert "12 API-key route(s) x" in both.describe() and "on each of 2 listeners" in both.describe()
