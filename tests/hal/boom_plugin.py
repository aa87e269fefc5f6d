"""A plugin module whose import fails, as a broken third-party adapter would."""

raise RuntimeError("boom: this plugin cannot be imported")
