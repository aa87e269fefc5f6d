"""Initializers and deterministic initialization."""

from __future__ import annotations

import math

import numpy as np
import pytest

from polyhal import nn
from polyhal.errors import IRError


def _model() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(2, 4, 3), nn.Flatten(), nn.Linear(4, 3))


def _draw(init: nn.init.Initializer, shape: tuple[int, ...], seed: int = 0,
          **kwargs: object) -> np.ndarray:
    return init(nn.Parameter(shape, init, dtype="float64", **kwargs), np.random.default_rng(seed))


def test_same_seed_same_values_different_seed_different_values():
    first = _model().initialize(7).state_dict()
    again = _model().initialize(7).state_dict()
    other = _model().initialize(8).state_dict()
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["0.weight"], other["0.weight"])
    assert not np.array_equal(first["2.weight"], other["2.weight"])


def test_initialize_draws_in_named_order_from_one_generator():
    model = _model().initialize(3)
    rng = np.random.default_rng(3)
    for name, parameter in model.named_parameters().items():
        expected = parameter.init(parameter, rng).astype(np.float32)
        np.testing.assert_array_equal(parameter.data, expected, err_msg=name)


def test_a_never_initialized_model_is_initialized_with_seed_0_on_first_use():
    reference = _model().initialize(0).state_dict()
    lazy = _model()
    assert not any(p.is_initialized for p in lazy._named_parameters().values())
    with pytest.raises(IRError, match=r"parameter 'weight' has no value yet.*initialize"):
        _ = lazy[0].weight.data
    lazy.graph((1, 2, 3, 3))  # first use
    for name, value in lazy.state_dict().items():
        np.testing.assert_array_equal(value, reference[name])


def test_first_use_draws_only_missing_values_as_initialize_0_would():
    reference = _model().initialize(0).state_dict()
    model = _model()
    model.load_state_dict({"2.weight": np.full((4, 3), 5.0, np.float32)}, strict=False)
    state = model.state_dict()
    np.testing.assert_array_equal(state["2.weight"], np.full((4, 3), 5.0, np.float32))
    for name in ("0.weight", "0.bias", "2.bias"):
        np.testing.assert_array_equal(state[name], reference[name])


def test_float32_and_float64_models_agree_from_one_seed():
    single = nn.Linear(5, 3).initialize(1).weight.data
    double = nn.Linear(5, 3, dtype="float64").initialize(1).weight.data
    assert single.dtype == np.float32 and double.dtype == np.float64
    np.testing.assert_array_equal(single, double.astype(np.float32))


def test_kaiming_uniform_uses_each_layouts_fan_in():
    linear = nn.Linear(200, 300).initialize(0).weight.data
    bound = math.sqrt(6 / 200)
    assert np.abs(linear).max() <= bound and np.abs(linear).max() > 0.98 * bound
    assert np.var(linear) == pytest.approx(2 / 200, rel=0.03)
    conv = nn.Conv2d(16, 32, (3, 5), groups=2).initialize(0).weight.data
    fan_in = 16 // 2 * 3 * 5
    assert conv.shape == (32, 8, 3, 5)
    assert np.abs(conv).max() <= math.sqrt(6 / fan_in)
    assert np.var(conv) == pytest.approx(2 / fan_in, rel=0.05)
    assert nn.Conv2d(16, 32, (3, 5), groups=2).weight.fans == (120, 32 * 15)


def test_default_fans_follow_the_layouts():
    assert nn.init.default_fans(()) == (1, 1)
    assert nn.init.default_fans((7,)) == (7, 7)
    assert nn.init.default_fans((3, 5)) == (3, 5)  # [in, out]
    assert nn.init.default_fans((8, 4, 3, 3)) == (36, 72)  # [out, in, kh, kw]


def test_biases_default_to_zeros():
    assert not nn.Linear(3, 4).initialize(5).bias.data.any()
    assert not nn.Conv2d(3, 4, 1).initialize(5).bias.data.any()


@pytest.mark.parametrize(("init", "mean", "var"), [
    (nn.init.normal(std=0.5, mean=1.0), 1.0, 0.25),
    (nn.init.uniform(-2.0, 4.0), 1.0, 36 / 12),
    (nn.init.xavier_uniform(), 0.0, 2 / (100 + 300)),
    (nn.init.xavier_normal(gain=2.0), 0.0, 4 * 2 / (100 + 300)),
    (nn.init.kaiming_normal(), 0.0, 2 / 100),
    (nn.init.kaiming_normal(gain=1.0, mode="fan_out"), 0.0, 1 / 300),
    (nn.init.kaiming_uniform(gain=1.0, mode="fan_out"), 0.0, 1 / 300),
])
def test_initializer_statistics(init, mean, var):
    values = _draw(init, (100, 300))
    assert np.mean(values) == pytest.approx(mean, abs=0.02 * max(math.sqrt(var), 0.1))
    assert np.var(values) == pytest.approx(var, rel=0.03)


