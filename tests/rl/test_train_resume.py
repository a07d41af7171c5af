"""Resuming a run (``deepshare train --resume``) without Ray: a stand-in algorithm saves and
restores checkpoints, so the run folder's bookkeeping (which checkpoint, which metrics rows) is
checked in a second."""

from __future__ import annotations

import csv
import types
from pathlib import Path

import pytest

import deepshare.rl.train as training
from deepshare.core.errors import DeepShareError

CONFIG = "name: t\nenv: {generated_fraction: 1.0, generated_jobs: 12, generated_nodes: [2]}\nrun: {checkpoint_every: 5}\n"


def complete(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "algorithm_state.pkl").write_bytes(b"")  # what RLlib's save_to_path writes last
    return folder


def test_the_newest_checkpoint_is_found_by_number_and_only_when_complete(tmp_path):
    for i in (9995, 9999, 10000):
        complete(tmp_path / "checkpoints" / f"iter_{i:04d}")
    assert training._latest_checkpoint(tmp_path).name == "iter_10000"  # not iter_9999 (text order)
    (tmp_path / "checkpoints" / "iter_10005").mkdir()  # a save cut short: no state file
    complete(tmp_path / "checkpoints" / "iter_10010.partial")  # a save still under way
    assert training._latest_checkpoint(tmp_path).name == "iter_10000"


def test_a_folder_of_incomplete_checkpoints_is_one_line(tmp_path):
    (tmp_path / "checkpoints" / "iter_0005").mkdir(parents=True)
    with pytest.raises(DeepShareError, match="no complete checkpoints"):
        training._latest_checkpoint(tmp_path)


class FakeAlgo:
    """What ``train`` uses of an RLlib Algorithm: iterations, checkpoints, the module, and the
    env runners its config sampled with (recorded in ``policy.pt``)."""

    def __init__(self, iteration: int = 0, crash_at: int | None = None, fail_save: bool = False) -> None:
        self.iteration, self.crash_at, self.fail_save = iteration, crash_at, fail_save
        self.config = types.SimpleNamespace(num_env_runners=2, num_envs_per_env_runner=1)

    def train(self) -> dict:
        if self.crash_at and self.iteration + 1 == self.crash_at:
            raise KeyboardInterrupt("node lost")
        self.iteration += 1
        return {"training_iteration": self.iteration}

    def save_to_path(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "it").write_text(str(self.iteration))
        if self.fail_save:
            raise KeyboardInterrupt("stopped mid-save")
        (Path(path) / "algorithm_state.pkl").write_bytes(b"")

    def get_module(self):
        return types.SimpleNamespace(scorer=None)

    def stop(self) -> None:
        pass


@pytest.fixture
def no_ray(monkeypatch):
    import ray
    from ray.rllib.algorithms.algorithm import Algorithm

    import deepshare.policies.checkpoint as checkpoint
    import deepshare.rl.advantages as advantages
    import deepshare.rl.curriculum as curriculum
    import deepshare.rl.seeding as seeding

    monkeypatch.setattr(training, "start_ray", lambda address: None)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 1.0})
    monkeypatch.setattr(checkpoint, "export_scorer", lambda *a, **k: None)
    monkeypatch.setattr(Algorithm, "from_checkpoint",
                        staticmethod(lambda p: FakeAlgo(int((Path(p) / "it").read_text()))))
    monkeypatch.setattr(curriculum, "resume_stage", lambda algo: None)
    monkeypatch.setattr(advantages, "resume_replay", lambda algo: None)
    monkeypatch.setattr(seeding, "resume_streams", lambda algo: 0)
    return lambda algo: monkeypatch.setattr(
        training, "build_algorithm_config", lambda *a, **k: types.SimpleNamespace(build_algo=lambda: algo))


def test_resuming_drops_the_metrics_rows_after_the_checkpoint(tmp_path, no_ray):
    config, run = tmp_path / "c.yaml", tmp_path / "run"
    config.write_text(CONFIG)
    no_ray(FakeAlgo(crash_at=8))
    with pytest.raises(KeyboardInterrupt):
        training.train(config, run, iterations=10)  # stops at iteration 8; the last checkpoint is iter_0005
    training.train(config, None, iterations=10, resume=run)
    iterations = [int(r["iteration"]) for r in csv.DictReader((run / "metrics.csv").open())]
    assert iterations == list(range(1, 11))  # 6 and 7 once, not twice


