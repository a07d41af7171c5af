"""Nothing a job reports is trusted (issue 35): the live scheduler's report path under attack.

A fake cluster (no Ray), a real journal with a fake clock, the real control loop and, where it
matters, the learned contention model. Each row of the issue's table is replayed: a job's report
with a list, a string, a huge step or an infinite throughput; a spec whose estimate would overflow
the belief maths; a policy that raises on one job. The other jobs keep launching, cancels work,
the API's answers serialise, and the contention fit stays finite. A hypothesis test fuzzes every
report field with every JSON type.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from fake_launcher import FakeLauncher
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.responses import JSONResponse

from deepshare.core.contention import make_contention
from deepshare.core.contention.learned import ContentionLearner, Observation
from deepshare.core.errors import DeepShareError
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.runtime.journal import JobState, Journal
from deepshare.runtime.learning import CONTENTION_DIR, LiveLearning
from deepshare.runtime.loop import ControlLoop, LoopConfig
from deepshare.runtime.models import JobDetailOut, JobOut, job_detail, job_out
from deepshare.runtime.reports import MAX_REPORT_BYTES, BadReport, Progress, check_report
from deepshare.runtime.spec import spec_from_json
from deepshare.runtime.worker import JobWorker, Report
from test_control_loop import Clock

CATALOG = default_catalog()


class Rig:
    """Two 2-GPU nodes, fifo+consolidated (or ``policy``), optionally learning contention."""

    def __init__(self, state: Path, policy: Any = None, learning: bool = False) -> None:
        self.clock = Clock()
        self.journal = Journal(state, clock=self.clock)
        self.fake = FakeLauncher({"node0": 2, "node1": 2})
        self.learning = LiveLearning(state, make_contention("profiled"), CATALOG, refit_s=1.0) if learning else None
        self.loop = ControlLoop(self.journal, policy or make_policy("fifo+consolidated"), CATALOG,
                                make_contention("profiled"), LoopConfig(interval_s=0.01, preempt_grace_s=1.0),
                                launcher=self.fake, learning=self.learning)

    def submit(self, name: str, gpus: int = 2, **extra: Any) -> str:
        job = self.journal.submit(spec_from_json(dict(name=name, gpus=gpus, model="GraphSage", command=["true"],
                                                      checkpoint_dir="/tmp/ckpt", **extra)))
        self.clock.t += 1.0
        return job.job_id

    def send(self, job_id: str, doc: Any) -> None:
        """Rank 0 writes ``doc`` as its report (what the worker hands the loop, unchecked)."""
        run = self.fake._current(job_id)
        if isinstance(doc, dict) and set(doc) <= {"samples", "throughput", "step", "time"}:
            run.report = Report(doc.get("samples"), doc.get("throughput"), doc.get("step"), doc.get("time"))
        else:
            run.report = Report(None, None, None, None, "expected a JSON object")

    def api_answers(self) -> None:
        """What ``GET /v1/jobs``, ``GET /v1/jobs/ID`` and ``GET /v1/contention`` serialise, checked the
        way FastAPI does (response models validated, JSON without NaN or infinities)."""
        for job in self.journal.jobs():
            out = JobOut.model_validate(job_out(job).model_dump())
            json.dumps(out.model_dump(mode="json"), allow_nan=False)
            detail = job_detail(job, self.journal.runs(job.job_id), self.journal.transitions(job.job_id),
                                checkpoint_dir=self.journal.run_names.checkpoint_dir(job.spec, job.job_id))
            json.dumps(JobDetailOut.model_validate(detail.model_dump()).model_dump(mode="json"), allow_nan=False)
        if self.learning is not None:
            JSONResponse(self.learning.document())  # renders now: refuses NaN and infinities


# -- the checker -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "doc, field, text",
    [
        ([1, 2], "report", "expected a JSON object, got an array"),
        ({"throughput": [1, 2]}, "throughput", "got an array"),
        ({"throughput": "fast"}, "throughput", "got 'fast'"),
        ({"samples": "10"}, "samples", "got '10'"),
        ({"step": "3"}, "step", "expected an integer from 0 to 9007199254740992, got '3'"),
        ({"step": 1e308}, "step", "got 1e+308"),
        ({"step": 2.0}, "step", "got 2.0"),
        ({"step": True}, "step", "got True"),
        ({"step": -1}, "step", "got -1"),
        ({"throughput": math.inf}, "throughput", "got inf"),
        ({"throughput": math.nan}, "throughput", "got nan"),
        ({"throughput": -1.0}, "throughput", "got -1.0"),
        ({"samples": 1e19}, "samples", "from 0 to 1e+18"),
        ({"samples": 10**400}, "samples", "expected a finite number"),
        ({"time": "now"}, "time", "got 'now'"),
        ({"loss": 0.1}, "loss", "unknown field"),
    ],
)
def test_a_bad_report_names_its_field(doc, field, text):
    with pytest.raises(BadReport) as caught:
        check_report(doc)
    assert caught.value.field == field and text in str(caught.value)


def test_counters_may_not_go_back_within_a_run():
    last = check_report({"samples": 100.0, "step": 10, "throughput": 5.0, "time": 1.0})
    assert last == Progress(100.0, 5.0, 10)
    with pytest.raises(BadReport, match="samples: went back from 100 to 50 within one run"):
        check_report({"samples": 50.0}, last)
    with pytest.raises(BadReport, match="step: went back from 10 to 9"):
        check_report({"step": 9}, last)
    assert check_report({"samples": 100.0, "step": 10}, last) == Progress(100.0, None, 10)  # equal is fine


# -- the loop: one row of the table each -------------------------------------------------
@pytest.mark.parametrize("doc", [{"throughput": [1, 2]}, {"throughput": "x"}, {"samples": "x"}, {"step": "x"},
                                 {"step": 1e308}, {"throughput": math.inf}, [1, 2]])
def test_a_bad_report_is_dropped_and_the_scheduler_goes_on(tmp_path, caplog, doc):
    rig = Rig(tmp_path / "state", learning=True)
    a, b = rig.submit("a", 4), rig.submit("b", 4)
    assert rig.loop.tick().launched == (a,)
    rig.send(a, {"samples": 10.0, "step": 1, "throughput": 2.0})
    rig.loop.tick()
    rig.send(a, doc)
    for _ in range(3):
        report = rig.loop.tick()
        assert report.error is None
    job = rig.journal.get(a)
    assert (job.samples, job.step, job.throughput) == (10.0, 1, 2.0)  # the last good values
    dropped = [r for r in caplog.records if "progress report dropped" in r.getMessage()]
    assert len(dropped) == 1 and a in dropped[0].getMessage()  # one line, naming the job (not one per tick)
    rig.api_answers()
    assert rig.journal.cancel(a) is JobState.RUNNING  # cancel is marked ...
    rig.loop.tick()
    assert rig.journal.get(a).state is JobState.CANCELLED  # ... and carried out
    rig.loop.tick()
    assert rig.journal.get(b).state is JobState.RUNNING  # the next job launches


def test_values_an_older_version_stored_unchecked_read_as_not_reported(tmp_path):
    """A journal written before reports were checked (a string throughput, an infinite step)
    answers GET /v1/jobs and GET /v1/jobs/ID instead of 500 for every client."""
    rig = Rig(tmp_path / "state", learning=True)
    a = rig.submit("a", 2)
    rig.loop.tick()
    db = sqlite3.connect(tmp_path / "state" / "journal.sqlite")
    db.execute("UPDATE jobs SET samples='many', step=1e308, throughput=? WHERE id=?", (math.inf, a))
    db.execute("UPDATE runs SET measured_throughput='fast', start_step='x', predicted_throughput=? WHERE job_id=?",
               (math.nan, a))
    db.commit()
    db.close()
    job = rig.journal.get(a)
    assert (job.samples, job.step, job.throughput) == (None, None, None)
    assert rig.journal.runs(a)[0].measured_throughput is None
    rig.api_answers()
    assert rig.loop.tick().error is None


def test_a_spec_with_an_overflowing_estimate_is_refused_and_an_old_one_is_quarantined(tmp_path):
    body = dict(name="big", gpus=2, model="GraphSage", command=["true"], checkpoint_dir="/tmp/c", requested_s=1.7e308)
    with pytest.raises(DeepShareError, match="requested_s: Input should be less than or equal to 31536000"):
        spec_from_json(body)
    rig = Rig(tmp_path / "state", policy=make_policy("bsrsf+packed"))
    good = rig.submit("good", 2, requested_s=600.0)
    bad = rig.submit("big", 2, requested_s=600.0)
    db = sqlite3.connect(tmp_path / "state" / "journal.sqlite")  # what an older version accepted
    db.execute("UPDATE jobs SET spec=? WHERE id=?", (json.dumps({**body, "args": [], "env": {}}), bad))
    db.commit()
    db.close()
    report = rig.loop.tick()
    assert report.error is None and report.launched == (good,)
    assert rig.journal.get(bad).state is JobState.FAILED and "quarantined" in rig.journal.get(bad).error


class RaisesOn:
    """A policy that raises on a view holding one job (as a policy's maths would on bad data)."""

    name = "raises-on"

    def __init__(self, job_id: str, exc: Exception) -> None:
        self.job_id, self.exc = job_id, exc
        self.inner = make_policy("fifo+consolidated")
        self.calls = 0

    def decide(self, view: Any) -> Any:
        self.calls += 1
        if any(j.job_id == self.job_id for j in (*view.queued, *view.running)):
            raise self.exc
        return self.inner.decide(view)


@pytest.mark.parametrize("exc", [OverflowError("math range error"), ValueError("cannot convert float NaN"),
                                 DeepShareError("body.pending.1.requested_s: too large")])
def test_a_policy_that_fails_on_one_job_isolates_it_and_launches_the_rest(tmp_path, exc):
    rig = Rig(tmp_path / "state")
    jobs = [rig.submit(f"j{i}", 1) for i in range(5)]
    rig.loop.policy = policy = RaisesOn(jobs[2], exc)
    report = rig.loop.tick()
    assert report.error is None
    assert set(report.launched) == set(jobs) - {jobs[2]}
    failed = rig.journal.get(jobs[2])
    assert failed.state is JobState.FAILED and failed.error.startswith("isolated: the policy policy fails on it")
    assert type(exc).__name__ in failed.error
    assert policy.calls <= 2 + 2 * math.ceil(math.log2(len(jobs))) + 1  # a bisection, not one probe per job


def test_a_policy_that_fails_on_every_job_fails_the_tick_and_blames_no_job(tmp_path):
    rig = Rig(tmp_path / "state")
    jobs = [rig.submit(f"j{i}", 1) for i in range(3)]

    class Broken:
        def decide(self, view: Any) -> Any:
            raise OverflowError("always")

    rig.loop.policy = Broken()
    report = rig.loop.tick()
    assert report.error is not None and "always" in report.error
    assert [rig.journal.get(j).state for j in jobs] == [JobState.QUEUED] * 3


# -- the fuzz ------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
reports = st.one_of(
    st.fixed_dictionaries({}, optional={f: json_values for f in ("samples", "throughput", "step", "time")}),
    st.fixed_dictionaries({}, optional={"samples": st.floats(0, 1e6), "throughput": st.floats(0, 1e6),
                                        "step": st.integers(0, 10**6)}),
    json_values,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sequence=st.lists(reports, min_size=1, max_size=6))
def test_fuzzed_reports_never_hurt_the_loop_the_api_or_the_fit(tmp_path_factory, sequence):
    state = tmp_path_factory.mktemp("fuzz") / "state"
    rig = Rig(state, learning=True)
    a, b, c = rig.submit("a", 2), rig.submit("b", 2), rig.submit("c", 2)
    assert set(rig.loop.tick().launched) == {a, b}
    for doc in sequence:
        rig.send(a, doc)
        rig.clock.t += 2.0  # past refit_s: every tick refits from the journal
        report = rig.loop.tick()
        assert report.error is None
        job = rig.journal.get(a)
        assert job.state is JobState.RUNNING
        for value in (job.samples, job.throughput):
            assert value is None or (isinstance(value, float) and math.isfinite(value))
        assert job.step is None or (type(job.step) is int and 0 <= job.step <= 2**53)
        rig.api_answers()
        for fit in rig.learning.learner.fits.values():
            assert math.isfinite(fit.log_scale) and math.isfinite(fit.exponent)
    rig.fake.finish(b)
    assert rig.loop.tick().launched == (c,)  # another job's launch is never blocked
    for path in (state / CONTENTION_DIR).glob("*.json"):
        json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{path} holds {name}"))


# -- the contention fit --------------------------------------------------------------------------
def test_the_fit_refuses_non_finite_samples_and_never_holds_a_non_finite_parameter():
    learner = ContentionLearner()
    with pytest.raises(DeepShareError, match="finite ratios"):
        learner.observe("M", 0.5, math.inf)
    learner.fit_all([Observation("M", 0.5, math.inf), Observation("M", math.nan, 0.5), Observation("M", 0.5, 0.4),
                     Observation("M", 1.0, 1e300), Observation("M", 0.5, 0.5, weight=-1.0)])
    assert learner.skipped == 3
    fit = learner.fit("M")
    assert math.isfinite(fit.scale) and math.isfinite(fit.exponent) and fit.observations == 2


def test_a_params_file_holding_nan_is_not_loaded(tmp_path, caplog):
    folder = tmp_path / CONTENTION_DIR
    folder.mkdir()
    (folder / "params-00001.json").write_text(json.dumps(
        {"version": 1, "models": {"M": {"scale": math.inf, "exponent": math.nan, "observations": 1, "contended": 1}}}))
    learning = LiveLearning(tmp_path, make_contention("profiled"), CATALOG)
    assert learning.learner.fits == {} and learning.latest is None
    assert "starting from the prior" in caplog.text
    JSONResponse(learning.document())


# -- the worker reads report.json as untrusted ---------------------------------------------------
@pytest.fixture()
def worker():
    w = JobWorker("job", 1, 0)
    yield w
    w.terminate()


def test_the_worker_reads_a_good_report(worker):
    (worker.control / "report.json").write_text(json.dumps({"samples": 5, "throughput": 1.5, "step": 2, "time": 3.0}))
    assert worker._report() == Report(5, 1.5, 2, 3.0)


@pytest.mark.parametrize("make, problem", [
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: os.symlink("/dev/zero", p), "cannot open report.json"),
    (lambda p: p.write_bytes(b" " * (MAX_REPORT_BYTES + 1)), "larger than"),
    (lambda p: p.write_text("[1, 2]"), "expected a JSON object, got list"),
    (lambda p: p.write_text("[" * 60_000), "not valid JSON"),
    (lambda p: p.write_text('{"loss": 1}'), "loss: unknown field"),
])
def test_the_worker_refuses_a_hostile_report_file_without_blocking(worker, make, problem):
    make(worker.control / "report.json")
    report = worker._report()
    assert report is not None and problem in report.problem and report.document() == dict.fromkeys(
        ("samples", "throughput", "step", "time"))


