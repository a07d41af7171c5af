"""The link model (review): Llama-7B's FSDP volume counted once; a running job not counted
against itself in a prediction."""

from __future__ import annotations

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.link import default_link_catalog, llm
from deepshare.core.contention.link.params import COMMON_MODELS
from deepshare.core.topology import load_topology
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog


def test_llama7b_puts_fsdps_volume_on_the_nic_as_the_llm_classes_do():
    """FSDP moves 3 (k - 1) / k parameter bytes per node, 1.5x a ring all-reduce; the model
    applies the ring factor 2 (k - 1) / k itself, so the common model's factor is 1.5 (it was 3:
    twice the volume). Per GB of bf16 parameters, nic_s equals llama3-8b's (derived in llm.py)."""
    catalog = default_link_catalog()
    common, derived = COMMON_MODELS["llama7b"], llm.LLM_CLASSES["llama3-8b"]
    per_gb_common = catalog.params["llama7b"].nic_s / (common.params_m / 1e3 * common.bytes_per_value)
    per_gb_derived = catalog.params["llama3-8b"].nic_s / (derived.params_b * 2)
    assert per_gb_common == pytest.approx(per_gb_derived, rel=1e-3)


@pytest.mark.parametrize("model", ["profiled", "link"])
def test_a_running_job_predicted_at_its_own_placement_is_not_slowed_by_itself(model):
    state = make_contention(model).new_state(load_topology("testbed"), default_catalog())
    job = RunningJob("a", "FSDP", 4, Placement.of({0: 2, 1: 2}))
    state.add(job)
    prediction = state.predict(job)
    assert prediction.ratio == 1.0 and dict(prediction.others) == {}
    state.add(RunningJob("b", "FSDP", 4, Placement.of({0: 2, 1: 2})))
    assert state.predict(job).ratio == pytest.approx(state.ratio("a"))  # beside b alone, as it runs
