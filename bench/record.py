"""A benchmark's headline figures as JSON: each script in ``make bench`` takes ``--json PATH`` and
writes ``{"bench", "provenance", "measures": [{"name", "value", "unit", "target", "met"}]}``,
which ``make results`` renders into the results page (``deepshare.experiments.results_page``).

Usage in a script::

    record = Record("simulator", args.json)
    record.add("256-job bundled trace, best of 5", 0.21, "s", at_most=0.3)
    record.write()
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from deepshare.experiments.provenance import provenance_at_write, run_provenance


class Record:
    def __init__(self, bench: str, path: str | None) -> None:
        self.bench, self.path = bench, path
        # Taken at the start: the load the run met. Its commit is read again at each write
        # (provenance_at_write): a checkout that changed meanwhile is recorded dirty.
        self.provenance = run_provenance(["python", *sys.argv])
        self.measures: list[dict[str, Any]] = []

    def add(self, name: str, value: float, unit: str, *, at_most: float | None = None,
            at_least: float | None = None, note: str = "") -> None:
        """One figure; ``at_most`` / ``at_least``: its target, if it has one. A NaN or infinity
        (a failed measure) ends the run in one line naming it: the results page refuses the file."""
        value = float(value)  # NumPy scalars compare to NumPy booleans, which JSON refuses
        if not math.isfinite(value):
            raise SystemExit(f"error: {self.bench}: measure {name!r} is {value}, not a finite number "
                             "(the results page refuses a report holding one)")
        target, met = None, None
        if at_most is not None:
            target, met = f"<= {at_most:g}", value <= at_most
        elif at_least is not None:
            target, met = f">= {at_least:g}", value >= at_least
        self.measures.append({"name": name, "value": value, "unit": unit, "target": target, "met": met, "note": note})

    def final_provenance(self) -> dict[str, Any]:
        """:attr:`provenance` with the commit read again now (as :meth:`write` records it; the
        run's own file is not a change to the checkout)."""
        return provenance_at_write(self.provenance, outputs=[self.path] if self.path else ())

    def write(self, quiet: bool = False) -> None:
        """Write the file (whole: a temporary file and a rename), if ``--json`` was given; a
        script may write it again as figures come in (each write replaces the last)."""
        if not self.path:
            return
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.provenance = self.final_provenance()  # kept: a change seen by one write stays recorded by the next
        tmp.write_text(json.dumps({"bench": self.bench, "provenance": self.provenance, "measures": self.measures}, indent=1) + "\n")
        os.replace(tmp, path)
        if not quiet:
            print(f"wrote {path}")


def check_output(path: str | None, flag: str) -> None:
    """Refuse an unusable output path (a folder, a device, a path through a regular file) in one
    line before the run, not after it; a missing folder is fine: :func:`write_output` creates it,
    as :meth:`Record.write` does."""
    from deepshare.core.errors import DeepShareError
    from deepshare.core.files import check_output_path

    if path:
        try:
            check_output_path(path, "the results", label=f"{flag} {path}")
        except DeepShareError as exc:
            raise SystemExit(f"error: {exc}") from None


def write_output(path: str, text: str, what: str) -> None:
    """Write ``text`` to ``path`` whole (a temporary file and a rename), its folder created first
    as :meth:`Record.write` creates it."""
    from deepshare.core.atomic import write_text_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text, what)


def add_json_flag(parser: Any) -> None:
    parser.add_argument("--json", metavar="PATH", help="also write the headline figures as JSON (for `make results`)")
