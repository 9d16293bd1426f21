"""Pure builders: what the program declares on the gateway side, as plain Kubernetes objects.

Each function turns validated settings into `Manifest`s (apiVersion, kind, metadata, spec). Components
only hand them to Pulumi, and the tests validate them against the upstream CRD schemas. Secrets never
pass through here: a manifest names a Secret, the component fills it from secret config.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from core.budget_rules import (
    ACTOR_HEADER,
    LIMIT_SLOTS_ANNOTATION,
    MODEL_HEADER,
    POOL_SLOTS_ANNOTATION,
    TOKEN_COST_TYPES,
    TOKEN_METADATA_KEYS,
    BudgetRules,
)
from core.ceilings import api_schema, ceiling_body_mutation
from core.filter_chain import IDENTITY_BEFORE_AGENT_ROUTER
from core.money import route_cost_entry
from core.settings import (
    GATEWAY_CONTROLLER_NAME,
    GATEWAY_SERVICE_NAME,
    Provider,
    Route,
    StackSettings,
)
from core.suspension import suspension_authorization, suspension_response_overrides

GATEWAY_API = "gateway.networking.k8s.io"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io"
AI_GATEWAY_API = "aigateway.envoyproxy.io"
GATEWAY_CLASS_NAME = "agent-budgets"
GATEWAY_NAME = GATEWAY_SERVICE_NAME
ENVOY_PROXY_NAME = GATEWAY_SERVICE_NAME
BUDGET_POLICY_NAME = "agent-budgets"
JWT_POLICY_NAME = "agent-budgets-jwt"
JWT_PROVIDER_NAME = "agent-substrate"
IDP_BACKEND_NAME = "substrate-idp"
MOCK_MODEL_NAME = "mock-model"
MOCK_MODEL_PORT = 8080
UPSTREAM_CONTROL_HEADERS = (
    "x-envoy-upstream-rq-timeout-ms",
    "x-envoy-upstream-rq-per-try-timeout-ms",
    "x-envoy-retry-on",
    "x-envoy-retry-grpc-on",
    "x-envoy-max-retries",
    "x-envoy-retriable-status-codes",
    "x-envoy-retriable-header-names",
    "x-envoy-hedge-on-per-try-timeout",
)
"""Request headers Envoy's router reads to override a route's timeout or to retry (envoy
source/common/http/headers.h). Envoy strips them itself only from callers it does not count as internal
(conn_manager_utility.cc `cleanInternalHeaders`), and which addresses are internal has changed between Envoy
versions; a caller who could send them would stretch a call past its route's timeout, or make the provider
bill several attempts of a call that is charged once."""
API_KEY_SECRET_FIELD = "apiKey"  # the data key Agent Router reads from a provider Secret


@dataclass(frozen=True)
class Manifest:
    """One Kubernetes object, as the API server would receive it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None
    spec: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def resource_name(self) -> str:
        """A stable Pulumi name: kind and object name, unique within the stack."""
        return f"{self.kind.lower()}-{self.name}"

    def metadata(self) -> dict[str, Any]:
        """The object's metadata, with our labels."""
        meta: dict[str, Any] = {"name": self.name, "labels": {**common_labels(), **self.labels}}
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        if self.namespace:
            meta["namespace"] = self.namespace
        return meta


def common_labels() -> dict[str, str]:
    """Labels on everything we create, so `kubectl get -l` finds it."""
    return {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "agent-budgets"}


def _gateway_ref() -> dict[str, str]:
    return {"group": GATEWAY_API, "kind": "Gateway", "name": GATEWAY_NAME}


# ---------------------------------------------------------------------------------------------------------
# Model gateway


