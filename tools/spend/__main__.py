"""Entry point of `python -m tools.spend` (and `make spend`)."""

import sys

from tools.spend.cli import main

sys.exit(main())
