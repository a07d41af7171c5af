"""Generated traces and drawn estimates do not depend on which SIMD kernel NumPy picks."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from deepshare.core import stable_math
from deepshare.core.information import InformationModel
from deepshare.core.traces import RecurrenceModel, generate


@given(arrays(np.float64, st.tuples(st.integers(0, 4), st.integers(0, 5)), elements=st.floats(-700, 700)))
def test_exp_is_the_c_librarys_element_by_element(values):
    got = stable_math.exp(values)
    assert got.shape == values.shape and got.dtype == np.float64
    assert [x for x in got.ravel()] == [math.exp(v) for v in values.ravel()]


def test_traces_and_estimates_never_use_numpys_exp(monkeypatch):
    """NumPy's exp gives other last bits on AVX-512 machines; nothing that draws a trace or an
    estimate may call it, or a seed stops meaning the same trace on every machine."""
    def numpys_exp(*args, **kwargs):
        raise AssertionError("np.exp called")

    monkeypatch.setattr(np, "exp", numpys_exp)
    trace = generate(50, load=1.0, total_gpus=32, duration_sigma=1.0, seed=4, recurrence=RecurrenceModel())
    assert len(trace.jobs) == 50
    factors = InformationModel("estimated", 1.0, 3).error_factors(50)
    assert factors is not None and len(factors) == 50 and (factors > 0).all()
