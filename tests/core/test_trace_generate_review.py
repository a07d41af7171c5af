"""``trace generate`` and ``trace stats`` against what a careless or hostile user gives them.

Found by a review: ``--load`` ignored the year's cap on a drawn duration (asked load 1, got 0.63
with a median of an hour and sigma 3); a generated run time could fall below the picosecond the
project's own reader requires; a byte that is not UTF-8 in a model or level name was a
traceback; ``--demand 2:1_0`` read weight 10; a tiny ``requested_s`` made the stats' log-sigma NaN."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli

from deepshare.core.bounds import MAX_DURATION_S, MIN_WORK_S
from deepshare.core.traces import generate, load, parse_demand, write_canonical
from deepshare.core.traces.generator import rate_for_load
from deepshare.core.traces.recurrence import RecurrenceModel, gpu_quantiles, lognormal_excess, mean_gpu_seconds

DEMAND = {2: 1.0, 4: 1.0, 8: 1.0}


def sampled_mean_gpu_seconds(median: float, sigma: float, corr: float, n: int = 2_000_000) -> float:
    """``E[gpus x min(duration, a year)]`` by sampling, as the recurrence model draws them."""
    rng = np.random.default_rng(0)
    sizes, edges = gpu_quantiles(DEMAND)
    u, w = rng.standard_normal(n), rng.standard_normal(n)
    gpus = np.asarray(sizes)[np.searchsorted(edges, u)]
    z = corr * u + math.sqrt(1 - corr**2) * w
    return float(np.mean(gpus * np.minimum(median * np.exp(sigma * z), MAX_DURATION_S)))


@pytest.mark.parametrize(("median", "sigma", "corr"), [(3600.0, 3.0, 0.0), (86400.0, 3.0, 0.0), (3600.0, 3.0, 0.3),
                                                       (3600.0, 4.0, 0.5), (86400.0, 2.5, 0.9)])
def test_the_load_counts_the_years_cap_on_a_draw(median, sigma, corr):
    if corr == 0:
        mean = 32 / rate_for_load(1.0, 32, DEMAND, median, sigma)
    else:
        mean = mean_gpu_seconds(DEMAND, median, sigma, corr)
    sampled = sampled_mean_gpu_seconds(median, sigma, corr)
    assert mean == pytest.approx(sampled, rel=0.01)
    if corr == 0:
        assert sampled < 0.9 * (14 / 3) * median * math.exp(sigma**2 / 2)  # the cap takes a share off that matters


def test_where_the_cap_moves_the_mean_by_under_a_millionth_the_rate_is_the_old_formula():
    assert lognormal_excess(math.log(3600.0), 1.0) < 1e-6 * 3600.0 * math.exp(0.5)
    expected = 0.8 * 64 / ((14 / 3) * (3600 * math.exp(0.5)))
    assert rate_for_load(0.8, 64, DEMAND, 3600.0, 1.0) == expected


def test_a_generated_trace_at_load_1_with_a_heavy_tail_offers_about_load_1():
    trace = generate(20_000, load=1.0, total_gpus=32, median_duration_s=3600.0, duration_sigma=3.0, seed=1)
    span = trace.jobs[-1].submit_time - trace.jobs[0].submit_time
    offered = sum(j.gpus * j.duration_s for j in trace.jobs) / (span * 32)
    assert 0.9 < offered < 1.1  # 0.65 before (heavy tail: one seed's sample, not the expectation)


@pytest.mark.parametrize("recurrence", [None, RecurrenceModel()])
def test_generated_run_times_stay_within_a_traces_bounds_and_read_back(tmp_path: Path, recurrence):
    """``trace generate --jobs 770916 --median-duration-s 1 --duration-sigma 5 --seed 78`` wrote a
    run time of 1.9e-13 s that ``trace stats`` then refused; a tiny median shows it at any size."""
    trace = generate(3000, median_duration_s=1e-6, duration_sigma=5.0, seed=3, recurrence=recurrence)
    durations = [j.duration_s for j in trace.jobs]
    assert min(durations) == MIN_WORK_S  # sigma 5 draws below a picosecond: floored to it
    write_canonical(trace, tmp_path / "t.csv")
    assert [j.duration_s for j in load(tmp_path / "t.csv").jobs] == durations


@pytest.mark.parametrize("flags", [
    ["--mix", "a\udc85b:1"],
    ["--required-level", "r\udc85", "--required-share", "1"],
])
def test_a_name_holding_a_byte_that_is_not_utf8_is_one_line(tmp_path: Path, capsys, flags):
    """What a non-UTF-8 byte of a command line becomes (a lone surrogate) failed the write with a
    UnicodeEncodeError traceback."""
    out = tmp_path / "x.csv"
    rc, stdout, err = cli(capsys, "trace", "generate", "--jobs", 3, *flags, "--out", out)
    assert rc == 2 and stdout == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(("deepshare: error: ", "deepshare trace generate: error: ")), err
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("weight", ["1_0", "\u0661", "0x10", "1e", "inf"])
def test_demand_weights_are_plain_numbers(weight):
    from deepshare.core.errors import DeepShareError

    with pytest.raises(DeepShareError, match="weight must be a positive number"):
        parse_demand(f"2:{weight}")
    assert parse_demand("2:1e1,4:0.5") == {2: 10.0, 4: 0.5}


def test_stats_of_a_tiny_requested_time_have_a_finite_log_sigma(tmp_path: Path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples,requested_s\n"
                     "j1,0,ResNet50,1,31536000,,5e-324\nj2,1,ResNet50,1,100,,200\n")
    rc, out, err = cli(capsys, "trace", "stats", trace, "--json", "-")
    assert rc == 0 and "RuntimeWarning" not in err, err
    import json

    sigma = json.loads(out)["features"]["estimate"]["log_ratio_sigma"]
    expected = abs((math.log(5e-324) - math.log(31536000)) - math.log(2.0)) / 2
    assert sigma == pytest.approx(expected)


@pytest.mark.parametrize(("demand", "median", "sigma", "corr"), [
    ({8: 2, 12: 1, 16: 4, 32: 3, 64: 2, 128: 1}, 3600.0, 5.0, 0.3),
    ({2: 1, 4: 1, 8: 1}, 3600.0, 3.0, 0.3),
    ({1: 1, 8: 1}, 86400.0, 2.5, -0.9),
])
def test_the_correlated_caps_excess_is_integrated_band_by_band_to_a_millionth(demand, median, sigma, corr):
    """Second read: one trapezoid across the jumps between GPU sizes was off by 3.6e-4 of the mean,
    where the cap is counted from 1e-6 of it."""
    quad = pytest.importorskip("scipy.integrate").quad
    from deepshare.core.traces.recurrence import _correlated_excess

    sizes, edges = gpu_quantiles(demand)
    spread, mu = sigma * math.sqrt(1 - corr**2), math.log(median)
    ends = [-12.0, *edges, 12.0]
    reference = math.fsum(
        g * quad(lambda u: math.exp(-u * u / 2) / math.sqrt(2 * math.pi) * lognormal_excess(mu + sigma * corr * u, spread),
                 lo, hi, epsabs=0, epsrel=1e-10, limit=200)[0]
        for g, lo, hi in zip(sizes, ends, ends[1:]))
    uncapped = mean_gpu_seconds(demand, median, sigma, corr) + _correlated_excess(sizes, edges, median, sigma, corr)
    assert abs(_correlated_excess(sizes, edges, median, sigma, corr) - reference) < 1e-6 * uncapped


def test_a_tiny_medians_rate_keeps_its_precision():
    """Second read: ``NormalDist.cdf`` keeps only an absolute 1e-16 in the left tail, and a year
    times that swamped the cap's excess for a median of picoseconds (the rate was off by 1.6e-4)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    median, sigma = mp.mpf(2.0e-11), mp.mpf(5)
    mu, cap = mp.log(median), mp.mpf(MAX_DURATION_S)
    phi = lambda x: mp.erfc(-x / mp.sqrt(2)) / 2  # noqa: E731
    excess = mp.exp(mu + sigma**2 / 2) * phi((mu + sigma**2 - mp.log(cap)) / sigma) - cap * phi((mu - mp.log(cap)) / sigma)
    expected = 1 / (median * mp.exp(sigma**2 / 2) - excess)
    assert rate_for_load(1.0, 1, {1: 1.0}, 2.0e-11, 5.0) == pytest.approx(float(expected), rel=1e-6)
