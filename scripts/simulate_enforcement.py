"""Print each limit's worst case next to the fullest counter of randomized concurrent workloads (`make simulate`).

    venv/bin/python scripts/simulate_enforcement.py                  # the table of docs/budgets.md
    venv/bin/python scripts/simulate_enforcement.py --runs 20000 --seed 7

The simulation (tests/support/enforcement.py) replays the rate-limit service's semantics as envoyproxy/ratelimit
implements them, Envoy's request and stream-done descriptors and Agent Router's usage reports, for the stack in
`BOUNDED_STACK`; the bounds are the program's own stack output `worstCase` (core/worst_case.py). The default
seed and run count are the ones of the table in docs/budgets.md (`make docs` writes it) and of
tests/test_enforcement.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.enforcement import RUNS, SEED, simulate, table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help=f"randomized runs (default {RUNS:,})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED})")
    args = parser.parse_args(argv)
    observations = simulate(args.seed, args.runs)
    print(table(observations, args.runs, args.seed))
    exceeded = [o for o in observations if o.worst_seen > o.bound]
    for o in exceeded:
        print(f"BOUND EXCEEDED: {o.budget} rule {o.rule}: {o.worst_seen} > {o.bound}", file=sys.stderr)
    return 1 if exceeded else 0


if __name__ == "__main__":
    raise SystemExit(main())
