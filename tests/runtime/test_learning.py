"""The live loop learns contention from its journal (fake cluster, real journal, fake clock): a job
reporting half its predicted rate changes the next prediction for its model; the fit is versioned in
the state folder, survives a restart, equals ``deepshare calibrate --from-state``, and is shown by
``GET /v1/contention`` and ``deepshare contention``.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from api_serving import served
from fake_launcher import FakeLauncher

from deepshare.cli import main
from deepshare.core.contention import make_contention
from deepshare.core.contention.learned import EXPONENT_PRIOR_WEIGHT, SCALE_PRIOR_WEIGHT
from deepshare.core.types import Decision, Launch, Placement
from deepshare.core.view import JobView
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.runtime.journal import Journal
from deepshare.runtime.learning import CONTENTION_DIR, LiveLearning, fit_from_journal, versions
from deepshare.runtime.loop import ControlLoop, LoopConfig
from deepshare.runtime.spec import spec_from_json
from test_control_loop import Clock, Scripted  # the journal clock and scripted policy the loop tests use

CATALOG = default_catalog()
SPLIT = Placement(((0, 2), (1, 2)))
FSDP_PAIR = 0.64  # the measured table: FSDP on 4 GPUs over 2 nodes beside another such job


def rig(state: Path, policy: Any, refit_s: float = 10.0):
    clock = Clock()
    journal = Journal(state, clock=clock)
    fake = FakeLauncher({"node0": 4, "node1": 4})
    learning = LiveLearning(state, make_contention("profiled"), CATALOG, refit_s=refit_s)
    loop = ControlLoop(journal, policy, CATALOG, make_contention("profiled"), LoopConfig(interval_s=0.01),
                       launcher=fake, learning=learning)
    return clock, journal, fake, learning, loop


def submit(journal: Journal, clock: Clock, name: str, gpus: int, model: str) -> str:
    job = journal.submit(spec_from_json(dict(name=name, gpus=gpus, model=model, command=["true"],
                                             checkpoint_dir="/tmp/ckpt")))
    clock.t += 1.0
    return job.job_id


def test_a_job_at_half_its_predicted_rate_changes_the_next_prediction_for_its_model(tmp_path):
    state = tmp_path / "state"
    clock, journal, fake, learning, loop = rig(state, make_policy("fifo+consolidated"))
    a = submit(journal, clock, "a", 2, "GraphSage")
    assert loop.tick().launched == (a,)
    iso = CATALOG.throughput("GraphSage", 2, 1)
    assert journal.get(a).predicted_throughput == pytest.approx(iso)  # alone: the shipped model's 1.0
    on_node1 = Placement(((1, 2),))
    before = learning.predicted_throughput("GraphSage", on_node1, 1.0)
    assert before == pytest.approx(iso) and learning.version == 0 and versions(state / CONTENTION_DIR) == []

    fake.report(a, samples=100.0, step=10, throughput=iso / 2)  # half of what was predicted
    clock.t += 20.0
    loop.tick()
    # one uncontended report at half the predicted rate: ln(scale) = ln(0.5) / (1 + prior weight)
    scale = math.exp(math.log(0.5) / (1 + SCALE_PRIOR_WEIGHT))
    after = learning.predicted_throughput("GraphSage", on_node1, 1.0)
    assert after == pytest.approx(iso * scale) and after < before
    assert learning.predicted_throughput("FSDP", on_node1, 1.0) == pytest.approx(CATALOG.throughput("FSDP", 2, 1))
    doc = learning.latest
    assert doc["version"] == 1 and doc["runs"] == 1 and doc["prior"] == "profiled"
    assert doc["models"]["GraphSage"]["scale"] == pytest.approx(scale)
    assert doc["mae_prior"] == pytest.approx(0.5) and doc["mae_learned"] == pytest.approx(0.5)  # ratios: both 1.0
    files = versions(state / CONTENTION_DIR)
    assert [f.name for f in files] == ["params-00001.json"] and json.loads(files[0].read_text()) == doc
    # a refit that changes nothing writes no new version
    clock.t += 20.0
    loop.tick()
    assert learning.version == 1 and len(versions(state / CONTENTION_DIR)) == 1
    # a restarted scheduler starts from the latest version; the offline fit of the journal is the same
    again = LiveLearning(state, make_contention("profiled"), CATALOG)
    assert again.latest == doc and again.predicted_throughput("GraphSage", on_node1, 1.0) == pytest.approx(after)
    _, offline = fit_from_journal(journal, CATALOG, "profiled")
    assert offline["models"] == doc["models"]


def test_a_contended_job_reporting_half_raises_its_models_exponent_in_the_next_view(tmp_path):
    state = tmp_path / "state"
    policy = Scripted(Decision(launch=(Launch("a-1", SPLIT), Launch("b-2", SPLIT))))
    clock, journal, fake, learning, loop = rig(state, policy)
    a, b = submit(journal, clock, "a", 4, "FSDP"), submit(journal, clock, "b", 4, "FSDP")
    assert loop.tick().launched == (a, b)
    iso = CATALOG.throughput("FSDP", 4, 2)
    fake.report(a, samples=1.0, step=1, throughput=iso * FSDP_PAIR / 2)  # half its predicted rate
    fake.report(b, samples=1.0, step=1, throughput=iso * FSDP_PAIR)
    c = submit(journal, clock, "c", 4, "FSDP")  # queued: the loop asks the policy again
    clock.t += 20.0
    loop.tick()
    x = math.log(FSDP_PAIR)
    theta = (EXPONENT_PRIOR_WEIGHT + x * (math.log(FSDP_PAIR / 2) + x)) / (EXPONENT_PRIOR_WEIGHT + 2 * x * x)
    assert learning.latest["models"]["FSDP"]["exponent"] == pytest.approx(theta) and theta > 1
    view = policy.views[-1]
    assert [j.ratio for j in view.running] == pytest.approx([FSDP_PAIR ** theta] * 2)
    queued = next(iter(view.queued))
    assert queued.job_id == c
    d = JobView("d", "FSDP", 4, 0.0, 1.0, 0.0, queued.comm_class)
    assert view.predict(d, SPLIT, ()).ratio == pytest.approx(FSDP_PAIR ** theta)
    # the journal keeps the shipped model's prediction beside the measurement (the learner's input)
    assert journal.get(a).predicted_throughput == pytest.approx(iso * FSDP_PAIR)


def test_measured_link_load_the_running_jobs_do_not_explain_slows_the_prediction(tmp_path):
    learning = LiveLearning(tmp_path, make_contention("link"), CATALOG)
    from deepshare.core.topology import uniform

    topo = uniform(2, 4)
    d = ("d", "FSDP", 4, SPLIT)
    quiet = learning.model(topo, [], {}).new_state(topo, CATALOG)
    busy = learning.model(topo, [], {"node0/nic": 0.7}).new_state(topo, CATALOG)
    from deepshare.core.contention.base import RunningJob

    job = RunningJob(*d)
    assert busy.predict(job).ratio < quiet.predict(job).ratio
    # load the running jobs explain is not background
    running = [("a", "FSDP", 4, SPLIT)]
    explained = learning.prior_state(topo, running).link_loads()
    model = learning.model(topo, running, explained)
    assert dict(model.background) == {}


def test_calibrate_from_state_and_the_contention_endpoint_and_command(tmp_path, capsys):
    pytest.importorskip("uvicorn")
    from deepshare.runtime.api import guard, make_app

    state = tmp_path / "state"
    clock, journal, fake, learning, loop = rig(state, make_policy("fifo+consolidated"))
    a = submit(journal, clock, "a", 2, "GraphSage")
    loop.tick()
    fake.report(a, samples=100.0, step=10, throughput=CATALOG.throughput("GraphSage", 2, 1) / 2)
    clock.t += 20.0
    loop.tick()
    out_json = tmp_path / "fit.json"
    assert main(["calibrate", "--from-state", str(state), "--json", str(out_json)]) == 0
    offline = json.loads(out_json.read_text())
    assert offline["models"] == learning.latest["models"]
    assert "GraphSage" in capsys.readouterr().out
    assert main(["calibrate", "--from-state", str(tmp_path / "nowhere")]) == 2
    assert "no journal" in capsys.readouterr().err

    token = "test-token-0123456789"
    with serving(guard(make_app(journal, lambda: (8, 2), contention=learning.document), token=token,
                       bound_host="127.0.0.1")) as url:
        doc_path = tmp_path / "shown.json"
        assert main(["contention", "--url", url, "--token", token, "--json", str(doc_path)]) == 0
        shown = json.loads(doc_path.read_text())
        assert shown["models"] == learning.latest["models"] and shown["refit_s"] == 10.0 and shown["version"] == 1
        assert main(["contention", "--url", url, "--token", token]) == 0
        out = capsys.readouterr().out
        assert "contention fit v1" in out and "GraphSage" in out
    # a scheduler that does not learn says so: one line, exit 2
    with serving(guard(make_app(journal, lambda: (8, 2)), token=token, bound_host="127.0.0.1")) as url:
        assert main(["contention", "--url", url, "--token", token]) == 2
        assert "does not learn contention" in capsys.readouterr().err


@contextmanager
def serving(app):
    """``app`` served by uvicorn on a free loopback port for the block; its URL."""
    from deepshare.runtime.service import api_server

    with served(api_server(app)) as port:
        yield f"http://127.0.0.1:{port}"


def test_the_live_scheduler_migrates_a_job_slow_for_a_window(tmp_path):
    from deepshare.policies.migrate import MIGRATE_WINDOW_S, Migrating

    clock = Clock()
    journal = Journal(tmp_path / "state", clock=clock)
    fake = FakeLauncher({"node0": 4, "node1": 4, "node2": 4})
    policy = Migrating("scripted+migrate", Scripted(Decision(launch=(Launch("a-1", SPLIT), Launch("b-2", SPLIT)))))
    learning = LiveLearning(tmp_path / "state", make_contention("profiled"), CATALOG)
    loop = ControlLoop(journal, policy, CATALOG, make_contention("profiled"), LoopConfig(interval_s=0.01, preempt_grace_s=1.0),
                       launcher=fake, learning=learning)
    a, b = submit(journal, clock, "a", 4, "FSDP"), submit(journal, clock, "b", 4, "FSDP")
    assert loop.tick().launched == (a, b)
    clock.t += 1.0
    assert loop.tick().migrated == ()  # slow (0.64) from now on, not yet for a window
    clock.t += MIGRATE_WINDOW_S
    report = loop.tick()
    # a moves to the free node; b, then alone on nodes 0 and 1, is predicted within 1.4% of one
    # node's speed there, under the gain a move must make, so it stays
    assert report.migrated == (a,) and report.launched == (a,)
    assert fake.launches[-1:] == [(a, 2, (("node2", 4),))]
    assert [t.reason for t in journal.transitions(a)][-2:] == ["migrating", "launched"]
    clock.t += 1.0
    assert loop.tick().migrated == ()  # a may not move again within its window, and b gains too little


def test_a_model_the_catalog_lacks_starts_from_its_proxy_and_learns_from_its_own_reports(tmp_path):
    state = tmp_path / "state"
    clock, journal, fake, learning, loop = rig(state, make_policy("fifo+consolidated"))
    a = submit(journal, clock, "a", 2, "my-new-net")  # no such model: the catalog's default proxy stands in
    loop.tick()
    proxy = CATALOG.throughput("my-new-net", 2, 1)
    assert proxy == CATALOG.throughput(CATALOG.resolve("my-new-net"), 2, 1)
    assert journal.get(a).predicted_throughput == pytest.approx(proxy)
    fake.report(a, samples=1.0, step=1, throughput=proxy / 2)
    clock.t += 20.0
    loop.tick()
    assert set(learning.latest["models"]) == {"my-new-net"}  # its own fit; the proxy's model is untouched
    place = Placement(((1, 2),))
    assert learning.predicted_throughput("my-new-net", place, 1.0) < proxy
    proxied = CATALOG.resolve("my-new-net")
    assert learning.predicted_throughput(proxied, place, 1.0) == pytest.approx(CATALOG.throughput(proxied, 2, 1))


def _resnet_runs(queue: str | None, ratio: float, n: int):  # type: ignore[no-untyped-def]
    """``n`` measured 2-GPU ResNet50 runs of ``queue`` at ``ratio`` of the catalog's isolated rate."""
    from deepshare.runtime.journal import Measurement

    iso = CATALOG.throughput("ResNet50", 2, 1)
    return [Measurement(f"{queue}-{i}", 1, "ResNet50", 2, (("n0", 2),), ratio * iso, iso, None, queue) for i in range(n)]


