"""The example DDP job, for the example job specs beside it (``entrypoint: examples.jobs.ddp_mlp:main``).

The job itself is ``deepshare/data/jobs/ddp_mlp.py``, package data, so that an installed deepshare
ships it too; read it there. Run it alone: ``python -m examples.jobs.ddp_mlp --steps 50``.
"""

from __future__ import annotations

import runpy
import sys
from importlib import resources

_JOB = runpy.run_path(str(resources.files("deepshare.data") / "jobs" / "ddp_mlp.py"))
main = _JOB["main"]
parse = _JOB["parse"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
