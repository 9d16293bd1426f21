"""The component package (plugin/): the schema it serves, served by the real plugin process, at the project's version.

Without the Pulumi CLI: the schema is inferred in this process exactly as the plugin's host infers it and compared
with plugin/schema.json (`make docs` rewrites it); the plugin is started as the Python language host starts it
(`python <plugin dir> <engine address>`: pulumi/provider/server.py `main` prints its port, and the engine is
contacted only on Construct) and asked for its schema over gRPC.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import grpc
import pytest
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from agent_budgets.component import SECRET_FIELDS, SECTION_FIELDS
from agent_budgets.package import PACKAGE_NAME, package_schema, schema_text
from agent_budgets.version import VERSION
from core.validation import TOP_LEVEL_KEYS

ROOT = Path(__file__).resolve().parents[1]
COMPONENT_TYPE = "agent-budgets:index:AgentBudgets"


def test_the_committed_schema_is_the_one_the_code_infers():
    assert (ROOT / "plugin" / "schema.json").read_text(encoding="utf-8") == schema_text(), "run `make docs`"


def test_the_inputs_are_the_configuration_sections_and_the_secrets():
    resource = package_schema()["resources"][COMPONENT_TYPE]
    inputs = resource["inputProperties"]
    secrets = {"kubeconfig", "providerApiKeys", "redisPassword", "redisSentinelPassword"}
    assert set(SECTION_FIELDS) == set(TOP_LEVEL_KEYS)
    assert set(inputs) == set(TOP_LEVEL_KEYS) | secrets
    assert len(SECRET_FIELDS) == len(secrets)
    assert resource["requiredInputs"] == ["budgets"]
    # The configuration must be known when the component is built (it is validated then): plain inputs. The
    # secrets may be Outputs of the consumer's program.
    assert all(inputs[key].get("plain") for key in TOP_LEVEL_KEYS)
    assert not any(inputs[key].get("plain") for key in ("kubeconfig", "redisPassword", "redisSentinelPassword"))
    assert not inputs["providerApiKeys"]["additionalProperties"].get("plain")
    # Docstrings are the descriptions, each naming its section.
    for key in TOP_LEVEL_KEYS:
        assert inputs[key]["description"].startswith(f"`{key}`: "), key
    assert resource["description"].startswith("A token budget for every AI agent")


def test_one_version_names_the_package_the_distribution_and_the_plugin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "agent_budgets.version.VERSION"}
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements.txt"]}
    schema = package_schema()
    assert (schema["name"], schema["version"]) == (PACKAGE_NAME, VERSION)
    main = (ROOT / "plugin" / "__main__.py").read_text(encoding="utf-8")
    assert "serve(PackageProvider(), sys.argv[1:])" in main


def test_the_schema_marks_the_secrets_so_generated_sdks_keep_them_secret():
    """A generated TypeScript SDK wraps each `secret: true` input in `pulumi.secret` and asks for each such output as
    an additional secret output (pulumi/pulumi pkg/codegen/nodejs/gen.go): the secret inputs and `apiKeys` are
    marked; the configuration sections are not (they hold no secret: the checks refuse one there)."""
    resource = package_schema()["resources"][COMPONENT_TYPE]
    marked_inputs = {key for key, spec in resource["inputProperties"].items() if spec.get("secret")}
    marked_outputs = {key for key, spec in resource["properties"].items() if spec.get("secret")}
    assert marked_inputs == {"kubeconfig", "redisPassword", "redisSentinelPassword"}
    assert marked_outputs == {"apiKeys"}
    # providerApiKeys stays a plain map of inputs (its names are read at construct time), each value an input.
    assert resource["inputProperties"]["providerApiKeys"]["plain"] is True
    assert resource["inputProperties"]["providerApiKeys"]["additionalProperties"]["type"] == "string"


def test_the_plugin_declares_a_python_runtime_with_the_programs_requirements():
    manifest = (ROOT / "plugin" / "PulumiPlugin.yaml").read_text(encoding="utf-8")
    assert "runtime:\n  name: python\n" in manifest
    requirements = (ROOT / "plugin" / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert [line for line in requirements if not line.startswith("#")] == ["-r ../requirements.txt"]


@pytest.fixture
def plugin_port():
    """The plugin process, started as the language host starts it; its gRPC port."""
    # The engine address is only dialled on Construct; nothing listens on port 1.
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "plugin"), "127.0.0.1:1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        if not line.strip().isdigit():
            process.kill()
            pytest.fail(f"the plugin printed no port: {line!r} {process.stderr.read()}")
        yield int(line)
    finally:
        process.kill()
        process.wait(timeout=30)


def test_the_plugin_process_answers_get_schema_with_the_committed_schema(plugin_port):
    with grpc.insecure_channel(f"127.0.0.1:{plugin_port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        response = provider_pb2_grpc.ResourceProviderStub(channel).GetSchema(
            provider_pb2.GetSchemaRequest(version=0), timeout=30
        )
    assert json.loads(response.schema) == json.loads((ROOT / "plugin" / "schema.json").read_text(encoding="utf-8"))