def _tenants(**owners: list[str]):  # type: ignore[no-untyped-def]
    """A tenants file whose tenant ``name`` owns queues ``owners[name]`` (plus ``admin-q``, no one's)."""
    import hashlib

    from deepshare.tenants.spec import parse_tenants

    queues = sorted({q for qs in owners.values() for q in qs} | {"admin-q"})
    return parse_tenants(
        "queues:\n" + "".join(f"  - {{name: {q}, nominal_gpus: 8}}\n" for q in queues)
        + "default_queue: admin-q\ntokens:\n"
        + "".join(f"  - {{name: {name}, queues: [{', '.join(qs)}], sha256: {hashlib.sha256(name.encode()).hexdigest()}}}\n"
                  for name, qs in owners.items()))


def _tenant_runs(journal: Journal, queue: str, measured: float, count: int) -> None:
    """``count`` finished-measuring runs of queue ``queue``'s ResNet50 jobs, uncontended (the
    prediction recorded is the isolated throughput), each reporting ``measured``."""
    iso = default_catalog().throughput("ResNet50", 2, 1)
    for _ in range(count):
        job = journal.submit(spec_from_json(dict(name=queue, gpus=2, model="ResNet50", command=["true"],
                                                 checkpoint_dir="/tmp/ck", queue=queue)))
        attempt = journal.start_run(job.job_id, (("node0", 2),), iso)
        journal.record_progress(job.job_id, attempt, None, None, measured, None)