def test_the_worker_refuses_a_socket(worker):
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(worker.control / "report.json"))
        assert "cannot open report.json" in worker._report().problem  # ENXIO: a socket cannot be opened


def test_a_job_asking_for_a_level_the_cluster_lacks_is_isolated_with_the_reason(tmp_path):
    rig = Rig(tmp_path / "state")
    odd = rig.submit("odd", 2, required_level="leaf")  # the fake cluster's fabric has one level, rack
    ok = rig.submit("ok", 2)
    report = rig.loop.tick()
    assert report.launched == (ok,)
    job = rig.journal.get(odd)
    assert job.state is JobState.FAILED
    assert "unknown fabric level 'leaf'; this cluster's levels are rack" in job.error


def test_the_search_for_the_failing_job_stops_at_the_decision_timeout_and_goes_on_next_tick(tmp_path):
    # Each probe without the bad job takes 0.2 s. A tick's decision, its search and its second
    # decision share one 0.5 s timeout: before, each probe got a timeout of its own and a slow
    # policy's search could take 64 of them. What the search cleared is not probed again.
    from deepshare.core.interrupt import checkpoint

    class SlowRaisesOn(RaisesOn):
        def decide(self, view: Any) -> Any:
            self.calls += 1
            if any(j.job_id == self.job_id for j in (*view.queued, *view.running)):
                raise self.exc
            until = time.monotonic() + 0.2
            while time.monotonic() < until:
                checkpoint()
                time.sleep(0.01)
            return self.inner.decide(view)

    rig = Rig(tmp_path / "state")
    rig.loop.config = dataclasses.replace(rig.loop.config, decision_timeout_s=0.5)
    jobs = [rig.submit(f"j{i}", 1) for i in range(8)]
    rig.loop.policy = policy = SlowRaisesOn(jobs[7], ValueError("bad number"))
    start = time.monotonic()
    report = rig.loop.tick()
    assert time.monotonic() - start < 1.5
    # the decision, then probes: j0-j3 (slow), j4-j7 (fails), j4-j5 (slow), j6-j7 (fails), j6
    # (slow: stopped at 0.5 s); j7 alone is not probed, nobody is blamed this tick
    assert report.error == "policy policy: bad number"
    assert all(rig.journal.get(j).state is JobState.QUEUED for j in jobs) and policy.calls == 6
    # the next tick: the decision, then j6 (slow, passes) and j7 (fails) alone, then a decision
    # without j7 (slow), all within the timeout
    policy.calls = 0
    report = rig.loop.tick()
    assert report.error is None and rig.journal.get(jobs[7]).state is JobState.FAILED
    assert policy.calls == 4 and len(report.launched) == 4  # 2 nodes x 2 GPUs, 1-GPU jobs