def gateway_manifests(settings: StackSettings) -> list[Manifest]:
    """GatewayClass, EnvoyProxy (fixed Service name), Gateway and ClientTrafficPolicy."""
    ns = settings.gateway.namespace
    kubernetes: dict[str, Any] = {
        # The fixed name every egress policy targets: agent-router.envoy-gateway-system.svc.cluster.local
        "envoyService": {"name": GATEWAY_SERVICE_NAME, "type": "ClusterIP"},
    }
    if settings.gateway.small_cluster:
        kubernetes["envoyDeployment"] = {"container": {"resources": {}}}
    return [
        Manifest(
            "gateway.networking.k8s.io/v1",
            "GatewayClass",
            GATEWAY_CLASS_NAME,
            None,
            {"controllerName": GATEWAY_CONTROLLER_NAME},
        ),
        Manifest(
            "gateway.envoyproxy.io/v1alpha1",
            "EnvoyProxy",
            ENVOY_PROXY_NAME,
            ns,
            {
                "provider": {"type": "Kubernetes", "kubernetes": kubernetes},
                # custom_response after the identity filters, so that Agent Router's processor, which its
                # extension server inserts before custom_response, sees the verified x-actor-id
                # (core.filter_chain: otherwise a retried call is charged nothing).
                "filterOrder": [dict(position) for position in IDENTITY_BEFORE_AGENT_ROUTER],
            },
        ),
        Manifest(
            "gateway.networking.k8s.io/v1",
            "Gateway",
            GATEWAY_NAME,
            ns,
            {
                "gatewayClassName": GATEWAY_CLASS_NAME,
                "infrastructure": {
                    "parametersRef": {"group": ENVOY_GATEWAY_API, "kind": "EnvoyProxy", "name": ENVOY_PROXY_NAME}
                },
                "listeners": [
                    {
                        "name": "http",
                        "protocol": "HTTP",
                        "port": settings.gateway.port,
                        "allowedRoutes": {"namespaces": {"from": "Same"}},
                    }
                ],
            },
        ),
        Manifest(
            "gateway.envoyproxy.io/v1alpha1",
            "ClientTrafficPolicy",
            GATEWAY_NAME,
            ns,
            {
                "targetRefs": [_gateway_ref()],
                # LLM request bodies outgrow Envoy's 32 KiB default.
                "connection": {"bufferLimit": settings.gateway.request_buffer_limit},
                # Defence in depth: drop any client-sent x-actor-id before any filter runs; only the
                # JWT filter may set it, from the verified subject. Drop client-sent timeouts and retries too:
                # every bound on a budget's overshoot assumes one attempt that ends within its route's timeout.
                "headers": {"earlyRequestHeaders": {"remove": [ACTOR_HEADER, *UPSTREAM_CONTROL_HEADERS]}},
            },
        ),
    ]


# ---------------------------------------------------------------------------------------------------------
# Substrate IdP trust


def idp_trust_manifests(settings: StackSettings) -> list[Manifest]:
    """The Backend for Substrate's IdP, and the TLS trust Envoy Gateway needs to fetch its JWKS.

    None in mode `localJwks`: the keys come from a ConfigMap, and nothing reaches the IdP at request time.
    """
    sub = settings.substrate
    if not sub.trust.fetches_remote_jwks:
        return []
    ns = settings.gateway.namespace
    backend_spec: dict[str, Any] = {
        "endpoints": [{"fqdn": {"hostname": sub.idp_hostname, "port": sub.idp_port}}],
    }
    manifests: list[Manifest] = []
    if sub.trust.mode == "insecureSkipVerify":
        backend_spec["tls"] = {"insecureSkipVerify": True}
    else:
        if sub.trust.mode == "clusterTrustBundle":
            ca_ref = {
                "group": "certificates.k8s.io",
                "kind": "ClusterTrustBundle",
                "name": sub.trust.cluster_trust_bundle,
            }
        else:
            ca_ref = {"group": "", "kind": "ConfigMap", "name": sub.trust.config_map}
        manifests.append(
            Manifest(
                "gateway.networking.k8s.io/v1",
                "BackendTLSPolicy",
                IDP_BACKEND_NAME,
                ns,
                {
                    "targetRefs": [{"group": ENVOY_GATEWAY_API, "kind": "Backend", "name": IDP_BACKEND_NAME}],
                    "validation": {"caCertificateRefs": [ca_ref], "hostname": sub.idp_hostname},
                },
            )
        )
    return [Manifest("gateway.envoyproxy.io/v1alpha1", "Backend", IDP_BACKEND_NAME, ns, backend_spec), *manifests]


