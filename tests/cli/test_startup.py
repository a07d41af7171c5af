"""Start-up: the commands that simulate and compare heuristics import only what they need.

Runs the real entry point under ``python -X importtime`` in a fresh interpreter and reads which
modules were imported (a behaviour test, not a timing one): no torch, Ray, FastAPI, Starlette,
uvicorn, gymnasium, matplotlib or SciPy, and no probe code of the node agents (the agents'
package loads its modules on first use).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
HEAVY = ("torch", "ray", "fastapi", "starlette", "uvicorn", "gymnasium", "matplotlib", "scipy")
NOT_NEEDED = ("deepshare.agents.probes", "deepshare.agents.sampler", "deepshare.rl.env", "deepshare.serving.engine")


def imported(*args: str) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules a fresh ``python -X importtime ARGS`` imported, and the finished process."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    names = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", proc.stderr, flags=re.M))
    assert names, proc.stderr[-2000:]
    return names, proc


def offenders(names: set[str]) -> list[str]:
    bad = [n for n in names if n.split(".")[0] in HEAVY]
    bad += [n for n in names if any(n == m or n.startswith(m + ".") for m in NOT_NEEDED)]
    return sorted(bad)


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "deepshare", "simulate", "--trace", str(TRACE), "--policy", "las+consolidated"],
        ["-m", "deepshare", "compare", "--trace", str(TRACE), "--policies", "fifo+spread,srsf+packed,las+contention-aware"],
        ["-c", "import deepshare.cli"],
    ],
    ids=["simulate", "compare", "import-cli"],
)
def test_heuristic_commands_import_nothing_heavy(args):
    names, proc = imported(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "deepshare.cli" in names  # the check itself sees the package's imports
    assert offenders(names) == []


def test_the_check_would_see_a_heavy_import():
    """The same reading flags a module that is imported (here: the agents' probes)."""
    names, proc = imported("-c", "import deepshare.cli; from deepshare.agents import local_probes")
    assert proc.returncode == 0
    assert any(n.startswith("deepshare.agents.probes.") for n in offenders(names))


def test_version_still_answers():
    proc = subprocess.run([sys.executable, "-m", "deepshare", "--version"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    import deepshare

    assert proc.returncode == 0 and proc.stdout == f"deepshare {deepshare.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", deepshare.__version__)


def test_lazy_agents_package_still_exports_everything():
    import deepshare.agents as agents

    for name in agents.__all__:
        assert getattr(agents, name) is not None
    with pytest.raises(AttributeError):
        agents.no_such_name  # noqa: B018
