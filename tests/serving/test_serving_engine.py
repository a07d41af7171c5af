"""The placement service without HTTP: request -> view -> decision -> response, for every
registered policy, and the field paths of inconsistent requests."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError
from serving_cases import assert_feasible, canonical, large_request, small_request, valid_requests

from deepshare.core.bounds import MAX_DURATION_S, MAX_GPU_SERVICE_S, MAX_JOB_GPUS, MAX_TIMESTAMP_S
from deepshare.core.contention import make_contention
from deepshare.core.information import InformationModel
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology
from deepshare.core.traces import load
from deepshare.policies import make_policy, policy_names
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import RequestError, response_to_decision, view_to_request

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
ENGINES: dict[str, PlacementEngine] = {}


def engine(policy: str = "rl-hybrid") -> PlacementEngine:
    if policy not in ENGINES:
        ENGINES[policy] = PlacementEngine(EngineSettings(policy=policy))
    return ENGINES[policy]


def place(request: dict, policy: str = "rl-hybrid") -> dict:
    return engine(policy).place(PlacementRequest.model_validate(request)).model_dump(mode="json", exclude_none=True)


LIGHTER = {"planner": "planner=2"}
"""Policies that take a knob, run here with a cheaper one: the same code paths (the planner still
samples, rolls out and compares futures), a quarter of the planner's default cost."""


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_answers_through_the_service_as_in_the_simulator(policy):
    """Decision points of a real simulation, sent as requests, give the policy's own decisions.
    The simulation runs under the estimated information model, which is what a request says (a
    service never knows true remaining work, so a view it builds is never ``exact``)."""
    policy = LIGHTER.get(policy, policy)
    served, local = engine(policy), make_policy(policy)
    sim = Simulator(load_topology("testbed"), load(TRACE).jobs[:80], make_contention("profiled"),
                    information=InformationModel("estimated", 1.0, 3))
    points = 0
    while (view := sim.advance()) is not None and points < 60:
        decision = local.decide(view)
        request = view_to_request(view)
        response = served.place(PlacementRequest.model_validate_json(request.model_dump_json()))
        assert_feasible(request.model_dump(mode="json"), response.model_dump(mode="json", exclude_none=True))
        assert canonical(response_to_decision(response, view)) == canonical(decision)
        sim.apply(decision)
        points += 1
    assert points >= 15


def test_small_request_exact_answer_from_a_heuristic():
    answer = place(small_request(), "fifo+consolidated")
    assert answer["policy"] == "fifo+consolidated" and answer["policy_version"].startswith("deepshare-")
    assert answer["decisions"] == [
        {"job_id": "p0", "action": "place", "placement": {"n0": 2}, "predicted_slowdown": 1.0},
        {"job_id": "p1", "action": "place", "placement": {"n1": 8}, "predicted_slowdown": 1.0},
        {"job_id": "p2", "action": "place", "placement": {"n2": 8, "n3": 8}, "predicted_slowdown": 1.0},
    ]
    assert answer["preempt"] == [] and answer["migrate"] == []


def test_large_request_is_feasible():
    request = large_request()
    answer = place(request)
    assert_feasible(request, answer)
    assert sum(d["action"] == "place" for d in answer["decisions"]) > 10


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_requests())
def test_valid_requests_get_feasible_answers(request):
    assert_feasible(request, place(request))


def test_batched_scoring_gives_the_same_answer():
    """A server's scorer (calls batched with other requests') decides exactly like the policy's own."""
    eng = engine()
    calls = []

    def score(obs):
        calls.append(obs)
        return eng.batch_scorer([obs, obs])[1]  # scored inside a batch of two

    request = PlacementRequest.model_validate(large_request(16, 16))
    together = eng.place(request, score=score)
    assert together == eng.place(request) and len(calls) > 1


def test_scorer_batch_equals_single_calls():
    policy = engine().policy
    scorer = policy.scorer
    rng = np.random.default_rng(0)
    obs = [
        {"observations": rng.normal(size=(16, len(policy.encoding.features))).astype(np.float32),
         "action_mask": (rng.random(16) > 0.3).astype(np.float32)}
        for _ in range(5)
    ]
    batch = scorer.batch(obs)
    for one, scores in zip(obs, batch):
        np.testing.assert_allclose(scorer(one), scores, rtol=1e-6)


def test_policy_description_says_what_it_was_trained_on():
    info = engine().describe()
    assert info.name == "rl-hybrid" and info.checkpoint.endswith("rl_est_ppo.pt")
    assert info.trained_on["config"] == "rllib_configs/rl_est_ppo.yaml"
    assert "deepshare-train-jobset0-episode0.json" in info.trained_on["env"]["traces"]  # shown without directories
    assert list(info.trained_on["env"]["durations"]) == ["estimated", "estimated", "estimated", "unknown"]
    assert engine("las+spread").describe().trained_on is None


