"""How the property-based tests run: seeded and bounded in `make test`, wider on request.

Every property test sets its own `max_examples` through `examples(n)`, so its cost in `make test` is fixed by
example counts, never by wall-clock time. The `seeded` Hypothesis profile (`tests/conftest.py` loads it) is
derandomized (the same examples on every run, on every machine) and keeps no example database, so CI and a
laptop run exactly the same inputs. To hunt for new failures, run with another profile:

    AGENT_BUDGETS_PROPERTY_SCALE=20 venv/bin/python -m pytest tests/test_config_properties.py \\
        --hypothesis-profile=explore

`explore` draws fresh random examples on each run (a failure prints the seed and the shrunk example to
reproduce it), and the scale multiplies every example count.
"""

from __future__ import annotations

import os

from hypothesis import settings

SCALE_ENV = "AGENT_BUDGETS_PROPERTY_SCALE"
DEFAULT_PROFILE = "seeded"

settings.register_profile(DEFAULT_PROFILE, derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)


def examples(count: int) -> int:
    """`count` examples, times `$AGENT_BUDGETS_PROPERTY_SCALE` (default 1)."""
    scale = float(os.environ.get(SCALE_ENV) or 1)
    return max(1, round(count * scale))
