"""What `kernelevo optimize` shows while it runs (stderr) and when it ends (stdout).

The live panel fits a 100-column terminal: one line of search state, one of spend, one of
verdicts, one of what the model's replies became (yield, calls per operator), one per model when
the run has several (what each model's calls cost and earned), one per format when calls ask for
several (--format auto: what each format's calls earned, and its best kernel), one of activity.
It redraws at most four times a second.
"""
from __future__ import annotations

import time
from typing import Any

from kernelevo.text import loop_text
from kernelevo.text import speedup_text as _x


WIDTH = 100  # the panel fits a 100-column terminal (4 columns go to its border and padding)


def lines(p: Any, limits: dict) -> list[str]:
    """The panel's text lines for a loop Progress (plain strings, so tests can read them)."""
    cap = f" of ${limits['max_cost_usd']:.2f}" if limits.get("max_cost_usd") else ""
    unknown = f" (+{p.unknown_cost_calls} calls of unknown cost)" if p.unknown_cost_calls else ""
    cache = f"{p.cache_hit:.0%}" if p.cache_hit is not None else "-"
    verdicts = "  ".join(f"{k} {v}" for k, v in sorted(p.verdicts.items(), key=lambda kv: -kv[1])) or "-"
    text = [
        f"generation {p.generation}  judged {p.judged} ({p.per_minute:.1f}/min)  "
        f"best {_x(p.best_eager, p.best_eager_ci)} vs eager, "
        f"{_x(p.best_compile, p.best_compile_ci)} vs torch.compile",
        f"spend ${p.spend_usd:.4f}{cap}{unknown}  LLM calls {p.calls}"
        + (f" ({p.replayed} replayed)" if p.replayed else "") + f"  prompt cache hits {cache}",
        f"verdicts: {verdicts}" + (f"  copies skipped {p.skipped_copies}" if p.skipped_copies else "")
        + (f"  prompts not repeated {p.repeats_avoided}" if p.repeats_avoided else ""),
        f"yield {p.replies_judged}/{p.replies} replies judged  calls: {call_shares(p.calls_by_operator)}",
        *(f"{row['model']}: {model_text(row, p.dropped.get(row['model']))}"
          for row in (p.models if len(p.models) > 1 else ())),
        *(f"{row['format']}: {format_text(row)}" for row in getattr(p, "formats", ())),
        f"in flight: {p.llm_in_flight} LLM calls, {p.judging} being judged{_remeasuring(p)}  {p.status}",
    ]
    return [line if len(line) <= WIDTH - 4 else line[:WIDTH - 7] + "..." for line in text]


def _remeasuring(p: Any) -> str:
    """' (1 a new best, re-measured)': judge jobs that check a new best before the search believes it."""
    n = p.remeasuring
    return f" ({n} a new best, re-measured)" if n == 1 else f" ({n} new bests, re-measured)" if n else ""


def model_text(row: dict, dropped: str | None = None) -> str:
    """'12 calls $0.0310, 9/11 replies judged, 5 correct, 3 improvements (97/$)': one model's share."""
    cost = f"${row['cost_usd']:.4f}" + (f" +{row['unknown_cost_calls']} unknown" if row["unknown_cost_calls"] else "")
    per = row.get("improvements_per_usd")
    text = (f"{row['calls']} calls {cost}, {row['judged']}/{row['replies']} replies judged, {row['correct']} correct, "
            f"{row['improvements']} improvements" + (f" ({per:.3g}/$)" if per is not None else ""))
    return text + (f"; dropped out: {dropped}" if dropped else "")


def format_text(row: dict) -> str:
    """'7 calls, 5/6 judged correct, 2 improvements, best 1.42x (1.38-1.45), kernel 12': one format's share."""
    best = row.get("best_speedup")
    if row.get("best") is None:
        top = "no correct kernel yet"
    elif best is None:
        top = f"best: kernel {row['best']}, correct, not timed"
    else:
        top = f"best {_x(best, row.get('best_speedup_ci'))}, kernel {row['best']}"
    return (f"{row['calls']} calls, {row['correct']}/{row['judged']} judged correct, "
            f"{row['improvements']} improvements, {top}")


def call_shares(calls: dict) -> str:
    """'mutate 5 (42%), crossover 3 (25%)': LLM calls per operator, most first."""
    total = sum(calls.values())
    if not total:
        return "-"
    return ", ".join(f"{op} {n} ({n / total:.0%})" for op, n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])))