def test_trim_metrics_keeps_the_header_and_rows_up_to_the_checkpoint(tmp_path):
    file = tmp_path / "metrics.csv"
    file.write_text("iteration,x\n1,a\n2,b\n3,c\n")
    assert training.trim_metrics(file, 2) == 1
    assert file.read_text() == "iteration,x\n1,a\n2,b\n"
    assert training.trim_metrics(file, 2) == 0 and training.trim_metrics(tmp_path / "none.csv", 2) == 0


OLD_COLUMNS = [c for c in training.METRIC_COLUMNS if c not in ("baseline_matched", "reward_rate")]
"""metrics.csv's header before the columns ``baseline_matched`` and ``reward_rate`` were added."""


def test_resuming_a_run_an_earlier_deepshare_wrote_gives_its_metrics_the_new_columns(tmp_path, no_ray):
    """A resumed run's rows have every column this deepshare writes: the old header gains them
    (the old rows empty there), so no row is longer than its header."""
    config, run = tmp_path / "c.yaml", tmp_path / "run"
    config.write_text(CONFIG)
    no_ray(FakeAlgo(crash_at=8))
    with pytest.raises(KeyboardInterrupt):
        training.train(config, run, iterations=10)
    file = run / "metrics.csv"
    old = [dict(zip(OLD_COLUMNS, line.split(","))) for line in file.read_text().splitlines()[1:]]
    file.write_text(",".join(OLD_COLUMNS) + "\r\n" + "".join(",".join(r.values()) + "\r\n" for r in old))
    training.train(config, None, iterations=10, resume=run)
    with file.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == training.METRIC_COLUMNS and all(len(r) == len(rows[0]) for r in rows)
    by_name = [dict(zip(rows[0], r)) for r in rows[1:]]
    assert [int(r["iteration"]) for r in by_name] == list(range(1, 11))
    assert [r["baseline_matched"] for r in by_name[:5]] == [""] * 5  # the earlier run's rows: empty there
    assert all(r["baseline_matched"] == "nan" for r in by_name[5:])  # this fake run has no group baseline
    assert [r["reward_rate"] for r in by_name[:5]] == [""] * 5 and all(r["reward_rate"] == "nan" for r in by_name[5:])


def test_a_metrics_file_with_columns_train_does_not_write_is_refused_and_left_alone(tmp_path):
    file = tmp_path / "metrics.csv"
    file.write_text("iteration,reward\n1,2\n")
    with pytest.raises(DeepShareError, match=r"metrics.csv: column\(s\) reward are not"):
        training.upgrade_metrics_header(file)
    assert file.read_text() == "iteration,reward\n1,2\n"
    for bad, needle in (("iteration,iteration\n1,2\n", "its header is not"),
                        ("iteration,wall_s\n1,2\n2,3,4\n", "line 3 has more values than the header's 2 columns")):
        file.write_text(bad)
        with pytest.raises(DeepShareError, match=needle):
            training.upgrade_metrics_header(file)
        assert file.read_text() == bad
    current = (",".join(training.METRIC_COLUMNS) + "\r\n").encode()
    file.write_bytes(current)
    assert not training.upgrade_metrics_header(file) and file.read_bytes() == current
    assert not training.upgrade_metrics_header(tmp_path / "none.csv")


def test_a_save_cut_short_leaves_no_checkpoint_a_resume_would_pick(tmp_path, no_ray):
    folder = tmp_path / "checkpoints" / "iter_0005"
    with pytest.raises(KeyboardInterrupt):
        training.save_checkpoint(FakeAlgo(5, fail_save=True), folder)
    assert not folder.exists()
    training.save_checkpoint(FakeAlgo(5), folder)
    assert training.checkpoint_iteration(folder) == 5 and not folder.with_name("iter_0005.partial").exists()


