"""The live scheduler's tenants file is refused when another user could change it.

Its token hashes let their holders submit jobs, which run as the scheduler's user: a tenants
file writable by the group or by everyone, or in a folder others can write (not sticky), let any
local user add a token of their own at the next reload. The state folder was already refused
under the same rules (``check_not_shared``); the tenants file was read wherever it was."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

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


def test_the_folder_of_a_link_in_the_middle_of_a_chain_is_checked(tmp_path, folder):
    """conf/tenants.yaml -> shared/link -> private/tenants.yaml: the path's folders and the
    target's were checked, not the middle link's, whose owner-less 0777 folder let another user
    point the chain at their own file between the check and the read (a race won in about one
    reload in 150 with the link flipped in a loop)."""
    private, shared = tmp_path / "private", tmp_path / "shared"
    private.mkdir(mode=0o755)
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / "link").symlink_to(write(private / "tenants.yaml"))
    (folder / "tenants.yaml").symlink_to(shared / "link")
    with pytest.raises(DeepShareError, match=rf"--tenants {folder}/tenants.yaml: {shared} is writable by other "
                                             r"users \(mode 0777\)"):
        LiveTenants(ADMIN, folder / "tenants.yaml")
    os.chmod(shared, 0o755)
    assert LiveTenants(ADMIN, folder / "tenants.yaml").current is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a link to another user (chown)")
def test_a_link_another_user_owns_in_a_sticky_folder_is_refused(tmp_path, folder):
    """In a sticky folder (``/tmp``) the link's owner may replace it, whatever it points at."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    link = sticky / "tenants.yaml"
    link.symlink_to(write(folder / "tenants.yaml"))
    os.chown(link, 12345, 12345, follow_symlinks=False)
    with pytest.raises(DeepShareError, match=r"tenants.yaml is a link that belongs to another user \(uid 12345\)"):
        LiveTenants(ADMIN, link)


def test_relative_paths_and_linked_folders_are_read(tmp_path, folder, monkeypatch):
    write(folder / "tenants.yaml")
    (tmp_path / "linked").symlink_to(folder)
    monkeypatch.chdir(tmp_path)
    for path in ("linked/tenants.yaml", "conf/../linked/./tenants.yaml"):
        assert LiveTenants(ADMIN, path).current is not None


def test_a_kubernetes_configmap_volume_is_read(tmp_path, monkeypatch):
    """kubelet's layout: the volume a read-only mount of a folder of mode 0777 (root's), the key a
    link to ``..data/KEY``, ``..data`` a link to the timestamped folder (0755) of the current
    files. Nobody can write a read-only mount: the same folder writable is still refused."""
    volume = tmp_path / "deepshare"
    stamped = volume / "..2026_12_07_22_00_00.123456789"
    stamped.mkdir(parents=True)
    os.chmod(volume, 0o777)
    os.chmod(stamped, 0o755)
    write(stamped / "tenants.yaml")
    (volume / "..data").symlink_to(stamped.name)
    (volume / "tenants.yaml").symlink_to("..data/tenants.yaml")
    with pytest.raises(DeepShareError, match=r"deepshare is writable by other users \(mode 0777\)"):
        LiveTenants(ADMIN, volume / "tenants.yaml")
    real = os.statvfs

    def mounted_read_only(path):  # as kubelet mounts it: the tests cannot mount
        found = real(path)
        inside = Path(path) == volume or volume in Path(path).parents
        flag = found.f_flag | os.ST_RDONLY if inside else found.f_flag
        return os.statvfs_result((*found[:8], flag, found.f_namemax))

    monkeypatch.setattr(os, "statvfs", mounted_read_only)
    assert [t.name for t in LiveTenants(ADMIN, volume / "tenants.yaml").current.tokens] == ["alice"]


def test_a_start_with_a_shared_tenants_file_writes_nothing_in_the_state_folder(tmp_path, folder):
    """The refusal came after the journal, the lock and the token were made in a new state folder."""
    from deepshare.runtime.service import ServiceConfig, run_scheduler

    file = write(folder / "tenants.yaml", 0o666)
    state = tmp_path / "state"
    with pytest.raises(DeepShareError, match="is writable by other users"):
        run_scheduler(ServiceConfig(state_dir=str(state), port=0, tenants_file=str(file)), object(),
                      handle_signals=False)
    assert not state.exists()


def test_a_dot_dot_after_a_link_is_checked_where_the_system_goes(tmp_path, folder):
    """``conf/link/../tenants.yaml`` reads ``shared/tenants.yaml`` when ``link`` points to
    ``shared/inner`` (the system follows the link, then ``..``); the check normalised the path
    first and checked ``conf/tenants.yaml``, a file it never read."""
    write(folder / "tenants.yaml")  # the file the normalised path names: safe
    shared = tmp_path / "shared"
    (shared / "inner").mkdir(parents=True)
    write(shared / "tenants.yaml")
    os.chmod(shared, 0o777)
    (folder / "link").symlink_to(shared / "inner", target_is_directory=True)
    with pytest.raises(DeepShareError, match=r"shared is writable by other users"):
        LiveTenants(ADMIN, folder / "link" / ".." / "tenants.yaml")


@pytest.mark.parametrize("text", ["queues: [", "queues:\n  - {name: a, nominal_gpus: -1}\n"])
def test_a_start_with_a_tenants_file_that_does_not_read_writes_nothing(tmp_path, folder, text):
    """A tenants file that does not parse, or names a bad field, was refused after the journal, the
    lock and the token were made in a new state folder; it is refused before."""
    from deepshare.runtime.service import ServiceConfig, run_scheduler

    file = folder / "tenants.yaml"
    file.write_text(text)
    state = tmp_path / "state"
    with pytest.raises(DeepShareError, match=re.escape(str(file))):
        run_scheduler(ServiceConfig(state_dir=str(state), port=0, tenants_file=str(file)), object(),
                      handle_signals=False)
    assert not state.exists()
