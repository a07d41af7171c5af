"""The two kinds of failure every layer reports: the user's input, or something outside it.

:class:`DeepShareError` (and its :class:`InfeasibleDecision`) is a bad trace, config, flag or request:
the CLI prints it as one line and exits 2. :class:`RuntimeFailure` is something outside the user's
input (a Ray that does not start): one line and exit 1. :class:`Unavailable` marks an error of a
service a step asked (unreachable, too slow, overloaded): the data is not at fault, and no job is
blamed for it. Depends on nothing.
"""

from __future__ import annotations


class DeepShareError(Exception):
    """Base class of every error caused by a user's input (trace, config, flag, request)."""


class RuntimeFailure(Exception):
    """Something outside the user's input failed (a Ray that does not start or cannot be joined):
    the CLI prints it as one line and exits 1, where input errors exit 2."""

    @classmethod
    def could_not(cls, what: str, exc: BaseException) -> "RuntimeFailure":
        """``could not WHAT (ErrorType: first line of its message)``: one line, whatever ``exc`` says."""
        return cls(f"could not {what} ({first_line(exc)})")


class InfeasibleDecision(DeepShareError):
    """A policy asked for something the cluster cannot do (too many GPUs, unknown node or job)."""


class Unavailable(Exception):
    """Mixed into an error raised because a service a step depends on did not answer (unreachable,
    cut off, out of time, overloaded, refusing the caller's credentials), not because of what it
    was asked: the step is
    retried later and none of its jobs is blamed (the live scheduler isolates a job only for its
    data)."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """``ErrorType: the first line of its message`` (at most ``limit`` characters of it), or the
    type alone when the message is empty: an exception as one short line."""
    first = (str(exc).strip().splitlines() or [""])[0][:limit]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def shown(value: object) -> str:
    """``value`` for an error message: a ``repr`` cut to a few levels and about 100 characters, so
    a file's 10 MB string or a list nested 100,000 deep makes one short line, not a huge one or
    a RecursionError."""
    import reprlib

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # repr of an int past 4,300 digits raises ValueError (Python 3.11's reprlib still calls it)
        sign = "a negative" if value < 0 else "an"
        return f"{sign} integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlist, short.maxdict = 3, 80, 80, 6, 6
    return short.repr(value)


def one_line(text: str) -> str:
    """``text`` with every character that is not printable written as its escape (``\\n``,
    ``\\x1b``, ``\\u2028``): a path or message a user typed with a newline or a terminal escape in
    it prints as one line that says what it holds, and cannot forge a second line of output or
    drive the terminal. Once anything is escaped, a backslash is doubled too, so a name holding a
    backslash and an ``n`` does not print as one holding a newline."""
    if text.isprintable():
        return text
    return "".join(_escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    return ch if ch.isprintable() else ascii(ch)[1:-1]