def test_a_placement_service_that_goes_away_mid_search_gets_no_job_blamed(tmp_path):
    # The first decision fails on j3's data; the service then answers the first half's probe
    # and goes away. Before, every later probe failed as if on its data, down to single jobs,
    # and innocent queued jobs were FAILED as culprits. An unreachable service ends the search.
    from deepshare.serving.client import PlacementClient

    class GoesAway(RaisesOn):
        def decide(self, view: Any) -> Any:
            self.calls += 1
            if self.calls > 2:
                return PlacementClient("http://127.0.0.1:9", timeout_s=2).decide(view)  # nothing listens on port 9
            if self.calls == 1:
                raise self.exc
            return self.inner.decide(view)

    rig = Rig(tmp_path / "state")
    jobs = [rig.submit(f"j{i}", 1) for i in range(4)]
    rig.loop.policy = policy = GoesAway(jobs[3], ValueError("bad number"))
    report = rig.loop.tick()
    assert report.error == "policy policy: bad number"
    assert [rig.journal.get(j).state for j in jobs] == [JobState.QUEUED] * 4
    assert policy.calls == 3  # the decision, j0-j1 (passes), j2-j3 (the service is gone): no more probes
    # while it stays away, a tick fails without a search and blames nobody
    report = rig.loop.tick()
    assert "cannot reach the placement service" in report.error and policy.calls == 4
    assert [rig.journal.get(j).state for j in jobs] == [JobState.QUEUED] * 4
    # it comes back failing every request (HTTP 500): the halves cleared before the outage do not
    # count as passed, so nobody is blamed (before, j2 and j3 were FAILED)
    from deepshare.serving.client import PlacementServiceError

    class Broken:
        def decide(self, view: Any) -> Any:
            raise PlacementServiceError("http://placement/v1/placements: HTTP 500: internal error", 500)

    rig.loop.policy = Broken()
    report = rig.loop.tick()
    assert "HTTP 500" in report.error
    assert [rig.journal.get(j).state for j in jobs] == [JobState.QUEUED] * 4


