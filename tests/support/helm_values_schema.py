"""The Helm values the program sets, as JSON Schemas that know every field name upstream reads there.

Neither chart has a values schema, and Envoy Gateway decodes its configuration file leniently
(`internal/envoygateway/config/decoder.go`): a misspelt key anywhere in the values is dropped by Helm and by
Envoy Gateway without a word. So every object on a path the program sets is written down here with the full
list of its field names upstream (`additionalProperties: false`):

* a name the program sets gets a schema for its value;
* a name upstream has but the program does not set is `NOT_SET` (refused, with a hint: model it here first);
* any other name is a typo and is refused.

Sources, each at the version the program is validated against:

* `config.envoyGateway`: the Go types of the EnvoyGateway configuration, envoyproxy/gateway v1.9.0 (39763b1c)
  `api/v1alpha1/envoygateway_types.go` (EnvoyGatewaySpec, EnvoyGatewayProvider, EnvoyGatewayKubernetesProvider
  with its two inlined structs, ExtensionAPISettings, ExtensionManager, ExtensionHooks, XDSTranslatorHooks,
  TranslationConfig, ExtensionService, RateLimit, RateLimitDatabaseBackend, RateLimitRedisSettings,
  RedisTLSSettings), `shared_types.go` (KubernetesDeploymentSpec, KubernetesContainerSpec, KubernetesPodSpec,
  KubernetesPodDisruptionBudgetSpec, XDSTranslatorHook values) and `backend_types.go` (BackendEndpoint
  inlined in ExtensionService, FQDNEndpoint). Envoy Gateway builds with k8s.io/api v0.36.
* Kubernetes objects inside it (EnvVar, Volume, VolumeMount and what they hold): the field names of the
  Kubernetes OpenAPI as pulumi-kubernetes generates its typed inputs from it (`pulumi_kubernetes.core.v1`).
* the gateway-helm chart's own values (`deployment.pod.annotations`): the names its templates read at v1.9.0
  (`templates/*.yaml` and the defines of `templates/_helpers.tpl` they include; `values.tmpl.yaml` leaves out
  `nameOverride` and `fullnameOverride`); the chart reads only `config.envoyGateway` under `config`
  (`templates/envoy-gateway-config.yaml`). tests/test_helm_template.py holds these lists to the chart's templates
  and renders every value admitted here with the real `helm template`.
* Agent Router's chart values: theagentrouter/agent-router `manifests/charts/ai-gateway-helm/values.yaml`
  @38d5d582 and `templates/deployment.yaml` @5ca4be99 (which also reads `controller.maxRecvMsgSize`, a key
  values.yaml only mentions in a comment); envoyproxy/ai-gateway v1.1.0 has the same keys but `rateLimiter`
  and `controller.priorityClassName`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

import pulumi_kubernetes.core.v1 as k8s_core

NOT_SET: dict[str, Any] = {
    "not": {},
    "description": "a field upstream has but the program does not set: add its schema here before setting it",
}
_STRING = {"type": "string"}
_BOOL = {"type": "boolean"}
_INT = {"type": "integer"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
# Kubernetes quantities and IntOrString: a number or a string.
_INT_OR_STRING = {"type": ["integer", "string"]}
# gwapiv1.Duration (Gateway API v1.6.1 `Duration` pattern).
_DURATION = {"type": "string", "pattern": r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"}


def fields(names: Iterable[str], modelled: Mapping[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    """An object that admits exactly `names`, of which only the `modelled` ones may be set."""
    known = list(names)
    unknown = set(modelled) - set(known)
    if unknown:
        raise ValueError(f"modelled fields {sorted(unknown)} are not upstream field names {known}")
    properties = {name: modelled.get(name, NOT_SET) for name in known}
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


def kubernetes_fields(args_class: type, modelled: Mapping[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    """`fields` for a Kubernetes type: its JSON names are those pulumi-kubernetes gives its typed input."""
    names = [
        member.fget._pulumi_name
        for _, member in inspect.getmembers(args_class)
        if isinstance(member, property) and hasattr(member.fget, "_pulumi_name")
    ]
    return fields(sorted(names), modelled, required)


def _array(items: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": dict(items)}


# --- Kubernetes core/v1 -----------------------------------------------------------------------------------

SECRET_KEY_SELECTOR = kubernetes_fields(k8s_core.SecretKeySelectorArgs, {"name": _STRING, "key": _STRING}, ["key"])
ENV_VAR = kubernetes_fields(
    k8s_core.EnvVarArgs,
    {
        "name": _STRING,
        "value": _STRING,  # always a string: a number would make the Deployment invalid
        "valueFrom": kubernetes_fields(k8s_core.EnvVarSourceArgs, {"secretKeyRef": SECRET_KEY_SELECTOR}),
    },
    ["name"],
)
KEY_TO_PATH = kubernetes_fields(k8s_core.KeyToPathArgs, {"key": _STRING, "path": _STRING}, ["key", "path"])
VOLUME = kubernetes_fields(
    k8s_core.VolumeArgs,
    {
        "name": _STRING,
        "configMap": kubernetes_fields(
            k8s_core.ConfigMapVolumeSourceArgs, {"name": _STRING, "items": _array(KEY_TO_PATH)}
        ),
    },
    ["name"],
)
VOLUME_MOUNT = kubernetes_fields(
    k8s_core.VolumeMountArgs, {"name": _STRING, "mountPath": _STRING, "readOnly": _BOOL}, ["name", "mountPath"]
)

# --- Envoy Gateway's configuration (config.envoyGateway) ---------------------------------------------------

KUBERNETES_DEPLOYMENT = fields(
    ("patch", "replicas", "strategy", "pod", "container", "initContainers", "name"),
    {
        "replicas": {"type": "integer", "minimum": 0},
        "pod": fields(
            ("annotations", "labels", "securityContext", "affinity", "tolerations", "volumes", "imagePullSecrets",
             "nodeSelector", "topologySpreadConstraints", "priorityClassName"),
            {"volumes": _array(VOLUME)},
        ),
        "container": fields(
            ("env", "resources", "securityContext", "image", "imageRepository", "volumeMounts"),
            {"env": _array(ENV_VAR), "volumeMounts": _array(VOLUME_MOUNT)},
        ),
    },
)  # fmt: skip
KUBERNETES_PROVIDER = fields(
    # EnvoyGatewayKubernetesInfrastructureConfiguration, then EnvoyGatewayKubernetesConfiguration (both inline).
    ("rateLimitDeployment", "rateLimitHpa", "rateLimitPDB", "deploy", "shutdownManager", "proxyTopologyInjector",
     "watch", "leaderElection", "client", "cacheSyncPeriod"),
    {
        "rateLimitDeployment": KUBERNETES_DEPLOYMENT,
        "rateLimitPDB": fields(("minAvailable", "maxUnavailable", "patch", "name"), {"minAvailable": _INT_OR_STRING}),
    },
)  # fmt: skip
_INCLUDE_ALL = fields(("includeAll",), {"includeAll": _BOOL})
XDS_TRANSLATOR_HOOK = {"enum": ["VirtualHost", "Route", "HTTPListener", "Cluster", "Endpoints", "Translation"]}
EXTENSION_MANAGER = fields(
    ("name", "resources", "policyResources", "backendResources", "hooks", "service", "failOpen", "maxMessageSize"),
    {
        "hooks": fields(
            ("xdsTranslator",),
            {
                "xdsTranslator": fields(
                    ("pre", "post", "translation"),
                    {
                        "post": _array(XDS_TRANSLATOR_HOOK),
                        "translation": fields(
                            ("listener", "route", "cluster", "secret"),
                            {kind: _INCLUDE_ALL for kind in ("listener", "route", "cluster", "secret")},
                        ),
                    },
                )
            },
        ),
        "service": fields(
            # BackendEndpoint (inline), then ExtensionService's own fields.
            ("hostname", "fqdn", "ip", "unix", "zone", "host", "port", "tls", "retry"),
            {"fqdn": fields(("hostname", "port"), {"hostname": _STRING, "port": _INT}, ["hostname", "port"])},
        ),
        "maxMessageSize": _INT_OR_STRING,
    },
)
RATE_LIMIT = fields(
    ("backend", "timeout", "failClosed", "telemetry"),
    {
        "backend": fields(
            ("type", "redis"),
            {
                "type": {"const": "Redis"},
                "redis": fields(("url", "urlRef", "tls"), {"url": _STRING}),  # `tls` set: issue 22
            },
            ["type"],
        ),
        "timeout": _DURATION,
        "failClosed": _BOOL,
    },
    ["backend"],
)
ENVOY_GATEWAY_CONFIG_SCHEMA: dict[str, Any] = fields(
    ("gateway", "provider", "logging", "admin", "telemetry", "xdsServer", "rateLimit", "extensionManager",
     "extensionManagers", "extensionApis", "gatewayAPI", "runtimeFlags", "envoyProxy"),
    {
        "gateway": fields(("controllerName",), {"controllerName": _STRING}),
        "provider": fields(
            ("type", "kubernetes", "custom"),
            {"type": {"enum": ["Kubernetes", "Custom"]}, "kubernetes": KUBERNETES_PROVIDER},
            ["type"],
        ),
        "rateLimit": RATE_LIMIT,
        "extensionManager": EXTENSION_MANAGER,
        "extensionApis": fields(
            ("enableEnvoyPatchPolicy", "enableBackend", "disableLua", "enableLua", "enableSDSSecretRef"),
            {"enableEnvoyPatchPolicy": _BOOL, "enableBackend": _BOOL, "enableLua": _BOOL},
        ),
    },
)  # fmt: skip

# --- the gateway-helm chart's values -----------------------------------------------------------------------

ENVOY_GATEWAY_VALUES_SCHEMA: dict[str, Any] = fields(
    ("global", "crds", "commonLabels", "podDisruptionBudget", "deployment", "service", "hpa", "config",
     "createNamespace", "namespaceOverride", "kubernetesClusterDomain", "certgen", "topologyInjector",
     # Read by `eg.name` and `eg.fullname` (templates/_helpers.tpl), though values.tmpl.yaml lists neither.
     "nameOverride", "fullnameOverride"),
    {
        "config": fields(("envoyGateway",), {"envoyGateway": ENVOY_GATEWAY_CONFIG_SCHEMA}),
        "deployment": fields(
            ("annotations", "envoyGateway", "ports", "priorityClassName", "replicas", "pod"),
            {
                "pod": fields(
                    ("affinity", "annotations", "labels", "topologySpreadConstraints", "tolerations",
                     "nodeSelector", "extraVolumeMounts", "extraVolumes", "securityContext"),
                    {"annotations": _STRING_MAP},
                )
            },
        ),
    },
)  # fmt: skip

# --- the ai-gateway-helm chart's values (Agent Router) -----------------------------------------------------

AGENT_ROUTER_VALUES_SCHEMA: dict[str, Any] = fields(
    ("global", "endpointConfig", "extProc", "controller", "rateLimiter", "envoyGateway"),
    {
        "controller": fields(
            ("logLevel", "logFormat", "nameOverride", "fullnameOverride", "quotaRateLimitServiceAddr",
             "quotaRateLimitTimeout", "quotaRateLimitFailureModeDeny", "requestHeaderAttributes",
             "spanRequestHeaderAttributes", "metricsRequestHeaderAttributes", "logRequestHeaderAttributes",
             "serviceAccount", "leaderElection", "watch", "image", "imagePullPolicy", "replicaCount",
             "priorityClassName", "imagePullSecrets", "podAnnotations", "podLabels", "podDisruptionBudget",
             "podSecurityContext", "securityContext", "podEnv", "extraEnvVars", "volumes", "service",
             "mutatingWebhook", "hostNetwork", "resources", "nodeSelector", "tolerations", "affinity",
             "topologySpreadConstraints", "maxRecvMsgSize", "mcp"),
            {
                "fullnameOverride": _STRING,
                # Rendered as `--maxRecvMsgSize={{ . }}`: a string, so Helm never prints a float.
                "maxRecvMsgSize": {"type": "string", "pattern": "^[1-9][0-9]*$"},
                "metricsRequestHeaderAttributes": {"type": "string", "pattern": r"^[^:,]+:[^:,]+(,[^:,]+:[^:,]+)*$"},
            },
        ),
        "envoyGateway": fields(("namespace",), {"namespace": _STRING}, ["namespace"]),
    },
)  # fmt: skip
