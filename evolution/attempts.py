"""What was tried on a kernel: the notebook a kernel engineer keeps, read from the run's rows.

Every prompt that asks the model to change a kernel lists what came of earlier attempts on it (its
children, and those of its tune family: the same kernel with other constants), newest first and
bounded, each in one line: which kernel, by which operator, the idea in the model's own words, and
the outcome (a speedup with its interval, a verdict and why, a reply that copied a known kernel, a
reply without a kernel, or still being judged). Without it a model is asked the same thing again
and answers the same way (a run sent one mutate prompt three times; two of the replies were copies).

Rows are the archive's kernel records (Archive.kernels(run_id=...)); everything here is pure.
"""
from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Iterable, Sequence

from kernelevo.agent.prompting import attempt_line, phrase
from kernelevo.agent.replies import idea_of
from kernelevo.evaluation import Verdict
from kernelevo.text import speedup_text

if TYPE_CHECKING:
    from kernelevo.archive.records import KernelRecord

SHOWN = 6  # attempt lines per kernel in a prompt: enough to see a pattern, small enough to stay cheap
_COPY = re.compile(r"^(?:renamed_)?copy: the same code as kernel (\d+)")


def family(kernel_id: int, rows: Sequence[KernelRecord]) -> set[int]:
    """The kernel with its tune relatives: the kernel it was tuned from (up to the root), and every
    tune variant of that root. Their attempts are one kernel's attempts."""
    by_id = {r.id: r for r in rows}
    root = kernel_id
    while root in by_id and by_id[root].operator == "tune" and by_id[root].parents:
        root = by_id[root].parents[0]
    members, frontier = {root}, [root]
    while frontier:
        current = frontier.pop()
        for r in rows:
            if r.operator == "tune" and r.parents and r.parents[0] == current and r.id not in members:
                members.add(r.id)
                frontier.append(r.id)
    return members | {kernel_id}


def on_kernel(kernel_id: int, rows: Sequence[KernelRecord], limit: int = SHOWN) -> tuple[str, ...]:
    """Attempt lines of the model's children of the kernel and its tune family, and of any reply
    that came back as a copy of one of them (whatever it was asked), newest first."""
    children, elsewhere = _tried(kernel_id, rows)
    told = lines(children, rows, limit)
    if not elsewhere:
        return told
    # replies to other prompts that came back as this kernel: one line, whatever their number
    ids = ", ".join(str(r.id) for r in elsewhere[:8]) + (", ..." if len(elsewhere) > 8 else "")
    ops = "/".join(sorted({r.operator for r in elsewhere}))
    return told + (phrase("attempt", "copies", kernels=ids, operators=ops, kernel=copied_kernel(elsewhere[0])) + "\n",)


def count_on(kernel_id: int, rows: Sequence[KernelRecord]) -> int:
    """How many attempts the model made on the kernel and its tune family (copies of it included)."""
    return sum(map(len, _tried(kernel_id, rows)))


def _tried(kernel_id: int, rows: Sequence[KernelRecord]) -> tuple[list[KernelRecord], list[KernelRecord]]:
    """(the model's children of the kernel's family, replies elsewhere that copied one of them)."""
    kin = family(kernel_id, rows)
    children = [r for r in rows if r.operator != "tune" and r.id not in kin and kin & set(r.parents)]
    taken = {r.id for r in children}
    elsewhere = sorted((r for r in rows if r.id not in taken and copied_kernel(r) in kin), key=lambda r: -r.id)
    return children, elsewhere


def idea_for(kernel_id: int, rows: Sequence[KernelRecord]) -> str:
    """The idea of one kernel of the rows ("" when it has none)."""
    by_id = {r.id: r for r in rows}
    return idea(by_id[kernel_id], by_id) if kernel_id in by_id else ""


def translations(rows: Sequence[KernelRecord], limit: int = SHOWN) -> tuple[str, ...]:
    """Attempt lines of the run's translations so far, and of replies that copied one, newest first."""
    first = {r.id for r in rows if r.operator == "translate"}
    return lines([r for r in rows if r.id in first or copied_kernel(r) in first], rows, limit)


def lines(children: Iterable[KernelRecord], rows: Sequence[KernelRecord], limit: int) -> tuple[str, ...]:
    by_id = {r.id: r for r in rows}
    newest = sorted(children, key=lambda r: -r.id)[:limit]
    return tuple(attempt_line(r.id, r.operator, idea(r, by_id), outcome(r)) for r in newest)


def idea(row: KernelRecord, by_id: dict[int, KernelRecord]) -> str:
    """The kernel's idea: its account's `Idea:` line or first sentence, else what changed from its parent."""
    if row.account:
        return idea_of(row.account)
    if row.operator == "tune" and row.thinking:
        return phrase("attempt", "tuned", change=row.thinking)
    parent = by_id.get((row.parents or (None,))[0])
    if parent and parent.source and row.source:
        return diff_summary(parent.source, row.source, parent.id)
    return ""


def outcome(row: KernelRecord) -> str:
    """What came of a kernel: its measured speedup, its verdict, or why it was never judged."""
    problem = row.problem or ""
    copied = _COPY.match(problem)
    if copied:
        return phrase("attempt", "copy", kernel=copied.group(1))
    if problem:
        return phrase("attempt", "no_kernel", problem=_clip(problem, 160))
    if not row.verdict:
        return phrase("attempt", "judging")
    if row.verdict == Verdict.OK:
        return phrase("attempt", "ok", speedup=speedup_text(row.speedup_eager, row.speedup_eager_ci))
    message = _clip((row.message or "").splitlines()[0] if row.message else "", 160)
    if message:
        return phrase("attempt", "failed_message", verdict=row.verdict, reason=row.reason or "-",
                      message=message)
    return phrase("attempt", "failed", verdict=row.verdict, reason=row.reason or "-")


def copied_kernel(row: KernelRecord) -> int | None:
    """The kernel a reply was a copy of (its problem says so), or None."""
    found = _COPY.match(row.problem or "")
    return int(found.group(1)) if found else None


def diff_summary(old: str, new: str, parent_id: int) -> str:
    """'changed 3 lines of kernel 4, e.g. `x` -> `y`': the change in words, for kernels without an account."""
    a, b = old.splitlines(), new.splitlines()
    removed, added = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":  # the example is the first changed line of code, not of a comment
            removed += [line.strip() for line in a[i1:i2] if _code(line)]
            added += [line.strip() for line in b[j1:j2] if _code(line)]
    if not removed and not added:
        return ""
    if not removed:
        return phrase("attempt", "added", count=len(added), parent=parent_id, new=_clip(added[0], 70))
    return phrase("attempt", "changed", count=max(len(removed), len(added)), parent=parent_id,
                  old=_clip(removed[0], 70), new=_clip(added[0] if added else "", 70))


def _code(line: str) -> bool:
    text = line.strip()
    return bool(text) and not text.startswith(("#", "//", '"""', "'''", "/*", "*"))


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."
