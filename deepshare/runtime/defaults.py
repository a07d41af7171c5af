"""Defaults the live scheduler and its command line share: the command line builds its parser
without importing the loop (which would slow every ``deepshare`` command)."""

DEFAULT_DECISION_TIMEOUT_S = 60.0
"""Seconds one decision of the live scheduler may take unless configured (``--decision-timeout``)."""
MAX_QUEUED = 10_000
"""Queued jobs the scheduler holds at most unless configured (``--max-queued``); a submission
beyond gets 429. The placement service's own bound on pending jobs per request: a decision over
a longer queue is not one the policies are measured on, and every queued job costs each tick."""
DEFAULT_REFIT_S = 300.0
"""Seconds between two refits of the live scheduler's learned contention model unless configured
(``--refit-interval``: None in the parser, so that one given with ``--contention-knowledge exact``
is refused)."""
DAY_S = 86_400.0
"""Seconds in a day (``--keep-finished`` is given in days)."""
MAX_KEEP_DAYS = 36_500.0
"""The longest ``--keep-finished`` (a hundred years: longer is keeping every job)."""
