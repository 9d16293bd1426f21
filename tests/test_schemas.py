"""Every object the program would send, validated as the cluster validates it: each custom resource against the
pinned upstream CRDs (schema + CEL), each built-in object against the Kubernetes schemas and the API server's own
checks (tests/support/kubernetes_schema.py), for the dev and prod stacks and their variants."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support import kubernetes_schema
from tests.support.crds import load_catalog
from tests.support.program import ProgramRun, run_program, stack_config
from tests.test_bounded_budgets import bounded_config

OPENAI_KEY = "sk-schema-test-openai"
ANTHROPIC_KEY = "sk-ant-schema-test"
PROD_SECRETS = {"openaiApiKey": OPENAI_KEY, "anthropicApiKey": ANTHROPIC_KEY, "redisPassword": "schema-test-pw"}


def variants() -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    dev = stack_config("dev")
    real = copy.deepcopy(dev)
    real["providers"] = [
        {"name": "openai", "kind": "openai"},
        {"name": "anthropic", "kind": "anthropic"},
        {"name": "mock", "kind": "mock"},
    ]
    real["routes"] = [
        {"name": "gpt", "models": ["gpt-4o-mini"], "provider": "openai", "modelNameOverride": "gpt-4o-mini-2024"},
        {"name": "claude", "models": ["claude-sonnet-4", "claude-haiku"], "provider": "anthropic"},
        {"name": "mock", "models": ["mock-model"], "provider": "mock"},
    ]
    real["actors"] = [f"agents/actor-{i}" for i in range(40)] + ["lab/bot-1"]
    real["budgets"] = {
        "default": {"tokens": 100_000, "per": "Day"},
        "classes": [
            {"name": "large", "tokens": 1_000_000, "per": "Week", "actors": real["actors"][:20]},
            {"name": "bots", "tokens": 5_000, "per": "Hour", "actors": ["lab/bot-1"]},
            {"name": "retired", "tokens": 1, "per": "Month", "actors": []},
        ],
    }
    real["substrate"] = {"trust": {"mode": "configMap", "configMap": "idp-ca"}}
    # The alerts and the PodMonitors that feed them (prometheus-operator v0.93.0 CRDs).
    real["monitoring"] = {"prometheusRules": True, "ruleLabels": {"release": "kube-prometheus-stack"}}
    insecure = copy.deepcopy(dev)
    insecure["substrate"] = {"trust": {"mode": "insecureSkipVerify"}}
    insecure["gateway"] = {"smallCluster": False, "port": 8080, "requestBufferLimit": "100Mi"}
    # No IdP in the request path: the SecurityPolicy reads the actor keys from a ConfigMap (localJWKS).
    local_jwks = copy.deepcopy(dev)
    local_jwks["substrate"] = {"trust": {"mode": "localJwks"}}
    keys = {"openaiApiKey": OPENAI_KEY, "anthropicApiKey": ANTHROPIC_KEY}
    # Money budgets, several windows and suspended actors: CEL costs on every route, usd rules with their
    # extra match, reserved rule slots, the SecurityPolicy's authorization and the BTP's responseOverride.
    money = copy.deepcopy(real)
    money["actors"] = real["actors"] + [f"lab/suspended-{i:03d}" for i in range(130)]
    money["budgets"] = {
        "default": {"limits": [{"tokens": 100_000, "per": "Day"}, {"usd": 2.5, "per": "Month"}]},
        "classes": [
            {
                "name": "research",
                "limits": [{"tokens": 200_000, "per": "Hour"}, {"usd": 5, "per": "Day"}, {"usd": 50, "per": "Month"}],
                "actors": real["actors"][:5],
            },
            {"name": "solo", "usd": 0.01, "per": "Week", "actors": ["lab/bot-1"]},
        ],
    }
    money["budgetPolicy"] = {"limitSlots": 3}
    money["prices"] = {
        "gpt-4o-mini-2024": {"input": 0.15, "cachedInput": 0.075, "output": 0.60},  # the gpt route's override
        "claude-sonnet-4": {"input": 3, "cachedInput": 0.3, "cacheWrite": 3.75, "output": 15},
        "claude-haiku": {"input": 0.8, "output": 4},
        "mock-model": {"input": 10, "output": 20},
    }
    money["suspended"] = ["agents/actor-7", *[f"lab/suspended-{i:03d}" for i in range(130)]]
    # Output ceilings, route timeouts and calls limits (tests/test_bounded_budgets.py).
    bounded = bounded_config()
    # Pools (listed members and a whole atespace), per-model limits and every kind of tokens.
    pools = copy.deepcopy(money)
    pools["suspended"] = []
    pools["budgets"] = {
        "default": {
            "limits": [
                {"tokens": 100_000, "per": "Day"},
                {"usd": 2, "per": "Day", "models": ["claude-sonnet-4"]},
                {"tokens": 20_000, "per": "Hour", "count": "output"},
            ]
        },
        "classes": [
            {
                "name": "research",
                "limits": [
                    {"tokens": 50_000, "per": "Hour", "count": "input"},
                    {
                        "tokens": 10_000,
                        "per": "Hour",
                        "count": "cachedInput",
                        "models": ["claude-sonnet-4", "gpt-4o-mini"],
                    },
                ],
                "actors": real["actors"][:5],
            }
        ],
        "pools": [
            {"name": "agents", "atespaces": ["agents"], "limits": [{"usd": 200, "per": "Day"}]},
            {
                "name": "pair",
                "members": ["agents/actor-1", "lab/bot-1"],
                "limits": [{"calls": 100, "per": "Hour", "models": ["mock-model"]}, {"tokens": 9_000, "per": "Day"}],
            },
        ],
    }
    pools["budgetPolicy"] = {"limitSlots": 3, "classSlots": 2}
    return {
        "dev": (dev, {}),
        "real": (real, keys),
        "insecure-idp": (insecure, {}),
        "local-jwks": (local_jwks, {}),
        "money": (money, keys),
        "bounded": (bounded, keys),
        "pools": (pools, keys),
    }


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module", params=sorted(variants()))
def variant_run(request) -> ProgramRun:
    config, secrets = variants()[request.param]
    return run_program(config, secrets=secrets)


@pytest.fixture(scope="module")
def custom_objects(variant_run) -> list[dict[str, Any]]:
    return [resource.as_object() for resource in variant_run.custom_resources()]


def test_every_custom_resource_meets_its_crd(catalog, custom_objects):
    kinds = {obj["kind"] for obj in custom_objects}
    assert {
        "GatewayClass",
        "Gateway",
        "EnvoyProxy",
        "ClientTrafficPolicy",
        "Backend",
        "SecurityPolicy",
        "BackendTrafficPolicy",
        "AIGatewayRoute",
        "AIServiceBackend",
        "BackendSecurityPolicy",
    } <= kinds
    failures = []
    evaluated = 0
    for obj in custom_objects:
        report = catalog.validate(obj)
        evaluated += report.cel_evaluated
        if report.errors:
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {report.errors}")
    assert failures == []
    assert evaluated > 0, "no CEL rule was evaluated: the validator is not looking"


def test_the_local_jwks_variant_is_checked_with_its_cel_rule(catalog):
    """Guard against a vacuous pass: the localJWKS provider is there, and its own CEL rule (exactly one of
    inline or valueRef, matching type) is evaluated; a provider breaking that rule is refused."""
    config, secrets = variants()["local-jwks"]
    objects = [r.as_object() for r in run_program(config, secrets=secrets).custom_resources()]
    [security] = [o for o in objects if o["kind"] == "SecurityPolicy"]
    [provider] = security["spec"]["jwt"]["providers"]
    assert provider["localJWKS"]["type"] == "ValueRef"
    assert catalog.validate(security).errors == []
    broken = copy.deepcopy(security)
    broken["spec"]["jwt"]["providers"][0]["localJWKS"]["type"] = "Inline"
    assert any("Exactly one of inline or valueRef" in error for error in catalog.validate(broken).errors)
    assert not [o for o in objects if o["kind"] in {"Backend", "BackendTLSPolicy"} and "idp" in o["metadata"]["name"]]


def test_the_money_variant_exercises_every_new_field(catalog):
    """Guard against a vacuous pass: the objects checked above really hold CEL costs and the kill switch."""
    config, secrets = variants()["money"]
    objects = [r.as_object() for r in run_program(config, secrets=secrets).custom_resources()]
    routes = [o for o in objects if o["kind"] == "AIGatewayRoute"]
    assert routes and all([c["type"] for c in o["spec"]["llmRequestCosts"]] == ["TotalToken", "CEL"] for o in routes)
    [security] = [o for o in objects if o["kind"] == "SecurityPolicy"]
    assert [
        len(r["principal"]["jwt"]["claims"][0]["values"]) for r in security["spec"]["authorization"]["rules"][1:]
    ] == [
        128,
        3,
    ]
    [btp] = [o for o in objects if o["kind"] == "BackendTrafficPolicy"]
    assert len(btp["spec"]["responseOverride"]) == 3  # the two 403s and the spent budget's 429
    assert len(btp["spec"]["rateLimit"]["global"]["rules"]) == 7  # 3 + 3 + 1 (solo): one reserved slot
    for obj in (security, btp, *routes):
        assert catalog.validate(obj).errors == []


def test_the_bounded_variant_exercises_ceilings_timeouts_and_calls_rules(catalog):
    """Guard against a vacuous pass: the bounded variant's objects really hold each new field."""
    config, secrets = variants()["bounded"]
    objects = [r.as_object() for r in run_program(config, secrets=secrets).custom_resources()]
    refs = [ref for o in objects if o["kind"] == "AIGatewayRoute" for ref in o["spec"]["rules"][0]["backendRefs"]]
    assert {ref["bodyMutation"]["set"][0]["path"] for ref in refs} == {"max_completion_tokens", "max_tokens"}
    timeouts = [o["spec"]["rules"][0].get("timeouts") for o in objects if o["kind"] == "AIGatewayRoute"]
    assert {"request": "5m"} in timeouts
    [btp] = [o for o in objects if o["kind"] == "BackendTrafficPolicy"]
    assert [r["cost"] for r in btp["spec"]["rateLimit"]["global"]["rules"]].count(
        {"request": {"from": "Number", "number": 1}}
    ) == 2
    [client] = [o for o in objects if o["kind"] == "ClientTrafficPolicy"]
    # The duplicate-key guard (core/body_guard.py): one Lua EnvoyExtensionPolicy on the Gateway.
    [guard] = [o for o in objects if o["kind"] == "EnvoyExtensionPolicy"]
    gateway = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "agent-router"}
    assert guard["spec"]["targetRefs"] == [gateway]
    assert [entry["type"] for entry in guard["spec"]["lua"]] == ["Inline"]
    for obj in (btp, client, guard, *[o for o in objects if o["kind"] == "AIGatewayRoute"]):
        assert catalog.validate(obj).errors == []


