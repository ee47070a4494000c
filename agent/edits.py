"""SEARCH/REPLACE edits against a parent kernel: parsed tolerantly, applied strictly.

A block is

    <<<<<<< SEARCH
    lines copied from the parent
    =======
    the lines to put there instead
    >>>>>>> REPLACE

Parsing accepts 5-9 marker characters, missing spaces, and blocks inside code fences. Applying
accepts an exact match, then a match that ignores whitespace (indentation, trailing spaces, runs
of blanks inside a line), and nothing looser: a block that matches nowhere, or in more than one
place, fails. Each failure carries the parent's closest lines and where they are, so the model
can be told exactly which block failed and what the real text is.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_SEARCH = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*$", re.I)
_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_REPLACE = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$", re.I)


@dataclass(frozen=True)
class Edit:
    search: str
    replace: str
    number: int  # 1-based position of the block in the reply


@dataclass(frozen=True)
class EditFailure:
    edit: Edit
    problem: str  # "no match", "ambiguous" or "empty search"
    closest: str  # the parent's lines most like the SEARCH text ("" when none)
    line: int  # 1-based line of `closest` (or of the first of several matches) in the text edited


class EditError(Exception):
    """Some blocks did not apply. `text` is the parent with the blocks that did apply."""

    def __init__(self, failures: list[EditFailure], applied: int, text: str):
        self.failures, self.applied, self.text = failures, applied, text
        super().__init__(describe(failures, applied))


def parse_edits(reply: str) -> list[Edit]:
    """Every complete SEARCH/REPLACE block in the reply, in order; incomplete ones are ignored
    here and reported by `incomplete_blocks`."""
    edits, state, search, replace = [], None, [], []
    for line in reply.splitlines():
        if _SEARCH.match(line):
            state, search, replace = "search", [], []
        elif state == "search" and _DIVIDER.match(line):
            state = "replace"
        elif state == "replace" and _REPLACE.match(line):
            edits.append(Edit(_join(search), _join(replace), len(edits) + 1))
            state = None
        elif state == "search":
            search.append(line)
        elif state == "replace":
            replace.append(line)
    return edits


def incomplete_blocks(reply: str) -> int:
    """How many SEARCH markers start a block that never reaches its REPLACE marker."""
    starts = sum(1 for line in reply.splitlines() if _SEARCH.match(line))
    return max(0, starts - len(parse_edits(reply)))


def _join(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


def apply_edits(source: str, edits: list[Edit]) -> str:
    """The source with every edit applied in order; raises EditError if any block fails."""
    text, failures, applied = source, [], 0
    for edit in edits:
        result = _apply_one(text, edit)
        if isinstance(result, EditFailure):
            failures.append(result)
        else:
            text, applied = result, applied + 1
    if failures:
        raise EditError(failures, applied, text)
    return text


def _apply_one(text: str, edit: Edit) -> str | EditFailure:
    if not edit.search.strip():
        return EditFailure(edit, "empty search", "", 0)
    count = text.count(edit.search)
    if count == 1:
        return text.replace(edit.search, edit.replace, 1)
    if count > 1:
        return EditFailure(edit, "ambiguous", edit.search, text[:text.index(edit.search)].count("\n") + 1)
    lines = text.splitlines(keepends=True)
    searched = _trimmed(edit.search.splitlines())
    want, have = [_squash(s) for s in searched], [_squash(s) for s in lines]
    starts = [i for i in range(len(lines) - len(want) + 1) if have[i:i + len(want)] == want]
    if len(starts) == 1:
        start = starts[0]
        found = lines[start:start + len(want)]
        replacement = _reindent(edit.replace, _first_indent(searched), _first_indent(found))
        return "".join(lines[:start]) + replacement + "".join(lines[start + len(want):])
    if len(starts) > 1:
        return EditFailure(edit, "ambiguous", "".join(lines[starts[0]:starts[0] + len(want)]), starts[0] + 1)
    closest, line = closest_lines(text, edit.search)
    return EditFailure(edit, "no match", closest, line)


def _squash(line: str) -> str:
    return " ".join(line.split())


def _trimmed(lines: list[str]) -> list[str]:
    """Lines without the blank lines at either end (models add and drop them freely)."""
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _first_indent(lines: list[str]) -> str:
    for line in lines:
        if line.strip():
            return line[:len(line) - len(line.lstrip())]
    return ""


def _reindent(text: str, written: str, actual: str) -> str:
    """Shift REPLACE lines by the indentation the SEARCH text was off by."""
    if written == actual:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        out.append(actual + line[len(written):] if line.startswith(written) and line.strip() else line)
    return "".join(out)


def closest_lines(text: str, search: str) -> tuple[str, int]:
    """The window of the text's lines most like `search` (as many lines), with its 1-based line."""
    lines = text.splitlines(keepends=True)
    want = search.splitlines(keepends=True)
    if not lines or not want:
        return "", 0
    size = min(len(want), len(lines))
    best, best_at = -1.0, 0
    target = "".join(want)
    for i in range(len(lines) - size + 1):
        score = difflib.SequenceMatcher(None, "".join(lines[i:i + size]), target, autojunk=False).ratio()
        if score > best:
            best, best_at = score, i
    return "".join(lines[best_at:best_at + size]), best_at + 1


def describe(failures: list[EditFailure], applied: int) -> str:
    """A summary line for logs; the full follow-up message to the model is rendered from a prompt file."""
    parts = [f"block {f.edit.number}: {f.problem}" + (f" (closest at line {f.line})" if f.line else "")
             for f in failures]
    return f"{len(failures)} SEARCH/REPLACE block(s) failed, {applied} applied: " + "; ".join(parts)
