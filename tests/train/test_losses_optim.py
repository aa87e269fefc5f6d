"""Losses against numpy, optimizers' IR updates against the textbook (torch)
formulas, and their argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal import train
from polyhal.errors import IRError
from polyhal.ir import DType, GraphBuilder, TensorType
from polyhal.reference import run


def _loss_value(loss, predictions, targets):
    g = GraphBuilder("loss")
    p = g.input("p", TensorType.of(predictions))
    t = g.input("t", TensorType.of(targets))
    g.output(loss(p, t), name="loss")
    return float(run(g.build(), p=predictions, t=targets)["loss"])


RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((6, 4)).astype(np.float32)
LABELS = np.array([0, 3, 1, 1, 2, 0], np.int64)


def _log_softmax(x):
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def test_mse():
    p, t = RNG.standard_normal((5, 3)).astype(np.float32), RNG.standard_normal((5, 3))
    got = _loss_value(train.mse, p, t.astype(np.float32))
    assert got == pytest.approx(np.mean((p - t.astype(np.float32)) ** 2), rel=1e-6)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_cross_entropy_with_integer_labels(dtype):
    got = _loss_value(train.cross_entropy, LOGITS, LABELS.astype(dtype))
    expected = -np.mean(_log_softmax(LOGITS)[np.arange(6), LABELS])
    assert got == pytest.approx(expected, rel=1e-6)


def test_cross_entropy_with_probabilities():
    probabilities = np.eye(4, dtype=np.float32)[LABELS] * 0.9 + 0.025
    got = _loss_value(train.cross_entropy, LOGITS, probabilities)
    expected = -np.mean(np.sum(probabilities * _log_softmax(LOGITS), axis=1))
    assert got == pytest.approx(expected, rel=1e-6)


def test_binary_cross_entropy_and_its_logit_form_agree():
    logits = RNG.standard_normal((8, 1)).astype(np.float32) * 3
    targets = (RNG.random((8, 1)) > 0.5).astype(np.float32)
    p = 1 / (1 + np.exp(-logits))
    expected = -np.mean(targets * np.log(p) + (1 - targets) * np.log(1 - p))
    assert _loss_value(train.binary_cross_entropy, p, targets) == pytest.approx(expected,
                                                                                 rel=1e-5)
    assert _loss_value(train.binary_cross_entropy_with_logits, logits, targets) == (
        pytest.approx(expected, rel=1e-5))


def test_binary_cross_entropy_stays_finite_when_saturated():
    p = np.array([[0.0], [1.0]], np.float32)
    t = np.array([[1.0], [0.0]], np.float32)
    assert np.isfinite(_loss_value(train.binary_cross_entropy, p, t))
    wrong = np.array([[80.0], [-80.0]], np.float32)  # confidently wrong for t = [0, 1]
    assert _loss_value(train.binary_cross_entropy_with_logits, wrong, p) == (
        pytest.approx(80.0))


def test_losses_check_their_inputs():
    with pytest.raises(IRError, match="logits must be \\[batch, classes\\]"):
        _loss_value(train.cross_entropy, LOGITS[0], LABELS[:1])
    with pytest.raises(IRError, match="integer labels must be \\[batch\\]"):
        _loss_value(train.cross_entropy, LOGITS, LABELS.reshape(6, 1))
    with pytest.raises(IRError, match="same shape"):
        _loss_value(train.mse, LOGITS, LOGITS[:, :2].copy())
    with pytest.raises(IRError, match="targets must be floating-point"):
        _loss_value(train.mse, LOGITS, LABELS)
    with pytest.raises(IRError, match="unknown loss 'hinge'"):
        train.losses.get_loss("hinge")


# ----------------------------------------------------------------------------- optimizers


def _ir_steps(optimizer, params, grads_per_step, lr):
    """Run ``optimizer``'s IR update once per gradient set."""
    state = optimizer.init_state(params)
    g = GraphBuilder("update")
    p_in = {n: g.input(n, TensorType.of(v)) for n, v in params.items()}
    g_in = {n: g.input(f"grad/{n}", TensorType.of(v)) for n, v in params.items()}
    s_in = {n: g.input(n, TensorType.of(v)) for n, v in state.items()}
    lr_in = g.input("lr", TensorType(DType.FLOAT32, ()))
    new_p, new_s = optimizer.update(p_in, g_in, s_in, lr_in)
    for n in params:
        g.output(new_p[n], name=f"next/{n}")
    for n in state:
        g.output(new_s.get(n, s_in[n]), name=f"next/{n}")
    graph = g.build()
    values = dict(params)
    for grads in grads_per_step:
        out = run(graph, **values, **{f"grad/{n}": v for n, v in grads.items()}, **state,
                  lr=np.float32(lr))
        values = {n: out[f"next/{n}"] for n in params}
        state = {n: out[f"next/{n}"] for n in state}
    return values


def _textbook(kind, p, grads, lr, **kw):
    """The update rules as torch.optim documents them, in float64."""
    p = p.astype(np.float64)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = g.astype(np.float64)
        if kind == "sgd":
            if kw.get("weight_decay"):
                g = g + kw["weight_decay"] * p
            if kw.get("momentum"):
                m = kw["momentum"] * m + g
                g = g + kw["momentum"] * m if kw.get("nesterov") else m
            p = p - lr * g
        else:
            b1, b2 = kw.get("betas", (0.9, 0.999))
            wd = kw.get("weight_decay", 0.0)
            if kind == "adam" and wd:
                g = g + wd * p
            if kind == "adamw":
                p = p - lr * wd * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + kw.get("eps", 1e-8))
    return p


@pytest.mark.parametrize(("kind", "optimizer", "kw"), [
    ("sgd", train.SGD(0.1), {}),
    ("sgd", train.SGD(0.1, momentum=0.9), {"momentum": 0.9}),
    ("sgd", train.SGD(0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
     {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("adam", train.Adam(0.01), {}),
    ("adam", train.Adam(0.01, betas=(0.8, 0.99), weight_decay=0.1),
     {"betas": (0.8, 0.99), "weight_decay": 0.1}),
    ("adamw", train.AdamW(0.01, weight_decay=0.1), {"weight_decay": 0.1}),
])
def test_optimizer_updates_follow_the_textbook(kind, optimizer, kw):
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((3, 2)).astype(np.float32)}
    grads = [{"w": rng.standard_normal((3, 2)).astype(np.float32)} for _ in range(5)]
    got = _ir_steps(optimizer, params, grads, optimizer.lr)["w"]
    expected = _textbook(kind, params["w"], [g["w"] for g in grads], optimizer.lr, **kw)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: train.SGD(-1.0), "lr=-1.0 must be >= 0"),
    (lambda: train.SGD(0.1, momentum=1.5), "momentum=1.5"),
    (lambda: train.SGD(0.1, nesterov=True), "nesterov=True needs momentum"),
    (lambda: train.Adam(0.1, betas=(0.9,)), "betas"),
    (lambda: train.Adam(0.1, betas=(0.9, 1.0)), "betas\\[1\\]=1.0"),
    (lambda: train.AdamW(0.1, eps=float("nan")), "eps=nan"),
])
def test_optimizer_arguments_are_checked(make, message):
    with pytest.raises(IRError, match=message):
        make()


def test_optimizer_repr_names_its_settings():
    assert repr(train.SGD(0.5, momentum=0.9)) == (
        "SGD(lr=0.5, momentum=0.9, weight_decay=0.0, nesterov=False)")
