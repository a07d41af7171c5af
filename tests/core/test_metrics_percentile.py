"""The report's percentiles are NumPy's default ``np.percentile``, bit for bit, without calling it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.metrics import _pct

FLOATS = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


def numpy_pct(values, q):
    return float(np.percentile(values, q))


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([10.0], 99, 10.0),
        ([1.0, 2.0], 50, 1.5),
        ([1.0, 2.0, 3.0, 4.0], 95, 3.85),  # virtual index 2.85: 4 - 0.15 x (4 - 3), from the nearer end as NumPy's _lerp
        ([4.0, 1.0, 3.0, 2.0], 0, 1.0),
        ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
    ],
)
def test_small_cases(values, q, expected):
    assert _pct(values, q) == pytest.approx(expected, abs=1e-12)
    assert _pct(values, q) == numpy_pct(values, q)


def test_no_values_and_nan():
    assert _pct([], 50) is None
    assert math.isnan(_pct([1.0, float("nan"), 3.0], 50))
    assert math.isnan(numpy_pct([1.0, float("nan"), 3.0], 50))


@settings(max_examples=400, deadline=None)
@given(values=st.lists(FLOATS, min_size=1, max_size=60), q=st.one_of(st.sampled_from([0, 50, 95, 99, 100]), st.floats(0, 100)))
def test_equals_numpy_bit_for_bit(values, q):
    assert _pct(values, q) == numpy_pct(values, q)


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, 1.5, 1e6, 86400.25]), min_size=1, max_size=300), q=st.sampled_from([50, 95, 99]))
def test_equals_numpy_with_many_ties(values, q):
    assert _pct(np.array(values), q) == numpy_pct(values, q)
