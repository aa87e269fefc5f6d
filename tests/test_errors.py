"""``polyhal.errors.shown``: how every error message shows a value it names."""

from __future__ import annotations

import time

from polyhal.errors import shown


def test_short_values_show_as_their_repr():
    assert shown("abc") == "'abc'"
    assert shown("x" * 60) == repr("x" * 60)
    assert shown(1.5) == "1.5" and shown(None) == "None" and shown([1, 2]) == "[1, 2]"


def test_a_long_string_is_cut_and_says_its_length():
    assert shown("x" * 1000) == repr("x" * 60) + "... (str, 1000 characters)"
    assert shown("y" * 100, limit=10) == repr("y" * 10) + "... (str, 100 characters)"


def test_long_values_of_other_types_are_cut_and_say_their_type():
    text = shown(b"a" * 300)
    assert text.startswith("b'aaa") and text.endswith("... (bytes)") and len(text) < 80


def test_huge_values_are_shown_at_once():
    start = time.perf_counter()
    assert shown(list(range(10**6))) == "[0, 1, 2, 3, 4, 5, ...]"
    assert shown(10**5000) == "<int>"  # past Python's limit on printing an int
    assert time.perf_counter() - start < 0.5


def test_a_value_whose_repr_fails_still_shows():
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert "Broken" in shown(Broken())
