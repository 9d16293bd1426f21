"""Pure builders: what the program declares on the gateway side, as plain Kubernetes objects.

Each function turns validated settings into `Manifest`s (apiVersion, kind, metadata, spec). Components
only hand them to Pulumi, and the tests validate them against the upstream CRD schemas. Secrets never
pass through here: a manifest names a Secret, the component fills it from secret config.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from core.body_guard import BODY_GUARD_POLICY_NAME, body_guard_spec, guard_enabled
from core.budget_rules import (
    ACTOR_HEADER,
    CLASS_SLOTS_ANNOTATION,
    LIMIT_SLOTS_ANNOTATION,
    MODEL_HEADER,
    TOKEN_COST_TYPES,
    TOKEN_METADATA_KEYS,
    BudgetRules,
)
from core.ceilings import api_schema, ceiling_body_mutation
from core.filter_chain import IDENTITY_BEFORE_AGENT_ROUTER
from core.identity import API_KEYS, JWT_PROVIDER_NAMES, KUBERNETES, SUBSTRATE, parse_actor_id
from core.image_reference import mirrored
from core.money import route_cost_entry
from core.settings import (
    GATEWAY_CONTROLLER_NAME,
    GATEWAY_SERVICE_NAME,
    KUBERNETES_API_HOST,
    KUBERNETES_API_JWKS_URI,
    Provider,
    Route,
    StackSettings,
)
from core.suspension import (
    api_key_authorization,
    budget_spent_response_override,
    jwt_authorization,
    suspension_response_overrides,
)

GATEWAY_API = "gateway.networking.k8s.io"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io"
AI_GATEWAY_API = "aigateway.envoyproxy.io"
GATEWAY_CLASS_NAME = "agent-budgets"
GATEWAY_NAME = GATEWAY_SERVICE_NAME
ENVOY_PROXY_NAME = GATEWAY_SERVICE_NAME
BUDGET_POLICY_NAME = "agent-budgets"
JWT_POLICY_NAME = "agent-budgets-jwt"
JWT_PROVIDER_NAME = JWT_PROVIDER_NAMES[SUBSTRATE]
SERVICE_ACCOUNT_PROVIDER_NAME = JWT_PROVIDER_NAMES[KUBERNETES]
API_KEY_POLICY_NAME = "agent-budgets-api-keys"
JWT_LISTENER = "http"
"""The Gateway listener JWT callers use (Substrate actors and service accounts), on `gateway.port`."""
API_KEY_LISTENER = "apikeys"
"""The Gateway listener API-key callers use, on `identity.apiKeys.port`: a listener of its own, so no JWT filter
runs there (see `api_key_policy_manifest`)."""
API_KEY_SECRET_PREFIX = "agent-budgets-api-key-"
API_KEY_LENGTH = 48
"""Characters of every generated API key (letters and digits: about 285 bits), the same for every actor."""
ACTOR_ID_ANNOTATION = "agent-budgets.dev/actor"
"""On each API-key Secret: the actor it holds the key of (`apikey:<name>`), for readers that may not see the key."""
IDP_BACKEND_NAME = "substrate-idp"
KUBERNETES_API_BACKEND_NAME = "kubernetes-api"
KUBERNETES_ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
"""Published in every namespace by kube-controller-manager's root-ca-cert-publisher, key `ca.crt`: the CA of the
API server's serving certificate."""
DISCOVERY_CLUSTER_ROLE = "system:service-account-issuer-discovery"
DISCOVERY_BINDING_NAME = "agent-budgets-service-account-issuer-discovery"
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


def gateway_listeners(settings: StackSettings) -> list[dict[str, Any]]:
    """The JWT listener on `gateway.port` when a JWT source is on, the API-key listener on `identity.apiKeys.port`
    when API keys are.

    Each port is an Envoy listener with its own HTTP filter chain (envoyproxy/gateway v1.9.0
    internal/xds/translator: one HCM per listener), and the model routes attach to both (their parentRefs name
    the Gateway without a section). A SecurityPolicy targeting a listener wins over one targeting the Gateway
    for that listener's routes (internal/gatewayapi/securitypolicy.go: listener policies are translated first,
    and the Gateway's skips a route that already has one).
    """

    def listener(name: str, port: int) -> dict[str, Any]:
        return {"name": name, "protocol": "HTTP", "port": port, "allowedRoutes": {"namespaces": {"from": "Same"}}}

    listeners: list[dict[str, Any]] = []
    if settings.identity.jwt_sources:
        listeners.append(listener(JWT_LISTENER, settings.gateway.port))
    if settings.identity.api_keys_enabled:
        listeners.append(listener(API_KEY_LISTENER, settings.identity.api_keys.port))
    return listeners


