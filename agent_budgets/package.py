"""The component package of agent-budgets (plugin/): its name, its components and the schema it serves.

`pulumi package add <repository>/plugin@v<VERSION>` runs plugin/__main__.py, which serves `PackageProvider`: the
`ComponentProvider` of pulumi.provider.experimental hosting `PACKAGE_COMPONENTS` under `PACKAGE_NAME` and `VERSION`
(what `component_provider_host` would start), with the secrets marked in its schema; `package_schema` is that schema,
built the same way in this process (plugin/schema.json, `make docs`).
"""

import json
from typing import Any

import pulumi
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import ComponentInitError

from agent_budgets.component import TYPE_TOKEN, AgentBudgets
from agent_budgets.version import VERSION

PACKAGE_NAME = "agent-budgets"
PACKAGE_COMPONENTS = [AgentBudgets]
# The inputs and outputs that hold secrets. The SDK infers no secrecy from annotations (pulumi 3.272.0
# pulumi/provider/experimental/analyzer.py has none), but the generated SDKs act on `secret: true`: TypeScript wraps
# such an input in `pulumi.secret` before it leaves the consumer's program, and asks for such an output as an
# `additionalSecretOutputs` (pulumi/pulumi pkg/codegen/nodejs/gen.go). `providerApiKeys` is a plain map of inputs
# (its provider names are read when the component is built): a secret map would reach the component as one Output,
# so each key is made a secret inside the component instead (components/stack.py).
SECRET_INPUTS = ("kubeconfig", "redisPassword", "redisSentinelPassword")
SECRET_OUTPUTS = ("apiKeys",)


def with_secrets_marked(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with `secret: true` on each secret input and output of `AgentBudgets`."""
    resource = schema["resources"][TYPE_TOKEN]
    for key in SECRET_INPUTS:
        resource["inputProperties"][key]["secret"] = True
    for key in SECRET_OUTPUTS:
        resource["properties"][key]["secret"] = True
    return schema


class PackageProvider(ComponentProvider):
    """The component provider of the package: the inferred schema (pulumi 3.272.0
    pulumi/provider/experimental/component.py, `ComponentProvider.__init__`), its secrets marked."""

    def __init__(self) -> None:
        super().__init__(PACKAGE_COMPONENTS, PACKAGE_NAME, version=VERSION)
        self.schema = json.dumps(with_secrets_marked(json.loads(self.schema or "{}")))

    def construct(
        self,
        name: str,
        resource_type: str,
        inputs: pulumi.Inputs,
        options: pulumi.ResourceOptions | None = None,
    ) -> Any:
        """The SDK's construct, with a refused input reported as one: `ComponentProvider.construct` wraps every
        exception of the constructor in `ComponentInitError` (pulumi 3.272.0 provider/experimental/component.py), so
        the server's `InputPropertyError` branch (provider/server.py `Construct`) never sees ours, and the engine
        printed `Unexpected <class 'Exception'>:` and our traceback. Unwrapped, it answers with the property and the
        reason, as an invalid-input status."""
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as error:
            if isinstance(error.inner, pulumi.InputPropertyError):
                raise error.inner from None
            raise


def package_schema() -> dict[str, Any]:
    """The package schema the plugin serves."""
    return json.loads(PackageProvider().schema or "{}")


def schema_text() -> str:
    """plugin/schema.json: the schema as the file holds it."""
    return json.dumps(package_schema(), indent=2) + "\n"
