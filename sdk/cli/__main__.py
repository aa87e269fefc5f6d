"""``python -m polyhal.cli``."""

import sys

from polyhal.cli import main

sys.exit(main())
