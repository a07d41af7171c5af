"""``--address``: run a command's independent simulations as Ray tasks on a running Ray cluster.

``evaluate`` (``--suite`` or ``--trace``/``--policies``) and ``compare`` take it, as ``train``
and ``tune`` do. Without it nothing here runs and Ray is never imported: the local path stays
as it was. With it, :func:`joined` checks the address (a malformed or unreachable one is one
line and exit 2, before any work and without Ray's minutes of reconnecting), connects this
process as a driver for the command, and disconnects at the end (the cluster keeps running).
"""

from __future__ import annotations

import argparse
import logging
from contextlib import contextmanager
from typing import Iterator

from deepshare.core.errors import DeepShareError

RERUNS = 3
"""What the help says of reruns: :data:`deepshare.experiments.ray_runs.MAX_RETRIES` (a test keeps
them equal; that module is not imported at start-up)."""


def add_address_flag(parser: argparse.ArgumentParser, runs: str) -> None:
    """``--address auto|HOST:PORT``; ``runs`` says which runs become the cluster's tasks."""
    parser.add_argument(
        "--address", metavar="auto|HOST:PORT",
        help=f"run {runs} as Ray tasks (one CPU each) on this running Ray cluster instead of locally: "
        "auto (the cluster this machine belongs to, or $RAY_ADDRESS) or the head's HOST:PORT; the same results, "
        f"a run whose node dies is rerun elsewhere (up to {RERUNS} times)",
    )


def check_address(address: str | None) -> None:
    """Refuse an empty ``--address`` (an unset variable): it ran locally, silently."""
    if address is not None and not address.strip():
        raise DeepShareError(f"--address {address!r}: an empty address; give 'auto' or HOST:PORT of a running Ray head "
                             "node, or leave the flag out to run on this machine")


@contextmanager
def joined(address: str | None) -> Iterator[bool]:
    """True inside the block when connected to the cluster at ``address``; False (and no Ray)
    without one. A process already connected to Ray keeps its connection."""
    if address is None:
        yield False
        return
    check_address(address)
    from deepshare.agents.deploy import check_reachable

    check_reachable(address)  # fails fast: Ray retries an unreachable head for minutes
    import ray

    if ray.is_initialized():
        yield True
        return
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types; all mean "no cluster there"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DeepShareError(f"--address {address}: cannot join a Ray cluster there ({first}); expected 'auto' "
                             "or HOST:PORT of a running Ray head node") from None
    try:
        yield True
    finally:
        ray.shutdown()  # disconnects this driver; the cluster keeps running
