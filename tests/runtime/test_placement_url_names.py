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
    # DEL, C1, the line separators and the bidirectional marks are refused by the service too
    assert printable("a\x7fb\x85") == "a\\x7fb\\x85" and printable("\u202eevil\u2028") == "\\u202eevil\\u2028"


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


def test_every_name_the_service_refuses_is_sent_escaped_and_within_its_field_length():
    """Each patterned field view_to_request fills from a journal, with a control character, and
    names so long that escaping passes the service's limits (a 255-character user and a tab; a
    64-character model with 22 tabs): the request is one the service takes, names that differed
    still differ, and job ids of running and pending jobs (decisions come back by them) are
    sent as they are."""
    import dataclasses

    from deepshare.core.contention import make_contention
    from deepshare.core.history import FinishedJob, JobHistory
    from deepshare.core.workloads import default_catalog
    from deepshare.serving.samples import small_request
    from deepshare.serving.translate import request_to_view

    view = request_to_view(PlacementRequest.model_validate(small_request()), default_catalog(), make_contention("profiled"))
    long_user, long_model = "u" * 255 + "\t", "m" * 42 + "\t" * 22
    names = dict(user=long_user, group="g\x1b", vc="v\n", queue="q\t", priority="p\r", model=long_model)
    running = [dataclasses.replace(j, **names) for j in view.running]
    queued = [dataclasses.replace(view.queued[0], **{**names, "user": long_user[:-1] + "\n"}), *view.queued[1:]]
    past = FinishedJob("old\tjob", long_model, 1, 60.0, 10.0, user=long_user, group="g\x1b", vc="v\n")
    nodes = [dataclasses.replace(n, gpu_model="TITAN\tXp") for n in view.topology.nodes]
    view = dataclasses.replace(view, running=type(view.running)(running), queued=type(view.queued)(queued),
                               history=JobHistory([past]), topology=dataclasses.replace(view.topology, nodes=tuple(nodes)))
    sent = PlacementRequest.model_validate_json(view_to_request(view).model_dump_json())
    jobs = [*sent.running, *sent.pending[:1], *sent.history]
    assert all(len(j.user) == 256 and j.user.startswith("u" * 200) for j in jobs)
    assert sent.running[0].user != sent.pending[0].user  # a tab and a line break: two users still
    assert all(126 <= len(j.model) <= 128 and j.model.startswith("m" * 42 + "\\x09") for j in jobs)
    assert all(j.model[:-9].endswith("\\x09") and j.model[-9] == "~" for j in jobs)  # cut between escapes
    assert [(j.group, j.vc) for j in jobs] == [("g\\x1b", "v\\x0a")] * 3
    assert [(j.queue, j.priority) for j in (*sent.running, sent.pending[0])] == [("q\\x09", "p\\x0d")] * 2
    assert sent.history[0].job_id == "old\\x09job" and {n.gpu_model for n in sent.nodes} == {"TITAN\\x09Xp"}
    assert [j.job_id for j in sent.running] == [j.job_id for j in view.running]
