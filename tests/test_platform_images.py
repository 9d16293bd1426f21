"""`platform.images`: every image the program and its charts run, pulled from a mirror.

The rewrite (core/image_reference.py `mirrored`) keeps each image's repository path and tag and replaces its host,
Docker Hub's familiar names spelled out as the kubelet normalizes them. With a registry set, every image the program
registers names it (the Redis StatefulSet, the mock model, the Gateway's EnvoyProxy), and so does every image Envoy
Gateway's real chart renders from the program's values (`helm template`: the controller, its certgen Job, the
rate-limit service and the shutdown manager in its configuration). Unset, nothing changes: the resource baseline
(tests/test_agent_budgets_urns.py) holds every stack's inputs as they were.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import platform_values as pv
from core.image_reference import image_reference_problem, mirrored, registry_problem
from core.settings import ENVOY_GATEWAY_NAMESPACE, ConfigError
from core.validation import parse_settings, validate_stack
from tests.support.helm_chart import envoy_gateway_configuration, helm_template
from tests.support.program import plain, run_program, stack_config
from tests.support.real_tools import real_chart, real_tool

MIRROR = "registry.example.internal:5000/mirror"
BASE: dict[str, Any] = {
    "actors": ["agents/actor-a", "serviceaccount:agents/bot"],
    "identity": {"sources": ["substrate", "kubernetes"]},
    "budgets": {"default": {"tokens": 500, "per": "Day"}},
}
ENVOY = "docker.io/envoyproxy/envoy:distroless-v1.39.0"


def with_images(images: dict[str, Any], **platform: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw["platform"] = {"images": images, **platform}
    return raw


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("redis:8.2.4-alpine3.22", f"{MIRROR}/library/redis:8.2.4-alpine3.22"),
        ("python:3.12-alpine", f"{MIRROR}/library/python:3.12-alpine"),
        ("envoyproxy/envoy:distroless-v1.39.0", f"{MIRROR}/envoyproxy/envoy:distroless-v1.39.0"),
        ("docker.io/envoyproxy/gateway:v1.9.3", f"{MIRROR}/envoyproxy/gateway:v1.9.3"),
        ("index.docker.io/library/redis:8", f"{MIRROR}/library/redis:8"),
        ("ghcr.io/org/tool:1.0", f"{MIRROR}/org/tool:1.0"),
        ("localhost:5001/agent-budgets-probe@sha256:" + "a" * 64, f"{MIRROR}/agent-budgets-probe@sha256:" + "a" * 64),
        ("docker.io/envoyproxy/ai-gateway-controller", f"{MIRROR}/envoyproxy/ai-gateway-controller"),
    ],
)
def test_a_mirrored_image_keeps_its_path_and_tag_under_the_registry(image: str, expected: str):
    assert mirrored(image, MIRROR) == expected
    assert image_reference_problem(expected) is None
    assert mirrored(image, None) == image


@pytest.mark.parametrize(
    ("registry", "problem"),
    [
        ("https://registry.example.internal", "has a scheme"),
        ("mirror", "no '.' or ':' in its host"),
        ("registry.example.internal/Upper", "is not a registry host"),
        ("registry.example.internal:port", "is not a registry host"),
    ],
)
def test_a_registry_that_is_no_registry_host_is_named(registry: str, problem: str):
    found = registry_problem(registry)
    assert found is not None and problem in found
    for good in ("registry.example.internal", "127.0.0.1:5000", "localhost:5000/x", MIRROR):
        assert registry_problem(good) is None, good


def _refusal(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_stack(raw, lambda key: (True, True))
    return str(caught.value)


def test_a_registry_without_a_known_envoy_image_is_refused_with_the_key_the_value_and_the_fix():
    """The pinned v1.9.3's Envoy image cannot be read here; neither can a local chart's."""
    message = _refusal(with_images({"registry": MIRROR}))
    assert "agent-budgets:platform" in message
    assert f"images.registry '{MIRROR}'" in message and "Envoy Gateway v1.9.3" in message
    assert "set images.envoyProxy" in message and ENVOY in message
    local = _refusal(with_images({"registry": MIRROR}, charts={"envoyGateway": {"path": "/charts/gateway-helm"}}))
    assert "the local Envoy Gateway chart" in local
    bad = _refusal(with_images({"registry": "https://mirror.example.internal"}))
    assert "registry 'https://mirror.example.internal' has a scheme" in bad


def test_the_envoy_image_comes_from_the_setting_or_the_release_the_program_knows():
    mirror_chart = {"envoyGateway": {"repository": "oci://registry.example.internal/envoyproxy", "version": "v1.9.0"}}
    known = parse_settings(with_images({"registry": MIRROR}, charts=mirror_chart))
    assert known.platform.envoy_proxy_image == ENVOY
    named = parse_settings(with_images({"registry": MIRROR, "envoyProxy": "envoyproxy/envoy:distroless-v1.39.3"}))
    assert named.platform.envoy_proxy_image == "envoyproxy/envoy:distroless-v1.39.3"
    unset = parse_settings(copy.deepcopy(BASE))
    assert unset.platform.envoy_proxy_image is None and unset.platform.images.registry is None


def images_in(value: Any) -> Iterator[str]:
    """Every `image` string in a nested value (pod specs, Helm values, EnvoyProxy containers)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "image" and isinstance(item, str):
                yield item
            else:
                yield from images_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from images_in(item)


