"""`AgentBudgets` as a program that uses it builds it: from arguments, with its secrets as inputs.

Under Pulumi mocks, with no stack configuration at all: the dev and prod stack files passed as arguments build
exactly the resources of the baseline (tests/fixtures/resource-baseline/, the program before `AgentBudgets`), only
under the component; a configuration problem is one report and registers nothing; and hosted as the component
package (plugin/), through the SDK's own `ComponentProvider.construct`, the egress policies are refused with an
input error that says what to do instead.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import ComponentInitError
from pulumi.runtime import rpc

import agent_budgets.component as component_module
from agent_budgets import AgentBudgets, AgentBudgetsArgs
from agent_budgets.component import SECTION_FIELDS
from agent_budgets.package import PACKAGE_COMPONENTS, PACKAGE_NAME, PackageProvider
from agent_budgets.version import VERSION
from scripts.gen_resource_baseline import BASELINE_DIR, EXAMPLE_SECRETS, inputs_digest
from tests.support.engine_urns import engine_resources
from tests.support.program import PROJECT, ProgramRun, run_program, stack_config

COMPONENT_TYPE = "agent-budgets:index:AgentBudgets"
SECRET_TEXT = "component-secret-0123456789"


def stack_file_args(stack: str) -> dict[str, Any]:
    """A stack file's sections as AgentBudgets arguments."""
    return {SECTION_FIELDS[key]: value for key, value in stack_config(stack).items()}


def build(args: dict[str, Any] | Any, stack: str = "test") -> tuple[ProgramRun, dict[str, Any]]:
    """AgentBudgets under mocks; `args` may be a function making them (to create Outputs inside the run)."""
    built: dict[str, Any] = {}

    def main() -> None:
        built["component"] = AgentBudgets("agent-budgets", args() if callable(args) else args)

    return run_program({}, stack=stack, main=main), built


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_stack_files_as_arguments_build_the_resources_of_the_stacks(stack):
    def args() -> AgentBudgetsArgs:
        values = stack_file_args(stack)
        if stack == "prod":
            values["provider_api_keys"] = {
                name: pulumi.Output.secret(EXAMPLE_SECRETS[f"{name}ApiKey"]) for name in ("openai", "anthropic")
            }
            values["redis_password"] = pulumi.Output.secret(EXAMPLE_SECRETS["redisPassword"])
        return values

    run, _ = build(args, stack)
    resources = engine_resources(run.monitor.registrations, stack, PROJECT)
    [component] = [resource for resource in resources if resource.type == COMPONENT_TYPE]
    assert component.parent == ""
    # Each resource's URN without the component in its parents' types is its URN in the stack.
    prefix = f"urn:pulumi:{stack}::{PROJECT}::{COMPONENT_TYPE}$"
    built = {
        resource.urn.replace(prefix, f"urn:pulumi:{stack}::{PROJECT}::"): inputs_digest(resource.inputs)
        for resource in resources
        if resource is not component
    }
    baseline = json.loads((BASELINE_DIR / f"{stack}.json").read_text())["resources"]
    assert built == {item["urn"]: item["inputs"] for item in baseline}


def test_the_component_outputs_are_the_stack_outputs_and_the_schema_lists_each():
    """dev-kubernetes with `platform.install: false` has every output (gatewayUrl, apiKeys, the Helm values)."""
    config = stack_config("dev-kubernetes")
    config["platform"] = {**config.get("platform", {}), "install": False}
    program = run_program(config, stack="dev-kubernetes")
    run, built = build({SECTION_FIELDS[key]: value for key, value in config.items()}, "dev-kubernetes")
    budgets: AgentBudgets = built["component"]
    schema = ComponentProvider(PACKAGE_COMPONENTS, PACKAGE_NAME, version=VERSION)
    outputs = json.loads(schema.schema)["resources"][COMPONENT_TYPE]["properties"]
    assert set(budgets.stack_outputs) == set(program.outputs) == set(outputs)
    for key in program.outputs:
        if key != "apiKeys":
            assert budgets.stack_outputs[key] == program.outputs[key], key
    registered = run.monitor.outputs[run.monitor.one(COMPONENT_TYPE).urn]
    assert registered["actors"] == program.outputs["actors"] == len(config["actors"])


def test_a_missing_secret_input_and_other_mistakes_are_one_report_and_nothing_is_registered():
    args = stack_file_args("prod")
    args["budgets"] = {"default": {"tokens": -1, "per": "Day"}}
    args["provider_api_keys"] = {"openai": SECRET_TEXT, "open-ai": SECRET_TEXT}
    with pytest.raises(pulumi.RunError) as caught:
        build(args, "prod")
    report = str(caught.value)
    assert report.startswith("invalid stack configuration:")
    assert "agent-budgets:budgets.default.tokens:" in report
    assert "agent-budgets:providerApiKeys.anthropic: is not set: it holds the API key of provider 'anthropic'" in report
    assert "agent-budgets:redisPassword: is not set: it holds the password of the external Redis" in report
    assert "agent-budgets:providerApiKeys.open-ai: is set, but no setting uses it" in report
    assert "pulumi config" not in report  # a component user has no secret config to set
    assert SECRET_TEXT not in report