class LivePanel:
    """A rich Live panel on stderr, redrawn with `show(lines)`; when stderr is not a terminal, the
    first `plain` lines are printed every few seconds instead (a log, not a screen). Thread-safe."""

    def __init__(self, title: str, plain: int = 2):
        import threading

        from rich.console import Console

        self.title, self.plain = title, plain
        self.console = Console(stderr=True)
        self.live = None
        self._last_plain = 0.0
        self._lock = threading.Lock()

    def __enter__(self):
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def status(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def show(self, text: list[str]) -> None:
        with self._lock:
            if self.live is not None:
                from rich.panel import Panel

                self.live.update(Panel("\n".join(text), title=self.title, width=min(WIDTH, self.console.width)))
            elif time.monotonic() - self._last_plain > 5:
                self._last_plain = time.monotonic()
                for line in text[:self.plain]:
                    self.console.print(line, markup=False, highlight=False, soft_wrap=True)


class LiveProgress(LivePanel):
    """The optimize panel: the search state and spend lines go to a log now and then."""

    def __init__(self, title: str, limits: dict):
        super().__init__(title, plain=2)
        self.limits = limits

    def __call__(self, progress: Any) -> None:
        self.show(lines(progress, self.limits))


def repeats_text(calls: dict) -> str:  # operator -> OperatorYield
    """'mutate: 2 prompts not sent again, 1 reply a copy; ...': per operator, the prompts not sent
    because they were answered before, and the replies that copied a kernel the run had."""
    parts = []
    for op, row in sorted(calls.items()):
        said = [f"{n} {what}" for n, what in ((row.repeats, "prompts not sent again"),
                                               (row.copies, "replies copies of a kernel")) if n]
        if said:
            parts.append(f"{op}: {', '.join(said)}")
    return "; ".join(parts) or "no prompt repeated, no reply a copy"


def summary_rows(outcome: Any) -> list[tuple[str, str]]:
    """The final summary as (label, value) rows."""
    summary = outcome.summary
    spend, counts = summary.spend, summary.counts
    best = outcome.best
    rows = [("run", outcome.run_id), ("stopped because", outcome.reason)]
    if sol := summary.bound:
        rows.append(("speed of light", f"{sol.bound_ms:.4f} ms, from {sol.source}"
                     + (f"; not used: {sol.unreliable}" if sol.unreliable else "")))
    if summary.baseline:
        rows.append(("ranked against", "torch.compile" if summary.baseline == "compile" else "eager"))
    if best is not None:
        searched = summary.search_speedups or (None, None)
        spread = summary.search_intervals or (None, None)
        rows += [("best kernel", f"{outcome.best_kernel_id}: {_x(best.speedup_eager, best.speedup_eager_ci)} vs eager, "
                                 f"{_x(best.speedup_compile, best.speedup_compile_ci)} vs torch.compile "
                                 "(re-judged in a fresh process)"),
                 ("in the search", f"{_x(searched[0], spread[0])} vs eager, {_x(searched[1], spread[1])} "
                                   "vs torch.compile"),
                 *((("in a loop", loop_text(best.loop)),) if best.loop else ()),
                 ("written to", str(outcome.written))]
    else:
        rows.append(("best kernel", "none passed the judge"))
    cost = f"${spend.cost_usd:.4f}"
    if spend.unknown_cost_calls:
        cost += f" + {spend.unknown_cost_calls} calls of unknown cost"
    calls = summary.calls
    replies, judged = sum(r.replies for r in calls.values()), sum(r.judged for r in calls.values())
    replayed = f", {spend.replayed} of them replayed" if spend.replayed else ""
    rows += [("LLM calls", f"{spend.calls} ({cost}{replayed})"),
             *((f"replay {label}", note) for label, note in summary.replays.items()),
             ("calls per operator", call_shares({op: row.calls for op, row in calls.items() if row.calls})),
             ("yield", f"{judged} of {replies} replies judged" if replies else "-"),
             ("asked once", repeats_text(calls)),
             *((f"model {row['model']}", model_text(row, summary.dropped.get(row["model"]))) for row in summary.models),
             *((f"format {row['format']}", format_text(row)) for row in summary.formats),
             ("candidates judged", str(counts.evaluations)),
             ("verdicts", ", ".join(f"{k} {v}" for k, v in sorted(counts.verdicts.items())) or "-")]
    return rows


def print_summary(outcome: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False, box=None)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")  # a long path folds instead of being cut
    for label, value in summary_rows(outcome):
        table.add_row(label, value)
    Console().print(table)