def test_the_pools_variant_exercises_pools_model_limits_and_token_kinds(catalog):
    """Guard against a vacuous pass: the pools variant's objects really hold pool rules (no Distinct match),
    x-ai-eg-model matches of both types and an llmRequestCosts entry for every kind of tokens."""
    config, secrets = variants()["pools"]
    objects = [r.as_object() for r in run_program(config, secrets=secrets).custom_resources()]
    [btp] = [o for o in objects if o["kind"] == "BackendTrafficPolicy"]
    assert btp["metadata"]["annotations"]["agent-budgets.dev/class-slots"] == "2"
    rules = btp["spec"]["rateLimit"]["global"]["rules"]
    headers = [[h for s in rule["clientSelectors"] for h in s["headers"]] for rule in rules]
    # limitSlots 3: the class holds block 1 (rules 3 and 4), block 2 is a class slot kept free (rules 6 to 8), the
    # pools blocks 3 and 4 (rules 9, and 12 and 13).
    assert len(rules) == 14
    for index in (9, 12, 13):
        assert "Distinct" not in {match["type"] for match in headers[index]}, f"pool rule {index}: one shared counter"
    assert all(rules[index].get("shadowMode") is True for index in (5, 6, 7, 8, 10, 11))
    model_matches = [h[0] for h in headers if h[0]["name"] == "x-ai-eg-model"]
    assert {m["type"] for m in model_matches} == {"Exact", "RegularExpression"}
    routes = [o for o in objects if o["kind"] == "AIGatewayRoute"]
    assert routes and all(
        [c["type"] for c in o["spec"]["llmRequestCosts"]]
        == ["TotalToken", "InputToken", "OutputToken", "CachedInputToken", "CEL"]
        for o in routes
    )
    for obj in (btp, *routes):
        assert catalog.validate(obj).errors == []


