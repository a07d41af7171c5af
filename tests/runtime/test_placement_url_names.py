"""Names the placement service refuses (control characters) in a live journal written before the
scheduler refused them at submission: under ``--placement-url`` the scheduler sends them escaped
(:func:`deepshare.serving.translate.printable`), so one such job, running, queued or finished
(its history), no longer fails every decision or gets innocent jobs isolated."""

from __future__ import annotations

from typing import Any

import pytest
from test_hostile_reports import Rig

from deepshare.core.types import WAIT
from deepshare.policies import make_policy
from deepshare.runtime.journal import JobState
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import printable, view_to_request


class ServedLike:
    """What ``PlacementClient.decide`` does around the HTTP call: WAIT with nothing queued, else
    the request built from the view, read back as the service reads a body, and a decision."""

    name = "served"

    def __init__(self) -> None:
        self.inner = make_policy("fifo+consolidated")
        self.requests: list[PlacementRequest] = []

    def decide(self, view: Any) -> Any:
        if not view.queued:
            return WAIT
        request = PlacementRequest.model_validate_json(view_to_request(view).model_dump_json())
        self.requests.append(request)
        return self.inner.decide(view)


def test_printable_escapes_control_characters_only():
    assert printable("al\tice") == "al\\x09ice" and printable("te\nam\x1b") == "te\\x0aam\\x1b"
    assert printable("dom\\user ü") == "dom\\user ü" and printable(None) is None


@pytest.mark.parametrize("where", ["running", "queued", "finished"])
def test_a_journalled_name_with_control_characters_fails_no_decision(tmp_path, where):
    rig = Rig(tmp_path / "state")
    # as a journal written before submission refused them (the schema itself takes them)
    old = rig.submit("old", 1, user="al\tice", vc="te\nam")
    if where != "queued":
        rig.loop.tick()
        assert rig.journal.get(old).state is JobState.RUNNING
    if where == "finished":
        rig.clock.t += 100
        rig.fake.finish(old)
        rig.loop.tick()
        assert rig.journal.get(old).state is JobState.FINISHED
    served = rig.loop.policy = ServedLike()
    new = [rig.submit(f"new{i}", 1) for i in range(2)]
    report = rig.loop.tick()
    assert report.error is None
    assert all(rig.journal.get(job).state is JobState.RUNNING for job in new)
    sent = served.requests[-1]
    names = [(j.user, j.vc) for j in (*sent.running, *sent.pending, *sent.history) if j.user is not None]
    assert names == [("al\\x09ice", "te\\x0aam")]
