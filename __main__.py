"""agent-budgets: a token budget for every AI agent. All logic lives in components/."""

from components.program import run

run()
