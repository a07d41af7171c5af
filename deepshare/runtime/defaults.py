"""Defaults the live scheduler and its command line share: the command line builds its parser
without importing the loop (which would slow every ``deepshare`` command)."""

DEFAULT_DECISION_TIMEOUT_S = 60.0
"""Seconds one decision of the live scheduler may take unless configured (``--decision-timeout``)."""
