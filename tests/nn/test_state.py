"""state_dict and load_state_dict: round trip, copies, and every error."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from polyhal import nn
from polyhal.errors import InputBindingError


def _model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_round_trip_restores_every_value():
    source = _model().initialize(1)
    target = _model().initialize(2)
    result = target.load_state_dict(source.state_dict())
    assert result == nn.LoadResult(missing=[], unexpected=[])
    for name, value in target.state_dict().items():
        np.testing.assert_array_equal(value, source.state_dict()[name])


def test_state_dict_and_loading_copy():
    model = _model().initialize(0)
    state = model.state_dict()
    state["0.weight"][...] = 9.0
    assert not (model[0].weight.data == 9.0).any()
    fresh = {k: np.zeros_like(v) for k, v in state.items()}
    model.load_state_dict(fresh)
    fresh["0.bias"][...] = 1.0
    assert not model[0].bias.data.any()


def test_frozen_parameters_are_in_the_state():
    model = _model().freeze("0")
    assert list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def _assert_untouched(model: nn.Module, before: dict[str, np.ndarray]) -> None:
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s.update(extra=np.zeros(1, np.float32)), r"unknown parameter\(s\) 'extra'"),
    (lambda s: s.pop("2.bias"), r"missing parameter\(s\) '2\.bias'"),
    (lambda s: s.update({"0.weight": np.zeros((4, 3), np.float32)}),
     r"'0\.weight': shape \(4, 3\) does not match the parameter's \(3, 4\)"),
    (lambda s: s.update({"0.bias": np.zeros(4, np.float64)}),
     r"'0\.bias': dtype float64 does not match the parameter's float32"),
    (lambda s: s.update({"0.bias": [0.0] * 4}), r"'0\.bias': expected a numpy array, got list"),
])
def test_load_errors_name_the_problem_and_change_nothing(change, message):
    model = _model().initialize(0)
    before = model.state_dict()
    state = {k: v + 1 for k, v in before.items()}
    change(state)
    with pytest.raises(InputBindingError, match=message + r".*\(nothing was loaded\)$"):
        model.load_state_dict(state)
    _assert_untouched(model, before)


def test_every_problem_is_listed_at_once():
    model = _model().initialize(0)
    state = model.state_dict()
    state.pop("0.weight")
    state["2.weight"] = state["2.weight"].T.copy()
    state["ghost"] = np.zeros(1)
    with pytest.raises(InputBindingError) as info:
        model.load_state_dict(state)
    text = str(info.value)
    assert "unknown parameter(s) 'ghost'" in text and "missing parameter(s) '0.weight'" in text
    assert "'2.weight': shape (2, 4)" in text


def test_non_strict_loading_reports_what_it_left_alone():
    model = _model().initialize(0)
    state = {"0.bias": np.ones(4, np.float32), "other": np.zeros(2)}
    result = model.load_state_dict(state, strict=False)
    assert result.unexpected == ["other"]
    assert result.missing == ["0.weight", "2.weight", "2.bias"]
    np.testing.assert_array_equal(model[0].bias.data, np.ones(4, np.float32))


def test_non_strict_loading_still_checks_shapes():
    model = _model().initialize(0)
    with pytest.raises(InputBindingError, match=r"'0\.bias': shape"):
        model.load_state_dict({"0.bias": np.ones(5, np.float32)}, strict=False)


def test_load_needs_a_mapping_and_data_assignment_is_checked():
    model = _model()
    with pytest.raises(InputBindingError, match=r"expected a mapping .* got list"):
        model.load_state_dict([1, 2])
    with pytest.raises(InputBindingError, match=r"parameter 'weight': dtype float64 does not "
                                                "match"):
        model[0].weight.data = np.zeros((3, 4))
    model[0].weight.data = np.ones((3, 4), np.float32)
    assert model[0].weight.data.sum() == 12


def test_a_model_pickles_and_deep_copies_with_its_values():
    model = _model().initialize(3)
    x = np.ones((2, 3), np.float32)
    expected = model.predict(x)  # fills the compiled-graph cache, which is not copied
    for copy_ in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert copy_[0].weight is not model[0].weight
        assert repr(copy_[0].weight.init) == repr(model[0].weight.init)
        np.testing.assert_array_equal(copy_.predict(x), expected)
