"""Piped output (a file, a pipe): a table too wide for 140 columns is printed whole, every name
and figure uncut; narrower tables and text are printed as before, at 140 columns."""

from __future__ import annotations

import io

from rich.table import Table

from deepshare.cli.piped import PIPED_WIDTH, PipedConsole

NAMES = ["bsrsf+topo-bestfit+backfill", "bsrsf+topo-balanced+backfill", "bsrsf+topo-aware+backfill",
         "bsrsf+topo-bestfit+preempt", "bsrsf+consolidated"]
HEADERS = ("avg JCT (s)", "p99 JCT (s)", "avg queue (s)", "makespan (s)", "GPU util", "useful util", "slowdown",
           "preempt", "fragmentation", "p95 queue >= 64 GPUs (s)")


def printed(*objects) -> str:
    buffer = io.StringIO()
    PipedConsole(file=buffer, highlight=False, emoji=False).print(*objects)
    return buffer.getvalue()


def wide_table() -> Table:
    """The shape of `deepshare compare` on a fabric with gangs: 11 columns, long policy names."""
    table = Table(title="a comparison on a fabric", header_style="bold")
    table.add_column("policy")
    for head in HEADERS:
        table.add_column(head, justify="right")
    for i, name in enumerate(NAMES):
        table.add_row(name, f"{7189 + i:,}", "41,728", "1,255", "60,959", "0.620", "0.618", "1.000", "17", "0.002",
                      "13,426")
    return table


def test_a_table_wider_than_140_columns_keeps_every_cell_whole():
    text = printed(wide_table())
    for name in NAMES:
        assert name in text
    for figure in ("7,189", "7,193", "41,728", "60,959", "13,426", "fragmentation", "p95 queue >= 64 GPUs (s)"):
        assert figure in text
    assert "…" not in text
    assert max(map(len, text.splitlines())) > PIPED_WIDTH


def test_a_narrow_table_and_text_stay_within_140_columns():
    table = Table()
    table.add_column("policy")
    table.add_column("avg JCT (s)", justify="right")
    table.add_row("srsf+packed", "1,234")
    assert printed(table) == printed(table)  # deterministic
    assert max(map(len, printed(table).splitlines())) < 40
    words = " ".join(["word"] * 100)
    assert max(map(len, printed(words).splitlines())) <= PIPED_WIDTH


def test_the_console_is_back_at_140_columns_after_a_wide_table():
    buffer = io.StringIO()
    console = PipedConsole(file=buffer, highlight=False, emoji=False)
    console.print(wide_table())
    assert console.width == PIPED_WIDTH
