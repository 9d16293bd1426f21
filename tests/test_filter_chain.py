"""Agent Router's processor runs after the filters that verify the caller (core/filter_chain.py).

Envoy Gateway v1.9 puts custom_response first in the listener (order 0), and Agent Router's extension server
inserts its router-level processor before it. The program always has a custom_response filter (the
suspension's 403 overrides), so without the EnvoyProxy's `filterOrder` Agent Router would snapshot the
request headers before jwt_authn set `x-actor-id`, and on a retry remove it again, leaving the call
uncharged. These tests check the model of the chain against the pinned CRD's documented default order, the
insertion rule against Agent Router's, and the program's EnvoyProxy against both, with 0, 1 and 500 suspended
actors.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from core.filter_chain import (
    AGENT_ROUTER_FILTER,
    API_KEY_AUTH,
    HEADER_TO_METADATA,
    IDENTITY_BEFORE_AGENT_ROUTER,
    JWT_AUTHN,
    ORDER,
    ROUTER,
    identity_filters_after_agent_router,
    insert_agent_router,
    listener_chain,
    sort_http_filters,
)
from core.manifests import gateway_manifests
from core.suspension import listener_http_filters
from core.validation import validate_stack
from tests.support.crds import load_catalog
from tests.support.program import stack_config
from tests.test_suspension import policies

CUSTOM_RESPONSE_OF_THE_BUDGET = "envoy.filters.http.custom_response/backendtrafficpolicy/agent-budgets/agent-budgets"
RATE_LIMIT_OF_THE_BUDGET = "envoy.filters.http.ratelimit/agent-budgets/agent-budgets"
RATE_LIMIT_OF_THE_LISTENER = "envoy.filters.http.ratelimit"
"""The listener-domain rate-limit filter, which Envoy Gateway v1.9.0 adds whenever a route of the listener has a
global rate limit, shared or not (internal/xds/translator/ratelimit.go `buildRateLimitFilter`; egctl shows it)."""


def documented_default_order() -> list[str]:
    """The default filter order the pinned Envoy Gateway v1.9.0 EnvoyProxy CRD documents for `filterOrder`."""
    version = load_catalog().version("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy")
    assert version is not None
    description = version.raw_schema["properties"]["spec"]["properties"]["filterOrder"]["description"]
    return re.findall(r"^- (envoy\.filters\.http\.\w+)$", description, flags=re.MULTILINE)


def test_the_model_sorts_filters_in_the_order_the_pinned_crd_documents():
    """Each documented type, as a filter of that type (the indexed ones with index 0), sorts into the
    documented order; and the model knows every type `filterOrder` accepts."""
    documented = documented_default_order()
    assert len(documented) >= 25 and documented[0].endswith("custom_response") and documented[-1] == ROUTER
    indexed = {"lua", "ext_proc", "wasm", "dynamic_modules"}
    as_filters = [f"{name}/0" if name.rsplit(".", 1)[-1] in indexed else name for name in documented]
    assert sort_http_filters(reversed(as_filters)) == as_filters
    version = load_catalog().version("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy")
    assert version is not None
    items = version.raw_schema["properties"]["spec"]["properties"]["filterOrder"]["items"]
    accepted = set(items["properties"]["name"]["enum"])
    assert accepted == {filter_type for filter_type, _ in ORDER} - {ROUTER}


@pytest.mark.parametrize(
    ("chain", "expected_at"),
    [
        ([JWT_AUTHN, "envoy.filters.http.rbac", RATE_LIMIT_OF_THE_BUDGET, ROUTER], 1),  # before rbac
        ([CUSTOM_RESPONSE_OF_THE_BUDGET, JWT_AUTHN, RATE_LIMIT_OF_THE_BUDGET, ROUTER], 0),  # before custom_response
        ([JWT_AUTHN, ROUTER], 1),
        # The buffer exception: after the last buffer filter at or past the insertion point.
        ([CUSTOM_RESPONSE_OF_THE_BUDGET, JWT_AUTHN, "envoy.filters.http.buffer", ROUTER], 3),
        (["envoy.filters.http.buffer", JWT_AUTHN, "envoy.filters.http.ext_proc/0", ROUTER], 2),
    ],
)
def test_agent_router_inserts_its_processor_before_the_first_filter_it_must_precede(chain, expected_at):
    """ai-gateway v1.1.0 `insertAIGatewayExtProcFilter`: before the first ext_proc, wasm, lua, rbac,
    local_ratelimit, ratelimit, custom_response, credential_injector, compressor or router filter, or after
    the last buffer filter when one sits at or after that point."""
    inserted = insert_agent_router(chain, log_header_attributes=False)
    assert inserted.index(AGENT_ROUTER_FILTER) == expected_at
    assert [name for name in inserted if name != AGENT_ROUTER_FILTER] == chain


def test_agent_router_adds_its_header_to_metadata_filter_right_before_the_router():
    """ai-gateway v1.1.0 `insertHeaderToMetadataFilter`, for the controller's default access-log header attributes
    (seen in the rig's Envoy: after ratelimit); with the attributes off it adds nothing, and an existing one stays."""
    chain = [JWT_AUTHN, "envoy.filters.http.rbac", RATE_LIMIT_OF_THE_BUDGET, ROUTER]
    assert insert_agent_router(chain) == [
        JWT_AUTHN,
        AGENT_ROUTER_FILTER,
        "envoy.filters.http.rbac",
        RATE_LIMIT_OF_THE_BUDGET,
        HEADER_TO_METADATA,
        ROUTER,
    ]
    assert HEADER_TO_METADATA not in insert_agent_router(chain, log_header_attributes=False)
    # Only the router as an anchor: the processor first, then the filter, both before it.
    assert insert_agent_router([JWT_AUTHN, ROUTER]) == [JWT_AUTHN, AGENT_ROUTER_FILTER, HEADER_TO_METADATA, ROUTER]
    present = [HEADER_TO_METADATA, JWT_AUTHN, ROUTER]
    assert insert_agent_router(present).count(HEADER_TO_METADATA) == 1


def test_filter_order_moves_a_type_after_the_last_filter_of_its_anchor_and_ignores_an_absent_anchor():
    names = [CUSTOM_RESPONSE_OF_THE_BUDGET, JWT_AUTHN, "envoy.filters.http.rbac", RATE_LIMIT_OF_THE_BUDGET, ROUTER]
    moved = sort_http_filters(names, IDENTITY_BEFORE_AGENT_ROUTER)
    assert moved == [
        JWT_AUTHN,
        CUSTOM_RESPONSE_OF_THE_BUDGET,
        "envoy.filters.http.rbac",
        RATE_LIMIT_OF_THE_BUDGET,
        ROUTER,
    ]
    before = sort_http_filters(names, [{"name": "envoy.filters.http.ratelimit", "before": "envoy.filters.http.rbac"}])
    assert before.index(RATE_LIMIT_OF_THE_BUDGET) == before.index("envoy.filters.http.rbac") - 1
    without_jwt = [name for name in names if name != JWT_AUTHN]
    assert sort_http_filters(without_jwt, IDENTITY_BEFORE_AGENT_ROUTER) == sort_http_filters(without_jwt)


def program_chain(suspended: int, filter_order: Any = None) -> list[str]:
    """The listener chain of a stack with the first `suspended` of 500 actors suspended (tests/test_suspension.py
    builds its policies), with the program's EnvoyProxy `filterOrder` (or the one given)."""
    if filter_order is None:
        settings = validate_stack(stack_config("dev"), lambda key: (True, True)).settings
        [envoy_proxy] = [m for m in gateway_manifests(settings) if m.kind == "EnvoyProxy"]
        filter_order = envoy_proxy.spec["filterOrder"]
    return listener_chain(listener_http_filters(*policies(suspended)), filter_order)


@pytest.mark.parametrize("suspended", [0, 1, 500])
def test_agent_router_runs_after_the_jwt_filter_with_any_number_suspended(suspended):
    assert program_chain(suspended) == [
        JWT_AUTHN,
        AGENT_ROUTER_FILTER,
        CUSTOM_RESPONSE_OF_THE_BUDGET,  # still before rbac and ratelimit, whose 403 and 429 it rewrites
        "envoy.filters.http.rbac",
        RATE_LIMIT_OF_THE_LISTENER,
        RATE_LIMIT_OF_THE_BUDGET,
        HEADER_TO_METADATA,
        ROUTER,
    ]


def test_without_the_filter_order_agent_router_would_run_before_the_jwt_filter():
    """The model sees the defect the EnvoyProxy's `filterOrder` prevents, so the test above can fail."""
    chain = program_chain(0, filter_order=[])
    assert chain[0] == AGENT_ROUTER_FILTER
    assert identity_filters_after_agent_router(chain) == [JWT_AUTHN]


def test_an_api_key_filter_also_runs_before_agent_router():
    """With API-key callers (api_key_auth, order 7) beside JWT ones, or alone, the processor comes after both."""
    both = listener_chain([CUSTOM_RESPONSE_OF_THE_BUDGET, API_KEY_AUTH, JWT_AUTHN], IDENTITY_BEFORE_AGENT_ROUTER)
    assert both[:3] == [API_KEY_AUTH, JWT_AUTHN, AGENT_ROUTER_FILTER]
    alone = listener_chain([CUSTOM_RESPONSE_OF_THE_BUDGET, API_KEY_AUTH], IDENTITY_BEFORE_AGENT_ROUTER)
    assert identity_filters_after_agent_router(alone) == [] and alone[:2] == [API_KEY_AUTH, AGENT_ROUTER_FILTER]


def test_the_duplicate_key_guard_runs_after_agent_router_s_processor_and_before_rbac_and_the_rate_limit():
    """The guard's Lua filter (order 13, core/body_guard.py) sits after the identity filters, Agent Router's
    processor (inserted before the first lua filter) and custom_response, and before rbac and ratelimit: a body
    it refuses is never counted, and custom_response, which rewrites only 403 and 429 (core/suspension.py), leaves
    its 400 alone."""
    settings = validate_stack(stack_config("dev"), lambda key: (True, True)).settings
    [envoy_proxy] = [m for m in gateway_manifests(settings) if m.kind == "EnvoyProxy"]
    guard = "envoy.filters.http.lua/envoyextensionpolicy/agent-budgets/agent-budgets-body-guard/lua/0"
    chain = listener_chain([*listener_http_filters(*policies(1)), guard], envoy_proxy.spec["filterOrder"])
    assert chain == [
        JWT_AUTHN,
        AGENT_ROUTER_FILTER,
        CUSTOM_RESPONSE_OF_THE_BUDGET,
        guard,
        "envoy.filters.http.rbac",
        RATE_LIMIT_OF_THE_LISTENER,
        RATE_LIMIT_OF_THE_BUDGET,
        HEADER_TO_METADATA,
        ROUTER,
    ]
