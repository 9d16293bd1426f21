"""Tests of the CRD validator itself (tests/support/crds.py).

It must accept what the API server accepts and reject, with the upstream message, what the API server
rejects; and a CEL rule it cannot evaluate must be reported, never counted as passed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import crds
from tests.support.crds import CrdCatalog, ValidationReport, evaluate_cel, load_catalog


@pytest.fixture(scope="module")
def catalog() -> CrdCatalog:
    return load_catalog()


# ---------------------------------------------------------------------------------------------
# Hand-written objects that the pinned CRDs accept
# ---------------------------------------------------------------------------------------------


def budget_policy() -> dict[str, Any]:
    """Global, shared rate limit per actor, excluding two actors, charging response tokens only."""
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "BackendTrafficPolicy",
        "metadata": {"name": "agent-budgets", "namespace": "ai", "labels": {"app.kubernetes.io/part-of": "budgets"}},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llm"}],
            "rateLimit": {
                "global": {
                    "rules": [
                        {
                            "clientSelectors": [
                                {
                                    "headers": [
                                        {"name": "x-actor-id", "type": "Distinct"},
                                        {
                                            "name": "x-actor-id",
                                            "type": "RegularExpression",
                                            "value": "^(actor-a|actor-b)$",
                                            "invert": True,
                                        },
                                    ]
                                }
                            ],
                            "limit": {"requests": 50000, "unit": "Day"},
                            "cost": {
                                "request": {"from": "Number", "number": 0},
                                "response": {
                                    "from": "Metadata",
                                    "metadata": {"namespace": "io.envoy.ai_gateway", "key": "llm_total_token"},
                                },
                            },
                            "shared": True,
                        }
                    ]
                }
            },
        },
    }


def jwt_policy() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": {"name": "agent-jwt", "namespace": "ai"},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "ai-gw"}],
            "jwt": {
                "providers": [
                    {
                        "name": "substrate-idp",
                        "issuer": "https://idp.ate-system.svc",
                        "audiences": ["agent-budgets"],
                        "remoteJWKS": {
                            "uri": "https://idp.ate-system.svc/openid/v1/jwks",
                            "backendRefs": [
                                {
                                    "group": "gateway.envoyproxy.io",
                                    "kind": "Backend",
                                    "name": "substrate-idp",
                                    "port": 443,
                                }
                            ],
                        },
                        "claimToHeaders": [{"claim": "sub", "header": "x-actor-id"}],
                    }
                ]
            },
        },
    }


def idp_backend() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "Backend",
        "metadata": {"name": "substrate-idp", "namespace": "ai"},
        "spec": {
            "endpoints": [{"fqdn": {"hostname": "idp.ate-system.svc.cluster.local", "port": 443}}],
            "tls": {
                "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "idp-ca"}],
                "sni": "idp.ate-system.svc",
            },
        },
    }


def model_backend() -> dict[str, Any]:
    return {
        "apiVersion": "aigateway.envoyproxy.io/v1beta1",
        "kind": "AIServiceBackend",
        "metadata": {"name": "mock-model", "namespace": "ai"},
        "spec": {
            "schema": {"name": "OpenAI"},
            "backendRef": {"name": "mock-model", "kind": "Backend", "group": "gateway.envoyproxy.io"},
            "headerMutation": {"remove": ["authorization"]},
        },
    }


def model_key_policy() -> dict[str, Any]:
    return {
        "apiVersion": "aigateway.envoyproxy.io/v1beta1",
        "kind": "BackendSecurityPolicy",
        "metadata": {"name": "mock-model-key", "namespace": "ai"},
        "spec": {
            "targetRefs": [{"group": "aigateway.envoyproxy.io", "kind": "AIServiceBackend", "name": "mock-model"}],
            "type": "APIKey",
            "apiKey": {"secretRef": {"name": "mock-model-key"}},
        },
    }


VALID: dict[str, Callable[[], dict[str, Any]]] = {
    "BackendTrafficPolicy": budget_policy,
    "SecurityPolicy": jwt_policy,
    "Backend": idp_backend,
    "AIServiceBackend": model_backend,
    "BackendSecurityPolicy": model_key_policy,
}


def mutated(make: Callable[[], dict[str, Any]], change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    obj = copy.deepcopy(make())
    change(obj)
    return obj


def rule0(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["rateLimit"]["global"]["rules"][0]


def provider0(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["jwt"]["providers"][0]


def errors_at(report: ValidationReport, path: str) -> list[str]:
    return [e for e in report.errors if e.startswith(f"{path}: ")]


def assert_rejected(report: ValidationReport, path: str, message: str, rule: str | None = None) -> None:
    assert any(message in e for e in errors_at(report, path)), f"want {path}: ...{message}... in\n{report}"
    if rule is not None:
        assert any(rule in r for r in report.cel_failed_rules), f"rule {rule!r} did not fire:\n{report}"


# ---------------------------------------------------------------------------------------------
# Valid objects pass, with their CEL rules really evaluated
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(VALID))
def test_valid_object_passes_with_cel_evaluated(catalog: CrdCatalog, kind: str) -> None:
    report = catalog.validate(VALID[kind]())
    assert report.ok, str(report)
    assert report.cel_evaluated > 0
    assert report.cel_unsupported == []
    assert report.cel_failed_rules == []


def test_cel_counts_on_the_sample_objects(catalog: CrdCatalog) -> None:
    # Pinned CRDs, so the number of rules met on the way is fixed; a change means the schemas changed.
    counts = {kind: catalog.validate(make()).cel_evaluated for kind, make in VALID.items()}
    assert counts == {
        "BackendTrafficPolicy": 13,
        "SecurityPolicy": 15,
        "Backend": 11,
        "AIServiceBackend": 2,
        "BackendSecurityPolicy": 7,
    }


def test_defaults_are_applied_before_cel(catalog: CrdCatalog) -> None:
    report = catalog.validate(jwt_policy())
    assert 'spec.jwt.providers[0].remoteJWKS.cacheDuration="300s"' in report.defaults_applied
    assert "spec.jwt.providers[0].remoteJWKS.backendRefs[0].weight=1" in report.defaults_applied
    stored = catalog.defaulted(idp_backend())
    assert stored["spec"]["type"] == "Endpoints"
    assert stored["spec"]["tls"]["insecureSkipVerify"] is False


# ---------------------------------------------------------------------------------------------
# Broken objects are rejected with the API server's reason
# ---------------------------------------------------------------------------------------------

RULES = "spec.rateLimit.global.rules[0]"

BROKEN: list[tuple[str, Callable[[], dict[str, Any]], str, str, str | None]] = [
    (
        "unknown field (there is no rule name)",
        lambda: mutated(budget_policy, lambda o: rule0(o).update(name="default")),
        f"{RULES}.name",
        'unknown field "name"',
        None,
    ),
    (
        "wrong enum",
        lambda: mutated(budget_policy, lambda o: rule0(o)["limit"].update(unit="Days")),
        f"{RULES}.limit.unit",
        'Unsupported value: "Days": supported values: "Second", "Minute", "Hour", "Day", "Week"',
        None,
    ),
    (
        "value over maxLength",
        lambda: mutated(budget_policy, lambda o: rule0(o)["clientSelectors"][0]["headers"][0].update(name="x" * 257)),
        f"{RULES}.clientSelectors[0].headers[0].name",
        "Too long: may not be longer than 256",
        None,
    ),
    (
        "too many items",
        lambda: mutated(jwt_policy, lambda o: provider0(o).update(audiences=[f"a{i}" for i in range(9)])),
        "spec.jwt.providers[0].audiences",
        "Too many: 9: must have at most 8 items",
        None,
    ),
    (
        "required field missing",
        lambda: mutated(budget_policy, lambda o: rule0(o)["limit"].pop("unit")),
        f"{RULES}.limit.unit",
        "Required value",
        None,
    ),
    (
        "CostSpecifier with number and metadata",
        lambda: mutated(
            budget_policy,
            lambda o: rule0(o)["cost"]["request"].update(metadata={"namespace": "io.envoy.ai_gateway", "key": "k"}),
        ),
        f"{RULES}.cost.request",
        "only one of number or metadata can be specified",
        "!(has(self.number) && has(self.metadata))",
    ),
    (
        "policy without targets",
        lambda: mutated(budget_policy, lambda o: o["spec"].pop("targetRefs")),
        "spec",
        "either targetRef or targetRefs must be used",
        "(has(self.targetRef) && !has(self.targetRefs))",
    ),
    (
        "Backend endpoint with both fqdn and ip",
        lambda: mutated(
            idp_backend, lambda o: o["spec"]["endpoints"][0].update(ip={"address": "10.0.0.7", "port": 443})
        ),
        "spec.endpoints[0]",
        "only one of fqdn, ip or unix can be specified",
        "((has(self.fqdn) && !(has(self.ip) || has(self.unix)))",
    ),
    (
        "Backend mixing fqdn and ip endpoints",
        lambda: mutated(
            idp_backend, lambda o: o["spec"]["endpoints"].append({"ip": {"address": "10.0.0.7", "port": 443}})
        ),
        "spec.endpoints",
        "fqdn addresses cannot be mixed with other address types",
        "self.all(f, has(f.fqdn)) || !self.exists(f, has(f.fqdn))",
    ),
    (
        "AIServiceBackend backendRef without kind/group (CRD defaults kind=Service, group='')",
        lambda: mutated(model_backend, lambda o: [o["spec"]["backendRef"].pop(k) for k in ("kind", "group")]),
        "spec.backendRef",
        "BackendRef must be a Backend resource of Envoy Gateway",
        "has(self.kind) && self.kind == 'Backend' && has(self.group) && self.group == 'gateway.envoyproxy.io'",
    ),
    (
        "AIServiceBackend defaulted Service reference without port",
        lambda: mutated(model_backend, lambda o: [o["spec"]["backendRef"].pop(k) for k in ("kind", "group")]),
        "spec.backendRef",
        "Must have port for Service reference",
        "(size(self.group) == 0 && self.kind == 'Service') ? has(self.port) : true",
    ),
    (
        "BackendSecurityPolicy APIKey with anthropicAPIKey",
        lambda: mutated(model_key_policy, lambda o: o["spec"].update(anthropicAPIKey={"secretRef": {"name": "k"}})),
        "spec",
        "When type is APIKey, only apiKey field should be set",
        "self.type == 'APIKey' ? (has(self.apiKey)",
    ),
    (
        "BackendSecurityPolicy targeting something else",
        lambda: mutated(model_key_policy, lambda o: o["spec"]["targetRefs"][0].update(kind="Backend")),
        "spec.targetRefs",
        "targetRefs must reference AIServiceBackend or InferencePool resources",
        None,
    ),
    (
        "JWT provider with remoteJWKS and localJWKS",
        lambda: mutated(jwt_policy, lambda o: provider0(o).update(localJWKS={"type": "Inline", "inline": "{}"})),
        "spec.jwt.providers[0]",
        "remoteJWKS and localJWKS cannot both be specified.",
        "!(has(self.remoteJWKS) && has(self.localJWKS))",
    ),
    (
        "JWT provider without any JWKS",
        lambda: mutated(jwt_policy, lambda o: provider0(o).pop("remoteJWKS")),
        "spec.jwt.providers[0]",
        "either remoteJWKS or localJWKS must be specified.",
        "has(self.remoteJWKS) || has(self.localJWKS)",
    ),
    (
        "JWT optional together with failOpen",
        lambda: mutated(jwt_policy, lambda o: o["spec"]["jwt"].update(optional=False, failOpen=True)),
        "spec.jwt",
        "optional and failOpen cannot both be set",
        "!(has(self.optional) && has(self.failOpen))",
    ),
]


@pytest.mark.parametrize(("make", "path", "message", "rule"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_object_is_rejected(
    catalog: CrdCatalog, make: Callable[[], dict[str, Any]], path: str, message: str, rule: str | None
) -> None:
    report = catalog.validate(make())
    assert not report.ok
    assert_rejected(report, path, message, rule)
    assert report.cel_unsupported == []


def test_failed_rule_names_the_defaults_that_made_it_fail(catalog: CrdCatalog) -> None:
    obj = mutated(model_backend, lambda o: [o["spec"]["backendRef"].pop(k) for k in ("kind", "group")])
    (error, *_) = errors_at(catalog.validate(obj), "spec.backendRef")
    assert 'kind="Service"' in error
    assert 'group=""' in error


def test_cel_failure_is_the_only_error_when_schema_is_fine(catalog: CrdCatalog) -> None:
    report = catalog.validate(
        mutated(model_key_policy, lambda o: o["spec"].update(anthropicAPIKey={"secretRef": {"name": "k"}}))
    )
    assert len(report.errors) == 1
    assert report.cel_evaluated > 0


# ---------------------------------------------------------------------------------------------
# Lookup, versions, scope, metadata
# ---------------------------------------------------------------------------------------------


def test_unknown_kind_and_version_are_errors(catalog: CrdCatalog) -> None:
    unknown_kind = mutated(idp_backend, lambda o: o.update(kind="Backendd"))
    assert any("no CRD for kind Backendd" in e for e in catalog.validate(unknown_kind).errors)
    unknown_version = mutated(idp_backend, lambda o: o.update(apiVersion="gateway.envoyproxy.io/v1"))
    assert any("is not a version of Backend" in e for e in catalog.validate(unknown_version).errors)
    assert not catalog.covers({"apiVersion": "v1", "kind": "ConfigMap"})
    assert catalog.covers(idp_backend())


def test_deprecated_version_warns(catalog: CrdCatalog) -> None:
    report = catalog.validate(mutated(model_backend, lambda o: o.update(apiVersion="aigateway.envoyproxy.io/v1alpha1")))
    assert report.ok, str(report)
    assert any("deprecated" in w for w in report.warnings)


def test_transition_rules_are_skipped_and_counted(catalog: CrdCatalog) -> None:
    gateway_class = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": "agent-budgets"},
        "spec": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"},
    }
    report = catalog.validate(gateway_class)
    assert report.ok, str(report)
    assert report.cel_skipped_transition == 1  # controllerName: self == oldSelf
    namespaced = mutated(lambda: gateway_class, lambda o: o["metadata"].update(namespace="ai"))
    assert_rejected(catalog.validate(namespaced), "metadata.namespace", "cluster-scoped")


def test_metadata_is_checked_like_object_meta(catalog: CrdCatalog) -> None:
    report = catalog.validate(
        mutated(
            idp_backend,
            lambda o: o["metadata"].update(name="Substrate_IdP", labels={"actor": "x" * 64}, labelz={}),
        )
    )
    assert_rejected(report, "metadata.name", "should match")
    assert_rejected(report, "metadata.labels.actor", "must be no more than 63 characters")
    assert_rejected(report, "metadata.labelz", 'unknown field "labelz"')


def test_null_for_a_non_nullable_field_is_an_error(catalog: CrdCatalog) -> None:
    report = catalog.validate(mutated(idp_backend, lambda o: o["spec"]["tls"].update(sni=None)))
    assert_rejected(report, "spec.tls.sni", "not nullable")


def test_list_map_keys_and_sets_must_be_unique(catalog: CrdCatalog) -> None:
    obj = mutated(
        model_backend,
        lambda o: o["spec"]["headerMutation"].update(
            remove=["authorization", "authorization"],
            set=[{"name": "x-a", "value": "1"}, {"name": "x-a", "value": "2"}],
        ),
    )
    report = catalog.validate(obj)
    assert_rejected(report, "spec.headerMutation.remove[1]", 'Duplicate value: "authorization"')
    assert_rejected(report, "spec.headerMutation.set[1]", 'Duplicate value: {"name": "x-a"}')


def test_escaped_property_names_reach_cel(catalog: CrdCatalog) -> None:
    # Gateway API rules say p1.__namespace__: the same Gateway in two namespaces is two parents.
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "llm", "namespace": "ai"},
        "spec": {
            "parentRefs": [{"name": "ai-gw"}, {"name": "ai-gw", "namespace": "edge"}],
            "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}],
        },
    }
    assert catalog.validate(route).ok
    twice = mutated(lambda: route, lambda o: o["spec"]["parentRefs"][1].pop("namespace"))
    assert_rejected(catalog.validate(twice), "spec.parentRefs", "sectionName or port must be unique")


def test_duration_rule(catalog: CrdCatalog) -> None:
    route = {
        "apiVersion": "aigateway.envoyproxy.io/v1beta1",
        "kind": "AIGatewayRoute",
        "metadata": {"name": "llm", "namespace": "ai"},
        "spec": {
            "parentRefs": [{"name": "ai-gw"}],
            "rules": [
                {"backendRefs": [{"name": "mock-model"}], "timeouts": {"request": "60s", "backendRequest": "1m30s"}}
            ],
        },
    }
    assert_rejected(
        catalog.validate(route),
        "spec.rules[0].timeouts",
        "backendRequest timeout cannot be longer than request timeout",
        "duration(self.backendRequest) > duration(self.request)",
    )
    route["spec"]["rules"][0]["timeouts"]["backendRequest"] = "59s"
    assert catalog.validate(route).ok


def test_cel_runtime_error_rejects_like_the_api_server(catalog: CrdCatalog) -> None:
    # `size(self.certificateRefs) > 0 || size(self.options) > 0` with neither set: no such key -> invalid.
    gateway = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "ai-gw", "namespace": "ai"},
        "spec": {
            "gatewayClassName": "eg",
            "listeners": [{"name": "https", "protocol": "HTTPS", "port": 443, "tls": {}}],
        },
    }
    report = catalog.validate(gateway)
    assert_rejected(
        report, "spec.listeners[0].tls", "certificateRefs or options must be specified when mode is Terminate"
    )
    assert "evaluation error" in errors_at(report, "spec.listeners[0].tls")[0]


def test_int_or_string(catalog: CrdCatalog) -> None:
    def proxy(min_available: Any) -> dict[str, Any]:
        return {
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "EnvoyProxy",
            "metadata": {"name": "p", "namespace": "ai"},
            "spec": {"provider": {"type": "Kubernetes", "kubernetes": {"envoyPDB": {"minAvailable": min_available}}}},
        }

    assert catalog.validate(proxy(1)).ok
    assert catalog.validate(proxy("50%")).ok
    assert errors_at(catalog.validate(proxy(True)), "spec.provider.kubernetes.envoyPDB.minAvailable")


def test_every_rule_in_the_pinned_crds_is_supported(catalog: CrdCatalog) -> None:
    assert catalog.unsupported_rules() == {}
    assert sum(1 for _ in catalog.rules()) > 1000


# ---------------------------------------------------------------------------------------------
# Extensions and library functions, on a synthetic CRD (kept out of the session totals)
# ---------------------------------------------------------------------------------------------


def rule(text: str, message: str = "", **extra: Any) -> dict[str, Any]:
    return {"rule": text, "message": message or f"failed: {text}", **extra}


WIDGET_SPEC: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-validations": [
        rule(
            "!has(self.address) || has(self.network)",
            "network is required with address",
            fieldPath=".network",
            reason="FieldValueRequired",
        )
    ],
    "properties": {
        "maybe": {"type": "string", "nullable": True},
        "port": {"type": "integer", "format": "int32"},
        "big": {"type": "integer", "format": "int64"},
        "ratio": {"type": "number"},
        "size": {"x-kubernetes-int-or-string": True},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "template": {
            "type": "object",
            "x-kubernetes-embedded-resource": True,
            "x-kubernetes-preserve-unknown-fields": True,
        },
        "limits": {
            "type": "object",
            "additionalProperties": {
                "type": "string",
                "x-kubernetes-validations": [
                    rule("isQuantity(self) && quantity(self).isLessThan(quantity('1Gi'))", "too big")
                ],
            },
        },
        "endpoint": {
            "type": "string",
            "x-kubernetes-validations": [
                rule(
                    "isURL(self) && url(self).getScheme() == 'https' && url(self).getPort() == '8443'",
                    messageExpression="'endpoint ' + self + ' must be https on 8443'",
                )
            ],
        },
        "address": {
            "type": "string",
            "x-kubernetes-validations": [rule("isIP(self) && ip(self).family() == 4", "IPv4 only")],
        },
        "network": {
            "type": "string",
            "x-kubernetes-validations": [rule("cidr(self).containsIP('10.0.0.1')", "needs 10.0.0.1")],
        },
        "label": {
            "type": "string",
            "x-kubernetes-validations": [rule("!format.dns1123Label().validate(self).hasValue()", "not a DNS label")],
        },
        "words": {
            "type": "string",
            "x-kubernetes-validations": [
                rule("self.split(',').map(w, w.trim().lowerAscii()).join('-') == 'a-b'", "want a,b"),
                rule(
                    "self.indexOf(',') > 0 && self.substring(0, self.indexOf(',')).upperAscii() == 'A'", "starts with a"
                ),
            ],
        },
        "letters": {"type": "string", "x-kubernetes-validations": [rule(r"self.matches(r'^\pL+$')", "letters only")]},
        "mystery": {"type": "string", "x-kubernetes-validations": [rule("self.frobnicate() == 1", "mystery")]},
        "pinned": {"type": "string", "x-kubernetes-validations": [rule("self == oldSelf", "immutable")]},
        "firstSet": {
            "type": "string",
            "x-kubernetes-validations": [
                rule("!oldSelf.hasValue() && self != 'forbidden-on-create'", "bad first value", optionalOldSelf=True)
            ],
        },
    },
}


@pytest.fixture(scope="module")
def widgets() -> CrdCatalog:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "test.agent-budgets.dev",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": WIDGET_SPEC,
                            },
                        }
                    },
                }
            ],
        },
    }
    return CrdCatalog([crd], source="synthetic", record_stats=False)


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "test.agent-budgets.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


GOOD_WIDGET: dict[str, Any] = {
    "maybe": None,
    "port": 8443,
    "big": 2**40,
    "ratio": 1,
    "size": "10Mi",
    "free": {"anything": {"goes": [1, "two"]}},
    "template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}},
    "limits": {"memory": "512Mi", "cpu": "250m"},
    "endpoint": "https://idp.example:8443/jwks",
    "address": "10.0.0.1",
    "network": "10.0.0.0/8",
    "label": "agent-a",
    "words": "A, b",
    "letters": "héllo",
    "pinned": "x",
    "firstSet": "fine",
}


def test_widget_extensions_and_library_pass(widgets: CrdCatalog) -> None:
    report = widgets.validate(widget(**GOOD_WIDGET))
    assert report.ok, str(report)
    assert report.cel_skipped_transition == 1
    assert report.cel_evaluated == 11  # limits x2, endpoint, address, network, label, words x2, letters, firstSet, spec
    assert [u.split(":")[0] for u in report.cel_unsupported] == []


def test_unsupported_rule_is_reported_never_passed(widgets: CrdCatalog) -> None:
    report = widgets.validate(widget(mystery="?"))
    assert report.ok  # unsupported is not a verdict on the object...
    (unsupported,) = report.cel_unsupported  # ...but it is reported, with the reason
    assert unsupported.startswith("spec.mystery: self.frobnicate() == 1")
    assert "frobnicate" in unsupported.split(" -- ")[1]
    assert report.cel_evaluated == 1  # the spec-level rule only
    assert "self.frobnicate() == 1" in widgets.unsupported_rules()


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        ({"port": 2**31}, "spec.port", "out of range for the format (-2147483648..2147483647)"),
        ({"big": 2**63}, "spec.big", "format int64"),
        ({"ratio": "1"}, "spec.ratio", "must be of type number"),
        ({"size": 1.5}, "spec.size", "must be an integer or a string"),
        ({"template": {"kind": "ConfigMap"}}, "spec.template.apiVersion", "Required value (embedded resource)"),
        ({"limits": {"memory": "2Gi"}}, "spec.limits.memory", "too big"),
        ({"limits": {"memory": "lots"}}, "spec.limits.memory", "too big"),
        (
            {"endpoint": "http://idp.example:8443/jwks"},
            "spec.endpoint",
            "endpoint http://idp.example:8443/jwks must be",
        ),
        ({"endpoint": "idp.example/jwks"}, "spec.endpoint", "must be https on 8443"),
        ({"address": "::1", "network": "::/0"}, "spec.address", "IPv4 only"),
        ({"address": "010.0.0.1", "network": "10.0.0.0/8"}, "spec.address", "IPv4 only"),
        ({"address": "10.0.0.1"}, "spec.network", "network is required with address reason=FieldValueRequired"),
        ({"network": "192.168.0.0/16"}, "spec.network", "needs 10.0.0.1"),
        ({"network": "not-a-cidr"}, "spec.network", "evaluation error"),
        ({"label": "Agent_A"}, "spec.label", "not a DNS label"),
        ({"words": "a,c"}, "spec.words", "want a,b"),
        ({"words": "b,a"}, "spec.words", "starts with a"),
        ({"letters": "abc1"}, "spec.letters", "letters only"),
        ({"firstSet": "forbidden-on-create"}, "spec.firstSet", "bad first value"),
        ({"free": {"x": 1}, "extra": True}, "spec.extra", 'unknown field "extra"'),
    ],
)
def test_widget_violations(widgets: CrdCatalog, spec: dict[str, Any], path: str, message: str) -> None:
    report = widgets.validate(widget(**spec))
    assert_rejected(report, path, message)


def test_library_functions() -> None:
    assert evaluate_cel("self.lastIndexOf('/') == 5 && self.charAt(0) == 'a'", "a/b/c/d") is not None
    assert bool(evaluate_cel("self.lastIndexOf('/')  == 5", "a/b/c/d"))
    assert bool(evaluate_cel("self.replace('-', '_', 1) == 'a_b-c'", "a-b-c"))
    assert bool(evaluate_cel("self.split('/', 2) == ['a', 'b/c']", "a/b/c"))
    assert bool(evaluate_cel("[3, 1, 2].sort() == [1, 2, 3] && [1, 2, 3].isSorted() && [1, 2].sum() == 3", None))
    assert bool(evaluate_cel("sets.contains([1, 2, 3], [2]) && !sets.intersects([1], [2])", None))
    assert bool(evaluate_cel("self.find('[0-9]+') == '42' && self.findAll('[a-z]').size() == 2", "ab42"))
    assert bool(evaluate_cel("url(self).getHostname() == '::1' && url(self).getPort() == '80'", "http://[::1]:80/x"))
    assert bool(evaluate_cel("url(self).getQuery()['a'] == ['1', '2']", "https://h/p?a=1&a=2"))
    assert bool(evaluate_cel("ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')", None))
    assert bool(evaluate_cel("cidr('10.1.2.3/8').masked() == cidr('10.0.0.0/8')", None))
    assert bool(evaluate_cel("quantity('1.5Gi').compareTo(quantity('1536Mi')) == 0", None))
    assert bool(evaluate_cel("quantity('1k').asInteger() == 1000 && quantity('1e3').isInteger()", None))
    assert bool(evaluate_cel("format.named('uuid').hasValue() && !format.named('nope').hasValue()", None))
    assert bool(evaluate_cel("optional.of(1).orValue(2) == 1 && optional.none().orValue(2) == 2", None))
    assert bool(evaluate_cel("duration('1h30m') == duration('90m') && duration('0') == duration('0s')", None))
    # cel-go semantics: an optional never equals null, so this upstream XBackend rule is false for any name.
    assert not bool(evaluate_cel("format.dns1123Label().validate(self) == null", "http"))
    assert crds.escape_property_name("namespace") == "__namespace__"
    assert crds.escape_property_name("x-kubernetes.io/a__b") == "x__dash__kubernetes__dot__io__slash__a__underscores__b"
    assert crds.escape_property_name("a b") is None


# ---------------------------------------------------------------------------------------------
# Loading and the session summary
# ---------------------------------------------------------------------------------------------


def test_missing_crds_skip_locally_and_fail_in_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv(crds.ENV_VAR, str(tmp_path / "nowhere"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make crds"):
        load_catalog()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="make crds"):
        load_catalog()


def test_crd_root_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(crds.ENV_VAR, ".crds")
    assert crds.crd_root() == crds.REPO_ROOT / ".crds"


def test_crd_root_falls_back_to_make_crds_output(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    repo = tmp_path / "repo"
    (repo / ".crds").mkdir(parents=True)
    monkeypatch.delenv(crds.ENV_VAR, raising=False)
    monkeypatch.setattr(crds, "REPO_ROOT", repo)
    assert crds.crd_root() == repo / ".crds"  # no ../shared/crds next to this checkout
    (tmp_path / "shared" / "crds").mkdir(parents=True)
    assert crds.crd_root() == tmp_path / "shared" / "crds"


def test_from_dir_ignores_hidden_staging_folders(tmp_path: Any) -> None:
    source = crds.crd_root() / "ai-gateway-v1.1.0" / "aigateway.envoyproxy.io_aiservicebackends.yaml"
    if not source.is_file():
        pytest.skip("pinned CRDs not available")
    for folder in ("ai-gateway-v1.1.0", ".fetch.abc123/ai-gateway-v1.1.0"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / source.name).write_text(source.read_text())
    assert CrdCatalog.from_dir(tmp_path, record_stats=False).kinds() == [
        "aigateway.envoyproxy.io/v1alpha1 AIServiceBackend",
        "aigateway.envoyproxy.io/v1beta1 AIServiceBackend",
    ]


def test_catalog_is_parsed_once(catalog: CrdCatalog) -> None:
    assert load_catalog() is catalog


def test_summary_lines_report_totals(catalog: CrdCatalog) -> None:
    catalog.validate(budget_policy())
    (first, *_rest) = crds.summary_lines()
    assert first.startswith("CRD schema: ")
    assert "objects validated" in first
    assert "could not be evaluated (unsupported)" in first
    assert "transition rules skipped" in first
