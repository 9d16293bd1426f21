"""The real `helm template` of Envoy Gateway's chart with the values the program computes (issue 31).

For every stack file of the repository, the `full` stack of the resource baseline (every optional feature on, TLS
Redis Sentinel with a private CA) and `full` with `gateway.refuseDuplicateKeys`, the program runs under mocks and
the `eg` Helm Release it registers is rendered by Helm itself: the chart gateway-helm as Envoy Gateway v1.9.0
releases it (tests/support/helm_chart.py prepares it from Envoy Gateway's Go module), the values, release name and
namespace of that Release. What Envoy Gateway will read is then its ConfigMap `envoy-gateway-config`
(`envoy-gateway.yaml`): the chart merges our `config.envoyGateway` over its own defaults
(`templates/envoy-gateway-config.yaml`, `templates/_helpers.tpl` `eg.default-envoy-gateway-config`), and each
setting there is compared with what the program's settings mean. The deployed default is Envoy Gateway v1.9.3; the
chart rendered is v1.9.0, the version of the module and of the pinned CRDs.

Only Envoy Gateway's chart is rendered. Agent Router's charts (ai-gateway-helm and ai-gateway-crds-helm) cannot be
had here: the Go module proxy serves no version of github.com/envoyproxy/ai-gateway nor of its fork, and the charts
are not in any module this suite can fetch. The `aieg` values stay checked by the hand-written schema alone
(tests/test_helm_values_schema.py), and the facts about Agent Router's controller used below (its Service name and
gRPC port) are read from its chart's sources at envoyproxy/ai-gateway v1.1.0.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from core import platform_values as pv
from core.body_guard import guard_enabled
from core.monitoring import near_limit_ratio
from core.ratelimit_deployment import pod_problems, ratelimit_problems, read_redis_client, render_ratelimit_pod
from core.settings import ENVOY_GATEWAY_NAMESPACE, StackSettings
from core.settings.platform import message_size_bytes
from core.validation import parse_settings
from scripts.gen_resource_baseline import FULL_SECRETS, full_config, stack_inputs
from tests.support.helm_chart import (
    ENVOY_GATEWAY_TAG,
    HelmTemplateError,
    Render,
    chart_reads,
    envoy_gateway_configuration,
    helm_template,
    rendered,
    scalars,
)
from tests.support.helm_values_schema import ENVOY_GATEWAY_VALUES_SCHEMA, NOT_SET
from tests.support.program import ROOT, ProgramRun, plain, run_program, stack_config
from tests.support.real_tools import real_chart, real_tool
from tools.spend.stack import stack_names

RELEASE = "kubernetes:helm.sh/v3:Release"
GUARD_STACK = "full-refuse-duplicate-keys"
STACKS = [*stack_names(ROOT), "full", GUARD_STACK]
"""Every stack file of the repository, `full`, and `full` with the duplicate-key guard (Lua on)."""


def inputs(stack: str) -> tuple[dict[str, Any], dict[str, str] | None]:
    """A stack's configuration and secret configuration."""
    if stack == GUARD_STACK:
        config = full_config()
        config["gateway"] = {**config.get("gateway", {}), "refuseDuplicateKeys": True}
        return config, FULL_SECRETS
    return stack_inputs(stack)


@dataclass(frozen=True)
class Stack:
    """One stack: its settings, the program's run, the Releases it registered and what Helm rendered of `eg`."""

    settings: StackSettings
    run: ProgramRun
    eg: dict[str, Any]
    aieg: dict[str, Any]
    render: Render

    @property
    def values(self) -> dict[str, Any]:
        """The `eg` values as the engine hands them to Helm."""
        return self.eg["values"]

    @property
    def config(self) -> dict[str, Any]:
        """The Envoy Gateway configuration Envoy Gateway reads (the ConfigMap's `envoy-gateway.yaml`)."""
        return envoy_gateway_configuration(self.render)

    @property
    def deployment(self) -> dict[str, Any]:
        """The `envoy-gateway` controller Deployment."""
        return rendered(self.render.documents, "Deployment", "envoy-gateway")


@pytest.fixture(scope="module")
def helm() -> Path:
    """The pinned `helm` (skipped on a laptop without it, failed on CI)."""
    return real_tool("helm")


@pytest.fixture(scope="module")
def chart() -> Path:
    """gateway-helm as Envoy Gateway's release packages it (rig/chart.py prepares it in the tools cache)."""
    return real_chart("gateway-helm")


