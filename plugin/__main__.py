"""The agent-budgets component package: hosts `AgentBudgets` for programs in any Pulumi language.

The Python language host runs this folder (`python <plugin dir> <engine address> ...`); it cannot be the repository
root, which holds the program's own `__main__.py` and Pulumi.yaml. The repository root goes on the import path, so
the package serves the checked-out code at the version it was added with (`pulumi package add
<repository>/plugin@v<VERSION>`). Egress policies are refused in this mode (agent_budgets.component.host_as_package).
It serves `PackageProvider` as pulumi.provider.experimental's `component_provider_host` serves a `ComponentProvider`
(pulumi 3.272.0 host.py: `main(provider, sys.argv[1:])`), so that the schema marks the secrets.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pulumi.provider import main as serve  # noqa: E402

from agent_budgets.component import host_as_package  # noqa: E402
from agent_budgets.package import PackageProvider  # noqa: E402


def main() -> None:
    host_as_package()
    serve(PackageProvider(), sys.argv[1:])


if __name__ == "__main__":
    main()
