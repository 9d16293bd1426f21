"""The component package of agent-budgets (plugin/): its name, its components and the schema Pulumi infers.

`pulumi package add <repository>/plugin@v<VERSION>` runs plugin/__main__.py, which hosts `PACKAGE_COMPONENTS` with
`pulumi.provider.experimental.component_provider_host` under `PACKAGE_NAME` and `VERSION`; `package_schema` is the
schema that host answers GetSchema with, built the same way in this process (plugin/schema.json, `make docs`).
"""

import json
from typing import Any

from pulumi.provider.experimental.component import ComponentProvider

from agent_budgets.component import AgentBudgets
from agent_budgets.version import VERSION

PACKAGE_NAME = "agent-budgets"
PACKAGE_COMPONENTS = [AgentBudgets]


def package_schema() -> dict[str, Any]:
    """The package schema, inferred from the components' annotations and docstrings (pulumi 3.272.0
    pulumi/provider/experimental/component.py: `ComponentProvider.__init__` analyzes them and serializes it)."""
    return json.loads(ComponentProvider(PACKAGE_COMPONENTS, PACKAGE_NAME, version=VERSION).schema)


def schema_text() -> str:
    """plugin/schema.json: the schema as the file holds it."""
    return json.dumps(package_schema(), indent=2) + "\n"