@pytest.fixture(scope="module")
def render(helm: Path, chart: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[dict[str, Any]], Render]:
    """`render(values)`: `helm template` of the chart as the `eg` release in Envoy Gateway's namespace."""
    workdir = tmp_path_factory.mktemp("helm")

    def render_values(values: dict[str, Any]) -> Render:
        return helm_template(helm, chart, values, pv.ENVOY_GATEWAY_RELEASE, ENVOY_GATEWAY_NAMESPACE, workdir)

    return render_values


@pytest.fixture(scope="module")
def stacks(helm: Path, chart: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Stack]:
    """`stacks(name)`: the program run and the render of one stack, each computed once."""
    workdir = tmp_path_factory.mktemp("stacks")

    @cache
    def stack(name: str) -> Stack:
        config, secrets = inputs(name)
        run = run_program(config, secrets=secrets, stack=name)
        releases = {r.inputs["name"]: plain(r.inputs) for r in run.resources if r.type == RELEASE}
        eg = releases[pv.ENVOY_GATEWAY_RELEASE]
        result = helm_template(helm, chart, eg["values"], eg["name"], eg["namespace"], workdir / name)
        return Stack(parse_settings(config), run, eg, releases[pv.AGENT_ROUTER_RELEASE], result)

    return stack


# --- the chart renders, and a wrong value shows ---------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_the_chart_renders_each_stacks_values_without_a_warning(stacks, stack):
    """Helm renders the chart with the stack's `eg` values, with no warning, and the program registered the values
    `core/platform_values.py` computes.

    Upstream: gateway-helm v1.9.0 `templates/envoy-gateway-config.yaml` (the ConfigMap) and
    `templates/envoy-gateway-deployment.yaml`; Helm's values coalescing warns when a value's type differs from the
    chart's default (`cannot overwrite table with non table`), and what renders is then no longer the chart's shape.
    Broken once: `extensionApis` as a list (`["enableBackend"]`) in `envoy_gateway_config` gave Helm's warning and
    failed every stack.
    """
    found = stacks(stack)
    assert found.render.warnings == []
    assert found.values == pv.envoy_gateway_values(found.settings)
    assert found.config["apiVersion"] == "gateway.envoyproxy.io/v1alpha1"
    assert found.config["kind"] == "EnvoyGateway"


def test_a_value_of_the_wrong_shape_is_refused_by_helm(stacks, render):
    """Helm refuses `provider.kubernetes` as a list: the chart's RBAC templates read its fields.

    Upstream: gateway-helm v1.9.0 `templates/namespaced-infra-manager-rbac.yaml` (`$kube.watch`).
    Broken once: the same values with `kubernetes` left a map rendered, and the test failed (no error raised).
    """
    values = copy.deepcopy(stacks("dev").values)
    provider = values["config"]["envoyGateway"]["provider"]
    provider["kubernetes"] = [provider["kubernetes"]]
    with pytest.raises(HelmTemplateError, match=r"namespaced-infra-manager-rbac\.yaml.*can't evaluate field watch"):
        render(values)


def test_a_misplaced_value_renders_visibly_wrong(stacks, render):
    """Helm renders `rateLimit` moved from `config.envoyGateway` to `config` without a word, and the configuration
    then has no rate limit: Envoy Gateway deploys no rate-limit service and no budget is enforced. The checks below
    see it, which is why they read the rendered configuration rather than our values.

    Upstream: gateway-helm v1.9.0 `templates/envoy-gateway-config.yaml` (reads only `config.envoyGateway`).
    Broken once: moving `rateLimit` back under `envoyGateway` made the `not in` assertion fail.
    """
    values = copy.deepcopy(stacks("prod").values)
    values["config"]["rateLimit"] = values["config"]["envoyGateway"].pop("rateLimit")
    config = envoy_gateway_configuration(render(values))
    assert "rateLimit" not in config
    with pytest.raises(ValueError, match="no rateLimit"):
        render_ratelimit_pod(config)


# --- the rendered Envoy Gateway configuration, against the program's settings ---------------------------------


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every scalar of a nested value with its path (list items by index)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
    else:
        yield path, value


MISSING = "<missing>"


def at(value: Any, path: tuple[Any, ...]) -> Any:
    """The value at `path`, or MISSING."""
    for step in path:
        found = (isinstance(value, dict) and step in value) or (
            isinstance(value, list) and isinstance(step, int) and step < len(value)
        )
        if not found:
            return MISSING
        value = value[step]
    return value


