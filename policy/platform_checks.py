"""Checks of the platform around the budgets: the rate limit's failure mode, the IdP trust, Redis persistence."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from core.plain import dig
from core.platform_values import ENVOY_GATEWAY_RELEASE, REDIS_NAME
from core.settings import PROJECT
from policy.resources import (
    DEFAULT_DEV_STACKS,
    ENVOY_GATEWAY_CHART_NAME,
    HELM_RELEASE_TYPE,
    UNKNOWN,
    Resource,
    StackProblem,
    as_dict,
    as_list,
    stack_of_urn,
)


def _is_envoy_gateway_release(props: Mapping[str, Any]) -> bool:
    """The Release of Envoy Gateway's chart: named `eg` by the program, or its chart `gateway-helm` by OCI reference,
    repository chart name or a local path (`platform.charts`: `.../gateway-helm`, `gateway-helm-v1.9.3.tgz`)."""
    chart = props.get("chart")
    last = chart.rstrip("/").rsplit("/", 1)[-1] if isinstance(chart, str) else ""
    return (
        props.get("name") == ENVOY_GATEWAY_RELEASE
        or last == ENVOY_GATEWAY_CHART_NAME
        or last.startswith(f"{ENVOY_GATEWAY_CHART_NAME}-")
    )


def check_fails_closed_outside_dev(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Envoy Gateway's rate limiting fails closed on every stack but the dev ones."""
    if resource.type != HELM_RELEASE_TYPE:
        return []
    if not _is_envoy_gateway_release(resource.props):
        return []
    stack = stack_of_urn(resource.urn)
    dev_stacks = config.get("devStacks")
    if not isinstance(dev_stacks, list):
        dev_stacks = list(DEFAULT_DEV_STACKS)
    if not stack or stack in dev_stacks:
        return []
    fail_closed = dig(resource.props, "values", "config", "envoyGateway", "rateLimit", "failClosed")
    if fail_closed is True or fail_closed is UNKNOWN:
        return []
    return [
        f"{resource.describe()}: stack {stack!r} fails open: when Redis or the rate-limit service is down, "
        f"every agent calls the models with no budget at all. Set {PROJECT}:rateLimit.failClosed: true "
        f"(or list {stack!r} in this policy's devStacks if it is a throwaway stack)"
    ]


def check_idp_trust_verifies(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The Backend Envoy Gateway fetches the actor JWKS through verifies the IdP's certificate."""
    del config
    if not resource.is_kind("gateway.envoyproxy.io", "Backend"):
        return []
    if dig(resource.spec, "tls", "insecureSkipVerify") is not True:
        return []
    return [
        f"{resource.describe()} skips TLS verification: whoever can answer for the IdP's name can serve "
        "their own signing keys and mint any actor's identity (and spend its budget). Set "
        f"{PROJECT}:substrate.trust.mode to clusterTrustBundle or configMap"
    ]


# `appendonly yes` as a redis.conf line (also inside a heredoc) or `--appendonly yes` on the command line.
_APPENDONLY = re.compile(r"(?:^[ \t]*|--)appendonly[ \t=]+\"?(yes|no)\b", re.IGNORECASE | re.MULTILINE)


def check_redis_persistence(resources: Sequence[Resource], config: Mapping[str, Any]) -> list[StackProblem]:
    """The in-cluster Redis keeps its counters across restarts: a mounted volume claim and `appendonly yes`."""
    del config
    config_maps: dict[tuple[str, str], str] = {}
    for resource in resources:
        if resource.is_kubernetes and resource.type.endswith("core/v1:ConfigMap"):
            name = dig(resource.props, "metadata", "name")
            data = as_dict(resource.props.get("data"))
            config_maps[(resource.namespace, str(name))] = "\n".join(v for v in data.values() if isinstance(v, str))
    problems: list[StackProblem] = []
    for resource in resources:
        if not resource.is_kubernetes or resource.kind not in ("StatefulSet", "Deployment"):
            continue
        if dig(resource.props, "metadata", "name") != REDIS_NAME:
            continue
        who = resource.describe()
        if resource.kind == "Deployment":
            problems.append(
                StackProblem(
                    f"{who} is a Deployment: its counters live in the pod, so a restart hands every agent a "
                    "fresh budget. Run Redis as a StatefulSet with a volume claim and appendonly yes",
                    resource.urn,
                )
            )
            continue
        pod = as_dict(dig(resource.spec, "template", "spec"))
        claims = {dig(claim, "metadata", "name") for claim in as_list(resource.spec.get("volumeClaimTemplates"))} - {
            None
        }
        containers = [c for c in as_list(pod.get("containers")) if isinstance(c, dict)]
        mounted = {m.get("name") for c in containers for m in as_list(c.get("volumeMounts")) if isinstance(m, dict)}
        if not claims & mounted:
            problems.append(
                StackProblem(
                    f"{who} mounts no volumeClaimTemplate: its data dies with the pod, so a restart hands every "
                    "agent a fresh budget. Add a volumeClaimTemplate and mount it at Redis's data dir",
                    resource.urn,
                )
            )
        texts: list[str] = []
        for volume in as_list(pod.get("volumes")):
            name = dig(volume, "configMap", "name")
            if isinstance(name, str):
                texts.append(config_maps.get((resource.namespace, name), ""))
        for container in containers:
            argv = [*as_list(container.get("command")), *as_list(container.get("args"))]
            texts.append(" ".join(a for a in argv if isinstance(a, str)))
        settings = [m.group(1).lower() for text in texts for m in _APPENDONLY.finditer(text)]
        if not settings or settings[-1] != "yes":
            problems.append(
                StackProblem(
                    f"{who} does not turn on appendonly: only periodic snapshots survive a restart, so agents "
                    "regain what they spent since the last one. Put `appendonly yes` in its redis.conf or args",
                    resource.urn,
                )
            )
    return problems