def test_one_tenants_false_reports_move_anothers_predictions_by_at_most_the_bound(tmp_path):
    """Fits are per model name: tenant b's jobs naming ResNet50 and reporting a trickle moved
    tenant a's ResNet50 predictions to almost nothing. Under tenants each queue is fitted apart,
    the median taken over queues, and the fit kept within TENANT_FIT_BOUND of the prior."""
    catalog = default_catalog()
    iso = catalog.throughput("ResNet50", 2, 1)
    journal = Journal(tmp_path / "s")
    tenants = _tenants(a=["team-a"], b=["team-b"], c=["team-c"])
    _tenant_runs(journal, "team-a", iso, 3)
    _tenant_runs(journal, "team-b", 0.001, 20)
    learner, doc = fit_from_journal(journal, catalog, "profiled", tenants=tenants)
    assert learner.throughput("ResNet50", iso, 1.0) >= iso / 2 * (1 - 1e-9)  # TENANT_FIT_BOUND
    assert doc["models"]["ResNet50"]["observations"] == 23
    _tenant_runs(journal, "team-c", iso, 2)  # a liar among three tenants: the median is an honest tenant's
    learner, _ = fit_from_journal(journal, catalog, "profiled", tenants=tenants)
    assert learner.throughput("ResNet50", iso, 1.0) == pytest.approx(iso)
    assert learner.correct("ResNet50", 0.5) == pytest.approx(0.5)