def gateway_manifests(settings: StackSettings) -> list[Manifest]:
    """GatewayClass, EnvoyProxy (fixed Service name), Gateway and ClientTrafficPolicy; with
    `gateway.refuseDuplicateKeys`, the EnvoyExtensionPolicy of the duplicate-key guard (core.body_guard)."""
    ns = settings.gateway.namespace
    kubernetes: dict[str, Any] = {
        # The fixed name every egress policy targets: agent-router.envoy-gateway-system.svc.cluster.local
        "envoyService": {"name": GATEWAY_SERVICE_NAME, "type": "ClusterIP"},
    }
    container: dict[str, Any] = {}
    if settings.gateway.small_cluster:
        container["resources"] = {}
    envoy_image = settings.platform.envoy_proxy_image
    if envoy_image is not None:
        # This EnvoyProxy replaces Envoy Gateway's default one (and the chart's image override with it).
        container["image"] = mirrored(envoy_image, settings.platform.images.registry)
    if container:
        kubernetes["envoyDeployment"] = {"container": container}
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
                "listeners": gateway_listeners(settings),
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
        *(
            [
                Manifest(
                    "gateway.envoyproxy.io/v1alpha1",
                    "EnvoyExtensionPolicy",
                    BODY_GUARD_POLICY_NAME,
                    ns,
                    body_guard_spec(_gateway_ref()),
                )
            ]
            if guard_enabled(settings)
            else []
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


def service_account_trust_manifests(settings: StackSettings) -> list[Manifest]:
    """With `identity.kubernetes.jwks: apiServer`: the Backend Envoy Gateway fetches the service-account keys
    through, and the BackendTLSPolicy that verifies the API server's certificate with the cluster's root CA.

    `kubernetes.default.svc` is in the API server's certificate (kubeadm cmd/kubeadm/app/util/pkiutil/
    pki_helpers.go `GetAPIServerAltNames`); a ConfigMap CA reference is read from key `ca.crt` (envoyproxy/gateway
    v1.9.0 internal/gatewayapi/backendtlspolicy.go), which `kube-root-ca.crt` holds in every namespace. Envoy's
    JWKS fetch carries no credentials (api/v1alpha1/jwt_types.go `RemoteJWKS` has no auth field), hence the
    anonymous discovery binding (`discovery_binding`). The other modes need no object here: `configMap` names a
    ConfigMap you keep, `publicUrl` a public URL Envoy Gateway reaches with the system trust store.
    """
    identity = settings.identity
    if not identity.kubernetes_enabled or identity.kubernetes.jwks != "apiServer":
        return []
    ns = settings.gateway.namespace
    return [
        Manifest(
            "gateway.envoyproxy.io/v1alpha1",
            "Backend",
            KUBERNETES_API_BACKEND_NAME,
            ns,
            {"endpoints": [{"fqdn": {"hostname": KUBERNETES_API_HOST, "port": 443}}]},
        ),
        Manifest(
            "gateway.networking.k8s.io/v1",
            "BackendTLSPolicy",
            KUBERNETES_API_BACKEND_NAME,
            ns,
            {
                "targetRefs": [{"group": ENVOY_GATEWAY_API, "kind": "Backend", "name": KUBERNETES_API_BACKEND_NAME}],
                "validation": {
                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": KUBERNETES_ROOT_CA_CONFIG_MAP}],
                    "hostname": KUBERNETES_API_HOST,
                },
            },
        ),
    ]


def discovery_binding(settings: StackSettings) -> dict[str, Any] | None:
    """The ClusterRoleBinding `identity.kubernetes.jwks: apiServer` needs (None otherwise): the bootstrap role
    `system:service-account-issuer-discovery` (get on `/.well-known/openid-configuration` and `/openid/v1/jwks`),
    bound by default to `system:serviceaccounts` only, bound here to `system:unauthenticated` too, because Envoy
    fetches the keys anonymously (kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go). This is a
    cluster-wide grant: anyone who reaches the API server can read the issuer URL and the public keys."""
    identity = settings.identity
    if not identity.kubernetes_enabled or identity.kubernetes.jwks != "apiServer":
        return None
    return {
        "metadata": {"name": DISCOVERY_BINDING_NAME, "labels": common_labels()},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DISCOVERY_CLUSTER_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}],
    }


