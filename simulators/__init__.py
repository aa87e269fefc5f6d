"""polyhal package."""
