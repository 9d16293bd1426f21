"""The cluster side: `kubernetes`, `gateway`, `budgetPolicy`, `rateLimit` and `platform` (the Helm releases)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from core.image_reference import registry_problem
from core.kubeconfig import is_contents
from core.settings.base import (
    DURATION,
    QUANTITY,
    RELEASE_VERSION,
    ConfigModel,
    check_command_argument,
    check_dns_label,
    check_image_reference,
    quantity_value,
)
from core.settings.budgets import MAX_LIMITS_PER_BUDGET


class KubernetesSettings(ConfigModel):
    """The cluster the program targets: an explicit context, never the ambient one."""

    context: str = Field(
        default="kind-agent-budgets", description="Kube context of the program's explicit Kubernetes provider."
    )
    kubeconfig: str | None = Field(
        default=None,
        description=(
            "Kubeconfig path or contents, for the Kubernetes provider and `kubectl ate`; unset means the kubeconfig "
            "default path. Contents are kept secret: store them with `pulumi config set --secret --path`."
        ),
        json_schema_extra={"sensitive": True},
    )

    @field_validator("context")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        return check_command_argument(value, "context", "kind-agent-budgets")

    @field_validator("kubeconfig")
    @classmethod
    def _kubeconfig(cls, value: str | None) -> str | None:
        """A path is opened here and handed to kubectl, and no path holds a control character; contents are YAML,
        which holds none but tab, newline and carriage return. The message never shows the value."""
        if value is None:
            return value
        contents = is_contents(value)
        allowed = "\t\n\r" if contents else ""
        for position, ch in enumerate(value, start=1):
            if (ord(ch) < 0x20 or ord(ch) == 0x7F) and ch not in allowed:
                what = "the kubeconfig contents" if contents else "the kubeconfig path"
                raise ValueError(
                    f"{what} hold{'' if contents else 's'} the control character U+{ord(ch):04X} at character "
                    f"{position} (the value is not shown: it may hold credentials): "
                    + ("no YAML can hold it; paste the file again" if contents else "no file path can; remove it")
                )
        return value


MAX_BUFFER_LIMIT = 2**32 - 1
"""The largest ClientTrafficPolicy `connection.bufferLimit` Envoy Gateway accepts, in bytes."""


class GatewaySettings(ConfigModel):
    """The model gateway: where our objects live and how requests are buffered."""

    namespace: str = Field(
        default="agent-budgets", description="Where the Gateway, the policies, the routes and the mock model live."
    )
    port: int = Field(
        default=80, ge=1, le=65535, description="Listener port of the Gateway, and the port every egress policy allows."
    )
    request_buffer_limit: str = Field(
        default="50Mi",
        description=(
            "ClientTrafficPolicy buffer (a Kubernetes quantity, a whole number of bytes below 4Gi); Envoy's 32 KiB "
            "default is too small for LLM bodies."
        ),
    )
    # kind nodes are small: drop the proxy's default resource requests there.
    small_cluster: bool = Field(default=False, description="Drop the Envoy proxy's resource requests (for kind).")
    refuse_duplicate_keys: bool = Field(
        default=False,
        description=(
            "Refuse (400) a JSON request body whose top-level object repeats a key, or spells one with an escape or "
            "a byte outside printable ASCII: a Lua EnvoyExtensionPolicy on the Gateway, which needs Envoy Gateway's "
            "`extensionApis.enableLua` (set in our Helm values). Without it a body that repeats `max_tokens`, "
            "`max_completion_tokens` or `n` escapes `routes[].maxOutputTokens`."
        ),
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return check_dns_label(value, "namespace")

    @field_validator("request_buffer_limit")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not QUANTITY.match(value):
            raise ValueError(f"requestBufferLimit {value!r} is not a Kubernetes quantity such as 50Mi")
        size = quantity_value(value)
        # Envoy Gateway v1.9.0 internal/gatewayapi/clienttrafficpolicy.go `buildConnection`: a whole number of
        # bytes (`AsInt64`) from 0 to 2^32-1, or the ClientTrafficPolicy is not accepted.
        if size != size.to_integral_value() or size > MAX_BUFFER_LIMIT:
            raise ValueError(
                f"requestBufferLimit {value!r} is not a whole number of bytes up to {MAX_BUFFER_LIMIT:,} (4Gi - 1), "
                "which Envoy Gateway requires of a connection buffer: give a size such as 50Mi"
            )
        return value


MAX_CLASS_SLOTS = 254
"""Envoy Gateway's 256 rules per policy, less the default budget's block and at least one rule of a pool after
the class blocks."""


class BudgetPolicySettings(ConfigModel):
    """Layout of the budget policy. Changing it moves counter keys: every default bucket restarts."""

    # Fixed number of inverted-regex matches that exclude class members from the default rule.
    # 32 by measurement (docs/message-size.md, scripts/measure_exclusion_slots.py): every slot lengthens every
    # default-budget counter key by about 32 bytes (stored in Redis, sent with every rate-limit check) and
    # admits about 83 more class members with ids like agents/actor-00042.
    exclusion_slots: int = Field(
        default=32,
        ge=1,
        le=1023,
        description=(
            "Fixed number of matches that exclude class members from the default rule (about 83 members each; "
            "each one adds about 32 bytes to every default counter key); changing it restarts every default bucket "
            "once. See docs/message-size.md."
        ),
    )
    limit_slots: int = Field(
        default=1,
        ge=1,
        le=MAX_LIMITS_PER_BUDGET,
        description=(
            "Rule slots each budget reserves for its limits: at least the most `limits` any budget has. With 1, the "
            "layout of single-limit versions; changing it restarts every class's and pool's counters once (the "
            "default budget's limits keep theirs), so leave room for the windows you will add."
        ),
    )
    class_slots: int = Field(
        default=0,
        ge=0,
        le=MAX_CLASS_SLOTS,
        description=(
            "Class blocks before the pools: pools come after the classes, so once `budgets.pools` is set this is at "
            "least the number of `budgets.classes`, with room for the classes you will add (each unused one is a "
            "small reserved rule per limit slot). Set it with the first pool and no counter moves; changing it "
            "later restarts every pool's counters once (the default budget's and the classes' keep theirs). No "
            "effect without pools."
        ),
    )


class RateLimitSettings(ConfigModel):
    """Envoy's behaviour toward the rate-limit service, and how many `envoy-ratelimit` pods serve it."""

    fail_closed: bool = Field(
        default=False,
        description="On a rate-limit store outage, answer 500 instead of letting calls through unmetered.",
    )
    timeout: str = Field(
        default="100ms", description="Envoy → rate-limit service timeout; a slower answer counts as an outage."
    )
    # Fail-closed turns a lone rate-limit pod into a single point of failure: run two or more.
    replicas: int = Field(
        default=1, ge=1, le=16, description="Rate-limit service pods; 2 or more also get a PodDisruptionBudget."
    )

    @field_validator("timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not DURATION.match(value) or all(ch == "0" for ch in re.sub(r"[a-z]", "", value)):
            raise ValueError(f"timeout {value!r} must be a positive duration such as 100ms or 1s")
        return value


# The extension-server message cap (docs/message-size.md). Envoy Gateway's pattern for maxMessageSize
# (api/v1alpha1/envoygateway_types.go v1.9.0) admits a whole number with an optional suffix; these are the
# suffixes that make sense for a message size.
MIB = 1024 * 1024
EXTENSION_MESSAGE_LIMIT_DEFAULT = "16Mi"
MIN_EXTENSION_MESSAGE_LIMIT = 4 * 1024 * 1024
MAX_EXTENSION_MESSAGE_LIMIT = 512 * 1024 * 1024
_MESSAGE_SIZE = re.compile(r"^([1-9][0-9]*)(Ki|Mi|Gi|k|M|G|)\Z")
_MESSAGE_SIZE_FACTORS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}