@pytest.mark.parametrize("stack", STACKS)
def test_every_setting_the_program_gives_envoy_gateway_is_in_its_configuration(stacks, stack):
    """Each value under `config.envoyGateway` reaches the ConfigMap at its path, unchanged by the chart's defaults,
    which only add to it (the rate-limit image). The models of our values (core/ratelimit_deployment.py, and the
    checks of tests/test_platform_values.py) rest on the chart passing our configuration on unchanged.

    Upstream: gateway-helm v1.9.0 `templates/envoy-gateway-config.yaml` (`merge` of ours over
    `eg.default-envoy-gateway-config`, `templates/_helpers.tpl`, which sets the rate-limit image, a pull-policy
    patch of `rateLimitDeployment` and the shutdown manager's image).
    The program alone cannot make this fail through Helm (ours win every merge, and a value whose type differs from
    the chart's default is kept, with the warning the first test catches), so it was broken on the chart's side:
    the prepared copy with `mustMergeOverwrite` (the chart's defaults over ours) and a default
    `rateLimitDeployment.replicas: 1` failed prod, `full` and the guard variant (2 rate-limit replicas).
    """
    found = stacks(stack)
    ours = found.values["config"]["envoyGateway"]
    config = found.config
    different = [(path, value, at(config, path)) for path, value in leaves(ours) if at(config, path) != value]
    assert different == []
    deployment = config["provider"]["kubernetes"]["rateLimitDeployment"]
    assert deployment["replicas"] == found.settings.rate_limit.replicas
    assert deployment["container"]["image"].startswith("docker.io/envoyproxy/ratelimit:")  # the chart's default


@pytest.mark.parametrize("stack", STACKS)
def test_the_rate_limit_backend_fail_mode_and_timeout_are_what_the_settings_say(stacks, stack):
    """`rateLimit`: Redis at the URL the program computes for the stack's Redis, never a `tls` block (it would give
    envoy-ratelimit a mount without a volume), fail closed or open and the timeout as configured.

    Upstream: envoyproxy/gateway v1.9.0 `api/v1alpha1/envoygateway_types.go` (RateLimit, RateLimitRedisSettings),
    `internal/infrastructure/kubernetes/ratelimit/resource.go` (the `redis-certs` mount for any `tls`), and the
    chart's `templates/envoy-gateway-config.yaml`.
    Broken once: `"failClosed": not settings.rate_limit.fail_closed` in `envoy_gateway_config` failed every stack,
    and so did `"timeout": None` (the key is then left out, and Envoy Gateway uses its own default).
    """
    found = stacks(stack)
    settings = found.settings
    assert found.config["rateLimit"] == {
        "backend": {"type": "Redis", "redis": {"url": pv.redis_url(settings.redis)}},
        "failClosed": settings.rate_limit.fail_closed,
        "timeout": settings.rate_limit.timeout,
    }


@pytest.mark.parametrize("stack", STACKS)
def test_envoy_ratelimit_connects_to_redis_as_the_program_meant(stacks, stack):
    """The rate-limit pod Envoy Gateway renders from the rendered configuration (our model of it,
    `core/ratelimit_deployment.py`) is valid and reaches the stack's Redis: URL, type, password by reference, TLS and
    the private CA file exactly when the settings ask for them, the near-limit ratio of the monitoring settings.

    Upstream: envoyproxy/gateway v1.9.0 `internal/infrastructure/kubernetes/ratelimit/resource.go` (the env, volumes
    and mounts, merged with ours) read from the configuration the chart renders; envoyproxy/ratelimit
    `src/settings/settings.go` for the variables.
    Broken once: dropping REDIS_TLS from `ratelimit_container_env` failed prod, `full` and the guard variant (TLS
    off toward a Redis that requires it).
    """
    found = stacks(stack)
    redis = found.settings.redis
    pod = render_ratelimit_pod(found.config, found.eg["namespace"])
    assert pod_problems(pod) == []
    assert ratelimit_problems(pod) == []
    client = read_redis_client(pod)
    assert client.url == pv.redis_url(redis)
    assert client.redis_type == (pv.redis_type_env(redis) or "SINGLE")
    assert client.auth == {"secretKeyRef": {"name": pv.RATELIMIT_REDIS_SECRET, "key": pv.PASSWORD_KEY}}
    assert client.tls is pv.redis_uses_tls(redis)
    private_ca = pv.redis_private_ca(redis) is not None
    assert client.ca_file == (f"{pv.REDIS_CA_DIR}/{pv.REDIS_CA_KEY}" if private_ca else None)
    assert (client.sentinel_auth is not None) is (pv.redis_sentinel_password_config(redis) is not None)
    assert pod.env_value("NEAR_LIMIT_RATIO") == {
        "name": "NEAR_LIMIT_RATIO",
        "value": near_limit_ratio(found.settings.monitoring),
    }