def test_groups_without_contended_runs_do_not_vote_on_the_exponent_nor_groups_without_uncontended_runs_on_the_scale():
    """A group whose runs of a model were never contended has the prior's exponent 1.0 alone, and
    voted for it: one honest contended group's exponent was halved beside one such group and
    erased beside two. Likewise a group with only contended runs voted the prior's scale 1."""
    from deepshare.runtime.journal import Measurement
    from deepshare.runtime.learning import fit_runs

    iso = CATALOG.throughput("GraphSage", 2, 1)

    def runs(queue: str, prior: float, measured: float, n: int = 30) -> list[Measurement]:
        return [Measurement(f"{queue}-{i}", 1, "GraphSage", 2, (("n0", 2),), measured * iso, prior * iso, None, queue)
                for i in range(n)]

    tenants = _tenants(a=["a"], b=["b"], c=["c"])
    contended = runs("a", 0.7, 0.7 ** 1.8)  # honest: the true exponent is 1.8
    alone = fit_runs(contended, CATALOG, tenants).fit("GraphSage").exponent
    assert alone > 1.7
    for others in (runs("b", 1.0, 1.0), runs("b", 1.0, 1.0) + runs("c", 1.0, 1.0)):
        assert fit_runs(contended + others, CATALOG, tenants).fit("GraphSage").exponent == pytest.approx(alone)
    slow = runs("b", 1.0, 0.5) + runs("c", 1.0, 0.5)  # uncontended, at half the catalog's rate
    scale = fit_runs(slow, CATALOG, tenants).fit("GraphSage").scale
    assert scale < 0.6
    assert fit_runs(slow + runs("a", 0.7, 0.35), CATALOG, tenants).fit("GraphSage").scale == pytest.approx(scale)