def test_kubeconfig_contents_as_an_input_reach_the_provider_and_the_shards_only_as_secrets():
    contents = (
        "apiVersion: v1\nclusters:\n- name: prod\n  cluster: {server: 'https://prod.example:6443'}\n"
        "contexts:\n- name: kind-agent-budgets\n  context: {cluster: prod, user: ci}\n"
        f"users:\n- name: ci\n  user: {{token: {SECRET_TEXT}}}\n"
    )
    run, _ = build({**stack_file_args("dev"), "kubeconfig": contents})
    [provider] = [r for r in run.monitor.registrations if r.type == "pulumi:providers:kubernetes"]
    shards = [r for r in run.monitor.registrations if r.type == "pulumi-python:dynamic:EgressPolicyShard"]
    assert shards
    for registration in [provider, *shards]:
        assert registration.inputs["kubeconfig"] == {rpc._special_sig_key: rpc._special_secret_sig, "value": contents}
    assert {shard.inputs["cluster"] for shard in shards} == {"server:https://prod.example:6443"}


def construct_as_package(inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[ProgramRun, Any]:
    """What the plugin process does on Construct: the package's provider (the SDK's ComponentProvider) maps the
    camelCase inputs and calls AgentBudgets, in a process marked as the package's host (plugin/__main__.py)."""
    monkeypatch.setattr(component_module, "_hosted_as_package", True)
    result: dict[str, Any] = {}

    def main() -> None:
        provider = PackageProvider()
        values = {key: value() if callable(value) else value for key, value in inputs.items()}
        result["construct"] = provider.construct("budgets", COMPONENT_TYPE, values, None)

    run = run_program({}, main=main)
    return run, result["construct"]


def test_as_a_package_the_egress_policies_are_refused_with_an_input_error(monkeypatch):
    inputs = dict(stack_config("dev"))
    with pytest.raises(pulumi.InputPropertyError) as caught:
        construct_as_package(inputs, monkeypatch)
    error = caught.value
    assert error.property_path == "substrate.egress.enabled"
    assert "Set substrate.egress.enabled to false" in error.reason
    assert "pulumi/pulumi#5455" in error.reason
    # The SDK reports a constructor's exception by its text: it names the input and the way out.
    assert str(caught.value).startswith("substrate.egress.enabled: is true (the default). Substrate egress policies")


def test_as_a_package_without_egress_policies_it_builds_and_answers_with_camel_case_outputs(monkeypatch):
    inputs: dict[str, Any] = dict(stack_config("dev"))
    inputs["substrate"] = {"egress": {"enabled": False}}
    inputs["kubeconfig"] = lambda: pulumi.Output.secret("/etc/agent-budgets/kubeconfig")
    run, result = construct_as_package(inputs, monkeypatch)
    types = {registration.type for registration in run.monitor.registrations}
    assert COMPONENT_TYPE in types and "pulumi-python:dynamic:EgressPolicyShard" not in types
    assert "agent-budgets:substrate:ActorEgressPolicies" not in types
    assert result.state["actors"].__class__ is pulumi.Output
    assert set(result.state) == {
        "gatewayUrl", "actors", "budgetRules", "worstCase", "suspended", "routes", "redisMode", "failClosed",
        "identitySources",
    }  # fmt: skip
    [provider] = [r for r in run.monitor.registrations if r.type == "pulumi:providers:kubernetes"]
    secret = {rpc._special_sig_key: rpc._special_secret_sig, "value": "/etc/agent-budgets/kubeconfig"}
    assert provider.inputs["kubeconfig"] == secret


def test_as_a_package_kubeconfig_contents_are_refused_among_the_plain_inputs(monkeypatch):
    inputs: dict[str, Any] = dict(stack_config("dev"))
    inputs["substrate"] = {"egress": {"enabled": False}}
    inputs["kubernetes"] = {"context": "prod", "kubeconfig": "apiVersion: v1\nclusters: []\n"}
    with pytest.raises(pulumi.InputPropertyError) as caught:
        construct_as_package(inputs, monkeypatch)
    assert caught.value.property_path == "kubernetes.kubeconfig"
    assert "pass them as the secret input `kubeconfig`" in caught.value.reason


def test_the_sdks_own_component_provider_wraps_a_refused_input_which_the_package_unwraps(monkeypatch):
    """Why PackageProvider.construct exists: the SDK's ComponentProvider hands the server a ComponentInitError, whose
    text and traceback the engine printed after `Unexpected <class 'Exception'>:` (seen on the rig with the real
    engine); the server reports an InputPropertyError as the input and its reason instead."""
    monkeypatch.setattr(component_module, "_hosted_as_package", True)
    caught: dict[str, BaseException] = {}

    def main() -> None:
        values = dict(stack_config("dev"))
        for provider in (ComponentProvider(PACKAGE_COMPONENTS, PACKAGE_NAME, version=VERSION), PackageProvider()):
            try:
                provider.construct("budgets", COMPONENT_TYPE, values, None)
            except Exception as error:  # the two providers raise different types
                caught[type(provider).__name__] = error

    run_program({}, main=main)
    sdk, ours = caught["ComponentProvider"], caught["PackageProvider"]
    assert isinstance(sdk, ComponentInitError) and isinstance(sdk.inner, pulumi.InputPropertyError)
    assert not isinstance(ours, ComponentInitError)
    assert isinstance(ours, pulumi.InputPropertyError) and ours.property_path == "substrate.egress.enabled"
