"""`autoscale live`'s scale-up line: each latency carries its unit, and the other shortages'
counts follow in parentheses, separated by "; " (a count's own text holds a comma)."""

from __future__ import annotations

from deepshare.cli.cluster import _latencies


def test_the_unit_follows_each_number_and_the_counts_come_after():
    assert _latencies([12.34], 1, 1) == "12.3 s (other shortages: 1 ended as jobs ended, no GPU added; 1 still open)"
    assert _latencies([12.34, 4.0], 0, 2) == "12.3 s, 4.0 s (other shortages: 2 still open)"
    assert _latencies([], 0, 0) == "none"
