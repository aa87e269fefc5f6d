"""Recipes: valid inputs for every op, by dtype and shape class."""

from polyhal.conformance.recipes.base import (
    RECIPES,
    SHAPE_CLASSES,
    OpSample,
    Recipe,
    recipe,
    special_values,
    values,
)

__all__ = ["RECIPES", "SHAPE_CLASSES", "OpSample", "Recipe", "recipe", "special_values",
           "values"]
