"""What a cluster YAML's shell command lines run, read as the shell splits them.

The validator asks whether a node installs this project and whether the head starts the
contention monitor. A substring test said yes to ``echo pip install deepshare`` and to
``ray start --head # deepshare agents start`` (a comment): these helpers split a line into shell
words (quotes and comments as the shell reads them, ``;``, ``&&``, ``|``... as separate words) and
look for a program only where the shell reads a command name.

A newline outside quotes ends a command as ``;`` does (a YAML literal block, ``- |``, holds
several lines, and the launcher runs it with ``bash -c``), and a backslash before a newline joins
the two lines, as in the shell.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Iterator, Sequence

from deepshare.core.errors import DeepShareError

SHELL_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "|&", ";;", ";&", ";;&"})
_PREFIXES = frozenset({"exec", "sudo", "nohup", "time", "env", "do", "then", "else", "!", "{"})
"""Words after which the shell (or the prefix program) reads a command name, as after an operator."""
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh"})


def shell_words(command: str, where: str) -> list[str]:
    """``command`` split as the shell would (comments dropped, operators as their own words, an
    unquoted newline as the word ``;``)."""
    lexer = shlex.shlex(_uncomment(command), posix=True, punctuation_chars=";&|()\n")
    lexer.whitespace_split = True
    lexer.whitespace = " \t\r"
    lexer.commenters = ""  # dropped by _uncomment, which keeps the newline ending each comment
    words: list[str] = []
    try:
        for word in lexer:
            if "\n" not in word or word.strip(";&|()\n"):  # a word (a quoted newline inside is its own)
                words.append(word)
                continue
            for part in re.split("(\n)", word):  # a run of operators such as `&&\n` or `;\n\n`
                if part == "\n":
                    if words and words[-1] not in SHELL_OPERATORS:
                        words.append(";")
                elif part:
                    words.append(part)
    except ValueError as exc:
        raise DeepShareError(f"{where}: cannot split {command!r} ({exc})") from None
    return words


def _uncomment(command: str) -> str:
    """``command`` without its comments (``#`` starting a word outside quotes, up to the end of
    its line, the newline kept) and with each backslash-newline outside single quotes removed."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(command):
        char = command[i]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            if command[i + 1:i + 2] != "\n":
                out.append(command[i:i + 2])
            i += 2
            continue
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (not out or out[-1] in (" ", "\t", "\r", "\n", ";", "&", "|", "(", ")")):
            end = command.find("\n", i)
            i = len(command) if end < 0 else end
            continue
        out.append(char)
        i += 1
    return "".join(out)


def command_position(words: Sequence[str], i: int) -> bool:
    """Whether ``words[i]`` is where a shell reads a command name: first, after an operator, a
    keyword (``do``, ``then``...), a prefix (``exec``, ``sudo``, ``nohup``...) or variable
    assignments (``RAY_X=1 ray start``)."""
    j = i - 1
    while j >= 0 and _ASSIGNMENT.match(words[j]):
        j -= 1
    return j < 0 or words[j] in SHELL_OPERATORS or words[j] in _PREFIXES


def runs(command: str, program: Sequence[str], where: str) -> bool:
    """Whether the shell line ``command`` runs ``program`` (its first word compared by file name,
    the rest word for word), directly or as ``python -m``."""
    words = shell_words(command, where)
    for i in range(len(words)):
        if not command_position(words, i):
            continue
        start = i + 2 if _is_python_m(words, i) else i  # python -m PROGRAM: the module's name
        name = words[start] if start > i else Path(words[i]).name
        if name == program[0] and list(words[start + 1:start + len(program)]) == list(program[1:]):
            return True
    return False


def pip_installs(command: str, package: str, where: str) -> bool:
    """Whether the shell line ``command`` runs ``pip install`` (or ``python -m pip install``) with
    an argument naming ``package`` (a name, a path or a URL holding it)."""
    words = shell_words(command, where)
    for i in range(len(words)):
        if not command_position(words, i):
            continue
        if _is_python_m(words, i) and words[i + 2:i + 4] == ["pip", "install"]:
            first = i + 4
        elif Path(words[i]).name in ("pip", "pip3") and words[i + 1:i + 2] == ["install"]:
            first = i + 2
        else:
            continue
        for word in words[first:]:
            if word in SHELL_OPERATORS:
                break
            if package in word and not word.startswith("-"):
                return True
    return False


