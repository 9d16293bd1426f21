"""agent-budgets: a token budget for every AI agent. One `AgentBudgets` (agent_budgets/), built from this stack's
configuration; its outputs are the stack's outputs."""

import pulumi

from agent_budgets import AgentBudgets
from components.program import stack_configuration

args, program = stack_configuration()
budgets = AgentBudgets("agent-budgets", args, program=program)
for key, value in budgets.stack_outputs.items():
    pulumi.export(key, value)