# ---------------------------------------------------------------------------------------------------------
# Budgets


def substrate_jwks_source(settings: StackSettings) -> dict[str, Any]:
    """Where Envoy Gateway gets the keys that verify actor JWTs: `remoteJWKS` or `localJWKS`.

    `localJWKS` names a ConfigMap by a LocalObjectReference, which Envoy Gateway reads in the SecurityPolicy's
    own namespace, key `jwks` (else the first key) (internal/gatewayapi/securitypolicy.go `buildLocalJWKS`
    @v1.9.0); `type` must be `ValueRef`, since it defaults to `Inline` (api/v1alpha1/jwt_types.go).
    """
    sub = settings.substrate
    if not sub.trust.fetches_remote_jwks:
        return {
            "localJWKS": {
                "type": "ValueRef",
                "valueRef": {"group": "", "kind": "ConfigMap", "name": sub.trust.jwks_config_map},
            }
        }
    return {
        "remoteJWKS": {
            "uri": sub.jwks_uri,
            "backendRefs": [
                {"group": ENVOY_GATEWAY_API, "kind": "Backend", "name": IDP_BACKEND_NAME, "port": sub.idp_port}
            ],
        }
    }


def substrate_jwt_provider(settings: StackSettings) -> dict[str, Any]:
    """The provider for actor JWTs Substrate mints: its issuer, our audience, sub copied into x-actor-id."""
    sub = settings.substrate
    return {
        "name": JWT_PROVIDER_NAME,
        "issuer": sub.issuer,
        "audiences": [sub.audience],
        **substrate_jwks_source(settings),
        "claimToHeaders": [{"header": ACTOR_HEADER, "claim": "sub"}],
    }


def jwt_providers(settings: StackSettings) -> list[dict[str, Any]]:
    """Every identity the gateway accepts, one JWT provider each (Envoy Gateway tries them in order).

    Each provider must copy its subject into x-actor-id, the one header every budget rule keys on.
    """
    return [substrate_jwt_provider(settings)]


def jwt_policy_manifest(settings: StackSettings) -> Manifest:
    """Verify the caller's JWT and copy its subject into x-actor-id (replacing any client value)."""
    spec: dict[str, Any] = {"targetRefs": [_gateway_ref()], "jwt": {"providers": jwt_providers(settings)}}
    # The kill switch: suspended actors' tokens are refused before any model is called. Always present, so
    # that suspending an actor changes route configuration only, never the listener (core.suspension).
    spec["authorization"] = suspension_authorization(settings.suspended, JWT_PROVIDER_NAME)
    return Manifest(
        "gateway.envoyproxy.io/v1alpha1",
        "SecurityPolicy",
        JWT_POLICY_NAME,
        settings.gateway.namespace,
        spec,
    )


def budget_policy_manifest(settings: StackSettings, rules: BudgetRules) -> Manifest:
    """The one BackendTrafficPolicy holding every budget rule. Its name is part of every counter key.

    It also gives a suspended actor's 403 a body that says so, whether or not anyone is suspended now
    (core.suspension).
    """
    spec: dict[str, Any] = {
        "targetRefs": [_gateway_ref()],
        "rateLimit": {"global": {"rules": rules.specs()}},
        "responseOverride": suspension_response_overrides(),
    }
    return Manifest(
        "gateway.envoyproxy.io/v1alpha1",
        "BackendTrafficPolicy",
        BUDGET_POLICY_NAME,
        settings.gateway.namespace,
        spec,
        # How many rules each budget owns, and which blocks are pools: the policy pack groups the rules of one
        # budget by them (the pool-slot annotation only once there are pool slots, so older policies are unchanged).
        annotations={
            LIMIT_SLOTS_ANNOTATION: str(rules.limit_slots),
            **({POOL_SLOTS_ANNOTATION: str(rules.pool_slots)} if rules.pool_slots else {}),
        },
    )


