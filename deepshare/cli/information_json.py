"""The ``"information"`` field of a run's JSON: what its policies knew, so a reader of the file can
tell a run with exact durations from one with estimates (and of which error) or none, and a run
that started with a job history from one that did not.

The keys follow the suite's JSON (each cell's ``durations`` and ``contention_knowledge``, its
spec's ``estimate_error``), so one reader takes both; ``description`` is the phrase the human
table's title shows (:meth:`~deepshare.core.information.InformationModel.describe`). A field that
does not apply to the run's model is null rather than a default nobody used: ``estimate_error``
outside ``estimated``, ``estimate_seed`` when nothing was drawn, ``report_s`` and
``measurement_noise`` unless contention is learned, ``history`` without ``--history``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deepshare.core.history import JobHistory
    from deepshare.core.information import InformationModel


def information_json(information: "InformationModel", history: "JobHistory | None", history_file: str | None,
                     seeded: bool = True) -> dict[str, Any]:
    """The ``"information"`` object of a run under ``information`` that started with ``history``
    (read from ``history_file``, ``--history``). ``seeded=False``: the runs drew with several
    seeds (``evaluate``'s, listed in its JSON's ``"seeds"``), so no one ``estimate_seed``."""
    estimated = information.durations == "estimated"
    learned = information.learns_contention
    return {
        "durations": information.durations,
        "estimate_error": information.estimate_error if estimated else None,
        "estimate_seed": information.estimate_seed if seeded and (estimated or learned) else None,
        "contention_knowledge": information.contention_knowledge,
        "report_s": information.report_s if learned else None,
        "measurement_noise": information.measurement_noise if learned else None,
        "history": None if history is None else {"file": history_file, "jobs": len(history)},
        "description": information.describe(),
    }