def test_the_validator_would_catch_a_broken_budget_rule(catalog, custom_objects):
    """A rule whose cost sets both number and metadata breaks a CEL rule of the CRD: prove we'd see it."""
    [btp] = [copy.deepcopy(o) for o in custom_objects if o["kind"] == "BackendTrafficPolicy"]
    btp["spec"]["rateLimit"]["global"]["rules"][0]["cost"]["request"]["metadata"] = {"namespace": "x", "key": "y"}
    report = catalog.validate(btp)
    assert any("only one of number or metadata" in error for error in report.errors), report.errors


def test_the_validator_would_catch_a_service_backend_ref(catalog, custom_objects):
    [backend] = [copy.deepcopy(o) for o in custom_objects if o["kind"] == "AIServiceBackend"][:1]
    del backend["spec"]["backendRef"]["kind"]
    del backend["spec"]["backendRef"]["group"]
    assert catalog.validate(backend).errors


# ---------------------------------------------------------------------------------------------------------
# Built-in objects


def builtin_failures(objects: list[dict[str, Any]]) -> list[str]:
    return [
        f"{obj['kind']}/{obj['metadata']['name']}: {problems}"
        for obj in objects
        if (problems := kubernetes_schema.problems(obj))
    ]


def test_every_builtin_object_meets_kubernetes(variant_run):
    objects = variant_run.builtin_objects()
    assert {"Namespace", "ConfigMap", "Secret", "Service", "NetworkPolicy"} <= {obj["kind"] for obj in objects}
    assert builtin_failures(objects) == []


