"""``python -m deepshare.runtime.entry MODULE:FUNCTION [ARGS...]``: a job's worker process.

The worker actor starts every rank as a child process (so a job's ``torch.distributed`` state,
threads and crashes stay out of the actor); for a Python entrypoint this module imports it and
calls ``function(args)`` with the spec's ``args`` as a list of strings.
"""

from __future__ import annotations

import importlib
import sys


def main(argv: list[str]) -> int:
    if not argv or ":" not in argv[0]:
        print("usage: python -m deepshare.runtime.entry MODULE:FUNCTION [ARGS...]", file=sys.stderr)
        return 2
    module_name, _, func_name = argv[0].partition(":")
    func = getattr(importlib.import_module(module_name), func_name)
    result = func(list(argv[1:]))
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