def local_jwks(config_map: str) -> dict[str, Any]:
    """A provider's keys read from a ConfigMap beside the SecurityPolicy, never fetched.

    `localJWKS` names a ConfigMap by a LocalObjectReference, which Envoy Gateway reads in the SecurityPolicy's
    own namespace, key `jwks` (else the first key) (internal/gatewayapi/securitypolicy.go `buildLocalJWKS`
    @v1.9.0); `type` must be `ValueRef`, since it defaults to `Inline` (api/v1alpha1/jwt_types.go).
    """
    return {"localJWKS": {"type": "ValueRef", "valueRef": {"group": "", "kind": "ConfigMap", "name": config_map}}}


def substrate_jwks_source(settings: StackSettings) -> dict[str, Any]:
    """Where Envoy Gateway gets the keys that verify actor JWTs: `remoteJWKS` or `localJWKS`."""
    sub = settings.substrate
    if not sub.trust.fetches_remote_jwks:
        return local_jwks(sub.trust.jwks_config_map)
    return {
        "remoteJWKS": {
            "uri": sub.jwks_uri,
            "backendRefs": [
                {"group": ENVOY_GATEWAY_API, "kind": "Backend", "name": IDP_BACKEND_NAME, "port": sub.idp_port}
            ],
        }
    }


def bearer_header_only() -> dict[str, Any]:
    """Where every JWT provider looks for its token: the `Authorization: Bearer` header and nowhere else.

    Without `extractFrom` Envoy's default locations apply, the `Authorization` header *and* the `access_token` query
    parameter (envoy source/extensions/filters/http/jwt_authn/extractor.cc); jwt_authn verifies every token it
    extracts and adds the claim header once per token (authenticator.cc `addJWTClaimToHeader`), so a member's token
    in the header and another admitted token in the query gave `x-actor-id: <other>, <member>`: the class rule's
    pattern matched one value while its `Distinct` entry keyed the counter on the first (review 2026-12b, seen with
    Envoy 1.40). Envoy Gateway renders `extractFrom.headers` as `from_headers` alone, with no default location
    (envoyproxy/gateway v1.9.0 internal/xds/translator/jwt.go `buildJwtFromHeaders`): a token in the query is then
    ignored, so one header can carry at most one token."""
    return {"headers": [{"name": "Authorization", "valuePrefix": "Bearer "}]}


def substrate_jwt_provider(settings: StackSettings) -> dict[str, Any]:
    """The provider for actor JWTs Substrate mints: its issuer, our audience, sub copied into x-actor-id."""
    sub = settings.substrate
    return {
        "name": JWT_PROVIDER_NAME,
        "issuer": sub.issuer,
        "audiences": [sub.audience],
        **substrate_jwks_source(settings),
        "claimToHeaders": [{"header": ACTOR_HEADER, "claim": "sub"}],
        "extractFrom": bearer_header_only(),
    }


def service_account_jwks(settings: StackSettings) -> dict[str, Any]:
    """Where Envoy Gateway gets the service-account signing keys, by `identity.kubernetes.jwks`: a ConfigMap copy
    (`local_jwks`), the API server through the Backend `kubernetes-api`, or a public URL (a `remoteJWKS` without
    backendRefs gets a cluster built from its URI, verified with the system trust store: envoyproxy/gateway v1.9.0
    internal/gatewayapi/securitypolicy.go)."""
    kubernetes = settings.identity.kubernetes
    if kubernetes.jwks == "configMap":
        return local_jwks(kubernetes.jwks_config_map)
    if kubernetes.jwks == "apiServer":
        return {
            "remoteJWKS": {
                "uri": KUBERNETES_API_JWKS_URI,
                "backendRefs": [
                    {"group": ENVOY_GATEWAY_API, "kind": "Backend", "name": KUBERNETES_API_BACKEND_NAME, "port": 443}
                ],
            }
        }
    assert kubernetes.jwks_uri is not None  # validation requires it for publicUrl
    return {"remoteJWKS": {"uri": kubernetes.jwks_uri}}


def service_account_jwt_provider(settings: StackSettings) -> dict[str, Any]:
    """The provider for projected service-account tokens: the cluster's issuer (so a Substrate token is never tried
    against its keys, envoy jwt_authn `isIssuerAllowed`), our audience, sub copied into x-actor-id."""
    kubernetes = settings.identity.kubernetes
    return {
        "name": SERVICE_ACCOUNT_PROVIDER_NAME,
        "issuer": kubernetes.issuer,
        "audiences": [kubernetes.audience],
        **service_account_jwks(settings),
        "claimToHeaders": [{"header": ACTOR_HEADER, "claim": "sub"}],
        "extractFrom": bearer_header_only(),
    }