def test_policy_description_shows_no_absolute_local_paths(tmp_path):
    """A file trained here records where its config and warm start lay; /v1/policy names them
    without the trainer's directories (relative paths stay as recorded)."""
    import torch

    from deepshare.policies.checkpoint import SHIPPED_BASE, shipped

    doc = torch.load(shipped(SHIPPED_BASE), weights_only=True)
    doc["metadata"] = {**doc["metadata"], "config": "/home/alice/exp/rl_base_warm.yaml",
                       "model": {"hidden": 64, "init_from": "/home/alice/runs/bc/policy.pt"}}
    torch.save(doc, tmp_path / "policy.pt")
    trained = engine(f"rl-base={tmp_path / 'policy.pt'}").describe().trained_on
    assert trained["config"] == "rl_base_warm.yaml"
    assert trained["model"] == {"hidden": 64, "init_from": "policy.pt"}
    dagger = engine(f"rl-base={shipped('rl_base_dagger.pt')}").describe().trained_on
    assert dagger["model"]["init_from"] == "runs/bc_dagger3/policy.pt"
    assert engine("rl-base").describe().trained_on["config"] == "rllib_configs/rl_est_imitate.yaml"


def bad(request: dict) -> list[tuple[tuple, str]]:
    with pytest.raises(RequestError) as caught:
        engine().view(PlacementRequest.model_validate(request))
    return [(e.loc, e.msg) for e in caught.value.errors]


def test_running_job_on_an_unknown_node_names_the_field():
    request = small_request()
    request["running"][0]["placement"] = {"n9": 4}
    [(loc, msg)] = bad(request)
    assert loc == ("body", "running", 0, "placement", "n9") and "unknown node 'n9'" in msg


def test_duplicate_ids_name_both_fields():
    request = small_request()
    request["pending"][2]["job_id"] = "r0"
    assert [loc for loc, _ in bad(request)] == [("body", "running", 0, "job_id"), ("body", "pending", 2, "job_id")]


@pytest.mark.parametrize(
    "change, loc, text",
    [
        (lambda r: r["nodes"].append(dict(r["nodes"][0])), ("body", "nodes", 4, "name"), "duplicate node name"),
        (lambda r: r["nodes"][1].update(free_gpus=9), ("body", "nodes", 1, "free_gpus"), "exceeds gpus"),
        (lambda r: r["nodes"][0].update(free_gpus=5), ("body", "nodes", 0, "free_gpus"), "running jobs hold 4 GPUs"),
        (lambda r: r["pending"][0].update(submitted_at=101.0), ("body", "pending", 0, "submitted_at"), "after now"),
        (lambda r: r["running"][0].update(submitted_at=101.0), ("body", "running", 0, "submitted_at"), "after now"),
        (lambda r: r["pending"][1].update(queued_since=150.0), ("body", "pending", 1, "queued_since"), "150.0 is after now (100.0)"),
        (lambda r: r["pending"][1].update(queued_since=5.0), ("body", "pending", 1, "queued_since"),
         "5.0 is before the job was submitted (20.0)"),
    ],
)
def test_inconsistent_requests_name_the_field(change, loc, text):
    request = small_request()
    change(request)
    [(got, msg)] = bad(request)
    assert got == loc and text in msg


def serve_cli(capsys, *argv: str) -> tuple[int, str]:
    """``deepshare serve ARGV`` in this process: (exit status, stderr)."""
    rc, _, err = cli(capsys, "serve", *argv)
    return rc, err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--policy", "rl-hybrid=/no/such/policy.pt"], "file not found"),
        (["--policy", "las+spread=x"], "takes no argument"),
        (["--contention", "magic"], "unknown model 'magic'"),
        (["--port", "0"], "expected a port number 1..65535"),
        (["--replicas", "-1"], "expected an integer from 1 to 256 replicas"),
    ],
)
def test_bad_serve_flags_exit_2_before_anything_starts(capsys, argv, needle):
    rc, err = serve_cli(capsys, *argv)
    assert rc == 2 and needle in err and "Traceback" not in err


def test_a_taken_port_is_refused(capsys, monkeypatch):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.delenv("DEEPSHARE_SERVE_TOKEN", raising=False)
        rc, err = serve_cli(capsys, "--policy", "las+spread", "--port", str(port))
    assert rc == 2 and f"--port {port}: cannot bind (already in use)" in err


def test_short_token_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("DEEPSHARE_SERVE_TOKEN", "short")
    rc, err = serve_cli(capsys, "--policy", "las+spread")
    assert rc == 2 and "at least 8 characters" in err