def test_the_state_file_looked_for_is_the_one_rllib_writes_last():
    """A real checkpoint's top-level state file is ``Algorithm.STATE_FILE_NAME``: looking for
    another name (``state.pkl``, a plain Checkpointable's) found no checkpoint to resume."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from deepshare.rl.train import CHECKPOINT_STATE

    assert {f"{Algorithm.STATE_FILE_NAME}.pkl", f"{Algorithm.STATE_FILE_NAME}.msgpack"} == set(CHECKPOINT_STATE)


def _crashed_run(tmp_path: Path, no_ray) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """(config, run folder) of a run stopped at iteration 8, its newest checkpoint iter_0005."""
    config, run = tmp_path / "c.yaml", tmp_path / "run"
    config.write_text(CONFIG)
    no_ray(FakeAlgo(crash_at=8))
    with pytest.raises(KeyboardInterrupt):
        training.train(config, run, iterations=10)
    return config, run


def test_a_checkpoint_rllib_cannot_restore_is_one_line_naming_it(tmp_path, no_ray, monkeypatch):
    """A truncated algorithm_state.pkl raised UnpicklingError through the CLI as a traceback."""
    import pickle

    from ray.rllib.algorithms.algorithm import Algorithm

    config, run = _crashed_run(tmp_path, no_ray)

    def damaged(path):
        raise pickle.UnpicklingError("pickle data was truncated")

    monkeypatch.setattr(Algorithm, "from_checkpoint", staticmethod(damaged))
    with pytest.raises(DeepShareError, match=r"^--resume .*run: checkpoint iter_0005 cannot be restored \(UnpicklingError: "
                                             r"pickle data was truncated\); move it away to resume from the one before$"):
        training.train(config, None, iterations=10, resume=run)


def test_resuming_to_an_iteration_the_checkpoint_has_reached_is_refused_before_ray(tmp_path, no_ray):
    """It trained nothing and still said "policy written"."""
    config, run = _crashed_run(tmp_path, no_ray)
    for iterations in (3, 5):
        with pytest.raises(DeepShareError, match=r"checkpoint is at iteration 5 already; give --iterations above 5"):
            training.train(config, None, iterations=iterations, resume=run)


@pytest.mark.parametrize("raised, expected, needle", [
    ("actor", "RuntimeFailure", "restore iter_0005 on Ray"),  # the cluster failed: exit 1, not "move it away"
    ("input", "DeepShareError", "trace file t.json: file not found"),  # the env's own error, as it is
])
def test_a_restore_that_fails_for_another_reason_than_the_checkpoint_says_so(tmp_path, no_ray, monkeypatch,
                                                                             raised, expected, needle):
    from ray.exceptions import RayActorError
    from ray.rllib.algorithms.algorithm import Algorithm

    config, run = _crashed_run(tmp_path, no_ray)

    def failing(path):
        raise RayActorError() if raised == "actor" else DeepShareError("trace file t.json: file not found")

    monkeypatch.setattr(Algorithm, "from_checkpoint", staticmethod(failing))
    with pytest.raises(Exception) as info:
        training.train(config, None, iterations=10, resume=run)
    assert type(info.value).__name__ == expected and needle in str(info.value) and "move it away" not in str(info.value)


def test_a_run_without_its_policy_file_is_checked_against_its_checkpoint(tmp_path, no_ray):
    """Each checkpoint records the run's metadata: with ``policy.pt`` deleted (or a save cut short
    before its export), a resume with another config was not checked and exported the restored
    weights under the new config's description."""
    config, run = tmp_path / "c.yaml", tmp_path / "run"
    config.write_text(CONFIG)
    no_ray(FakeAlgo(crash_at=8))
    with pytest.raises(KeyboardInterrupt):
        training.train(config, run, iterations=10)  # the last checkpoint is iter_0005; no policy.pt (export faked)
    assert not (run / "policy.pt").exists()
    assert (run / "checkpoints" / "iter_0005" / training.CHECKPOINT_RUN_FILE).is_file()
    changed = tmp_path / "changed.yaml"
    changed.write_text(CONFIG.replace("generated_jobs: 12", "generated_jobs: 10"))
    with pytest.raises(DeepShareError, match=r"CONFIG differs from the config this run was trained with \(its checkpoint "
                                             r"records .*\) in env.generated_jobs"):
        training.train(changed, None, iterations=10, resume=run)
    training.train(config, None, iterations=10, resume=run)  # its own config resumes
