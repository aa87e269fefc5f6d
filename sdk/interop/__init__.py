"""Model formats in and out of polyhal."""

from polyhal.interop.loading import load_model

__all__ = ["load_model"]
