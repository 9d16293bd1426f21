"""Every Helm value the program sets is a field upstream reads, at every depth (issue 22).

Helm passes unknown keys on and Envoy Gateway's decoder drops them silently, so a typo such as
`rateLimitPdb` for `rateLimitPDB` would quietly remove the rate-limit pods' disruption budget. The schemas in
tests/support/helm_values_schema.py list each object's upstream field names (cited there); here the values of
every kind of stack must meet them, and renaming any single key the program sets must break them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from core import platform_values as pv
from core.settings import StackSettings
from core.validation import parse_settings
from tests.support.helm_values_schema import (
    AGENT_ROUTER_VALUES_SCHEMA,
    ENV_VAR,
    ENVOY_GATEWAY_VALUES_SCHEMA,
    NOT_SET,
    fields,
)
from tests.support.program import stack_config

PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQk9P\nbm90IGEgcmVhbCBjZXJ0\n-----END CERTIFICATE-----\n"
SENTINEL = {
    "mode": "external", "type": "sentinel", "url": "mymaster,s-0.example.internal:26379", "tls": True,
    "tlsCaCertificate": PEM, "sentinelPasswordConfig": "redisSentinelPassword",
}  # fmt: skip
CLUSTER = {"mode": "external", "type": "cluster", "url": "n-0.example.internal:6379,n-1.example.internal:6379"}


def stacks() -> dict[str, StackSettings]:
    """Stacks that between them set every value the program can set."""
    dev, prod = stack_config("dev"), stack_config("prod")
    return {
        "dev": parse_settings(dev),
        "prod": parse_settings(prod),
        "sentinel-tls-ca": parse_settings({**dev, "redis": SENTINEL, "rateLimit": {"replicas": 3}}),
        "cluster": parse_settings({**dev, "redis": CLUSTER}),
        "no-actor-metrics": parse_settings({**dev, "monitoring": {"actorMetrics": False}}),
        "duplicate-key-guard": parse_settings({**dev, "gateway": {**dev["gateway"], "refuseDuplicateKeys": True}}),
    }


STACKS = stacks()
SCHEMAS = {"eg": ENVOY_GATEWAY_VALUES_SCHEMA, "aieg": AGENT_ROUTER_VALUES_SCHEMA, "aieg-crd": fields((), {})}


def errors(schema: dict[str, Any], values: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(values)]


def key_paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every dict key, list items by index."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key)
            yield from key_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from key_paths(item, (*path, index))


def renamed(values: Any, path: tuple[Any, ...]) -> Any:
    """A copy with the key at `path` misspelt the way people do: its last letter's case flipped."""
    broken = copy.deepcopy(values)
    parent = broken
    for step in path[:-1]:
        parent = parent[step]
    key = path[-1]
    parent[key[:-1] + key[-1].swapcase()] = parent.pop(key)
    return broken


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_value_the_program_sets_is_read_upstream(stack):
    specs = pv.release_specs(STACKS[stack])
    assert [spec.release_name for spec in specs] == ["eg", "aieg-crd", "aieg"]
    for spec in specs:
        assert errors(SCHEMAS[spec.release_name], spec.values) == [], spec.release_name


def test_the_stacks_set_every_value_the_schemas_model():
    """No vacuous pass: between them the stacks reach the deepest modelled paths."""
    paths = {path for settings in STACKS.values() for spec in pv.release_specs(settings) for path in
             key_paths({spec.release_name: spec.values})}  # fmt: skip
    for expected in (
        ("eg", "config", "envoyGateway", "provider", "kubernetes", "rateLimitPDB", "minAvailable"),
        ("eg", "config", "envoyGateway", "provider", "kubernetes", "rateLimitDeployment", "pod", "volumes", 0,
         "configMap", "items", 0, "path"),
        ("eg", "config", "envoyGateway", "provider", "kubernetes", "rateLimitDeployment", "container", "env", 0,
         "valueFrom", "secretKeyRef", "key"),
        ("eg", "config", "envoyGateway", "extensionManager", "hooks", "xdsTranslator", "translation", "secret",
         "includeAll"),
        ("eg", "config", "envoyGateway", "extensionApis", "enableLua"),
        ("eg", "deployment", "pod", "annotations", pv.CONFIG_CHECKSUM_ANNOTATION),
        ("aieg", "controller", "metricsRequestHeaderAttributes"),
        ("aieg", "envoyGateway", "namespace"),
    ):  # fmt: skip
        assert expected in paths, expected


@pytest.mark.parametrize("stack", ["prod", "sentinel-tls-ca"])
def test_a_misspelt_key_at_any_depth_is_refused(stack):
    """Rename each key the program sets, one at a time: only free-form map keys (annotations) may change."""
    uncaught = []
    for spec in pv.release_specs(STACKS[stack]):
        for path in key_paths(spec.values):
            if isinstance(path[-1], str) and not errors(SCHEMAS[spec.release_name], renamed(spec.values, path)):
                uncaught.append((spec.release_name, *path))
    assert uncaught == [("eg", "deployment", "pod", "annotations", pv.CONFIG_CHECKSUM_ANNOTATION)]


def test_the_issue_example_names_the_key():
    values = pv.envoy_gateway_values(STACKS["sentinel-tls-ca"])
    kubernetes = values["config"]["envoyGateway"]["provider"]["kubernetes"]
    kubernetes["rateLimitPdb"] = kubernetes.pop("rateLimitPDB")
    [message] = errors(ENVOY_GATEWAY_VALUES_SCHEMA, values)
    assert message.startswith("config.envoyGateway.provider.kubernetes: Additional properties are not allowed")
    assert "'rateLimitPdb' was unexpected" in message


def test_a_real_field_the_program_does_not_set_yet_must_be_modelled_first():
    values = pv.envoy_gateway_values(STACKS["dev"])
    values["config"]["envoyGateway"]["logging"] = {"level": {"default": "debug"}}
    assert errors(ENVOY_GATEWAY_VALUES_SCHEMA, values) == [
        "config.envoyGateway.logging: {'level': {'default': 'debug'}} should not be valid under {}"
    ]
    assert ENVOY_GATEWAY_VALUES_SCHEMA["properties"]["config"]["properties"]["envoyGateway"]["properties"][
        "logging"
    ] is NOT_SET  # fmt: skip


def test_kubernetes_field_names_come_from_the_kubernetes_types():
    assert {"name", "value", "valueFrom"} == set(ENV_VAR["properties"])
    with pytest.raises(ValueError, match="not upstream field names"):
        fields(("url", "tls"), {"tsl": {}})


def test_values_types_upstream_reads_as_they_are():
    """Env values are strings, the receive cap a string of digits (a float renders as 1.6777216e+07)."""
    values = pv.envoy_gateway_values(STACKS["dev"])
    values["config"]["envoyGateway"]["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["env"][-1][
        "value"
    ] = 0.8  # fmt: skip
    assert errors(ENVOY_GATEWAY_VALUES_SCHEMA, values)
    router = pv.agent_router_values(STACKS["dev"])
    router["controller"]["maxRecvMsgSize"] = 16777216
    assert errors(AGENT_ROUTER_VALUES_SCHEMA, router)