def test_the_stacks_cover_tls_redis_with_a_private_ca_and_the_lua_guard(stacks):
    """No vacuous pass: `full` renders a TLS Redis Sentinel with a private CA, the guard variant Lua, dev neither.

    Upstream: as the two tests above. Broken once: the guard variant with `refuseDuplicateKeys: False` failed it, and
    so did dropping REDIS_TLS from `ratelimit_container_env`.
    """
    full, guard, dev = stacks("full"), stacks(GUARD_STACK), stacks("dev")
    assert read_redis_client(render_ratelimit_pod(full.config)).tls is True
    assert read_redis_client(render_ratelimit_pod(full.config)).redis_type == "SENTINEL"
    assert read_redis_client(render_ratelimit_pod(dev.config)).tls is False
    assert guard.config["extensionApis"].get("enableLua") is True
    assert "enableLua" not in dev.config["extensionApis"]


@pytest.mark.parametrize("stack", STACKS)
def test_the_extension_manager_points_at_agent_routers_controller(stacks, stack):
    """The extension server is the Service Agent Router's chart creates for the `aieg` release (its
    `controller.fullnameOverride`, in the release's namespace, in the cluster domain the chart gives Envoy Gateway)
    on its gRPC port 1063, and Envoy Gateway's send cap is the `controller.maxRecvMsgSize` Agent Router is given.

    Upstream: gateway-helm v1.9.0 `templates/envoy-gateway-deployment.yaml` (KUBERNETES_CLUSTER_DOMAIN from
    `kubernetesClusterDomain`); envoyproxy/ai-gateway v1.1.0 `manifests/charts/ai-gateway-helm/templates/
    service.yaml` and `_helpers.tpl` (the Service is named `controller.fullnameOverride`), `values.yaml` (port
    1063, name `grpc`).
    Broken once: `EXTENSION_SERVER_HOST` in the `envoy-gateway-system` namespace failed every stack.
    """
    found = stacks(stack)
    [container] = found.deployment["spec"]["template"]["spec"]["containers"]
    domain = {item["name"]: item.get("value") for item in container["env"]}["KUBERNETES_CLUSTER_DOMAIN"]
    controller = found.aieg["values"]["controller"]
    manager = found.config["extensionManager"]
    assert manager["service"] == {
        "fqdn": {
            "hostname": f"{controller['fullnameOverride']}.{found.aieg['namespace']}.svc.{domain}",
            "port": pv.EXTENSION_SERVER_PORT,
        }
    }
    assert pv.EXTENSION_SERVER_PORT == 1063
    assert message_size_bytes(str(manager["maxMessageSize"])) == int(controller["maxRecvMsgSize"])
    assert int(controller["maxRecvMsgSize"]) == found.settings.platform.extension_message_bytes
    assert "failOpen" not in manager  # an extension error fails the translation: no route without its budget


@pytest.mark.parametrize("stack", STACKS)
def test_extension_apis_enable_backends_and_lua_exactly_with_the_guard(stacks, stack):
    """`extensionApis`: Backend resources on (the model routes' upstreams are Backends), Lua on exactly when
    `gateway.refuseDuplicateKeys` is (the guard is a Lua EnvoyExtensionPolicy), never `disableLua`.

    Upstream: envoyproxy/gateway v1.9.0 `api/v1alpha1/envoygateway_types.go` (ExtensionAPISettings) and the
    chart's `templates/_helpers.tpl` (`extensionApis` copied into the default configuration).
    Broken once: `**({"enableLua": True} if guard_enabled(settings) else {})` replaced by `"enableLua": False`
    failed the guard variant.
    """
    found = stacks(stack)
    apis = found.config["extensionApis"]
    assert apis.get("enableBackend") is True
    assert apis.get("enableLua", False) is guard_enabled(found.settings)
    assert "disableLua" not in apis