def test_serve_config_in_the_repo_is_a_valid_serve_config():
    """`serve run serve/config.yaml` names this package's builder with valid settings."""
    import yaml
    from ray.serve.schema import ServeDeploySchema

    from deepshare.serving.deployment import PlacementService, build_app
    from deepshare.serving.settings import ServiceSettings

    config = ServeDeploySchema.model_validate(yaml.safe_load((Path(__file__).resolve().parents[2] / "serve" / "config.yaml").read_text()))
    [app] = config.applications
    assert app.import_path == "deepshare.serving.deployment:build_app"
    ServiceSettings.model_validate(app.args)
    assert [d.name for d in app.deployments] == [PlacementService.name]
    assert app.deployments[0].autoscaling_config["max_replicas"] > 1
    assert config.http_options.host == "127.0.0.1"
    build_app(app.args)


@pytest.mark.parametrize("policy", ["rl-hybrid", "las+contention-aware", "srsf+packed"])
def test_a_deadline_changes_no_decision(policy):
    """Under a deadline the view's predictor checks it first, and still offers its batch and its
    isolated placements, so the service's decisions are those made without one."""
    from deepshare.core.deadline import Deadline

    served = engine(policy)
    for body in (small_request(), large_request()):
        request = PlacementRequest.model_validate(body)
        bounded = served._bounded_view(request, Deadline(600.0))
        assert callable(getattr(bounded.predict, "many", None)) and callable(getattr(bounded.predict, "isolated", None))
        assert served.place(request, Deadline(600.0)) == served.place(request)


@pytest.mark.parametrize("policy", ["srsf+packed", "fifo+consolidated"])
def test_concurrent_decision_threads_get_the_answers_they_get_alone(policy):
    """The service decides on several threads with one policy object: a heuristic's queue index
    (kept across decisions to save re-sorting) is per thread, so requests cannot corrupt each
    other (they did: KeyErrors, AssertionErrors and wrong answers that still looked feasible)."""
    import threading

    from interleaved import run_interleaved

    served = PlacementEngine(EngineSettings(policy=policy))
    first = large_request(64, 300)
    second = large_request(64, 300)
    for job in second["pending"]:  # the same ids in the opposite order of remaining time and of age
        job["remaining_s"] = 1e5 - job["remaining_s"]
        job["submitted_at"] = 1000.0 - job["submitted_at"]
    requests = [PlacementRequest.model_validate(body) for body in (first, second)]
    alone = [served.place(request) for request in requests]
    assert alone[0] != alone[1]
    answers: list[list] = [[], []]
    start = threading.Barrier(2)

    def decide(i: int) -> None:
        start.wait()
        for _ in range(12):
            try:
                answers[i].append(served.place(requests[i]))
            except Exception as exc:  # noqa: BLE001 - what a corrupted index raised
                answers[i].append(exc)

    run_interleaved([lambda: decide(0), lambda: decide(1)])  # switching often, as a busy replica does
    for i in (0, 1):
        assert answers[i] == [alone[i]] * 12


@pytest.mark.parametrize("policy", ["srsf+packed+preempt", "srsf+uncontended+preempt", "rl-hybrid-preempt"])
def test_a_preemptive_launch_is_predicted_without_its_victim(policy):
    """r0 spans both full nodes with a long way to go; p0 (short) outranks it. Preempting r0
    frees exactly p0's placement, where p0 then runs alone: predicted at full speed. With r0
    still counted, uncontended (and rl-hybrid-preempt, which defers to it) waited instead."""
    body = {
        "now": 1000.0,
        "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 0} for i in range(2)],
        "running": [
            {"job_id": "r0", "model": "Transformer-XL", "placement": {"n0": 4, "n1": 4}, "remaining_s": 90000.0},
            {"job_id": "r1", "model": "MobileNetV3", "placement": {"n0": 4}, "remaining_s": 10.0},
            {"job_id": "r2", "model": "MobileNetV3", "placement": {"n1": 4}, "remaining_s": 10.0},
        ],
        "pending": [{"job_id": "p0", "model": "Transformer-XL", "gpus": 8, "submitted_at": 10.0, "remaining_s": 60.0}],
    }
    answer = engine(policy).place(PlacementRequest.model_validate(body))
    assert answer.preempt == ["r0"]
    [decision] = answer.decisions
    assert (decision.action, decision.placement) == ("place", {"n0": 4, "n1": 4})
    alone = engine(policy).place(PlacementRequest.model_validate({
        **body, "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 4} for i in range(2)], "running": body["running"][1:],
    }))
    assert decision.predicted_slowdown == alone.decisions[0].predicted_slowdown  # as if r0 had never run


