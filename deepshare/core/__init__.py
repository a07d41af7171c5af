"""The scheduling problem and its discrete-event simulator: pure Python and NumPy, no Ray.

Start with ``types`` (jobs, placements, decisions), ``view`` (what a policy sees), ``simulator``
and ``contention/`` (how co-located jobs slow each other); ``errors`` says how failures are
reported. See ``docs/architecture.md``.
"""