def test_every_builtin_object_of_the_prod_stack_meets_kubernetes():
    """The prod example (external Redis, no mock model): its namespaces and provider Secrets. Its custom resources
    are of the kinds the `real` and `money` variants check against the CRDs."""
    objects = run_program(stack_config("prod"), secrets=PROD_SECRETS).builtin_objects()
    assert [obj["kind"] for obj in objects].count("Secret") == 3
    assert builtin_failures(objects) == []


@pytest.fixture(scope="module")
def dev_objects() -> dict[str, dict[str, Any]]:
    """The dev stack's built-in objects by kind (one of each but Namespace, Secret and Service)."""
    config, secrets = variants()["dev"]
    return {obj["kind"]: obj for obj in run_program(config, secrets=secrets).builtin_objects()}


def test_the_dev_stack_has_each_workload_the_checker_looks_into(dev_objects):
    """Guard against a vacuous pass: the mock model's Deployment and Redis's StatefulSet are among the objects, with
    their images, resources and volume claim."""
    objects = dev_objects
    assert objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] == "python:3.12-alpine"
    [claim] = objects["StatefulSet"]["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"


def test_the_builtin_checker_refuses_what_the_cluster_refuses(dev_objects):
    """Each check can fail: a schema error, and each API-server or kubelet rule the schemas leave out."""
    objects = dev_objects

    def problems_after(kind: str, change) -> list[str]:
        obj = copy.deepcopy(objects[kind])
        change(obj)
        return kubernetes_schema.problems(obj)

    def container(obj: dict[str, Any]) -> dict[str, Any]:
        return obj["spec"]["template"]["spec"]["containers"][0]

    assert problems_after("Deployment", lambda o: container(o).update(imageName="x"))[0].startswith("spec.template")
    assert "InvalidImageName" in problems_after("Deployment", lambda o: container(o).update(image=""))[0]
    assert "InvalidImageName" in problems_after("StatefulSet", lambda o: container(o).update(image="Redis:8"))[0]
    assert problems_after("Namespace", lambda o: o["metadata"].update(name="agent-budgets\n")) == [
        "metadata.name: 'agent-budgets\\n' is not a DNS label"
    ]
    assert problems_after("Service", lambda o: o["metadata"].update(name="1-redis")) == [
        "metadata.name: '1-redis' is not a DNS-1035 label (starting with a letter)"
    ]
    assert "is not a label value" in problems_after("ConfigMap", lambda o: o["metadata"]["labels"].update(a="-x"))[0]

    def no_storage(obj: dict[str, Any]) -> None:
        obj["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "0"

    zero = problems_after("StatefulSet", no_storage)
    assert zero == ["spec.volumeClaimTemplates[0].spec.resources.requests.storage: '0' must be greater than zero"]
    assert "is not a ConfigMap or Secret key" in problems_after("ConfigMap", lambda o: o["data"].update({"a b": ""}))[0]
