"""Training on any device: losses, optimizers whose updates are IR, ``fit`` with
metrics and a history, mixed precision with dynamic loss scaling, gradient
clipping and atomic, resumable checkpoints.

::

    from polyhal import nn, train
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2)).initialize(seed=0)
    history = train.fit(model, (x, y), epochs=10, batch_size=64,
                        optimizer=train.Adam(1e-2), device="cpu")
"""

from polyhal.train.checkpoint import load_checkpoint, save_checkpoint
from polyhal.train.datasets import gaussian_classes, spirals, two_moons
from polyhal.train.fit import StepInfo, accuracy, evaluate, fit
from polyhal.train.history import History
from polyhal.train.losses import (
    LOSSES,
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    mse,
)
from polyhal.train.optim import SGD, Adam, AdamW, Optimizer
from polyhal.train.precision import LossScaler
from polyhal.train.step import Trainer, step_graph

__all__ = [
    "LOSSES", "SGD", "Adam", "AdamW", "History", "LossScaler", "Optimizer", "StepInfo",
    "Trainer", "accuracy", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "cross_entropy", "evaluate", "fit", "gaussian_classes", "load_checkpoint", "mse",
    "save_checkpoint", "spirals", "step_graph", "two_moons",
]
