"""The Benchmarks page names every script under ``bench/``, and its table holds exactly what
``make bench`` runs: a benchmark added to the Makefile or to the folder without a word in the docs
is a figure nobody can read."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")


def make_bench_scripts() -> set[str]:
    """The scripts the Makefile's ``bench`` target runs."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    body = re.search(r"^bench:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert body, "no bench target in the Makefile"
    return set(re.findall(r"bench/(\w+\.py)", body.group(1)))


def table_scripts() -> set[str]:
    """The scripts of the page's table rows (``| `bench/NAME.py ...` | ...``)."""
    return set(re.findall(r"^\| `bench/(\w+\.py)", PAGE, re.MULTILINE))


def test_the_table_is_what_make_bench_runs() -> None:
    assert table_scripts() == make_bench_scripts()


def test_every_bench_script_is_named_on_the_page() -> None:
    scripts = {p.name for p in (ROOT / "bench").glob("*.py")}
    assert scripts and not {s for s in scripts if f"bench/{s}" not in PAGE}


def make_bench_commands() -> set[str]:
    """The Makefile's ``bench`` commands as a reader would type them: ``python bench/...``, with
    no ``--json`` (the results page's file) and no comment."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    body = re.search(r"^bench:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert body, "no bench target in the Makefile"
    commands = set()
    for line in re.findall(r"bench/\w+\.py[^#\n]*", body.group(1)):
        commands.add("python " + " ".join(re.sub(r"--json \S+", "", line).split()))
    return commands


def test_a_command_the_docs_say_make_bench_runs_is_the_makefiles() -> None:
    """A paragraph that shows a bench command and says "`make bench` runs it" shows the command
    the Makefile runs (``--repeats 3`` was missing from the tenants page's once the Makefile took it)."""
    shown = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for paragraph in page.read_text(encoding="utf-8").split("\n\n"):
            if "`make bench` runs it" in paragraph:
                shown += [(page.name, " ".join(c.split())) for c in re.findall(r"`(python bench/[^`]+)`", paragraph)]
    assert shown
    made = make_bench_commands()
    assert [(name, c) for name, c in shown if c not in made] == []
