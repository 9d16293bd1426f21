"""The rig's extension-message check (rig/extension_message.py) and its tap (rig/extension_tap.py): messages built
from the real Envoy protos are split into core/xds_size.py's terms, the judge finds each way a message can disagree
with the model, and the tap forwards real gRPC calls unchanged while recording their sizes."""

from __future__ import annotations

import json
from concurrent import futures

import grpc
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2 as route_pb
from envoy.config.route.v3 import route_pb2
from google.protobuf.internal import encoder

from core import xds_size
from core.budget_rules import compile_budget_rules
from core.settings import BudgetsConfig
from core.suspension import suspension_authorization
from rig.extension_message import (
    METHOD,
    REQUEST_FIELDS,
    RESPONSE_FIELDS,
    judge_message,
    message_parts,
    top_level_fields,
)
from rig.extension_tap import start_tap
from rig.processes import StepError
from tests.support.envoy_routes import NAME, NS, rbac_per_route, reference_route

RATE_LIMIT_KEY = f"{xds_size.RATE_LIMIT_FILTER}/{NS}/{NAME}"
CONFIG = "agent-budgets/agent-router/http"


def _field(number: int, message) -> bytes:
    payload = message.SerializeToString()
    return encoder._VarintBytes(number << 3 | 2) + encoder._VarintBytes(len(payload)) + payload


def _rules(classes=()):
    budgets = {"default": {"tokens": 500, "per": "Day"}, "classes": list(classes)}
    return compile_budget_rules(BudgetsConfig.model_validate(budgets), 16).specs()


AUTHORIZATION = suspension_authorization(["agents/actor-0001"], "agent-substrate")


def _with_rbac(route: route_pb.Route) -> route_pb.Route:
    route.typed_per_filter_config[xds_size.RBAC_FILTER].Pack(rbac_per_route(AUTHORIZATION))
    return route


def _message(rules, *, model_routes: int = 1, listener_name: str = "l", matcher: str = "/v1/chat/completions"):
    """A PostTranslateModifyRequest as Envoy Gateway sends it: a cluster, a listener, one route configuration with
    the model routes (route action, rate limits, RBAC) and Agent Router's catch-all (direct response, RBAC)."""
    routes = []
    for index in range(model_routes):
        route = reference_route(rules, f"httproute/{NS}/mock/rule/0/match/{index}/*")
        route.match.prefix = matcher
        route.route.cluster = f"httproute/{NS}/mock/rule/0"
        routes.append(_with_rbac(route))
    catch_all = route_pb.Route(name=f"httproute/{NS}/mock/rule/1/match/0/*")
    catch_all.direct_response.status = 404
    routes.append(_with_rbac(catch_all))
    config = route_pb2.RouteConfiguration(
        name=CONFIG, virtual_hosts=[route_pb.VirtualHost(name="agent-router", domains=["*"], routes=routes)]
    )
    return (
        _field(2, cluster_pb2.Cluster(name=f"httproute/{NS}/mock/rule/0"))
        + _field(4, listener_pb2.Listener(name=listener_name))
        + _field(5, config)
    )


def _estimate(rules, model_routes: int = 1):
    layout = xds_size.RouteLayout(model_routes=model_routes, catch_all_routes=1, providers=1)
    return xds_size.estimate_message(NS, NAME, rules, layout, AUTHORIZATION)


def test_a_message_of_the_real_protos_splits_into_the_model_s_terms():
    rules = _rules()
    data = _message(rules)
    parts = message_parts(data, REQUEST_FIELDS, RATE_LIMIT_KEY)
    estimate = _estimate(rules)
    assert parts.total == len(data) == sum(parts.parts.values())
    assert parts.counts == {"clusters": 1, "listeners": 1, "routes": 1}
    assert parts.route_configs == [CONFIG]
    model, catch_all = parts.routes
    assert (model.model_route, catch_all.model_route) == (True, False)
    assert model.rate_limit == estimate.rate_limit_bytes_per_route > 1000
    assert catch_all.rate_limit == 0
    assert model.security == catch_all.security == estimate.authorization_bytes_per_route > 200
    assert model.rest == model.total - model.rate_limit - model.security
    evidence, problems = judge_message(parts, estimate)
    assert problems == []
    assert evidence["bytes"] == len(data) and evidence["routes"] == 2
    assert evidence["outside_routes"] == parts.parts["clusters"] + parts.parts["listeners"]


def test_a_response_is_read_by_its_own_field_numbers():
    data = _field(1, cluster_pb2.Cluster(name="c")) + _field(3, listener_pb2.Listener(name="l"))
    assert message_parts(data, RESPONSE_FIELDS, RATE_LIMIT_KEY).counts == {"clusters": 1, "listeners": 1}
    with pytest.raises(StepError, match="field 5 is not one of"):
        message_parts(_field(5, route_pb2.RouteConfiguration()), RESPONSE_FIELDS, RATE_LIMIT_KEY)


