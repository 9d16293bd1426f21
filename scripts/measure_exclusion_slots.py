"""Print what `agent-budgets:budgetPolicy.exclusionSlots` costs, as the table in docs/message-size.md.

Run with `venv/bin/python scripts/measure_exclusion_slots.py`; tests/test_xds_size.py checks that the
document holds exactly this table.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.xds_size import exclusion_slot_cost  # noqa: E402

SLOT_COUNTS = (8, 16, 32, 64, 127)
ACTORS = 10_000


def table() -> str:
    """The Markdown table: one row per slot count."""
    lines = [
        "| exclusionSlots | rate-limit bytes per model route (no class) | default counter key | "
        f"keys of {ACTORS:,} default actors, one window | class members it can exclude |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for slots in SLOT_COUNTS:
        cost = exclusion_slot_cost(slots)
        lines.append(
            f"| {slots} | {cost.route_bytes:,} B | {cost.counter_key_bytes:,} B | "
            f"{cost.counter_key_bytes * ACTORS / 1_000_000:.1f} MB | about {cost.members_capacity:,} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
