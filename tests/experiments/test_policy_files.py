"""Policy files only the driver has: read once there, copied once per machine by content."""

from __future__ import annotations

from deepshare.experiments.policy_files import driver_files, local_spec


def test_only_specs_naming_a_file_here_are_carried(tmp_path):
    own = tmp_path / "policy.pt"
    own.write_bytes(b"weights")
    found = driver_files(["srsf+packed", f"rl-base={own}", "rl-hybrid", f"rl-base={tmp_path / 'missing.pt'}", "x:Y=3"])
    assert found == {f"rl-base={own}": b"weights"}


def test_a_copy_is_named_by_its_content_and_reused(tmp_path):
    one = local_spec("rl-base=/driver/run/policy.pt", b"weights", tmp_path)
    base, _, path = one.partition("=")
    assert base == "rl-base" and path.endswith("/policy.pt") and open(path, "rb").read() == b"weights"
    assert local_spec("rl-hybrid=/elsewhere/policy.pt", b"weights", tmp_path).partition("=")[2] == path  # reused
    other = local_spec("rl-base=/driver/run/policy.pt", b"other weights", tmp_path).partition("=")[2]
    assert other != path and open(other, "rb").read() == b"other weights"