def jwt_providers(settings: StackSettings) -> list[dict[str, Any]]:
    """One provider per enabled JWT source, Substrate's first; each copies its subject into x-actor-id, the one
    header every budget rule keys on. A token passes when any provider verifies it (envoyproxy/gateway v1.9.0
    internal/xds/translator/jwt.go: several providers become `requires_any`), and only the provider that verified
    it writes x-actor-id."""
    providers: list[dict[str, Any]] = []
    if settings.identity.uses(SUBSTRATE):
        providers.append(substrate_jwt_provider(settings))
    if settings.identity.kubernetes_enabled:
        providers.append(service_account_jwt_provider(settings))
    return providers


def jwt_policy_authorization(settings: StackSettings) -> dict[str, Any]:
    """The JWT policy's `authorization`: suspensions and the service-account allowlist (core.suspension)."""
    return jwt_authorization(
        settings.identity.jwt_sources, settings.actors, settings.suspended, settings.identity.kubernetes.issuer
    )


def jwt_policy_manifest(settings: StackSettings) -> Manifest:
    """Verify the caller's JWT and copy its subject into x-actor-id (replacing any client value).

    Only for a stack with a JWT source (Substrate, Kubernetes); it targets the whole Gateway, and the API-key
    listener's own policy displaces it there.
    """
    spec: dict[str, Any] = {"targetRefs": [_gateway_ref()], "jwt": {"providers": jwt_providers(settings)}}
    # Suspended actors and unlisted service accounts are refused before any model is called. Always present, so
    # that suspending an actor changes route configuration only, never the listener (core.suspension).
    spec["authorization"] = jwt_policy_authorization(settings)
    return Manifest(
        "gateway.envoyproxy.io/v1alpha1",
        "SecurityPolicy",
        JWT_POLICY_NAME,
        settings.gateway.namespace,
        spec,
    )


def api_key_client_id(actor_id: str) -> str:
    """The client id of an API-key actor's key: its Secret data key, and so its `x-actor-id` (core.identity)."""
    return parse_actor_id(actor_id).header_value


def api_key_secret_name(actor_id: str) -> str:
    """The Secret holding one API-key actor's key, in the gateway namespace (one per actor: rotating or reading one
    key touches one object)."""
    return API_KEY_SECRET_PREFIX + parse_actor_id(actor_id).name


def api_key_policy_manifest(settings: StackSettings) -> Manifest:
    """The API-key listener's SecurityPolicy: `apiKeyAuth` over every API-key actor's Secret, the client id
    written into x-actor-id, the key removed before the request goes upstream, and the suspensions.

    Facts (envoyproxy/gateway v1.9.0, envoy api_key_auth.cc @03503b34):

    * it holds no `jwt`: with both, jwt_authn (order 10) would remove the x-actor-id api_key_auth (order 7) just
      wrote (its claim headers are sanitized before verification), and both would have to pass
      (internal/xds/translator/httpfilters.go; research of issue 17);
    * it targets the API-key listener alone (`sectionName`), so the Gateway-wide JWT policy does not apply there;
    * each header in `extractFrom` is tried in order and a leading `Bearer ` is stripped; an unknown or missing key
      gets 401 "Client authentication failed." with no WWW-Authenticate;
    * `forwardClientIDHeader` sets the header with the verified client id, replacing a client-sent value;
      `sanitize` removes every configured key header from the request (`hide_credentials`);
    * the same key under two client ids fails the whole policy ("duplicated API key",
      internal/gatewayapi/securitypolicy.go `buildAPIKeyAuth`); the program's keys are random, 48 characters.
    """
    api_keys = settings.identity.api_keys
    refs = [
        {"group": "", "kind": "Secret", "name": api_key_secret_name(actor)}
        for actor in sorted(settings.actors_of(API_KEYS))
    ]
    spec: dict[str, Any] = {
        "targetRefs": [{**_gateway_ref(), "sectionName": API_KEY_LISTENER}],
        "apiKeyAuth": {
            "credentialRefs": refs,
            "extractFrom": [{"headers": list(api_keys.headers)}],
            "forwardClientIDHeader": ACTOR_HEADER,
            "sanitize": True,
        },
        "authorization": api_key_authorization(settings.suspended),
    }
    return Manifest(
        "gateway.envoyproxy.io/v1alpha1",
        "SecurityPolicy",
        API_KEY_POLICY_NAME,
        settings.gateway.namespace,
        spec,
    )


