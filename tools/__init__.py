"""Command-line tools for operators of an agent-budgets stack (they read a stack; they never change one)."""