# ---------------------------------------------------------------------------------------------------------
# Models


def provider_secret_name(provider: Provider) -> str:
    """The Secret holding a provider's key, next to its BackendSecurityPolicy."""
    return f"{provider.name}-api-key"


def mock_service_hostname(settings: StackSettings) -> str:
    """Where the in-cluster mock model answers."""
    return f"{MOCK_MODEL_NAME}.{settings.gateway.namespace}.svc.cluster.local"


def provider_backend_manifest(settings: StackSettings, provider: Provider) -> Manifest:
    """The Envoy Gateway Backend an AIServiceBackend points at (Agent Router accepts no Service)."""
    host = mock_service_hostname(settings) if provider.kind == "mock" else provider.effective_hostname
    port = MOCK_MODEL_PORT if provider.kind == "mock" else provider.effective_port
    return Manifest(
        "gateway.envoyproxy.io/v1alpha1",
        "Backend",
        provider.name,
        settings.gateway.namespace,
        {"endpoints": [{"fqdn": {"hostname": host, "port": port}}]},
    )


def provider_manifests(settings: StackSettings, provider: Provider) -> list[Manifest]:
    """AIServiceBackend, BackendSecurityPolicy and (for TLS providers) BackendTLSPolicy of one provider.

    The provider's Backend comes from `provider_backend_manifest` (the mock model owns its own).
    """
    ns = settings.gateway.namespace
    schema = api_schema(provider.kind)
    # AnthropicAPIKey sets x-api-key only: without removing authorization the actor JWT would reach
    # the provider. Removing it is safe everywhere: the provider key is set after the removal.
    service_backend = Manifest(
        "aigateway.envoyproxy.io/v1beta1",
        "AIServiceBackend",
        provider.name,
        ns,
        {
            "schema": {"name": schema},
            "backendRef": {"name": provider.name, "kind": "Backend", "group": ENVOY_GATEWAY_API},
            "headerMutation": {"remove": ["authorization"]},
        },
    )
    credential_type = "AnthropicAPIKey" if provider.kind == "anthropic" else "APIKey"
    credential_field = "anthropicAPIKey" if provider.kind == "anthropic" else "apiKey"
    security = Manifest(
        "aigateway.envoyproxy.io/v1beta1",
        "BackendSecurityPolicy",
        f"{provider.name}-key",
        ns,
        {
            "targetRefs": [{"group": AI_GATEWAY_API, "kind": "AIServiceBackend", "name": provider.name}],
            "type": credential_type,
            credential_field: {"secretRef": {"name": provider_secret_name(provider), "namespace": ns}},
        },
    )
    manifests = [service_backend, security]
    if provider.uses_tls:
        host = provider.effective_hostname
        assert host is not None
        manifests.append(
            Manifest(
                "gateway.networking.k8s.io/v1",
                "BackendTLSPolicy",
                provider.name,
                ns,
                {
                    "targetRefs": [{"group": ENVOY_GATEWAY_API, "kind": "Backend", "name": provider.name}],
                    "validation": {"wellKnownCACertificates": "System", "hostname": host},
                },
            )
        )
    return manifests


