"""Policy files that only the driver has, carried to the machines that run the policy.

A policy spec ``NAME=ARG`` whose ``ARG`` is a file on the driver (``rl-hybrid=runs/x/policy.pt``,
a learning curve's ``curve/iter_0003.pt``) names a path that a Ray worker on another machine
does not have. On a cluster the driver reads each such file once (:func:`driver_files`), the
bytes travel through Ray's object store, and a worker writes them to a file of its own machine
(:func:`local_spec`) and builds the policy from that copy. The copy's name is the content's hash,
so every task on a node reuses one file and two different files never share a copy; a copy is
reused only when its content still hashes to its name, in a folder only this user can write. Results stay
keyed by the driver's spec; only the policy's own metadata (its ``checkpoint``) names the copy.
A spec whose policy never reads a file (the planner's settings) is never carried.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterable

from deepshare.core.atomic import write_bytes_atomic
from deepshare.core.files import POLICY_BYTES, read_input_bytes
from deepshare.runtime.private import check_not_shared, make_private_dirs, open_regular

COPIES = "deepshare-policy-files"
"""Folder under the worker's temporary directory that holds the copies (suffixed with the user id)."""


def driver_files(specs: Iterable[str]) -> dict[str, bytes]:
    """``{spec: file bytes}`` for every ``NAME=ARG`` spec whose ``ARG`` is a file here and names
    one for its policy (:func:`~deepshare.policies.registry.argument_file`: not the planner's
    ``planner=8``, which a file named 8 made a copied checkpoint on the workers)."""
    from deepshare.policies.registry import argument_file

    found = {}
    for spec in specs:
        arg = argument_file(spec)
        if arg is not None and _is_file(arg):
            found[spec] = read_input_bytes(arg, "policy file", POLICY_BYTES, label=f"policy {spec}")
    return found


def _is_file(arg: str) -> bool:
    """Whether ``arg`` names an existing regular file; a name that cannot be a path (too long,
    say) is not one, and is left for the policy to judge as an argument."""
    try:
        return Path(arg).is_file()
    except OSError:
        return False


def copies_folder() -> Path:
    """This user's folder of copies under the temporary directory (``deepshare-policy-files-UID``):
    the temporary directory is shared, so the folder is made 0700 and refused when another user
    made it or can write it (they could plant weights the workers would load)."""
    folder = Path(tempfile.gettempdir()) / f"{COPIES}-{os.geteuid()}"
    make_private_dirs(folder)
    check_not_shared(folder, "policy file copies", "the weights the workers load", "remove it to have it made again")
    return folder


def local_spec(spec: str, data: bytes, folder: str | Path | None = None) -> str:
    """``spec`` with its argument replaced by a copy of ``data`` on this machine (written once,
    atomically, under ``folder``, by default :func:`copies_folder`). A copy already there is
    reused only when its content hashes to the same digest: a file of the right name and size
    is not enough."""
    base, _, arg = spec.partition("=")
    digest = hashlib.sha256(data).hexdigest()
    copy = Path(folder or copies_folder()) / digest[:32] / (Path(arg).name or "policy")
    if not _holds(copy, digest, len(data)):
        make_private_dirs(copy.parent)
        write_bytes_atomic(copy, data, "policy file copy")
    return f"{base}={copy}"


def _holds(copy: Path, digest: str, size: int) -> bool:
    """Whether ``copy`` is a regular file of ``size`` bytes whose sha256 is ``digest``."""
    try:
        with os.fdopen(open_regular(copy, os.O_RDONLY), "rb") as fh:  # no symlink, no FIFO to wait on
            if os.fstat(fh.fileno()).st_size != size:
                return False
            found = hashlib.sha256()
            while chunk := fh.read(1 << 20):
                found.update(chunk)
    except OSError:
        return False
    return found.hexdigest() == digest