def test_uniform_and_xavier_bounds():
    values = _draw(nn.init.uniform(-0.5, 0.25), (1000,))
    assert values.min() >= -0.5 and values.max() < 0.25
    values = _draw(nn.init.xavier_uniform(gain=3.0), (40, 60))
    assert np.abs(values).max() <= 3.0 * math.sqrt(6 / 100)


def test_constants():
    assert (_draw(nn.init.zeros(), (2, 3)) == 0).all()
    assert (_draw(nn.init.ones(), (2, 3)) == 1).all()
    np.testing.assert_array_equal(_draw(nn.init.constant(2.5), (2,)), [2.5, 2.5])
    np.testing.assert_array_equal(_draw(nn.init.constant([1, 2]), (2, 2)), [[1, 2], [1, 2]])
    assert repr(nn.init.constant(2.5)) == "constant(2.5)"
    assert repr(nn.init.kaiming_uniform()) == "kaiming_uniform(gain=1.414, mode='fan_in')"


def test_a_custom_initializer_is_any_callable():
    parameter = nn.Parameter((2, 2), lambda p, rng: np.full(p.shape, 0.5))
    parameter.initialize(np.random.default_rng(0))
    np.testing.assert_array_equal(parameter.data, np.full((2, 2), 0.5, np.float32))


@pytest.mark.parametrize(("make", "message"), [
    (lambda: nn.init.normal(std=-1.0), r"init\.normal: std must be >= 0"),
    (lambda: nn.init.normal(mean=float("nan")), "mean must be a finite number"),
    (lambda: nn.init.uniform(1.0, 0.0), r"need a <= b, got a=1, b=0"),
    (lambda: nn.init.uniform("a", 1.0), "a must be a finite number"),
    (lambda: nn.init.kaiming_uniform(mode="fan_avg"), "mode must be 'fan_in' or 'fan_out'"),
    (lambda: nn.init.xavier_normal(gain=-1), "gain must be >= 0"),
    (lambda: nn.init.constant("x"), "value must be a number or a numeric array"),
    (lambda: _draw(nn.init.constant([1, 2, 3]), (2, 2)), r"\(3,\) does not broadcast to"),
    (lambda: nn.Parameter((2,), nn.init.zeros), r"init=zeros is an initializer factory; "
                                                r"call it \(init=zeros\(\)\)"),
    (lambda: nn.Parameter((2,), 3), "init must be an initializer"),
    (lambda: nn.Parameter((-1,), nn.init.zeros()), "shape must be a sequence of ints >= 0"),
    (lambda: nn.Parameter((2,), nn.init.zeros(), dtype="int32"), "floating-point type"),
    (lambda: nn.Parameter((2,), nn.init.zeros(), fans=(1,)), r"fans must be \(fan_in, fan_out\)"),
    (lambda: nn.Parameter((2,), lambda p, rng: np.zeros(3)).initialize(
        np.random.default_rng(0)), r"returned shape \(3,\), expected \(2,\)"),
    (lambda: nn.Linear(1, 1).initialize(-1), "seed must be an int >= 0"),
    (lambda: nn.Linear(1, 1).initialize(1.5), "seed must be an int >= 0"),
])
def test_initializer_errors(make, message):
    with pytest.raises(IRError, match=message):
        make()


def test_a_parameter_too_large_to_hold_is_refused_before_it_is_drawn():
    from polyhal.errors import LimitExceededError
    from polyhal.ir import Limits, use_limits

    with pytest.raises(LimitExceededError, match=r"parameter 'weight' \(float32\[1099511627776, "
                                                 r"4\]\): dimension 1099511627776"):
        nn.Linear(2**40, 4).initialize()
    with use_limits(Limits(max_elements=1000)), pytest.raises(
            LimitExceededError, match=r"parameter 'weight' \(float32\[64, 64\]\): 4096 elements"):
        nn.Linear(64, 64).initialize()


def test_an_initializer_out_of_memory_names_the_parameter():
    from polyhal.errors import LimitExceededError

    def exhausting(parameter, rng):
        raise MemoryError

    parameter = nn.Parameter((3, 5), exhausting)
    with pytest.raises(LimitExceededError, match=r"parameter \(float32\[3, 5\]\): not enough "
                                                 r"memory to draw its 15 values"):
        parameter.initialize(np.random.default_rng(0))
