"""A plugin module whose import is interrupted (Ctrl-C while discovering adapters)."""

raise KeyboardInterrupt
