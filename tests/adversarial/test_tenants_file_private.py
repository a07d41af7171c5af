"""The live scheduler's tenants file is refused when another user could change it.

Its token hashes let their holders submit jobs, which run as the scheduler's user: a tenants
file writable by the group or by everyone, or in a folder others can write (not sticky), let any
local user add a token of their own at the next reload. The state folder was already refused
under the same rules (``check_not_shared``); the tenants file was read wherever it was."""

from __future__ import annotations

import hashlib
import os

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.runtime.tenancy import LiveTenants

ADMIN = "admin-token-0123456789"
ALICE = "alice-token-0123456789"
TEXT = ("queues:\n  - {name: a, nominal_gpus: 2}\ntokens:\n"
        f"  - {{name: alice, queues: [a], sha256: {hashlib.sha256(ALICE.encode()).hexdigest()}}}\n")


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "conf"
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)
    return path


def write(path, mode: int = 0o644):
    path.write_text(TEXT)
    os.chmod(path, mode)
    return path


def test_a_file_only_its_owner_can_write_is_read(folder):
    live = LiveTenants(ADMIN, write(folder / "tenants.yaml"))
    assert [t.name for t in live.current.tokens] == ["alice"]


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_file_others_can_write_is_refused_at_the_start(folder, mode):
    file = write(folder / "tenants.yaml", mode)
    with pytest.raises(DeepShareError) as err:
        LiveTenants(ADMIN, file)
    message = str(err.value)
    assert message.startswith(f"--tenants {file}: {file} is writable by other users (mode {mode:04o})")
    assert f"run 'chmod go-w {file}'" in message and "\n" not in message


def test_a_file_in_a_folder_others_can_write_is_refused_unless_sticky(folder):
    file = write(folder / "tenants.yaml")
    os.chmod(folder, 0o777)
    with pytest.raises(DeepShareError, match=r"conf is writable by other users \(mode 0777\)"):
        LiveTenants(ADMIN, file)
    os.chmod(folder, 0o1777)  # like /tmp: others cannot rename this user's file away
    assert LiveTenants(ADMIN, file).current is not None


def test_a_link_is_checked_where_it_points_too(tmp_path, folder):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    target = write(shared / "tenants.yaml")
    link = folder / "tenants.yaml"
    link.symlink_to(target)
    with pytest.raises(DeepShareError, match=r"shared is writable by other users"):
        LiveTenants(ADMIN, link)


def test_a_reload_of_a_file_made_writable_is_refused_and_the_old_one_stays(folder):
    file = write(folder / "tenants.yaml")
    live = LiveTenants(ADMIN, file)
    os.chmod(file, 0o666)
    with pytest.raises(DeepShareError, match="is writable by other users"):
        live.reload()
    assert live.refused == 1 and [t.name for t in live.current.tokens] == ["alice"]
    os.chmod(file, 0o600)
    live.reload()
    assert live.reloads == 1
