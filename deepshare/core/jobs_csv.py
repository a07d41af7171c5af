"""``--jobs-csv`` written while the simulation runs, not built in memory at the end.

Rows are the same, in the same order (trace order), as :meth:`MetricsReport.jobs_csv`: the
simulator hands each job's record over when the job finishes or is rejected, and a record that
arrives before its predecessors in the trace waits in a small buffer (the jobs that finished
out of order, not the whole trace). The file is written as a temporary file in the target's
folder and renamed over the target by :meth:`JobsCsvStream.commit`, so a reader sees the old
file or the whole new one; a run that fails leaves no partial file behind. A command that writes
other outputs too hands the finished temporary file (:meth:`JobsCsvStream.finish`) to an
:class:`~deepshare.core.output_set.OutputSet`, which renames it with the others. A target that
exists and is not a regular file (a device, FIFO, socket or folder) is refused before anything
is written (:func:`~deepshare.core.files.check_output_path`). On a cluster whose fabric has more
than one level the header ends with ``placement`` and ``domains_<level>`` per level
(:func:`~deepshare.core.metrics.csv_columns`): give the stream the fabric's level names.
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Sequence

from deepshare.core.atomic import mode_for, temp_prefix
from deepshare.core.files import check_output_path
from deepshare.core.metrics import JobRecord, csv_columns, csv_row
from deepshare.core.output_set import hold_temp
from deepshare.core.errors import DeepShareError


class JobsCsvStream:
    """Use as ``with JobsCsvStream(path) as out: Simulator(..., on_record=out.add).run(...)``:
    the file is committed when the block ends normally and discarded when it raises."""

    def __init__(self, path: str | os.PathLike[str], what: str = "per-job table", levels: Sequence[str] = ()) -> None:
        """``levels``: the cluster's fabric level names, lowest first (their ``domains_<level>``
        columns and ``placement`` are written when there is more than one)."""
        self.target = Path(path)
        self._columns = csv_columns(levels)
        self._what = what
        check_output_path(self.target, what)
        folder = self.target.parent if str(self.target.parent) else Path(".")
        try:
            fd, self._tmp = tempfile.mkstemp(dir=folder, prefix=temp_prefix(self.target), suffix=".tmp")
        except OSError as exc:
            raise self._error(exc) from None
        hold_temp(fd)  # rows may sit in memory for hours: the sweep of a concurrent commit must not take it
        self._fh = os.fdopen(fd, "w", encoding="utf-8", newline="")
        self._writer = csv.writer(self._fh, lineterminator="\n")
        self._next = 0
        self._held: dict[int, JobRecord] = {}
        self._closed = False
        self._write(self._columns)

    def _error(self, exc: OSError) -> DeepShareError:
        return DeepShareError(f"{self.target}: cannot write {self._what}: {exc.strerror or exc}")

    def _write(self, row: list[object]) -> None:
        try:
            self._writer.writerow(row)
        except OSError as exc:
            self.discard()
            raise self._error(exc) from None

    @property
    def held(self) -> int:
        """Records waiting for an earlier job of the trace (the reorder buffer's size)."""
        return len(self._held)

    def add(self, index: int, record: JobRecord) -> None:
        """The record of the job at trace position ``index`` (each index once)."""
        if index != self._next:
            self._held[index] = record
            return
        self._write(csv_row(record, self._columns))
        self._next += 1
        while self._next in self._held:
            self._write(csv_row(self._held.pop(self._next), self._columns))
            self._next += 1

    def commit(self) -> Path:
        """Write what is still held (in trace order), then put the file in place."""
        tmp = self.finish()
        try:
            os.replace(tmp, self.target)
        except OSError as exc:
            self.discard()
            raise self._error(exc) from None
        return self.target

    def finish(self) -> Path:
        """Write what is still held (in trace order) and close the temporary file, flushed to disk
        with the target's mode, without putting it in place; return its path. For outputs put in
        place together (:class:`~deepshare.core.output_set.OutputSet` renames it, or
        :meth:`discard` removes it)."""
        if self._closed:
            raise DeepShareError(f"{self.target}: {self._what} was already closed")
        for index in sorted(self._held):
            self._write(csv_row(self._held[index], self._columns))
        self._held.clear()
        try:
            self._fh.flush()
            os.fchmod(self._fh.fileno(), mode_for(self.target))  # by descriptor: a link in its place gets nothing
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._closed = True
        except OSError as exc:
            self.discard()
            raise self._error(exc) from None
        return Path(self._tmp)

    def discard(self) -> None:
        """Drop the temporary file (the target is left as it was)."""
        if not self._closed:
            self._closed = True
            try:
                self._fh.close()
            except OSError:
                pass
        try:
            os.unlink(self._tmp)
        except OSError:
            pass

    def __enter__(self) -> "JobsCsvStream":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()