# -- the domain of a request's numbers (issue 35): extreme but valid is answered, past it is 422 ---
def extreme_request(durations: str = "estimated") -> dict:
    """Every number at an end of its domain: a history whose run times for one group, one user
    and one size span a nanosecond to a year (and their estimates the other way round), estimates
    and remaining times of a year, a year of attained service on the largest job, the latest clock."""
    now = MAX_TIMESTAMP_S
    spread = [5e-324, MAX_DURATION_S, 1e-9, MAX_DURATION_S, 1.0]
    history = [
        {"job_id": f"h{i}", "model": "FSDP", "gpus": (1, 8, MAX_JOB_GPUS)[i % 3], "run_s": run,
         "finished_at": now - i, "user": "u", "group": "g", "vc": "v",
         "requested_s": spread[-1 - (i % len(spread))]}
        for i, run in enumerate(spread * 3)
    ]
    request = small_request()
    request.update(now=now, history=history, durations=durations)
    request["running"][0].update(attained_gpu_s=MAX_GPU_SERVICE_S, requested_s=MAX_DURATION_S, group="g",
                                 running_for_s=MAX_DURATION_S, remaining_s=MAX_DURATION_S)
    for job, remaining, attained in zip(request["pending"], (MAX_DURATION_S, 5e-324, 0.0), (MAX_GPU_SERVICE_S, 0.0, 0.0)):
        job.update(group="g", user="u", vc="v", attained_gpu_s=attained, last_run_s=MAX_DURATION_S,
                   remaining_s=remaining, submitted_at=0.0)
        if durations != "unknown":
            job["requested_s"] = MAX_DURATION_S if remaining else 5e-324
        else:
            del job["remaining_s"]
    if durations == "unknown":
        for past in history:
            past.pop("requested_s")
        del request["running"][0]["requested_s"], request["running"][0]["remaining_s"]
    return request


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_answers_extreme_but_valid_requests(policy):
    """The belief, forecast and prediction maths are total on the documented domain: every policy
    answers (no 500) with a feasible decision and finite predictions, under every information model."""
    for durations in ("estimated", "unknown", "exact"):
        request = extreme_request(durations)
        if durations == "exact":
            request["running"][0]["remaining_s"] = MAX_DURATION_S
            for job in request["pending"]:
                job["remaining_s"] = MAX_DURATION_S
        answer = place(request, policy)
        assert_feasible(request, answer)
        assert all(math.isfinite(d.get("predicted_slowdown", 1.0)) for d in answer["decisions"])


@pytest.mark.parametrize(
    "change, loc",
    [
        (lambda r: r.setdefault("history", []).append({"gpus": 1, "run_s": 1e308}), ("body", "history", 0, "run_s")),
        (lambda r: r.setdefault("history", []).append({"gpus": 1, "run_s": 1e10}), ("body", "history", 0, "run_s")),
        (lambda r: r["pending"][0].update(requested_s=1.7e308), ("body", "pending", 0, "requested_s")),
        (lambda r: r["pending"][0].update(remaining_s=1e300), ("body", "pending", 0, "remaining_s")),
        (lambda r: r["running"][0].update(attained_gpu_s=1e300), ("body", "running", 0, "attained_gpu_s")),
        (lambda r: r.update(now=1e300), ("body", "now")),
        (lambda r: r.setdefault("history", []).append({"gpus": 10**20, "run_s": 60.0}), ("body", "history", 0, "gpus")),
    ],
)
def test_numbers_past_their_domain_are_refused_naming_the_field(change, loc):
    request = small_request()
    change(request)
    with pytest.raises(ValidationError) as caught:
        PlacementRequest.model_validate(request)
    assert loc[1:] in [e["loc"] for e in caught.value.errors()]


def test_a_history_job_finished_after_now_is_refused():
    request = small_request()
    request["history"] = [{"gpus": 1, "run_s": 60.0, "finished_at": 100.5}]
    assert bad(request) == [(("body", "history", 0, "finished_at"), "100.5 is after now (100.0)")]


def test_a_replica_without_a_token_says_so_in_its_log(caplog):
    """``serve deploy`` builds the application on the cluster, where the deploying shell's
    $DEEPSHARE_SERVE_TOKEN is not set: the service came up open without a word. Each replica's
    constructor calls this check."""
    import inspect
    import logging

    import deepshare.serving.deployment as deployment
    from deepshare.serving.settings import ServiceSettings

    with caplog.at_level(logging.WARNING, logger="deepshare.serving.deployment"):
        assert deployment.warn_if_open(ServiceSettings(policy="fifo+consolidated"))
    assert "no token" in caplog.text and "without authentication" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="deepshare.serving.deployment"):
        assert not deployment.warn_if_open(ServiceSettings(policy="fifo+consolidated", token="t" * 12))
    assert "no token" not in caplog.text
    assert "        warn_if_open(self.settings)\n" in inspect.getsource(deployment)  # in the replica's constructor
