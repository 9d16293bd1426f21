"""How the property-based tests run: seeded and bounded in `make test`, wider on request.

Every property test sets its own `max_examples` through `examples(n)`, so its cost in `make test` is fixed by
example counts, never by wall-clock time. The `seeded` Hypothesis profile (`tests/conftest.py` loads it) is
derandomized (the same examples on every run, on every machine) and keeps no example database, so CI and a
laptop run exactly the same inputs. To hunt for new failures, run with another profile:

    AGENT_BUDGETS_PROPERTY_SCALE=20 venv/bin/python -m pytest tests/test_config_properties.py \\
        --hypothesis-profile=explore

`explore` draws fresh random examples on each run (a failure prints the seed and the shrunk example to
reproduce it), and the scale multiplies every example count.

Wall-clock deadlines, which catch an input whose cost blows up (a quadratic check, a catastrophic pattern), apply
only while exploring (`$AGENT_BUDGETS_PROPERTY_SCALE` set): `make test` runs on two shared cores, in parallel
workers, where an absolute time limit measures the machine as much as the code.
"""

from __future__ import annotations

import os

from hypothesis import settings

SCALE_ENV = "AGENT_BUDGETS_PROPERTY_SCALE"
DEFAULT_PROFILE = "seeded"

settings.register_profile(DEFAULT_PROFILE, derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)


def exploring() -> bool:
    """True when `$AGENT_BUDGETS_PROPERTY_SCALE` is set: someone is hunting for failures, not running `make test`."""
    return bool(os.environ.get(SCALE_ENV))


def explore_deadline(milliseconds: int) -> int | None:
    """A Hypothesis `deadline` that holds only while exploring; `make test` sets none (see the module docstring)."""
    return milliseconds if exploring() else None


def examples(count: int) -> int:
    """`count` examples, times `$AGENT_BUDGETS_PROPERTY_SCALE` (default 1)."""
    scale = float(os.environ.get(SCALE_ENV) or 1)
    return max(1, round(count * scale))