def test_every_image_the_program_registers_names_the_mirror():
    raw = with_images({"registry": MIRROR, "envoyProxy": ENVOY})
    run = run_program(raw)
    images = sorted({image for resource in run.mocks.resources for image in images_in(plain(resource.inputs))})
    assert images == [
        f"{MIRROR}/envoyproxy/envoy:distroless-v1.39.0",
        f"{MIRROR}/library/python:3.12-alpine",
        f"{MIRROR}/library/redis:8.2.4-alpine3.22",
    ]
    settings = parse_settings(raw)
    agent_router = pv.agent_router_values(settings)
    assert agent_router["controller"]["image"] == {"repository": f"{MIRROR}/envoyproxy/ai-gateway-controller"}
    assert agent_router["extProc"] == {"image": {"repository": f"{MIRROR}/envoyproxy/ai-gateway-extproc"}}
    assert pv.envoy_gateway_values(settings)["global"] == {"imageRegistry": MIRROR}


def test_without_a_registry_the_values_and_the_envoy_proxy_are_as_before():
    settings = parse_settings(copy.deepcopy(BASE))
    assert "global" not in pv.envoy_gateway_values(settings)
    assert "image" not in pv.agent_router_values(settings)["controller"]
    assert "extProc" not in pv.agent_router_values(settings)
    run = run_program(stack_config("dev-kubernetes"))
    proxy = next(r for r in run.mocks.resources if r.kind == "EnvoyProxy")
    assert "image" not in str(plain(proxy.inputs))


def test_envoy_gateways_chart_renders_every_image_from_the_mirror(tmp_path: Path):
    """The real chart (gateway-helm v1.9.0) with the program's values: the controller, its certgen Job, and in the
    configuration Envoy Gateway reads, the rate-limit service's image and the shutdown manager's, all from the
    mirror with their upstream paths; the proxy's Envoy image is the EnvoyProxy's (above)."""
    helm, chart = real_tool("helm"), real_chart("gateway-helm")
    settings = parse_settings(with_images({"registry": MIRROR, "envoyProxy": ENVOY}))
    render = helm_template(
        helm, chart, pv.envoy_gateway_values(settings), pv.ENVOY_GATEWAY_RELEASE, ENVOY_GATEWAY_NAMESPACE, tmp_path
    )
    pods = sorted({image for document in render.documents for image in images_in(document)})
    assert pods == [f"{MIRROR}/envoyproxy/gateway:v1.9.0"]
    kinds = {document["kind"] for document in render.documents if f"{MIRROR}/" in str(document)}
    assert {"Deployment", "Job"} <= kinds
    kubernetes = envoy_gateway_configuration(render)["provider"]["kubernetes"]
    assert kubernetes["rateLimitDeployment"]["container"]["image"] == f"{MIRROR}/envoyproxy/ratelimit:17b1956c"
    assert kubernetes["shutdownManager"]["image"] == f"{MIRROR}/envoyproxy/gateway:v1.9.0"
