"""Review of the scheduler's state folder: who else may write it, its lock file, and the learned
contention model's versions when one of them is damaged.

No Ray: ``run_scheduler`` checks its state folder, journal, token and port before it starts Ray,
so ``start_ray`` is replaced by a sentinel that says "the start got this far".
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.workloads import default_catalog
from deepshare.runtime import service
from deepshare.runtime.journal import Journal
from deepshare.runtime.learning import CONTENTION_DIR, LiveLearning, versions
from deepshare.runtime.service import ServiceConfig, run_scheduler
from deepshare.runtime.spec import spec_from_json
from deepshare.runtime.statelock import StateLock


class ReachedRay(Exception):
    """``run_scheduler`` accepted everything it checks before Ray (not a DeepShareError)."""


def _start(state: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def reached(*_a, **_k):  # type: ignore[no-untyped-def]
        raise ReachedRay()

    monkeypatch.setattr(service, "start_ray", reached)
    monkeypatch.delenv("DEEPSHARE_SCHEDULER_TOKEN", raising=False)
    from deepshare.policies import make_policy

    run_scheduler(ServiceConfig(state_dir=str(state), port=0, local_nodes=1), make_policy("fifo+consolidated"),
                  announce=lambda _line: None, stop=threading.Event(), handle_signals=False)


def test_a_state_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    """Whoever can write the state folder can replace ``scheduler.json`` (clients then send their
    token, ``$DEEPSHARE_SCHEDULER_TOKEN`` included, to the URL it names), plant a journal whose
    queued jobs the scheduler runs as its user, or put symlinks where rank logs go. Reproduced
    as root with user ``nobody``: a ``.deepshare/`` that ``nobody`` pre-created in a shared
    folder (``--state`` defaults to ``.deepshare/scheduler`` under the working directory) was
    used as is; ``nobody`` renamed the scheduler's folder away, put its own ``scheduler.json``
    in place, and ``deepshare jobs`` sent it ``Authorization: Bearer <admin token>``. The start
    must refuse a state folder writable by others (as ``ssh`` refuses such a ``~/.ssh``)."""
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o777)
    with pytest.raises(DeepShareError):
        _start(state, monkeypatch)


def test_a_state_folder_under_a_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    """The same through a parent: a folder others can write (and without the sticky bit that
    protects ``/tmp``'s entries) lets them rename the state folder away and put their own in its
    place, even though the scheduler created the state folder itself with mode 0700."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(DeepShareError):
        _start(shared / "state", monkeypatch)


def test_removing_the_lock_file_does_not_let_a_second_scheduler_in(tmp_path):
    """``scheduler.lock`` removed while a scheduler runs (an operator cleaning up what looks like
    a stale lock, a ``rm -rf state/*.lock``): a second scheduler creates a new file, locks it and
    runs on the same journal, and both launch the same queued job (the guarantee that a job
    never runs twice at once is gone). Lock something that cannot be removed under the holder
    (the state folder itself), or check that the path still names the locked file."""
    first = StateLock(tmp_path).acquire()
    try:
        (tmp_path / "scheduler.lock").unlink()
        with pytest.raises(DeepShareError):
            second = StateLock(tmp_path).acquire()
            second.release()
    finally:
        first.release()


def _measured(journal: Journal, name: str, throughput: float) -> None:
    job = journal.submit(spec_from_json(dict(name=name, gpus=2, model="GraphSage", command=["true"],
                                             checkpoint_dir="/tmp/ckpt")))
    attempt = journal.start_run(job.job_id, (("node0", 2),), 100.0)
    journal.record_progress(job.job_id, attempt, None, None, throughput, 100.0)


def test_a_damaged_newest_fit_does_not_shadow_every_later_fit(tmp_path):
    """A damaged newest ``contention/params-NNNNN.json`` (a crash, a full disk, a hand edit) is
    logged and the scheduler starts from the prior, as documented. But the version counter then
    starts from 0 again: the next fit is written as ``params-00001.json``, over the existing
    version 1, and every restart picks the damaged file again as the newest, so no fit written
    after it is ever read back."""
    state = tmp_path / "state"
    catalog, prior = default_catalog(), make_contention("profiled")
    journal = Journal(state)
    try:
        _measured(journal, "a", 50.0)
        first = LiveLearning(state, prior, catalog)
        first.refit(journal)
        folder = state / CONTENTION_DIR
        v1 = (folder / "params-00001.json").read_text()
        (folder / "params-00002.json").write_text('{"version": 2, "models": {')  # damaged
        restarted = LiveLearning(state, prior, catalog)
        _measured(journal, "b", 10.0)  # a new run: the fit changes
        doc = restarted.refit(journal)
        assert (folder / "params-00001.json").read_text() == v1, "an existing version was overwritten"
        again = LiveLearning(state, prior, catalog)
        assert again.latest is not None and again.latest["models"] == doc["models"], \
            f"the restart did not read the newest fit back (files: {[p.name for p in versions(folder)]})"
    finally:
        journal.close()


def test_a_client_refuses_a_scheduler_json_in_a_folder_others_can_write(tmp_path, monkeypatch):
    """The clients' side of the same attack: ``deepshare jobs --state DIR`` (no ``--url``) reads
    the URL it sends the token to from ``DIR/scheduler.json``; in a folder others can write, that
    file is anyone's. One line naming the folder and the fix, before anything is sent."""
    import argparse

    from deepshare.cli.scheduler import _client

    state = tmp_path / "state"
    state.mkdir()
    (state / "scheduler.json").write_text(json.dumps({"url": "http://127.0.0.1:9"}))
    os.chmod(state, 0o777)
    args = argparse.Namespace(url=None, state=str(state), token="a-token-0123456789")
    with pytest.raises(DeepShareError, match=r"is writable by other users \(mode 0777\).*chmod go-w"):
        _client(args)
    os.chmod(state, 0o700)
    from deepshare.runtime.statelock import StateLock

    lock = StateLock(state).acquire()  # a scheduler is running there
    try:
        assert _client(args) is not None
    finally:
        lock.release()


def test_a_deeply_nested_fit_is_passed_over_not_a_traceback(tmp_path):
    """A version file nested 5,000 levels deep ended the scheduler's start in a RecursionError
    (``json.loads``); it is read through the project's guarded JSON reader and passed over."""
    state = tmp_path / "state"
    folder = state / CONTENTION_DIR
    folder.mkdir(parents=True)
    (folder / "params-00001.json").write_text("[" * 5000)
    learning = LiveLearning(state, make_contention("profiled"), default_catalog())
    assert learning.latest is None and learning.version == 0


GOOD_FIT = {"version": 1, "fitted_at": 0.0, "prior": "profiled", "runs": 1, "mae_prior": 0.1, "mae_learned": 0.05,
            "models": {"DLRM": {"scale": 0.8, "exponent": 1.5, "observations": 1.0, "contended": 1.0}}}


@pytest.mark.parametrize("edit", [
    {"version": 1e999},  # an OverflowError that ended the scheduler's start
    {"version": 1e300},  # taken: the next version's file name was past 255 characters, every refit failed
    {"version": 10**13}, {"version": "3"}, {"version": -1},
    {"models": {"DLRM": {"scale": 0.8, "exponent": 1e308, "observations": 1.0, "contended": 1.0}}},  # ratios 0
    {"models": {"DLRM": {"scale": 1e-300, "exponent": 1.5, "observations": 1.0, "contended": 1.0}}},
    {"models": {"DLRM": {"scale": 10**400, "exponent": 1.5, "observations": 1.0, "contended": 1.0}}},  # OverflowError
    {"models": {"DLRM": {"scale": 0.8, "exponent": 1.5, "observations": 1.0, "contended": 5.0}}},
], ids=["v-inf", "v-1e300", "v-huge", "v-text", "v-negative", "exponent", "scale-tiny", "scale-400-digits",
        "counts"])
def test_a_fit_edited_out_of_range_is_passed_over_for_the_older_one(tmp_path, edit):
    """A version file holds only what a fit gives: a whole version number and parameters in the fit's
    own ranges (a learned ratio stays in (0, 1]); any other is passed over, and the newest readable
    version read instead, never an error that ends the start."""
    state = tmp_path / "state"
    folder = state / CONTENTION_DIR
    folder.mkdir(parents=True)
    (folder / "params-00001.json").write_text(json.dumps(GOOD_FIT))
    (folder / "params-00002.json").write_text(json.dumps({**GOOD_FIT, "version": 2, **edit}))
    learning = LiveLearning(state, make_contention("profiled"), default_catalog())
    assert learning.version == 1 and learning.latest == GOOD_FIT
    assert learning.learner.correct("DLRM", 0.5) == pytest.approx(0.5 ** 1.5)


def test_a_version_file_named_past_the_largest_version_is_no_version(tmp_path):
    """``params-<243 nines>.json`` (255 characters) set the next version's number: its file name was too long to
    write, and every refit failed."""
    state = tmp_path / "state"
    folder = state / CONTENTION_DIR
    folder.mkdir(parents=True)
    (folder / "params-00001.json").write_text(json.dumps(GOOD_FIT))
    (folder / ("params-" + "9" * 243 + ".json")).write_text(json.dumps(GOOD_FIT))
    assert [p.name for p in versions(folder)] == ["params-00001.json"]
    learning = LiveLearning(state, make_contention("profiled"), default_catalog())
    assert learning.version == 1 and learning._highest == 1
