"""agent-budgets as a library: `AgentBudgets`, the whole installation as one Pulumi component.

    from agent_budgets import AgentBudgets, AgentBudgetsArgs

docs/use-from-your-program.md shows it from Python, TypeScript and Pulumi YAML.
"""

from agent_budgets.component import AgentBudgets, AgentBudgetsArgs
from agent_budgets.version import VERSION

__version__ = VERSION

__all__ = ["VERSION", "AgentBudgets", "AgentBudgetsArgs", "__version__"]
