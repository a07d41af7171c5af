"""An adversarial review of policy files, cards and their copies: what it found, each case failing
before its fix.

A policy file is user input (``--policy NAME=FILE``, ``serve``, ``export-policy``, ``policies
--card``): it loaded NaN weights silently (every score NaN: rl-base 9x worse, and the card said
all was well), declared sizes that cost gigabytes before any check (a 30 KB file asking a
30,000-wide network: 3.75 GB; a 2 MB archive of deflated zeros: a 2 GiB tensor; 10**12 rows per
choice: terabytes at the first decision), and odd metadata ended loads, exports and
``GET /v1/policy`` in tracebacks or 500s. Cards could hold terminal escape sequences and paths.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch

from cli_run import cli as run
from deepshare.core.errors import DeepShareError
from deepshare.policies import make_policy
from deepshare.policies.checkpoint import load_policy_file, scorer_shapes, shipped
from deepshare.policies.scorer_net import CandidateScorer

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


def edited(tmp_path: Path, name: str, edit, source: str = "rl_est_imitation.pt") -> Path:  # type: ignore[no-untyped-def]
    doc = load_policy_file(shipped(source))
    edit(doc)
    path = tmp_path / name
    torch.save(doc, path)
    return path


def weight(name: str, value: float, dtype: torch.dtype | None = None):  # type: ignore[no-untyped-def]
    def edit(doc):  # type: ignore[no-untyped-def]
        tensor = doc["state_dict"][name].clone()
        if dtype is not None:
            tensor = tensor.to(dtype)
        tensor.view(-1)[0] = value
        doc["state_dict"][name] = tensor
    return edit


@pytest.mark.parametrize("name, edit, message", [
    ("nan.pt", weight("trunk.0.weight", float("nan")), "state_dict: trunk.0.weight holds NaN or infinite weights"),
    ("inf.pt", weight("head.weight", float("inf")), "state_dict: head.weight holds NaN or infinite weights"),
    ("big64.pt", weight("head.bias", 1e300, torch.float64), "state_dict: head.bias holds NaN or infinite weights"),
    ("nofeatures.pt", lambda d: d.pop("features"), r"not a DeepShare policy file \(no features\)"),
    ("wide.pt", lambda d: d.__setitem__("hidden", 30_000), "hidden: expected an integer in 1..4096, got 30000"),
    ("rows.pt", lambda d: d["encoding"].__setitem__("max_candidates", 10**12),
     "encoding: max_candidates must be an integer in 2..1024"),
    ("offered.pt", lambda d: d["encoding"].__setitem__("jobs_considered", 10**6), "encoding: jobs_considered must be an integer in 1..1024"),
    ("anchor.pt", lambda d: d["metadata"].__setitem__("hybrid_rules", {"anchor": [[1], [2]]}),
     r"metadata hybrid_rules.anchor: expected \[order, placement\], got \[\[1\], \[2\]\]"),
    ("deep.pt", lambda d: d["metadata"].__setitem__("hybrid_rules", _nested(200)), "metadata nested deeper than 32 levels"),
    # a share of the GPUs: a floor of 5 made the safety net fire on every decision
    ("floor.pt", lambda d: d["metadata"].__setitem__("hybrid_rules", {"utilisation_floor": 5}),
     "metadata hybrid_rules.utilisation_floor: expected a share of the GPUs from 0 to 1, got 5"),
    # a 29 KB file whose shared references stand for 2**30 lists: the copy took all memory
    ("laughs.pt", lambda d: d["metadata"].__setitem__("laugh", _doubled(30)),
     "metadata stands for more than 100,000 values"),
    # finite weights that overflow float32: every score was NaN or infinite, and the policy waited
    ("huge.pt", weight("trunk.0.weight", 3e38), "state_dict: the weights overflow"),
    ("all_huge.pt", lambda d: d["state_dict"].update({k: torch.full_like(v, 1e30) for k, v in d["state_dict"].items()}),
     "state_dict: the weights overflow"),
    ("generators.pt", lambda d: d["encoding"].__setitem__("generators", ["consolidated"] * 100_000),
     "encoding: placement generators must be distinct, got 100000 with repeats"),
    ("format.pt", lambda d: d.__setitem__("format", True), r"not a DeepShare policy file \(format 1\)"),
    ("format_tensor.pt", lambda d: d.__setitem__("format", torch.tensor(1)), r"not a DeepShare policy file \(format 1\)"),
    ("key.pt", lambda d: d["encoding"].__setitem__("__class__", 1), "encoding: unknown key '__class__'; expected some of"),
    ("wait.pt", lambda d: d["encoding"].__setitem__("max_wait_s", True), "encoding: max_wait_s: expected seconds or None, got True"),
    # a tensor: a RuntimeError traceback (several values), or kept as a tensor and written on by export-policy (one)
    ("wait_tensor.pt", lambda d: d["encoding"].__setitem__("max_wait_s", torch.tensor([5.0, 6.0])),
     "encoding: max_wait_s: expected a number, a name or a list of names, got Tensor"),
    ("wait_scalar.pt", lambda d: d["encoding"].__setitem__("max_wait_s", torch.tensor(5.0)),
     "encoding: max_wait_s: expected a number, a name or a list of names, got Tensor"),
    ("generators_tensor.pt", lambda d: d["encoding"].__setitem__("generators", ["consolidated", torch.tensor(1)]),
     "encoding: generators: expected a number, a name or a list of names, got Tensor"),
])
def test_a_bad_policy_file_is_one_short_line_before_anything_costly(tmp_path, name, edit, message):
    path = edited(tmp_path, name, edit)
    with pytest.raises(DeepShareError, match=message) as caught:
        make_policy(f"rl-hybrid={path}")
    assert str(path) in str(caught.value) and "\n" not in str(caught.value) and len(str(caught.value)) < 600


def _doubled(levels: int) -> list:
    """``[x, x]`` ``levels`` times over: pickled once per object, copied once per reference."""
    value: list = ["a"]
    for _ in range(levels):
        value = [value, value]
    return value


def test_a_corrupted_copy_fails_its_checksum(tmp_path):
    """torch reads stored entries without checking their CRC: a byte flipped in the weights loaded
    silently, with changed weights."""
    data = bytearray(shipped("rl_est_ppo.pt").read_bytes())
    archive = zipfile.ZipFile(io.BytesIO(bytes(data)))
    entry = next(e for e in archive.infolist() if e.filename.endswith("/data/2"))
    data[entry.header_offset + 30 + len(entry.filename.encode()) + len(entry.extra) + 5] ^= 0xFF
    path = tmp_path / "flipped.pt"
    path.write_bytes(bytes(data))
    with pytest.raises(DeepShareError, match=r"a damaged archive: entry '.*data/2' fails its checksum"):
        make_policy(f"rl-hybrid={path}")


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_huge_value_in_an_error_is_cut_short(tmp_path):
    """A 10 MB hybrid_rules string made a 10,000,149-byte "one-line" error."""
    path = edited(tmp_path, "long.pt", lambda d: d["metadata"].__setitem__("hybrid_rules", "A" * 10**7))
    with pytest.raises(DeepShareError, match="metadata hybrid_rules: expected a mapping") as caught:
        make_policy(f"rl-hybrid={path}")
    assert len(str(caught.value)) < 400


def test_the_shapes_checked_before_building_are_the_networks():
    net = CandidateScorer(26, 64)
    assert {name: tuple(t.shape) for name, t in net.state_dict().items()} == scorer_shapes(26, 64)


def test_a_compressed_archive_is_refused_before_torch_inflates_it(tmp_path):
    """torch.save stores its entries; torch.load inflates deflated ones, so a 2 MB file of
    deflated zeros became a 2 GiB tensor before the shape check."""
    plain = io.BytesIO()
    torch.save(load_policy_file(shipped("rl_est_imitation.pt")), plain)
    stored = zipfile.ZipFile(io.BytesIO(plain.getvalue()))
    assert all(e.compress_type == zipfile.ZIP_STORED for e in stored.infolist())
    path = tmp_path / "deflated.pt"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for entry in stored.infolist():
            out.writestr(entry.filename, stored.read(entry.filename))
    with pytest.raises(DeepShareError, match=r"refused: archive entries are compressed"):
        make_policy(f"rl-base={path}")


def test_odd_metadata_becomes_plain_data_and_v1_policy_still_answers(tmp_path):
    from deepshare.serving.engine import EngineSettings, PlacementEngine

    def edit(doc):  # type: ignore[no-untyped-def]
        doc["metadata"]["extra"] = torch.zeros(3)
        doc["metadata"]["blob"] = b"\x00\x01"
        doc["metadata"]["env"]["traces"] = 7

    path = edited(tmp_path, "odd.pt", edit)
    engine = PlacementEngine(EngineSettings(policy=f"rl-base={path}"))
    described = engine.describe()
    assert described.trained_on["env"]["traces"] == [] and isinstance(described.trained_on["extra"], str)
    assert described.model_dump_json()  # what GET /v1/policy sends (it was a 500 every time)


@pytest.mark.parametrize("key, value, message", [
    ("durations", 5, "metadata env.durations: expected exact, estimated or unknown (or a list of them), got 5"),
    ("estimate_errors", "abc", "metadata env.estimate_errors: expected numbers >= 0, got 'abc'"),
    ("estimate_errors", {"a": 1}, "metadata env.estimate_errors: expected numbers >= 0, got {'a': 1}"),
])
def test_export_of_odd_metadata_is_one_line_and_writes_nothing(tmp_path, capsys, key, value, message):
    path = edited(tmp_path, "src.pt", lambda d: d["metadata"]["env"].__setitem__(key, value))
    out = tmp_path / "out.pt"
    rc, _, err = run(capsys, "export-policy", path, "--out", out, "--kind", "network", "--drop-rules", "--commit", "abcdef1")
    assert rc == 2 and message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.pt"]


def test_export_refuses_a_teacher_with_terminal_escapes(tmp_path, capsys):
    path = edited(tmp_path, "src.pt", lambda d: d["metadata"].__setitem__("imitates", "\x1b[2J\x1b[32mall checks passed\x1b[0m"))
    rc, out, err = run(capsys, "export-policy", path, "--out", tmp_path / "out.pt", "--kind", "network", "--drop-rules",
                       "--commit", "abcdef1")
    assert rc == 2 and "control characters are not allowed in a card" in err and "\x1b" not in out + err.replace("\\x1b", "")


def _card(tmp_path: Path, weights: str) -> Path:
    text = shipped("rl_est_ppo.pt").with_name("rl_est_ppo.card.yaml").read_text()
    card = tmp_path / "x.card.yaml"
    card.write_text(text.replace("weights: rl_est_ppo.pt", f"weights: {weights}"))
    return card


@pytest.mark.parametrize("weights, message", [
    ("../a.pt", "weights: expected the weights file's bare name (it lies beside the card), got '../a.pt'"),
    ("'.'", "weights: expected the weights file's bare name (it lies beside the card), got '.'"),
    ('"\\e[2J\\e[31mEVIL.pt"', "weights: control characters are not allowed in a card"),
])
def test_a_card_naming_a_path_or_holding_escapes_is_refused(tmp_path, capsys, weights, message):
    card = _card(tmp_path, weights)
    rc, out, err = run(capsys, "policies", "--card", card)
    assert rc == 2 and message in err and "Traceback" not in err and "\x1b" not in out


def test_the_card_is_checked_against_the_file_the_user_named(tmp_path, capsys):
    """``policies --card mine.pt`` beside a copy of another file's card said "the card matches its
    weights": it checked the file the card names, not mine.pt."""
    mine = tmp_path / "mine.pt"
    mine.write_bytes(shipped("rl_est_imitation.pt").read_bytes())
    (tmp_path / "mine.card.yaml").write_text(shipped("rl_est_ppo.pt").with_name("rl_est_ppo.card.yaml").read_text())
    (tmp_path / "rl_est_ppo.pt").write_bytes(shipped("rl_est_ppo.pt").read_bytes())  # what the card names
    rc, out, _ = run(capsys, "policies", "--card", mine)
    assert rc == 1 and "OUT OF STEP: weights: the card describes rl_est_ppo.pt, not mine.pt" in out


def test_a_folder_named_like_a_policy_does_not_hide_its_card(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rl-hybrid").mkdir()
    rc, out, _ = run(capsys, "policies", "--card", "rl-hybrid")
    assert rc == 0 and "the card matches its weights" in out
