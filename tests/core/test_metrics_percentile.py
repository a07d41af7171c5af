"""The report's percentiles are NumPy's default ``np.percentile`` (linear interpolation)."""

from __future__ import annotations

import math

import pytest

from deepshare.core.metrics import _pct


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([10.0], 99, 10.0),
        ([1.0, 2.0], 50, 1.5),
        ([1.0, 2.0, 3.0, 4.0], 95, 3.85),  # virtual index 2.85: 3 + 0.85 x (4 - 3)
        ([4.0, 1.0, 3.0, 2.0], 0, 1.0),
        ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
    ],
)
def test_small_cases(values, q, expected):
    assert _pct(values, q) == pytest.approx(expected, abs=1e-12)


def test_no_values_and_nan():
    assert _pct([], 50) is None
    assert math.isnan(_pct([1.0, float("nan"), 3.0], 50))