@pytest.mark.parametrize("stack", STACKS)
def test_the_gateway_class_and_the_controller_roll_out_with_the_configuration(stacks, stack):
    """Envoy Gateway's `controllerName` is the one of the GatewayClass the program registers, and the checksum of
    our configuration is on the controller's pod template (so a change rolls the pods: the chart has no checksum of
    its ConfigMap).

    Upstream: gateway-helm v1.9.0 `templates/envoy-gateway-deployment.yaml` (`deployment.pod.annotations` on
    `spec.template.metadata`).
    Broken once: the annotation moved to `deployment.annotations` in `envoy_gateway_values` (the Deployment's own
    metadata, which rolls nothing) failed every stack.
    """
    found = stacks(stack)
    gateway_class = found.run.one("GatewayClass")
    assert found.config["gateway"]["controllerName"] == gateway_class.inputs["spec"]["controllerName"]
    annotations = found.deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations[pv.CONFIG_CHECKSUM_ANNOTATION] == pv.checksum(pv.envoy_gateway_config(found.settings))


# --- the hand-written values schema against the chart --------------------------------------------------------


def probe_values(schema: dict[str, Any], path: tuple[str, ...], probes: dict[str, tuple[str, ...]]) -> Any:
    """A value the schema admits at every depth, each scalar and free map key a unique probe string."""
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    if properties is not None or isinstance(additional, dict):
        value: dict[str, Any] = {}
        for name, field in (properties or {}).items():
            if field is not NOT_SET:
                value[name] = probe_values(field, (*path, name), probes)
        if isinstance(additional, dict):
            key = f"probe-key-{len(probes)}"
            probes[key] = (*path, "<key>")
            value[key] = probe_values(additional, (*path, key), probes)
        return value
    if schema.get("type") == "array":
        return [probe_values(schema["items"], (*path, "0"), probes)]
    probe = f"probe-{len(probes)}"
    probes[probe] = path
    return probe


def test_every_value_the_schema_admits_renders(render):
    """Every key `ENVOY_GATEWAY_VALUES_SCHEMA` admits, at every depth, is used by the chart: a value with each of them
    set to a unique probe string renders every probe.

    Upstream: gateway-helm v1.9.0 `templates/envoy-gateway-config.yaml` (all of `config.envoyGateway`) and
    `templates/envoy-gateway-deployment.yaml` (`deployment.pod.annotations`).
    Broken once: admitting `config.rateLimit` in the schema (a name added to `config`'s list, modelled as
    `RATE_LIMIT`) failed with every `config.rateLimit...` probe unrendered.
    """
    probes: dict[str, tuple[str, ...]] = {}
    values = probe_values(ENVOY_GATEWAY_VALUES_SCHEMA, (), probes)
    assert len(probes) > 30
    result = render(values)
    found = {text for document in result.documents for text in scalars(document)}
    assert sorted(".".join(path) for probe, path in probes.items() if probe not in found) == []


def schema_objects(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], set[str]]]:
    """Every object of the schema that lists its names, with its path and names (list items under `0`)."""
    if "properties" in schema:
        yield path, set(schema["properties"])
        for name, field in schema["properties"].items():
            yield from schema_objects(field, (*path, name))
    elif schema.get("type") == "array":
        yield from schema_objects(schema["items"], (*path, "0"))


def test_the_schema_lists_the_names_the_chart_reads(chart):
    """Where the chart reads values one by one, the schema's list of names is exactly the names its templates read;
    where it passes a whole object on (`config.envoyGateway`, into Envoy Gateway's configuration), every name it
    reads there is in the schema's list (whose source is Envoy Gateway's Go types).

    Upstream: every template of gateway-helm v1.9.0 (`templates/*.yaml`, the defines of `templates/_helpers.tpl` and
    `_rbac.tpl` that something includes, the `crds` subchart), read by `chart_reads`.
    Broken once: this test found `nameOverride` and `fullnameOverride` missing from the schema's top-level names
    (`eg.name` and `eg.fullname` read them; values.yaml lists neither), so the schema called a real key a typo; it
    passes since they were added (as not set). Counting every define of `_helpers.tpl` made it ask for
    `serviceAccount` too, which only `eg.serviceAccountName` reads and no template includes.
    """
    assert not (chart / "values.schema.json").exists()  # Helm would check values against it; none: only ours
    reads = chart_reads(chart)
    disagreements = []
    for path, names in schema_objects(ENVOY_GATEWAY_VALUES_SCHEMA):
        chart_names = {read[len(path)] for read in reads if read[: len(path)] == path and len(read) > len(path)}
        whole = any(path[:length] in reads for length in range(1, len(path) + 1))
        if (not chart_names <= names) if whole else chart_names != names:
            disagreements.append((".".join(path) or "<top>", sorted(names - chart_names), sorted(chart_names - names)))
    assert disagreements == []
    assert ("deployment", "pod", "annotations") in reads and ("config", "envoyGateway") in reads


