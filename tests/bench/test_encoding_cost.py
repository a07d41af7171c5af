"""bench/encoding_cost.py times the baseline and the variants in interleaved rounds (the baseline
was timed once, before every variant, so a change of the machine's load went into every ratio)."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


class Engine:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def place(self, request):
        self.calls.append(self.name)
        return type("Response", (), {"decisions": []})()


def test_every_engine_is_decided_in_each_round_each_starting_one_later(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their helpers from their own folder
    import encoding_cost

    calls: list[str] = []
    engines = [Engine(name, calls) for name in ("baseline", "a", "b")]
    cpus = encoding_cost.cpu_in_rounds(engines, object(), 3)
    assert len(cpus) == 3
    assert calls == ["baseline", "a", "b",  # the warm-ups
                     "baseline", "a", "b", "a", "b", "baseline", "b", "baseline", "a"]
