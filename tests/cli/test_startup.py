"""Start-up: the commands that simulate and compare heuristics import only what they need.

Runs the real entry point under ``python -X importtime`` in a fresh interpreter and reads which
modules were imported (a behaviour test, not a timing one): no torch, Ray, FastAPI, Starlette,
uvicorn, gymnasium, matplotlib or SciPy, no pydantic (presets and uniform clusters are built
without it; only a user's cluster YAML is validated with it), no probe code of the node agents
(the agents' package loads its modules on first use), none of the serving, HTTP-auth or
autoscaling code that other commands' flags are built from, and no ``importlib.metadata``
(about 15 ms). (``numpy.ma``, which NumPy's percentile imports, is allowed: the report uses
NumPy's percentile, and the command meets its start-up target with it; see ``core.metrics._pct``.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
HEAVY = ("torch", "ray", "fastapi", "starlette", "uvicorn", "gymnasium", "matplotlib", "scipy", "pydantic", "pydantic_core")
NOT_NEEDED = (
    "deepshare.agents.probes", "deepshare.agents.sampler", "deepshare.rl", "deepshare.serving",
    "deepshare.infra.httpauth", "deepshare.core.autoscaling", "deepshare.core.topology_spec",
    # ~15 ms: entry points are read only for a policy name outside the registry
    "importlib.metadata",
)


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
        ["-m", "deepshare", "simulate", "--trace", str(TRACE), "--policy", "srsf+packed", "--cluster", "mixed-32"],
        ["-m", "deepshare", "simulate", "--trace", str(TRACE), "--policy", "fifo+spread", "--nodes", "40"],
        ["-m", "deepshare", "compare", "--trace", str(TRACE), "--policies", "fifo+spread,srsf+packed,las+contention-aware"],
        ["-c", "import deepshare.cli"],
    ],
    ids=["simulate", "simulate-preset", "simulate-uniform", "compare", "import-cli"],
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


def test_a_user_cluster_yaml_is_still_validated_with_pydantic(tmp_path):
    """The plain path is for presets: a user's YAML goes through the schema (its errors)."""
    spec = tmp_path / "c.yaml"
    spec.write_text("node_types: {t: {gpus: 0}}\nnodes: [{type: t}]\n")
    names, proc = imported("-m", "deepshare", "simulate", "--trace", str(TRACE), "--policy", "fifo+spread", "--cluster", str(spec))
    assert proc.returncode == 2
    assert "pydantic" in names
    assert proc.stderr.strip().splitlines()[-1] == f"deepshare: error: {spec}: node_types.t.gpus: Input should be greater than 0"


def test_parser_constants_are_the_libraries_own():
    """The flags' defaults and bounds are plain copies (building the parser imports neither
    pydantic nor the autoscaling package); they must equal the values the libraries use."""
    from deepshare.cli import cluster, serve
    from deepshare.core.autoscaling import AUTOSCALERS
    from deepshare.serving import schemas, settings

    assert cluster.AUTOSCALERS == tuple(AUTOSCALERS)
    assert (serve.MAX_NODES, serve.MAX_JOBS) == (schemas.MAX_NODES, schemas.MAX_JOBS)
    for name in ("TOKEN_ENV", "DEFAULT_MAX_NODES", "DEFAULT_MAX_PENDING", "DEFAULT_MAX_RUNNING",
                 "DEFAULT_DECISION_TIMEOUT_S", "DEFAULT_BODY_TIMEOUT_S", "MAX_BODY_BYTES"):
        assert getattr(serve, name) == getattr(settings, name), name