def route_manifest(settings: StackSettings, route: Route) -> Manifest:
    """An AIGatewayRoute sending the route's models to its provider and reporting total tokens.

    With `maxOutputTokens`, the backendRef writes the ceiling into every request (core.ceilings); with
    `requestTimeout`, the rule's timeout replaces Agent Router's default of 60 s.
    """
    backend_ref: dict[str, Any] = {"name": route.provider}
    if route.model_name_override:
        backend_ref["modelNameOverride"] = route.model_name_override
    if route.max_output_tokens is not None:
        kind = next(provider.kind for provider in settings.providers if provider.name == route.provider)
        backend_ref["bodyMutation"] = ceiling_body_mutation(kind, route.max_output_tokens)
    # The budget rules charge these metadata keys at the end of every response or stream: the total tokens
    # (always), each other kind of tokens some tokens limit counts, and (when any limit is in dollars) the
    # call's price in mills. Agent Router writes each entry under its own key (processor_impl.go
    # buildDynamicMetadata), so they coexist on one route.
    kinds = ["total", *(kind for kind in settings.budgets.token_kinds if kind != "total")]
    costs: list[dict[str, Any]] = [
        {"metadataKey": TOKEN_METADATA_KEYS[kind], "type": TOKEN_COST_TYPES[kind]} for kind in kinds
    ]
    if settings.budgets.uses_usd:
        # Priced by the name Agent Router sends upstream: the override when the route has one (core.money).
        prices = {model: settings.prices[model].to_price() for model in route.billed_models}
        costs.append(route_cost_entry(route.billed_models, prices))
    return Manifest(
        "aigateway.envoyproxy.io/v1beta1",
        "AIGatewayRoute",
        route.name,
        settings.gateway.namespace,
        {
            "parentRefs": [{"name": GATEWAY_NAME, "kind": "Gateway", "group": GATEWAY_API}],
            "rules": [
                {
                    "matches": [
                        {"headers": [{"type": "Exact", "name": MODEL_HEADER, "value": model}]} for model in route.models
                    ],
                    "backendRefs": [backend_ref],
                    **({"timeouts": {"request": route.request_timeout}} if route.request_timeout else {}),
                }
            ],
            "llmRequestCosts": costs,
        },
    )


def model_manifests(settings: StackSettings) -> list[Manifest]:
    """Everything Agent Router needs for the configured providers and routes, except the mock's Backend."""
    manifests: list[Manifest] = []
    for provider in settings.providers:
        if provider.kind != "mock":
            manifests.append(provider_backend_manifest(settings, provider))
        manifests.extend(provider_manifests(settings, provider))
    manifests.extend(route_manifest(settings, route) for route in settings.routes)
    return manifests


# ---------------------------------------------------------------------------------------------------------
# Mock model (plain Kubernetes objects: returned as argument dicts for the typed Pulumi resources)


def mock_model_labels() -> dict[str, str]:
    """Selector labels of the mock model's pods."""
    return {"app.kubernetes.io/name": MOCK_MODEL_NAME, "app.kubernetes.io/part-of": "agent-budgets"}


def mock_model_deployment_spec(settings: StackSettings, server_source: str, key_secret: str) -> dict[str, Any]:
    """The mock's Deployment spec. The source checksum rolls the pods when the server changes."""
    checksum = hashlib.sha256(server_source.encode()).hexdigest()
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5}
    return {
        "replicas": settings.mock_model.replicas,
        "selector": {"matchLabels": mock_model_labels()},
        "template": {
            "metadata": {
                "labels": mock_model_labels(),
                "annotations": {"agent-budgets.dev/server-sha256": checksum},
            },
            "spec": {
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534},
                "containers": [
                    {
                        "name": "mock-model",
                        "image": settings.mock_model.image,
                        "command": ["python", "/app/server.py"],
                        "ports": [{"name": "http", "containerPort": MOCK_MODEL_PORT}],
                        "env": [
                            {"name": "PORT", "value": str(MOCK_MODEL_PORT)},
                            {"name": "MOCK_TOTAL_TOKENS", "value": str(settings.mock_model.total_tokens)},
                            {"name": "PYTHONUNBUFFERED", "value": "1"},
                            {
                                "name": "MOCK_EXPECTED_API_KEY",
                                "valueFrom": {"secretKeyRef": {"name": key_secret, "key": API_KEY_SECRET_FIELD}},
                            },
                        ],
                        "readinessProbe": probe,
                        "livenessProbe": {**probe, "periodSeconds": 20},
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "32Mi"},
                            "limits": {"memory": "128Mi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [{"name": "server", "mountPath": "/app", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "server", "configMap": {"name": MOCK_MODEL_NAME}}],
            },
        },
    }


def mock_model_service_spec() -> dict[str, Any]:
    """The mock's ClusterIP Service, which its Backend names by FQDN."""
    return {
        "selector": mock_model_labels(),
        "ports": [{"name": "http", "port": MOCK_MODEL_PORT, "targetPort": "http"}],
    }