def message_size_bytes(quantity: str) -> int | None:
    """A message size as Envoy Gateway's `maxMessageSize` takes it ("16Mi", "4M", "16777216") in bytes, or
    None when it is not a whole quantity with one of those suffixes."""
    match = _MESSAGE_SIZE.match(quantity)
    return int(match.group(1)) * _MESSAGE_SIZE_FACTORS[match.group(2)] if match else None


def _message_size_text(value: Any) -> Any:
    """A YAML integer is a byte count: Envoy Gateway's quantity accepts a number or text alike."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


CHART_REPOSITORY = re.compile(r"^(oci|https?)://[^\s]+$")


class ChartSource(ConfigModel):
    """Where one Helm release's chart comes from instead of the public OCI registry: a mirror (an OCI registry or a
    Helm chart repository) or a chart on the machine that runs `pulumi`. For clusters that cannot reach docker.io."""

    repository: str | None = Field(
        default=None,
        description=(
            "An `oci://` registry path the chart is pushed under (the chart's name is appended: `oci://mirror/"
            "envoyproxy` gives `oci://mirror/envoyproxy/gateway-helm`), or an `https://` Helm chart repository "
            "(its index.yaml lists the chart)."
        ),
    )
    path: str | None = Field(
        default=None,
        description=(
            "A chart directory or packaged `.tgz` on the machine that runs `pulumi`, relative to the project "
            "directory or absolute; its own version is what installs."
        ),
    )
    version: str | None = Field(
        default=None,
        description="The chart version to pull from `repository`; unset, the platform's pinned version of the release.",
    )

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str | None) -> str | None:
        if value is not None and not CHART_REPOSITORY.match(value):
            raise ValueError(
                f"repository {value!r} is not an oci://, https:// or http:// URL: e.g. "
                "oci://registry.example.internal/envoyproxy or https://charts.example.internal"
            )
        return value.rstrip("/") if value is not None else None

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\n" in value):
            raise ValueError(f"path {value!r} is not a file path: give the chart directory or its .tgz")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None and not RELEASE_VERSION.match(value):
            raise ValueError(f"version {value!r} is not a release version such as v1.9.3")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ChartSource:
        if (self.repository is None) == (self.path is None):
            raise ValueError(
                "give exactly one of repository (a mirror: oci:// or https://) and path (a chart on this machine)"
            )
        if self.path is not None and self.version is not None:
            raise ValueError(
                "version applies to a repository only: a chart at a path installs its own version (remove version)"
            )
        return self


class ChartSources(ConfigModel):
    """A source per Helm release; a release left out comes from its public OCI chart."""

    envoy_gateway: ChartSource | None = Field(default=None, description="The `eg` release (chart `gateway-helm`).")
    agent_router_crds: ChartSource | None = Field(
        default=None, description="The `aieg-crd` release (chart `ai-gateway-crds-helm`)."
    )
    agent_router: ChartSource | None = Field(default=None, description="The `aieg` release (chart `ai-gateway-helm`).")


ENVOY_PROXY_IMAGES = {"v1.9.0": "docker.io/envoyproxy/envoy:distroless-v1.39.0"}
"""The Envoy image each Envoy Gateway release runs by default (api/v1alpha1/shared_types.go DefaultEnvoyProxyImage),
for the versions whose source could be read: a mirror must hold that image, and the program must name it, because
the Gateway's own EnvoyProxy replaces Envoy Gateway's default one (envoygateway_types.go `EnvoyProxy`)."""


class ImageSources(ConfigModel):
    """Where the cluster pulls the images the program and its charts run from."""

    registry: str | None = Field(
        default=None,
        description=(
            "A registry mirror (`host[:port][/path]`) every image is pulled from: the Envoy Gateway and Agent Router "
            "controllers, the rate-limit service, Envoy, Redis and the mock model. Each image keeps its repository "
            "path and tag, with the host replaced (Docker Hub's official images under `library/`). Unset: the public "
            "registries. See docs/environments.md."
        ),
    )
    envoy_proxy: str | None = Field(
        default=None,
        description=(
            "The upstream Envoy image the proxy runs (e.g. `docker.io/envoyproxy/envoy:distroless-v1.39.0`), pulled "
            "through `registry` when that is set. Needed with a registry unless the program knows the image of the "
            "Envoy Gateway release: v1.9.0 (a local chart's version is not known)."
        ),
    )

    @field_validator("registry")
    @classmethod
    def _registry(cls, value: str | None) -> str | None:
        if value is None:
            return value
        problem = registry_problem(value.rstrip("/"))
        if problem is not None:
            raise ValueError(f"registry {value!r} {problem}")
        return value.rstrip("/")

    @field_validator("envoy_proxy")
    @classmethod
    def _envoy_proxy(cls, value: str | None) -> str | None:
        return None if value is None else check_image_reference(value, "envoyProxy", ENVOY_PROXY_IMAGES["v1.9.0"])


class PlatformSettings(ConfigModel):
    """Helm releases that install Envoy Gateway and Agent Router."""

    install: bool = Field(
        default=True,
        description=(
            "Install Envoy Gateway and Agent Router with Helm; with `false` they must already run with our values."
        ),
    )
    envoy_gateway_version: str = Field(
        default="v1.9.3", description="The `eg` release of `oci://docker.io/envoyproxy/gateway-helm`."
    )
    agent_router_version: str = Field(
        default="v1.2.1",
        description="The `aieg-crd` and `aieg` releases; v1.2 needs Envoy Gateway v1.9.2 or newer.",
    )

    charts: ChartSources = Field(
        default_factory=ChartSources,
        description=(
            "Where each release's chart comes from when the cluster's network cannot reach the public OCI registry: "
            "a mirror or a local chart per release (`envoyGateway`, `agentRouterCrds`, `agentRouter`). See "
            "docs/environments.md."
        ),
    )
    images: ImageSources = Field(
        default_factory=ImageSources,
        description=(
            "Where the cluster pulls every image from, for a cluster behind a registry mirror: `registry` (the mirror) "
            "and `envoyProxy` (the Envoy image the proxy runs). See docs/environments.md."
        ),
    )
    extension_message_limit: Annotated[str, BeforeValidator(_message_size_text)] = Field(
        default=EXTENSION_MESSAGE_LIMIT_DEFAULT,
        description=(
            "Cap on the one message Envoy Gateway sends Agent Router's extension server, a quantity such as `16Mi` or "
            "a number of bytes (set on both ends: Envoy "
            "Gateway `extensionManager.maxMessageSize`, Agent Router `controller.maxRecvMsgSize`); the preview "
            "refuses budgets and routes whose message would not fit with 25% headroom. See docs/message-size.md."
        ),
    )

    @field_validator("envoy_gateway_version", "agent_router_version")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not RELEASE_VERSION.match(value):
            raise ValueError(f"version {value!r} is not a release version such as v1.9.3")
        return value

    @field_validator("extension_message_limit")
    @classmethod
    def _message_limit(cls, value: str) -> str:
        size = message_size_bytes(value)
        if size is None:
            raise ValueError(
                f"extensionMessageLimit {value!r} is not a whole quantity: write e.g. 16Mi, 16M or 16777216 "
                "(suffixes Ki, Mi, Gi, k, M, G)"
            )
        if not MIN_EXTENSION_MESSAGE_LIMIT <= size <= MAX_EXTENSION_MESSAGE_LIMIT:
            raise ValueError(
                f"extensionMessageLimit {value!r} is {size:,} bytes: use 4Mi to 512Mi (gRPC's own default is 4Mi; "
                "larger messages cost Envoy Gateway and Agent Router memory on every configuration change)"
            )
        return value

    @model_validator(mode="after")
    def _envoy_image_known(self) -> PlatformSettings:
        """A mirror must hold the proxy's Envoy image, so the program must know which image that is."""
        if self.images.registry is not None and self.envoy_proxy_image is None:
            release = self._envoy_gateway_release()
            which = f"Envoy Gateway {release}" if release else "the local Envoy Gateway chart"
            raise ValueError(
                f"images.registry {self.images.registry!r} is set, but the program does not know which Envoy image "
                f"{which} runs (it knows {', '.join(sorted(ENVOY_PROXY_IMAGES))}): set images.envoyProxy to the "
                "image that release names (its api/v1alpha1/shared_types.go DefaultEnvoyProxyImage), e.g. "
                f"{ENVOY_PROXY_IMAGES['v1.9.0']}"
            )
        return self

    def _envoy_gateway_release(self) -> str | None:
        """The Envoy Gateway version the `eg` release installs, or None for a local chart."""
        source = self.charts.envoy_gateway
        if source is None:
            return self.envoy_gateway_version
        if source.path is not None:
            return None
        return source.version or self.envoy_gateway_version

    @property
    def envoy_proxy_image(self) -> str | None:
        """The upstream Envoy image the proxy runs when the program must name it (`images.envoyProxy`, or with a
        registry the one its Envoy Gateway release names); None leaves it to Envoy Gateway."""
        if self.images.envoy_proxy is not None:
            return self.images.envoy_proxy
        if self.images.registry is None:
            return None
        return ENVOY_PROXY_IMAGES.get(self._envoy_gateway_release() or "")

    @property
    def extension_message_bytes(self) -> int:
        """The limit in bytes."""
        size = message_size_bytes(self.extension_message_limit)
        assert size is not None  # the validator refused anything else
        return size