def test_chart_reads_follows_the_dot_variables_and_included_defines(tmp_path):
    """`chart_reads` on a small chart: `with` moves the dot to a values path (and `else` back), `range` to an item it
    does not follow, `$x := .Values...` names a path, and a define counts only when a rendered template includes it.

    Upstream: Go's text/template, as Helm runs it (`with`, `range`, `define`, `include`), the constructs gateway-helm
    v1.9.0 uses (`templates/infra-manager-rbac.yaml`, `templates/_helpers.tpl`).
    Broken once: counting every define (used = all of them) added `unused.name` and failed.
    """
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: chart\nversion: 0.1.0\n")
    (chart / "templates" / "_helpers.tpl").write_text(
        '{{- define "used" -}}{{ .Values.a.b }}{{- end }}\n{{- define "unused" -}}{{ .Values.unused.name }}{{- end }}\n'
    )
    (chart / "templates" / "object.yaml").write_text(
        "{{ $kube := .Values.config.kube }}{{ if $kube.watch }}{{ $kube.watch.namespaces }}{{ end }}\n"
        '{{- with .Values.pod }}{{ toYaml .annotations }}{{ include "used" $ }}{{ else }}{{ .Release.Name }}{{ end }}\n'
        "{{- range .Values.ports }}{{ .port }}{{ end }}\n"
        '{{- with .Values.labels }}{{ toYaml . }}{{ printf "%s.%s" "x" "y" }}{{ end }}\n'
    )
    assert chart_reads(chart) == {
        ("a", "b"),
        ("config", "kube"),
        ("config", "kube", "watch"),
        ("config", "kube", "watch", "namespaces"),
        ("pod",),
        ("pod", "annotations"),
        ("ports",),
        ("labels",),
    }


def test_the_prepared_chart_is_envoy_gateways_release(stacks):
    """The chart renders as Envoy Gateway's release of v1.9.0 does: its controller image and pull policy (from
    `values.yaml`, which the release fills from `values.tmpl.yaml`) and its version labels (Chart.yaml).

    Upstream: envoyproxy/gateway v1.9.0 `tools/make/helm.mk` (`helm-generate`, `helm-package`),
    `.github/workflows/release.yaml`, `charts/gateway-helm/templates/_helpers.tpl` (`eg.image`, `eg.labels`).
    Broken once: preparing with helm.mk's development image (`docker.io/envoyproxy/gateway-dev:latest`) failed; a
    copy of `values.tmpl.yaml` left unfilled made Helm refuse the chart (`${GatewayImage}` breaks the YAML). The
    chart is the one rig/chart.py prepares (`make tools`), so this holds its preparation to the release.
    """
    deployment = stacks("dev").deployment
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"docker.io/envoyproxy/gateway:{ENVOY_GATEWAY_TAG}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    labels = deployment["metadata"]["labels"]
    assert labels["helm.sh/chart"] == f"gateway-helm-{ENVOY_GATEWAY_TAG}"
    assert labels["app.kubernetes.io/version"] == ENVOY_GATEWAY_TAG


def test_a_release_from_a_local_chart_renders_as_the_public_chart_does(stacks, helm, chart, tmp_path):
    """`platform.charts.envoyGateway.path` (an air-gapped install): the program hands the `eg` Release the chart's
    path and no version or repository, and Helm renders that chart with the stack's values exactly as it renders
    the chart the default source names (here both are Envoy Gateway's v1.9.0 chart; rig/chart.py). Broken once by
    keeping the pinned version on a path source: the Release's `version` assertion failed."""
    config = stack_config("dev")
    config["platform"] = {"charts": {"envoyGateway": {"path": str(chart)}}}
    run = run_program(config)
    [eg] = [
        plain(r.inputs) for r in run.resources if r.type == RELEASE and r.inputs["name"] == pv.ENVOY_GATEWAY_RELEASE
    ]
    assert eg["chart"] == str(chart)
    assert "version" not in eg and "repositoryOpts" not in eg
    local = helm_template(helm, Path(eg["chart"]), eg["values"], eg["name"], eg["namespace"], tmp_path)
    assert envoy_gateway_configuration(local) == envoy_gateway_configuration(stacks("dev").render)
