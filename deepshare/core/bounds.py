"""The domain of every number a client, a trace or a job may give DeepShare.

Each boundary (trace readers, ``JobSpec``, the placement service's schema, the live scheduler's
job specs and progress reports, the CLI's flags) refuses a value outside these bounds with an
error naming the field, so that the code behind them (beliefs, predictions, the simulator, the
journal) is total on what it is handed: no overflow, no NaN, no infinity, whatever the input.

The bounds come from what real clusters need, with room to spare, not from what floats hold:

* a job runs at most a year (:data:`MAX_DURATION_S`): Philly's, Helios' and Alibaba PAI's
  longest jobs run weeks, and a time limit past a year says "no limit";
* a job holds at most :data:`MAX_JOB_GPUS` GPUs (the largest published training runs use about
  16-32 thousand; a cluster of 65,536 GPUs is beyond any in the public record);
* clocks are seconds since any epoch up to :data:`MAX_TIMESTAMP_S` (year 5138 in Unix time);
* a link (NIC, PCIe, NVLink, uplink) runs between :data:`MIN_LINK_GBPS` and
  :data:`MAX_LINK_GBPS` Gbit/s, or is absent (0) where absence means something;
* counters a job reports stay below :data:`MAX_SAMPLES` samples (10^18: a year at 30 billion
  samples or tokens a second) and :data:`MAX_STEP` steps (the largest integer a JSON double
  holds exactly), at most :data:`MAX_THROUGHPUT` samples a second;
* a job given in samples also runs at most :data:`MAX_DURATION_S` alone, at the catalog's
  reference throughput for its model and GPUs: the simulator checks it when it is built, the
  one place that holds the catalog (10^18 samples of DLRM on 8 GPUs are 627,000 years);
* a job of a trace has at least :data:`MIN_WORK_S` of work (a picosecond of isolated run time;
  in samples, at least :data:`MIN_SAMPLES` where the catalog is not known).
"""

from __future__ import annotations

import math

MAX_DURATION_S = 365 * 86400.0
"""Longest run time, estimate, time limit or history run time a job may have: one year, seconds."""
MAX_JOB_GPUS = 65_536
"""Most GPUs one job (or one finished job of a history) may hold."""
MAX_TIMESTAMP_S = 1e11
"""Latest clock reading (submit times, ``now``, finish times), seconds since the caller's epoch."""
MAX_GPU_SERVICE_S = MAX_JOB_GPUS * MAX_DURATION_S
"""Most GPU-seconds a job may have attained: all its GPUs for a year."""
MAX_SAMPLES = 1e18
"""Most samples (or tokens) a job may train or report: its cumulative counter's bound."""
MIN_WORK_S = 1e-12
"""Least work a job of a trace may have: a picosecond of isolated run time (far below any real
job: a history of run times from 10^-10 s to a year is simulated, issue 35). Its estimate is never
less either. A job of 5e-324 samples (a positive number) had an estimate of 0 s, and the run
aborted at its completion with an error that named no file, line or field."""
MAX_THROUGHPUT = 1e12
"""Most samples a second a job may report (over all its ranks)."""
MIN_MEASURED_THROUGHPUT = 1e-6
"""Least throughput a measured profile may give (samples a second): a job that slow measured
nothing, and a ratio over it is no fit's input."""
MIN_SAMPLES = MIN_WORK_S * MIN_MEASURED_THROUGHPUT
"""Fewest samples a job of a trace may train (10^-18): :data:`MIN_WORK_S` at the slowest
throughput a profile may give, so that a reader, which does not know the run's catalog, refuses
only what no catalog runs for a picosecond; the simulator checks :data:`MIN_WORK_S` itself."""
MAX_STEP = 2**53
"""Largest step counter a job may report (exact in a JSON number and in SQLite's integers)."""
MIN_LINK_GBPS = 1e-3
"""Slowest link (a node's NIC, PCIe or NVLink, a domain's uplink or port) a cluster may describe,
Gbit/s: 1 Mbit/s. A bandwidth of 5e-324 (greater than 0) made the link model's ratios NaN."""
MAX_LINK_GBPS = 1e9
"""Fastest link a cluster may describe, Gbit/s (an exabit a second)."""


def clamp(value: float, low: float, high: float) -> float:
    """``value`` held to ``[low, high]``."""
    return low if value < low else high if value > high else value


def finite_in(value: object, low: float, high: float, *, low_open: bool = False) -> bool:
    """Whether ``value`` is a real number (not a bool) in ``[low, high]`` (``(low, high]`` when
    ``low_open``); NaN and infinities never are."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        v = float(value)
    except OverflowError:  # an int too large for a float
        return False
    if not math.isfinite(v):
        return False
    return (low < v if low_open else low <= v) and v <= high


def duration_ok(value: object) -> bool:
    """Whether ``value`` is a run time DeepShare accepts: in ``(0, MAX_DURATION_S]``."""
    return finite_in(value, 0.0, MAX_DURATION_S, low_open=True)


def link_gbps_ok(value: object, *, none_ok: bool = False) -> bool:
    """Whether ``value`` is a link bandwidth DeepShare accepts, Gbit/s: in
    ``[MIN_LINK_GBPS, MAX_LINK_GBPS]``, or 0 with ``none_ok`` (where 0 means no link, or a
    non-blocking one)."""
    return finite_in(value, MIN_LINK_GBPS, MAX_LINK_GBPS) or (none_ok and finite_in(value, 0.0, 0.0))


def gpus_ok(value: object) -> bool:
    """Whether ``value`` is a GPU count DeepShare accepts: an integer in ``[1, MAX_JOB_GPUS]``."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_JOB_GPUS


MIN_OFFERED_LOAD = 0.01
"""The least offered load (GPU-seconds asked over GPU-seconds available) a generated trace may be
made at: a suite's ``loads``, training's ``generated_loads`` and ``trace generate --load``. Below
it the arrivals of a few hundred jobs spread past the latest submission time a trace may hold,
and the error named a job's field rather than the load."""
MAX_GRID_LOAD = 10.0
"""The most offered load a suite's grid or training's generated episodes may use."""
MAX_GENERATED_JOBS = 10_000_000
"""The most jobs one generated trace may hold: ``trace generate --jobs`` and training's
``generated_jobs``."""
MAX_ROUND_S = 1e7
"""The longest period of extra decision points: ``--round-s`` and training's ``round_s``."""


def grid_load_ok(value: object) -> bool:
    """Whether ``value`` is a load of a suite's ``loads`` or training's ``generated_loads``: a
    number (not a bool) in ``[MIN_OFFERED_LOAD, MAX_GRID_LOAD]`` (NaN and infinities are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and MIN_OFFERED_LOAD <= value <= MAX_GRID_LOAD


MAX_TRAIN_ITERATIONS = 1_000_000
"""The most iterations ``deepshare train --iterations`` takes (and a card's rebuilt command may say)."""
MAX_ENV_RUNNERS = 1024
"""Most env runners a training run asks for (``run.num_env_runners``, ``--num-env-runners``)."""
MAX_ENVS_PER_RUNNER = 1024
"""Most envs one env runner steps (``run.envs_per_env_runner``; each a simulator in memory)."""
MAX_TRAIN_SEED = 2**32 - 1 - MAX_ENV_RUNNERS
"""The largest training seed (``run.seed``, ``train --seed``): RLlib seeds NumPy's global generator
(``np.random.seed``, at most 2^32 - 1) with the seed in the driver and with ``seed + i`` in env
runner ``i``; a larger one passed the config and failed once Ray had started, with a traceback."""