def test_the_judge_names_every_disagreement():
    rules = _rules()
    parts = message_parts(_message(rules), REQUEST_FIELDS, RATE_LIMIT_KEY)

    _, problems = judge_message(parts, _estimate(rules, model_routes=2))
    assert problems == [f"{CONFIG}: 1 model route(s) and 1 catch-all(s); the model has 2 and 1"]

    other_rules = _rules([{"name": "big", "actors": ["agents/a", "agents/b"], "tokens": 9, "per": "Hour"}])
    _, problems = judge_message(parts, _estimate(other_rules))
    # Only the model route: the catch-all carries no rate limits under either policy.
    expected = _estimate(other_rules).rate_limit_bytes_per_route
    assert problems == [
        f"{CONFIG} httproute/{NS}/mock/rule/0/match/0/*: rate limits {parts.routes[0].rate_limit} bytes, "
        f"the model {expected}"
    ]
    assert expected != parts.routes[0].rate_limit

    _, problems = judge_message(parts, xds_size.estimate_message(NS, NAME, rules, _estimate(rules).layout))
    assert len(problems) == 2 and all(
        f"security entries {parts.routes[0].security} bytes, the model 0" in p for p in problems
    )


def test_the_judge_holds_each_route_to_its_allowance_and_the_rest_to_the_base():
    rules = _rules()
    long_match = _message(rules, matcher="/" + "x" * xds_size.ROUTE_ALLOWANCE)
    _, problems = judge_message(message_parts(long_match, REQUEST_FIELDS, RATE_LIMIT_KEY), _estimate(rules))
    assert (
        len(problems) == 1 and f"besides its rate limits and security, over {xds_size.ROUTE_ALLOWANCE}" in problems[0]
    )

    allowances = xds_size.BASE_ALLOWANCE + xds_size.PROVIDER_ALLOWANCE
    just_over = _message(rules, listener_name="l" * allowances)
    _, problems = judge_message(message_parts(just_over, REQUEST_FIELDS, RATE_LIMIT_KEY), _estimate(rules))
    assert len(problems) == 1 and "bytes outside the routes, over the allowances' " + str(allowances) in problems[0]

    far_over = _message(rules, listener_name="l" * 2 * allowances)
    _, problems = judge_message(message_parts(far_over, REQUEST_FIELDS, RATE_LIMIT_KEY), _estimate(rules))
    assert len(problems) == 2 and f"over the model's estimate of {_estimate(rules).total_bytes}" in problems[1]


def test_fields_that_are_not_messages_or_run_past_the_end_are_refused():
    with pytest.raises(StepError, match="wire type 0"):
        top_level_fields(b"\x08\x01")
    with pytest.raises(StepError, match="ends inside a field"):
        top_level_fields(_field(2, cluster_pb2.Cluster(name="cluster"))[:-2])


# --- the tap, with real gRPC on loopback ---------------------------------------------------------------------------


class Upstream(grpc.GenericRpcHandler):
    """Answers every call with its request reversed, and refuses `/test.Refuse/Call` as a capped server would."""

    def service(self, handler_call_details):
        method = handler_call_details.method

        def call(request: bytes, context):
            if method == "/test.Refuse/Call":
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "received message larger than max")
            return request[::-1]

        return grpc.unary_unary_rpc_method_handler(call)


@pytest.fixture()
def tap(tmp_path):
    upstream = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    upstream.add_generic_rpc_handlers([Upstream()])
    upstream_port = upstream.add_insecure_port("127.0.0.1:0")
    upstream.start()
    record = tmp_path / "calls.jsonl"
    server, port = start_tap("127.0.0.1:0", f"127.0.0.1:{upstream_port}", record)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel, record
    channel.close()
    server.stop(None)
    upstream.stop(None)


def test_the_tap_forwards_bytes_unchanged_and_keeps_the_translation_whole(tap):
    channel, record = tap
    request = bytes(range(256)) * 40
    # No deadline, as Envoy Gateway's client calls: grpcio reports that as years left, which the tap must not pass on.
    assert channel.unary_unary(METHOD)(request) == request[::-1]
    assert channel.unary_unary("/test.Other/Call")(b"abc", timeout=5) == b"cba"
    first, second = (json.loads(line) for line in record.read_text().splitlines())
    assert (first["method"], first["request_bytes"], first["response_bytes"], first["code"]) == (
        METHOD, 10240, 10240, "OK",
    )  # fmt: skip
    assert (record.parent / "1.request.bin").read_bytes() == request
    assert (record.parent / "1.response.bin").read_bytes() == request[::-1]
    assert (second["request_bytes"], second["response_bytes"]) == (3, 3) and "kept" not in second


def test_the_tap_passes_an_upstream_refusal_back_as_it_came(tap):
    channel, record = tap
    with pytest.raises(grpc.RpcError) as refused:
        channel.unary_unary("/test.Refuse/Call")(b"x" * 100, timeout=5)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == "received message larger than max"
    entry = json.loads(record.read_text())
    assert (entry["code"], entry["request_bytes"], entry["response_bytes"]) == ("RESOURCE_EXHAUSTED", 100, None)
