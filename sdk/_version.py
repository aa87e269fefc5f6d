"""The single source of polyhal's version."""

__version__ = "0.1.0"
