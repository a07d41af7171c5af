"""``python -m deepshare.runtime.entry MODULE:FUNCTION [ARGS...]``: a job's worker process.

The worker actor starts every rank as a child process (so a job's ``torch.distributed`` state,
threads and crashes stay out of the actor); for a Python entrypoint this module imports it and
calls ``function(args)`` with the spec's ``args`` as a list of strings.

The rank's exit status is what the function returns (:func:`exit_status`): ``None`` is 0 and an
integer from 0 to 255 is itself; anything else (a bool, an integer out of range, a string, a
dict) is 1, with one line on stderr saying what was returned. An exit status is a byte, so
``return 256`` passed straight on exited 0 (a failure read as success) and ``return True``
exited 1; the scheduler reads a rank's exit status as its success or failure.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any


def exit_status(result: Any) -> int:
    """The exit status for an entrypoint's return value (see the module doc); a line on stderr
    when the value is not None or an integer from 0 to 255."""
    if result is None:
        return 0
    if isinstance(result, int) and not isinstance(result, bool) and 0 <= result <= 255:
        return int(result)
    shown = repr(result)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    print(f"deepshare: the entrypoint returned {shown} ({type(result).__name__}), not None or an exit status "
          "0..255; exiting with status 1", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if not argv or ":" not in argv[0]:
        print("usage: python -m deepshare.runtime.entry MODULE:FUNCTION [ARGS...]", file=sys.stderr)
        return 2
    module_name, _, func_name = argv[0].partition(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return exit_status(func(list(argv[1:])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