def exec_lines(argv: Sequence[str]) -> list[str]:
    """The shell lines an exec-form command (a container's ``command`` + ``args``, a hook's
    ``exec.command``) runs: the script of ``sh -c SCRIPT`` (``-c`` alone or among other short
    options, ``bash -lc``, ``bash -lc -- SCRIPT`` as KubeRay writes it, ``bash -o pipefail -c``),
    else the argv itself as one line. Options are read as the shell reads them: all of them
    before the script, ``-o``/``+o``/``-O``/``+O`` and ``--rcfile``/``--init-file`` with an
    argument, ``--`` or ``-`` ending them."""
    if argv and Path(argv[0]).name in _SHELLS:
        at, script = 1, False
        while at < len(argv):
            word = argv[at]
            if word in ("--", "-"):
                at += 1
                break
            if word.startswith("--"):  # bash's long options, before the short ones
                at += 2 if word in _LONG_WITH_ARGUMENT else 1
                continue
            if not word.startswith(("-", "+")) or len(word) < 2:
                break
            script = script or (word[0] == "-" and "c" in word[1:])
            at += 1 + sum(word[1:].count(letter) for letter in "oO")  # each -o / -O takes the next word
        if script:
            return [argv[at]] if at < len(argv) else []
    return [shlex.join(argv)] if argv else []


_LONG_WITH_ARGUMENT = frozenset({"--rcfile", "--init-file"})


def _is_python_m(words: Sequence[str], i: int) -> bool:
    return Path(words[i]).name.startswith("python") and words[i + 1:i + 2] == ["-m"] and i + 2 < len(words)


def _pieces(text: str) -> Iterator[tuple[int, str, bool]]:
    """``(position, piece, bare)`` for each character of ``text`` as the shell reads its quoting:
    a backslash outside single quotes and the character after it make one piece; ``bare`` is
    true for a character outside quotes and not escaped (the quote characters themselves are
    not bare): where the shell splits words and expands braces."""
    quote = ""
    i = 0
    while i < len(text):
        char = text[i]
        if quote == "'":
            quote = "" if char == "'" else quote
            yield i, char, False
        elif char == "\\":
            yield i, text[i:i + 2], False
            i += 2
            continue
        elif quote:
            quote = "" if char == quote else quote
            yield i, char, False
        elif char in "'\"":
            quote = char
            yield i, char, False
        else:
            yield i, char, True
        i += 1


def raw_words(command: str) -> list[str]:
    """``command``'s words as written, quotes and backslashes kept (comments and backslash-newlines
    removed first, as :func:`shell_words` does; split at unquoted blanks; each unquoted operator
    character, and a newline as ``;``, its own word): where :func:`brace_expansion` looks, since
    :func:`shell_words` has removed the quoting that decides whether bash expands."""
    words: list[str] = []
    current: list[str] = []
    for _, piece, bare in _pieces(_uncomment(command)):
        if bare and piece in " \t\r\n;&|()":
            if current:
                words.append("".join(current))
                current = []
            if piece not in " \t\r":
                words.append(";" if piece == "\n" else piece)
        else:
            current.append(piece)
    if current:
        words.append("".join(current))
    return words


def brace_expansion(word: str) -> str | None:
    """The first part of ``word`` (as written, :func:`raw_words`) that bash's brace expansion
    turns into several words (``{a,b}``, ``{1..3}``: an unquoted ``{`` not after ``$``, with an
    unquoted ``,`` or ``..`` inside its matching unquoted ``}``), or None. ``shlex`` does no brace
    expansion: ``--resources={\\"a\\":1,\\"b\\":1}`` is one JSON word to it and two options to bash."""
    marks = [(i, char) for i, char, bare in _pieces(word) if bare and char in "{},.$"]  # the unquoted ones that matter
    for at, (start, char) in enumerate(marks):
        if char != "{" or (at and marks[at - 1] == (start - 1, "$")):
            continue
        depth, expands = 0, False
        for k in range(at, len(marks)):
            position, mark = marks[k]
            if mark == "{":
                depth += 1
            elif mark == "}":
                depth -= 1
                if depth == 0:
                    if expands:
                        return word[start:position + 1]
                    break
            elif depth == 1 and (mark == "," or (mark == "." and k + 1 < len(marks)
                                                  and marks[k + 1] == (position + 1, "."))):
                expands = True
    return None
