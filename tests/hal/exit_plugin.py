"""A plugin module that ends the process at import, as a careless third-party adapter might."""

import sys

sys.exit(3)
