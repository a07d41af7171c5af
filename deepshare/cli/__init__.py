"""The ``deepshare`` command: parse, call the library, print. Errors in users' input exit 2.

One module per command group, each with ``register(subparsers)``; :mod:`deepshare.cli.args` holds
the flag types and argument groups they share, :mod:`deepshare.cli.output` the ``--json`` flag and
the check that no output overwrites an input, :mod:`deepshare.cli.progress` progress bars. A
command module imports only what parsing needs at the top; the work's libraries (torch, Ray,
RLlib, SciPy, matplotlib) are imported when the command runs. Nothing outside this package
imports from it.
"""

from __future__ import annotations

import argparse
import errno
import os
import select
import signal
import sys
import threading
from importlib import import_module
from typing import Sequence

from rich.console import Console

from deepshare.cli.piped import PipedConsole
from deepshare.core.errors import DeepShareError, RuntimeFailure, one_line

EXIT_USAGE = 2
EXIT_RUNTIME = 1

PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP, errno.EACCES})
"""OSErrors that say a path itself is unusable (too long, through a regular file, a symlink loop,
not permitted): from a path flag, an input error (one line, exit 2), never a traceback."""

COMMAND_MODULES = ("simulate", "train", "export_policy", "evaluate", "calibrate", "agents", "serve", "scheduler", "cluster", "listing", "trace")
"""Modules of this package that register subcommands, in the order ``--help`` lists them."""


class _VersionAction(argparse.Action):
    """``--version``: the installed version, read (importlib.metadata) only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from deepshare import __version__

        if sys.stdout is None:  # `deepshare --version >&-`: no standard output to write to
            parser.exit(EXIT_RUNTIME, "deepshare: error: cannot write to standard output: it is closed\n")
        try:
            sys.stdout.write(f"deepshare {__version__}\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `deepshare --version | true`: the reader left, as for every command
            _stdout_to_devnull()
            parser.exit(EXIT_RUNTIME)
        except OSError as exc:  # a full disk, an I/O error: one line, no traceback
            _stdout_to_devnull()
            parser.exit(EXIT_RUNTIME, f"deepshare: error: cannot write to standard output: {exc.strerror or exc}\n")
        parser.exit()


def _stdout_to_devnull() -> None:
    """Point standard output at ``/dev/null`` after a write to it failed (a reader that closed its
    end of the pipe), as rich does: Python's flush at exit then has nothing left to fail on."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor behind sys.stdout (a test's capture, None)
        pass


def _stdout_broken() -> bool:
    """Whether standard output is a pipe or socket whose reader has left: a flush of what is still
    buffered fails with a broken pipe, or the system reports an error or hang-up on it."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError, AttributeError):  # closed, or None (`>&-`)
        pass
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's capture)
        return False
    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deepshare",
        description="Network-contention-aware scheduling of distributed deep-learning jobs: simulate "
        "and compare scheduling policies on GPU-cluster traces with measured or link-level contention, "
        "train and evaluate learned policies, serve a policy over HTTP, run real jobs on a Ray cluster "
        "under it, measure link load, and study autoscaling.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        import_module(f"deepshare.cli.{name}").register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is: it then ends as on Ctrl-C (temporary files removed,
    worker processes stopped, outputs left whole), where the default action killed the process
    on the spot, leaving temporary files and orphaned pool workers."""


def _terminate_as_interrupt() -> bool:
    """Raise :class:`Terminated` on SIGTERM in this process, where nothing else handles it (a
    command that owns its signals, ``scheduler start`` or ``serve``, installs its own); whether
    it did (:func:`main` then puts the default back: a caller's process is left as it was)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    main_pid = os.getpid()

    def terminated(signum: int, frame: object) -> None:
        if os.getpid() != main_pid:  # a forked worker: die as the default action would
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    signal.signal(signal.SIGTERM, terminated)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # User text (ids, names, paths, specs, a server's answers) is printed as typed: no ":name:"
    # emoji and no markup, so a name like "[/x]" is text, never a tag (it was a traceback).
    out = Console(highlight=False, emoji=False, markup=False)
    if not out.is_terminal:  # piped output: text at 140 columns, every table whole
        out = PipedConsole(highlight=False, emoji=False, markup=False)
    err = Console(stderr=True, highlight=False, emoji=False, markup=False)
    if not err.is_terminal:  # tables go there with --json -: whole in a log or `2> file`, as on stdout
        err = PipedConsole(stderr=True, highlight=False, emoji=False, markup=False)
    installed = _terminate_as_interrupt()
    try:
        return args.func(args, out, err)
    except DeepShareError as exc:
        err.print(f"deepshare: error: {one_line(str(exc))}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except RuntimeFailure as exc:
        err.print(f"deepshare: error: {one_line(str(exc))}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_RUNTIME
    except Terminated:
        err.print("deepshare: terminated", markup=False)
        return 128 + signal.SIGTERM
    except SystemExit as exc:
        # ray.init replaces the SIGTERM handler with one that exits with the signal's number: the
        # same SIGTERM, ended the same way (the block's cleanup ran as the exit unwound it)
        if not installed or exc.code != signal.SIGTERM:
            raise
        err.print("deepshare: terminated", markup=False)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        err.print("deepshare: interrupted", markup=False)
        return 130
    except BrokenPipeError as exc:
        if _stdout_broken():  # the reader of standard output left (`deepshare logs ID | head`): quietly, as rich does
            _stdout_to_devnull()
            return EXIT_RUNTIME
        # another pipe or socket (a worker process, a connection) closed its end: said, not hidden
        try:
            err.print(f"deepshare: error: {one_line(exc.strerror or str(exc))}: a connection or worker process closed "
                      "its end", markup=False, highlight=False, soft_wrap=True)
        except BrokenPipeError:  # standard error itself is the pipe that broke: nobody to tell
            pass
        return EXIT_RUNTIME
    except OSError as exc:
        if exc.errno not in PATH_ERRNOS or exc.filename is None:
            raise
        # a safety net: readers and writers turn these into DeepShareError (deepshare.core.files);
        # one that slips through is still a path the user gave that cannot be used
        err.print(f"deepshare: error: {one_line(str(exc.filename))}: {exc.strerror}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_USAGE
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
