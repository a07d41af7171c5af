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


def test_a_planted_copy_of_the_right_size_is_replaced_not_loaded(tmp_path):
    """The copies folder was shared and a copy reused when its size matched: a file of the same
    size planted under the content's name was what the workers loaded."""
    path = local_spec("rl-base=/driver/policy.pt", b"weights", tmp_path).partition("=")[2]
    with open(path, "wb") as fh:
        fh.write(b"planted")  # 7 bytes, as b"weights"
    assert local_spec("rl-base=/driver/policy.pt", b"weights", tmp_path).partition("=")[2] == path
    assert open(path, "rb").read() == b"weights"


def test_the_default_copies_folder_is_this_users_and_private(tmp_path, monkeypatch):
    import os
    import stat

    import pytest

    from deepshare.core.errors import DeepShareError
    from deepshare.experiments.policy_files import copies_folder

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folder = copies_folder()
    assert folder == tmp_path / f"deepshare-policy-files-{os.geteuid()}"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o777)  # as another user's planting would need it
    with pytest.raises(DeepShareError, match="writable by other users"):
        copies_folder()