def test_runs_are_fitted_by_tenant_only_under_a_tenants_file_and_pooled_when_one_tenant_ran_them():
    """Bounded per-queue fitting started whenever a run named a queue, also without ``--tenants``:
    a model truly at 0.2x its catalog rate was learned as 0.5x (the bound), a one-run queue was
    shrunk toward the prior, and a tenant with two queues had two votes."""
    from deepshare.runtime.journal import Measurement
    from deepshare.runtime.learning import TENANT_FIT_BOUND, fit_runs

    runs = _resnet_runs

    def scale(rs: list[Measurement], tenants=None) -> float:  # type: ignore[no-untyped-def]
        learner = fit_runs(rs, CATALOG) if tenants is None else fit_runs(rs, CATALOG, tenants)
        return learner.fit("ResNet50").scale

    pooled = scale(runs(None, 0.2, 40))
    assert pooled < 0.25
    assert scale(runs("x", 0.2, 40)) == pytest.approx(pooled)  # a user's queue field, no tenants file
    tenants = _tenants(alice=["a1", "a2"], bob=["b"])
    assert scale(runs("a1", 0.2, 20) + runs("a2", 0.2, 20), tenants) == pytest.approx(pooled)  # one tenant: pooled
    assert scale(runs("admin-q", 0.2, 20) + runs(None, 0.2, 20), tenants) == pytest.approx(pooled)  # the admin's
    # two groups: bounded (what is left: an honest model's true 0.2x reads as the bound's 0.5x)
    assert scale(runs("a1", 0.2, 20) + runs("admin-q", 0.2, 20), tenants) == pytest.approx(1 / TENANT_FIT_BOUND)
    # the liar's two queues are one vote: an honest tenant and the admin outvote it
    honest = runs("b", 1.0, 20) + runs("admin-q", 1.0, 20)
    assert scale(honest + runs("a1", 0.001, 5) + runs("a2", 0.001, 5), tenants) > 0.95
    from deepshare.runtime.learning import tenant_group

    assert [tenant_group(q, tenants) for q in ("a1", "a2", "b", "admin-q", None, "gone")] == [
        "tenant:alice", "tenant:alice", "tenant:bob", "admin", "admin", "queue:gone"]


def test_the_live_refit_and_calibrate_from_state_fit_by_tenant_under_the_tenants_file(tmp_path, capsys):
    import hashlib

    text = ("queues:\n  - {name: team-a, nominal_gpus: 8}\n  - {name: team-b, nominal_gpus: 8}\n"
            "default_queue: team-a\ntokens:\n"
            + "".join(f"  - {{name: {n}, queues: [team-{n}], sha256: {hashlib.sha256(n.encode()).hexdigest()}}}\n"
                      for n in ("a", "b")))
    (tmp_path / "tenants.yaml").write_text(text)
    from deepshare.tenants.spec import load_tenants

    tenants = load_tenants(tmp_path / "tenants.yaml")
    state = tmp_path / "s"
    journal = Journal(state)
    iso = CATALOG.throughput("ResNet50", 2, 1)
    _tenant_runs(journal, "team-a", iso, 3)
    _tenant_runs(journal, "team-b", 0.001, 20)
    live = LiveLearning(state, make_contention("profiled"), CATALOG, tenants=lambda: tenants).refit(journal)
    assert live["models"]["ResNet50"]["scale"] >= 0.5 * (1 - 1e-9)  # bounded: two tenants
    out = tmp_path / "fit.json"
    assert main(["calibrate", "--from-state", str(state), "--tenants", str(tmp_path / "tenants.yaml"),
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["models"] == live["models"]
    assert main(["calibrate", "--from-state", str(state), "--json", str(out)]) == 0  # no file: pooled
    assert json.loads(out.read_text())["models"]["ResNet50"]["scale"] < 0.1
    assert main(["calibrate", "--profiles", str(tmp_path), "--tenants", str(tmp_path / "tenants.yaml")]) == 2
    assert "--tenants goes with --from-state" in capsys.readouterr().err


def test_a_tenant_sharing_a_queue_is_one_group_with_its_co_owners_not_a_second_vote():
    """alice owns a alone and s with bob: grouped by each queue's exact owners she had two votes
    (tenant:alice, tenant:alice,bob), and her false reports on both dragged honest carol's model
    to the bound (0.5x). Tenants linked by a shared queue are one group."""
    from deepshare.runtime.learning import fit_runs, queue_owners, tenant_group

    tenants = _tenants(alice=["a", "s"], bob=["s"], carol=["c"])
    assert [tenant_group(q, tenants) for q in ("a", "s", "c")] == ["tenant:alice,bob", "tenant:alice,bob", "tenant:carol"]
    assert queue_owners(_tenants(x=["q1", "q2"], y=["q1"], z=["q2"], w=["q3"])) == {
        "q1": "tenant:x,y,z", "q2": "tenant:x,y,z", "q3": "tenant:w"}
    runs = _resnet_runs

    learner = fit_runs(runs("a", 0.001, 5) + runs("s", 0.001, 5) + runs("c", 1.0, 20) + runs("admin-q", 1.0, 20),
                       CATALOG, tenants)
    assert learner.fit("ResNet50").scale > 0.95