@pytest.mark.parametrize("answer", [{"decisions": []}, {"decisions": "no"}])
def test_a_placement_service_answering_nonsense_fails_the_tick_without_a_search(tmp_path, monkeypatch, answer):
    # A 200 that is not one decision per pending job (or not a placement response at all) is the
    # service's fault: before, it was a job-data error and every tick probed the service up to
    # MAX_PROBES more times looking for a culprit job it could not find.
    from deepshare.serving.client import PlacementClient, UnexpectedPlacementAnswer

    calls = []
    monkeypatch.setattr(PlacementClient, "_call", lambda self, method, path, body=None: calls.append(path) or answer)
    rig = Rig(tmp_path / "state")
    jobs = [rig.submit(f"j{i}", 1) for i in range(4)]
    rig.loop.policy = PlacementClient("http://placement.invalid")
    errors = []
    original = rig.loop._timed_decide

    def recording(view, deadline):
        try:
            return original(view, deadline)
        except Exception as exc:
            errors.append(exc)
            raise

    monkeypatch.setattr(rig.loop, "_timed_decide", recording)
    report = rig.loop.tick()
    assert [type(e) for e in errors] == [UnexpectedPlacementAnswer]
    assert "unexpected answer" in report.error and calls == ["/v1/placements"]  # one decision, no probes
    assert [rig.journal.get(j).state for j in jobs] == [JobState.QUEUED] * 4


def test_a_search_that_allows_few_probes_a_tick_goes_on_from_the_smallest_failing_set(tmp_path, monkeypatch):
    # Four probes a tick and the bad job first: each tick probed 16, 8, 4 and 2 jobs, all failing,
    # and the next tick started from the top again: the bad job was never isolated and the
    # scheduler never decided again.
    import deepshare.runtime.loop as loop_module

    monkeypatch.setattr(loop_module, "MAX_PROBES", 4)
    rig = Rig(tmp_path / "state")
    jobs = [rig.submit(f"j{i}", 1) for i in range(32)]
    rig.loop.policy = policy = RaisesOn(jobs[0], ValueError("bad number"))
    report = rig.loop.tick()
    assert report.error == "policy policy: bad number" and policy.calls == 5
    assert rig.loop._suspects == set(jobs[:2])
    report = rig.loop.tick()  # the decision, then j0 (fails) and j1 (passes): j0 is isolated
    assert report.error is None and rig.journal.get(jobs[0]).state is JobState.FAILED
    assert [rig.journal.get(j).state for j in jobs[1:]].count(JobState.FAILED) == 0
