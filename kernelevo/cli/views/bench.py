"""What `kernelevo bench` shows: a live line per running task and a suite line (stderr), then the
table of tasks and the suite's fast_p figures (stdout); and two benches side by side."""
from __future__ import annotations

from typing import Any

from kernelevo.cli.views.progress import LivePanel, WIDTH
from kernelevo.text import share_text, speedup_text as _x


def live_lines(view: Any) -> list[str]:
    """Plain text lines for a BenchView: the suite line, then one per running task."""
    fast = f"{view.fast_1}/{view.tasks}" if view.tasks else "-"
    against = "torch.compile" if view.baseline == "compile" else "eager"
    suite = (f"tasks {view.done}/{view.tasks} done  correct {view.correct}  fast_1 (vs {against}) {fast}  "
             f"spend ${view.spent_usd:.2f}")
    tasks = [f"{name}: {text}" for name, text in sorted(view.running.items())]
    return [line if len(line) <= WIDTH - 4 else line[:WIDTH - 7] + "..." for line in [suite, *tasks]]


class LiveBench(LivePanel):
    """The bench panel (called from the bench's worker threads); a log gets the suite line."""

    def __init__(self, title: str):
        super().__init__(title, plain=1)

    def __call__(self, view: Any) -> None:
        self.show(live_lines(view))


def print_table(table: dict) -> None:
    """The tasks and the suite's figures of one bench."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    bench, suite = table["bench"], table["suite"]
    tasks = Table(title=f"bench {bench['id']} ({bench['status']}): {bench['suite']}", title_justify="left")
    for column in ("task", "verdict", "vs eager", "vs torch.compile", "shapes", "calls", "cost", "wall"):
        tasks.add_column(column, justify="right" if column in ("vs eager", "vs torch.compile", "calls", "cost",
                                                               "wall") else "left")
    compile_ranked = table.get("baseline") == "compile"
    for r in table["tasks"]:
        shapes = "-" if r["specialized"] is None else "specialized" if r["specialized"] else "general"
        name = r["name"] + (" (degenerate)" if r["degenerate"] else "")
        verdict = r["verdict"] + (f": {r['reason']}" if r["reason"] and not r["correct"] else "")
        so_far = r.get("search_speedup_compile" if compile_ranked else "search_speedup_eager")
        if r.get("status") == "pending" and so_far:  # still searching (a replay waiting for a reply): its best so far
            verdict += f" (search so far: {_x(so_far)} vs {'torch.compile' if compile_ranked else 'eager'})"
        tasks.add_row(name, verdict, _x(r["speedup_eager"], r.get("speedup_eager_ci")),
                      _x(r["speedup_compile"], r.get("speedup_compile_ci")), shapes, str(r["calls"]),
                      f"${r['cost_usd']:.2f}", f"{r['wall_s']:.0f} s")
    console.print(tasks)
    console.print(suite_table(suite))
    console.print(suite_facts(suite), markup=False, highlight=False)
    if bench.get("mode") != "candidates":
        drove = "torch.compile" if table.get("baseline") == "compile" else "eager"
        console.print(f"the searches ranked kernels by their speedup over {drove}", markup=False, highlight=False)


def suite_table(suite: dict, other: dict | None = None):
    """fast_p against eager and torch.compile, over all tasks and the non-degenerate ones (a column per
    p), then correct rate, geomeans and totals; with `other` (compare), each row for A then B."""
    from rich.table import Table

    p_values = list(suite["fast_p"]["eager"])
    t = Table(title="suite", title_justify="left")
    t.add_column("")
    for p in p_values:
        t.add_column(f"fast_{p}", justify="right")
    suites = [("", suite)] if other is None else [(" A", suite), (" B", other)]
    for key, label in (("fast_p", "all tasks"), ("fast_p_healthy", "non-degenerate")):
        for base, name in (("eager", "eager"), ("compile", "torch.compile")):
            for tag, s in suites:
                t.add_row(f"vs {name}, {label}{tag}", *(share_text(s[key][base][p]) for p in p_values))
    return t


def suite_facts(suite: dict) -> str:
    """Correct rate, geomean speedups over correct tasks (device time, and in a loop with the host's work), flags and
    totals, in one line."""
    unknown = f" (+{suite['unknown_cost_calls']} calls of unknown cost)" if suite["unknown_cost_calls"] else ""
    loop = suite.get("geomean_loop") or {}
    in_loop = (f" (in a loop, host included: {_x(loop['eager'])} vs eager, {_x(loop['compile'])} vs torch.compile)"
               if loop.get("eager") else "")
    tokens = (f", tokens {suite['input_tokens']:,} in, {suite['output_tokens']:,} out"
              if suite.get("input_tokens") else "")
    replayed = f" ({suite['replayed']} replayed)" if suite.get("replayed") else ""
    return (f"correct {suite['correct']}/{suite['tasks']} ({share_text(suite['correct_rate'])}); geomean over correct "
            f"tasks {_x(suite['geomean']['eager'])} vs eager, {_x(suite['geomean']['compile'])} vs torch.compile"
            f"{in_loop}; {suite['degenerate']} degenerate, {suite['specialized']} specialized; LLM calls "
            f"{suite['calls']}{replayed}, ${suite['cost_usd']:.2f}{unknown}{tokens}; wall {suite['wall_s'] / 60:.1f} min")


def print_compare(cmp: dict) -> None:
    """Two benches: per task verdict and speedups side by side, then the suites' figures."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title=f"A = {cmp['a']}, B = {cmp['b']}", title_justify="left")
    for column in ("task", "A verdict", "A vs eager", "B verdict", "B vs eager", "A vs compile", "B vs compile"):
        t.add_column(column, justify="left" if "verdict" in column or column == "task" else "right",
                     overflow="fold")  # a narrow terminal folds an interval rather than cut it
    for row in cmp["tasks"]:
        a, b = row["a"] or {}, row["b"] or {}
        t.add_row(row["name"], a.get("verdict", "-"), _x(a.get("speedup_eager"), a.get("speedup_eager_ci")),
                  b.get("verdict", "-"), _x(b.get("speedup_eager"), b.get("speedup_eager_ci")),
                  _x(a.get("speedup_compile"), a.get("speedup_compile_ci")),
                  _x(b.get("speedup_compile"), b.get("speedup_compile_ci")))
    console.print(t)
    console.print(suite_table(cmp["suite"]["a"], cmp["suite"]["b"]))
    for tag in ("a", "b"):
        console.print(f"{tag.upper()}: {suite_facts(cmp['suite'][tag])}", markup=False, highlight=False)
