"""The version of agent-budgets: the one place it is written.

pyproject.toml reads it (`[tool.setuptools.dynamic]`), and the component package (plugin/) serves its schema under
it, so `pulumi package add .../plugin@v<VERSION>` and the installed distribution always agree.
"""

VERSION = "0.1.0"
