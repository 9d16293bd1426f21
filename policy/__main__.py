"""Entry point of the agent-budgets policy pack: `pulumi preview --policy-pack policy`.

`PolicyPack` starts the analyzer's gRPC server and blocks forever, so nothing imports this file: tests
import `policy.rules`. The rules reuse the program's `core/`, so the repository root goes on the
path first (the CLI runs this file from the pack's own directory and virtualenv).
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policy.rules import PACK_NAME, POLICIES  # noqa: E402

PolicyPack(
    name=PACK_NAME,
    policies=POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    description="agent-budgets: one token budget per actor; identity only from the actor JWT; keys only in Secrets.",
)
