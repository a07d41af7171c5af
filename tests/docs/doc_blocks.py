"""The shell blocks of the README and the documentation, as the tests run or parse them.

A fenced block whose info string is ``bash``, ``sh`` or ``shell`` is a block of commands. By
default it *runs* (``tests/docs/test_doc_commands.py``): in a temporary folder holding links to
the repository's data, with ``.venv/bin`` first on ``PATH``. A block that needs a real cluster, a
GPU, a server that runs until stopped or a long time is marked by an HTML comment on the line
before its fence, which neither GitHub nor MkDocs shows::

    <!-- doc-test: parse-only: REASON -->

Its ``deepshare`` commands are then only parsed by the CLI's own parser, and every other line must
at least split as shell words.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_FENCES = ("bash", "sh", "shell")
MARKER = re.compile(r"^<!--\s*doc-test:\s*parse-only:\s*(?P<reason>\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
OPERATORS = {";", "&&", "||", "|", "&", "(", ")"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    """1-based line of the opening fence."""
    code: str
    parse_only: str | None
    """The marker's reason, or None for a block that runs."""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def markdown_files() -> list[Path]:
    """The README, every page of the documentation (``docs/``) and the component READMEs."""
    components = sorted({*(ROOT / "deepshare").rglob("README.md"), *(ROOT / "cluster_yamls").glob("README.md")})
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *components]


def blocks(path: Path) -> list[Block]:
    """The shell blocks of one markdown file, in order."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, start = m["fence"], i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)), len(lines))
        if m["info"].lower() in SHELL_FENCES:
            marker = MARKER.match(lines[start - 1].strip()) if start > 0 else None
            found.append(Block(path, start + 1, "\n".join(lines[start + 1:end]) + "\n", marker["reason"] if marker else None))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in markdown_files() for b in blocks(path)]


def logical_lines(code: str) -> list[str]:
    """Whole shell lines: backslash continuations and quotes that span lines joined, blank lines
    and whole-line comments left out. Raises ValueError for a quote that never closes."""
    out, current = [], ""
    for line in code.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        try:
            shlex.split(current, comments=True)
        except ValueError:  # a quote still open: the line goes on
            current += "\n"
            continue
        if current.strip() and not current.strip().startswith("#"):
            out.append(current.strip())
        current = ""
    if current.strip():
        shlex.split(current, comments=True)  # raises for the quote left open
        out.append(current.strip())
    return out


def commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line, as argument lists (``a && b | c &`` gives three);
    leading ``VAR=value`` assignments are dropped. Raises ValueError if the line is not shell words."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segments: list[list[str]] = [[]]
    for token in lexer:
        if token in OPERATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    out = []
    for words in segments:
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            out.append(words)
    return out


def deepshare_argv(words: list[str]) -> list[str] | None:
    """The arguments after ``deepshare`` (or ``python -m deepshare``), or None for other programs."""
    if words and Path(words[0]).name == "deepshare":
        return words[1:]
    if len(words) >= 3 and Path(words[0]).name.startswith("python") and words[1:3] == ["-m", "deepshare"]:
        return words[3:]
    return None
