"""The service's deadline wraps the view's predictor (a :class:`~deepshare.core.view.ForwardingPredictor`):
the predictor without a preemptive decision's victims checks the deadline as the view's own does."""

from __future__ import annotations

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.contention.base import RunningJob, leaving_out, predict_all, predictor
from deepshare.core.topology import uniform
from deepshare.core.types import Placement
from deepshare.core.view import JobView
from deepshare.core.workloads import default_catalog
from deepshare.core.deadline import Deadline, DecisionTimeout
from deepshare.serving.engine import _Checked

CAT = default_catalog()
TOPO = uniform(2, 8)
WHERE = Placement.of({0: 4, 1: 4})


def state_of(with_victim: bool):  # type: ignore[no-untyped-def]
    state = make_contention("profiled").new_state(TOPO, CAT)
    if with_victim:
        state.add(RunningJob("r0", "MoE", 8, WHERE))
    return state


def test_the_deadline_wrapper_checks_inside_leaving_out():
    victim = JobView("r0", "MoE", 8, 0.0, 1.0, 0.0, CAT.class_of("MoE"), placement=WHERE)
    asks = [(JobView("q0", "FSDP", 4, 0.0, 1.0, 0.0, CAT.class_of("FSDP")), Placement.of({0: 2, 1: 2}))]
    checked = _Checked(predictor(state_of(True)), Deadline(600.0))
    assert predict_all(checked, asks)[0].ratio < 1.0
    with leaving_out(checked, [victim]) as bare:
        assert isinstance(bare, _Checked)
        assert predict_all(bare, asks) == predict_all(predictor(state_of(False)), asks)
    assert predict_all(checked, asks)[0].ratio < 1.0  # the victim back
    late = _Checked(predictor(state_of(True)), Deadline(-1.0))
    with leaving_out(late, [victim]) as bare:
        with pytest.raises(DecisionTimeout):
            bare(*asks[0])
        with pytest.raises(DecisionTimeout):
            bare.many(asks)