def budget_policy_manifest(settings: StackSettings, rules: BudgetRules) -> Manifest:
    """The one BackendTrafficPolicy holding every budget rule. Its name is part of every counter key.

    It also gives a refused actor's 403 a body that says why (suspended; with service accounts, also not listed),
    whether or not anyone is refused now, and a spent budget's 429 one that says when it resets (core.suspension).
    """
    spec: dict[str, Any] = {
        "targetRefs": [_gateway_ref()],
        "rateLimit": {"global": {"rules": rules.specs()}},
        "responseOverride": [
            *suspension_response_overrides(settings.identity.sources),
            budget_spent_response_override(),
        ],
    }
    return Manifest(
        "gateway.envoyproxy.io/v1alpha1",
        "BackendTrafficPolicy",
        BUDGET_POLICY_NAME,
        settings.gateway.namespace,
        spec,
        # How many rules each budget owns, and where the pools' blocks start: the policy pack groups the rules of
        # one budget by them (the class-slot annotation only once there are pools, so older policies are unchanged).
        annotations={
            LIMIT_SLOTS_ANNOTATION: str(rules.limit_slots),
            **({CLASS_SLOTS_ANNOTATION: str(rules.class_slots)} if rules.pools else {}),
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


def gateway_credential_headers(settings: StackSettings) -> list[str]:
    """The request headers that carry an agent's gateway credential, which no provider may see: `authorization`
    (the actor JWT, a service-account token, or an API key sent as a bearer token) and, with API keys on, every
    header of `identity.apiKeys.headers`. Every AIServiceBackend removes them.

    Why there, and not earlier: the API-key listener's `sanitize` removes the key headers only on that listener,
    and a JWT caller may send `x-api-key` beside its token on the JWT listener. A ClientTrafficPolicy cannot do it
    for the JWT listener alone without taking the Gateway-wide one's place there (envoyproxy/gateway v1.9.0
    internal/gatewayapi/clienttrafficpolicy.go: a policy with a `sectionName` is translated first and the
    Gateway's skips that listener), early removal on the API-key listener would hide the key from api_key_auth,
    and a BackendTrafficPolicy has no request-header field (api/v1alpha1/backendtrafficpolicy_types.go). The
    backend's `headerMutation` runs on every listener after every identity filter, in Agent Router's upstream
    processor, and changes no listener: the controller writes it to the processor's filter configuration, not to
    xDS (envoyproxy/ai-gateway v1.1.0 internal/controller/gateway.go `headerMutationToFilterAPI`, lowercased;
    internal/headermutator/header_mutator.go removes each listed header the request has, also on a retry). The
    provider's own key is set after the removal: internal/extproc/processor_impl.go appends the auth handler's
    header (`Authorization: Bearer` for APIKey, `x-api-key` for AnthropicAPIKey, internal/backendauth) to the same
    mutation, and Envoy's ext_proc applies every removal before any set (envoy
    source/extensions/filters/http/ext_proc/mutation_utils.cc `applyHeaderMutations`). The list is a set of at
    most 16 (the AIServiceBackend CRD: `x-kubernetes-list-type: set`, `maxItems: 16`); `authorization` comes first
    and once, so a stack without API keys keeps exactly `[authorization]`.
    """
    removed = ["authorization"]
    if settings.identity.api_keys_enabled:
        removed += [header for header in settings.identity.api_keys.headers if header not in removed]
    return removed


def provider_manifests(settings: StackSettings, provider: Provider) -> list[Manifest]:
    """AIServiceBackend, BackendSecurityPolicy and (for TLS providers) BackendTLSPolicy of one provider.

    The provider's Backend comes from `provider_backend_manifest` (the mock model owns its own).
    """
    ns = settings.gateway.namespace
    schema = api_schema(provider.kind)
    service_backend = Manifest(
        "aigateway.envoyproxy.io/v1beta1",
        "AIServiceBackend",
        provider.name,
        ns,
        {
            "schema": {"name": schema},
            "backendRef": {"name": provider.name, "kind": "Backend", "group": ENVOY_GATEWAY_API},
            "headerMutation": {"remove": gateway_credential_headers(settings)},
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
                        "image": mirrored(settings.mock_model.image, settings.platform.images.registry),
                        "command": ["python", "/app/server.py"],
                        "ports": [{"name": "http", "containerPort": MOCK_MODEL_PORT}],
                        "env": [
                            {"name": "PORT", "value": str(MOCK_MODEL_PORT)},
                            {"name": "MOCK_TOTAL_TOKENS", "value": str(settings.mock_model.total_tokens)},
                            {"name": "PYTHONUNBUFFERED", "value": "1"},
                            # Names only, never values: e2e check 16 reads which key headers reached the model.
                            {"name": "MOCK_ECHO_HEADER_NAMES", "value": "true"},
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
