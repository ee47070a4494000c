"""Terminal rendering of judge results (rich)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelevo.evaluation import Evaluation, TimingStats
from kernelevo.text import graph_text, loop_text, ms_text, speedup_text

_COLOURS = {"ok": "green", "incorrect": "yellow", "rejected": "red", "timeout": "magenta"}


def _time(stats: TimingStats | None) -> str:
    if stats is None:
        return "-"
    host = f", host {ms_text(stats.host_ms)}/call" if stats.host_ms is not None else ""
    return (f"{ms_text(stats.median_ms)}  (p10 {ms_text(stats.p10_ms)}, p90 {ms_text(stats.p90_ms)}, "
            f"n={stats.n}, ±{100 * stats.rel_ci:.2f}%{host})")


def _evidence(evidence: dict) -> str:
    """The measured facts behind a rejection, one `key=value` each; nested checks flattened."""
    parts = []
    for key, value in evidence.items():
        if isinstance(value, dict) and key != "findings":
            parts.extend(f"{key}.{k}={_value(v)}" for k, v in value.items())
        elif key != "findings":
            parts.append(f"{key}={_value(value)}")
    return "  ".join(parts)


def _value(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def print_evaluation(e: Evaluation, console=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    colour = _COLOURS.get(e.verdict, "red")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    verdict = f"[{colour}]{e.verdict}[/{colour}]" + (f"  ({e.reason})" if e.reason else "")
    table.add_row("verdict", verdict)
    if e.message:
        table.add_row("reason", e.message)
    table.add_row("task", f"{e.task}  [dim]{e.task_hash[:12]}[/dim]")
    table.add_row("candidate", f"{e.format} format  [dim]{e.candidate_hash[:12]}[/dim]")
    table.add_row("device", f"{e.device_name} ({e.node or e.device}), torch {e.torch_version}")
    if e.build_s is not None:
        table.add_row("build", f"{e.build_s:.2f} s")
    if e.correctness:
        c = e.correctness
        table.add_row("correctness", f"{c.passed}/{c.trials} trials passed; worst rel L2 {c.rel_l2:.2e}, "
                      f"max abs {c.max_abs:.2e} ({c.where})")
    if e.shapes:
        table.add_row("shapes", shapes_text(e))
    if e.policy:
        table.add_row("policy", e.policy)
    if e.confinement:  # what held the candidate's process; loud where a part of it ran unconfined
        text = escape(e.confinement.summary())
        table.add_row("sandbox", f"[yellow]{text}[/yellow]" if e.confinement.unconfined else f"[dim]{text}[/dim]")
    if e.verdict == "rejected" and e.evidence:
        table.add_row("evidence", _evidence(e.evidence))
    if e.candidate:
        table.add_row("candidate time", _time(e.candidate))
        table.add_row("eager time", _time(e.eager))
        table.add_row("compile time", _time(e.compiled))
        table.add_row("speedup", f"[bold]{speedup_text(e.speedup_eager, e.speedup_eager_ci)}[/bold] vs eager, "
                      f"[bold]{speedup_text(e.speedup_compile, e.speedup_compile_ci)}[/bold] vs torch.compile")
    if e.loop:  # what a loop of calls gets, host work included
        table.add_row("in a loop", loop_text(e.loop))
    if e.graph:  # what a model's CUDA graph gets: no launch gaps
        table.add_row("in a CUDA graph", graph_text(e.graph))
    if e.resources:
        table.add_row("compiler", "; ".join(resource_text(r) for r in e.resources[:4]))
    for warning in e.warnings:
        table.add_row("[yellow]warning[/yellow]", warning)
    for note in e.notes:
        table.add_row("note", f"[dim]{note}[/dim]")
    console.print(table)
    if e.excerpt:
        from rich.text import Text

        console.print(Text(e.excerpt, style="dim"))


def shapes_text(e: Evaluation) -> str:
    """'general: float32[64, 1024], float32[61, 1024]' or 'specialized: ..., refused ...'."""
    s = e.shapes
    if s is None:
        return ""
    kind = "specialized" if s.specialized else "general" if s.mode == "general" else "task's shapes only (--shapes exact)"
    text = f"{kind}: correct on {' | '.join(s.supported) or 'the task shapes'}"
    if s.refused:
        text += "; refused " + " | ".join(s.refused)
    return text + "".join(f"; [dim]{n}[/dim]" for n in s.notes)


def resource_text(r) -> str:
    if r.compiler == "driver":
        spills = "spills not reported (no ptxas log)"
    elif r.spill_stores or r.spill_loads:
        spills = f"[red]spills {r.spill_stores}/{r.spill_loads} B st/ld[/red]"
    else:
        spills = "no spills"
    return f"{r.name}: {r.registers} registers, {spills}, {r.stack_bytes} B stack, {r.shared_bytes} B static smem"


def print_profile(p, console=None) -> None:
    """A Profile as tables: speed of light, per-kernel times of both sides, compiler resources,
    Nsight Compute metrics; then the block the search's prompts show."""
    from rich.console import Console
    from rich.table import Table

    from kernelevo.agent.profile_block import profile_block

    console = console or Console()
    if p.sol:
        s = p.sol
        cand = f"{s.candidate_pct:.0f}%" if s.candidate_pct is not None else "-"
        ref = f"{s.reference_pct:.0f}%" if s.reference_pct is not None else "-"
        console.print(f"[bold]speed of light[/bold] {s.bound_ms:.4g} ms per forward, {s.bound}-bound: "
                      f"{s.flops / 1e9:.3g} GFLOP ({s.dtype}) at {s.peak_flops / 1e12:.3g} TFLOP/s, "
                      f"{s.bytes / 1e6:.4g} MB at {s.peak_bytes / 1e9:.4g} GB/s; candidate [bold]{cand}[/bold], "
                      f"eager {ref}  [dim]({s.calibration})[/dim]")
        if s.fewer_flops:
            console.print(f"  the candidate does fewer FLOPs than the reference: its % is of the memory floor, "
                          f"{s.memory_ms:.4g} ms")
    gpu = p.backend == "cuda"
    times = Table(title=f"time per forward on {p.device_name} (torch profiler, after a cache flush; "
                  "* the candidate's own)", title_justify="left")
    columns = ["side", "kernel" if gpu else "operator", "n", "ms", "share"] + (["regs", "smem", "occ."] if gpu else [])
    for column in columns:
        times.add_column(column, justify="left" if column in columns[:2] else "right", overflow="fold")
    for side, kernels in (("cand", p.candidate), ("eager", p.reference)):
        for k in kernels[:8]:
            row = [side, ("* " if k.own else "") + k.name, f"{k.launches:g}", f"{k.ms:.4f}", f"{100 * k.share:.0f}%"]
            times.add_row(*row, *([_maybe(k.registers), _maybe(k.shared_bytes), _maybe(k.occupancy, "%")]
                                  if gpu else []))
    console.print(times)
    if p.resources:
        console.print("[bold]compiler[/bold] " + "; ".join(resource_text(r) for r in p.resources))
    for k in p.ncu[:4]:
        stalls = ", ".join(f"{reason} {100 * share:.0f}%" for reason, share in k.stalls)
        console.print(f"[bold]ncu[/bold] {k.name}: {k.duration_us:.1f} us, occupancy {k.occupancy:.0f}%, "
                      f"DRAM {k.dram:.0f}%, L2 {k.l2:.0f}%, SM {k.sm:.0f}% of peak, {k.registers} registers; "
                      f"stalls: {stalls}")
    for note in p.notes:
        console.print(f"[dim]note: {note}[/dim]")
    block = profile_block(p)
    if block:
        from rich.text import Text

        console.print("[bold]as the search's prompts show it[/bold]")
        console.print(Text(block, style="dim"))
    console.print(f"[dim]profiling held the device {p.cost_s:.2f} s[/dim]")


def _maybe(value, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}"


def print_models(rows: list[dict]) -> None:
    """The model table: one line per model or alias, prices in USD per million tokens."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="USD per million tokens (-: unknown; such calls record an unknown cost)")
    table.add_column("model", no_wrap=True)
    for name in ("alias", "input", "cache read", "cache write", "output", "context", "edits"):
        table.add_column(name, justify="left" if name in ("alias", "edits") else "right")

    def price(value):
        return "-" if value is None else f"{value:g}"

    def tokens(value):
        return "-" if not value else f"{value / 1e6:g}M" if value >= 1e6 else f"{value // 1000}k"

    for r in rows:
        table.add_row(r["spec"], r["alias"], price(r["input"]), price(r["cached_input"]), price(r["cache_write"]),
                      price(r["output"]), tokens(r["context"]), r["edit_format"])
    Console().print(table)


# -- archive rows as a table (kernelevo archive ls) ---------------------------------------------

_HEADERS = {"operator": "op", "generation": "gen", "island": "isl", "format": "fmt", "speedup_eager": "eager",
            "speedup_compile": "compile", "candidate_ms": "ms", "stepping_stone": "stone", "best_speedup": "best",
            "best_kernel": "best id", "evaluations": "evals", "cost_usd": "USD", "specialized": "spec"}
# The columns a narrow terminal loses first, least needed first.
_DROP_ORDER = ("island", "format", "specialized", "stepping_stone", "best_kernel", "finished", "evaluations", "speedup_compile",
               "candidate_ms", "generation", "source_hash", "reason", "run", "model", "started", "kernels")
_NUMERIC = {"id", "generation", "island", "speedup_eager", "speedup_compile", "candidate_ms", "kernels",
            "evaluations", "ok", "best_speedup", "best_kernel", "cost_usd", "runs"}


def print_rows(rows: list[dict], fields: Sequence[str]) -> None:
    """Archive rows as a table on stdout; on a narrow terminal the least needed columns go (named on stderr)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    cells = [{f: _cell(f, row.get(f), row) for f in fields} for row in rows]
    shown = _fit(fields, cells, console.width)
    if len(shown) < len(fields):
        left_out = ", ".join(f for f in fields if f not in shown)
        Console(stderr=True).print(f"left out {left_out} to fit {console.width} columns; --json and --csv give "
                                   "every field", markup=False, highlight=False)
    table = Table(header_style="bold")
    for field in shown:
        table.add_column(_HEADERS.get(field, field), justify="right" if field in _NUMERIC else "left",
                         no_wrap=field in ("id", "run", "speedup_eager", "speedup_compile", "best_speedup"),
                         overflow="fold")  # a speedup and its interval stay on one line
    for row in cells:
        table.add_row(*(row[f] for f in shown))
    console.print(table)


def _fit(fields: Sequence[str], cells: list[dict], width: int) -> list[str]:
    """The fields whose columns fit `width`, dropping by _DROP_ORDER: rich would fold every column instead."""
    widths = {f: max([len(_HEADERS.get(f, f)), *(row[f].cell_len for row in cells)]) for f in fields}
    shown = list(fields)
    for field in _DROP_ORDER:
        if sum(widths[f] + 3 for f in shown) + 1 <= width:  # 3: a border and two spaces of padding
            break
        if field in shown:
            shown.remove(field)
    return shown


def _cell(field: str, value: Any, row: dict | None = None):
    from rich.text import Text

    if value is None:
        return Text("-", style="dim")
    if field in ("speedup_eager", "speedup_compile", "best_speedup"):
        return Text(speedup_text(value, (row or {}).get(f"{field}_ci")))  # with its interval, where the row has one
    if field == "verdict":
        return Text(value, style=_COLOURS.get(value, "red"))
    if field in ("started", "finished"):
        return Text(value[:16])  # to the minute: the seconds are in --json and --csv
    if field == "candidate_ms":
        return Text(f"{value:.4g}")
    if field == "cost_usd":
        return Text(f"{value:.2f}")
    if field == "specialized":  # stored as 0/1: 1 refuses shapes the reference handles
        return Text("yes" if value else "", style="yellow")
    if isinstance(value, bool):
        return Text("yes" if value else "")
    if isinstance(value, (list, tuple)):
        return Text(", ".join(map(str, value)))
    return Text(str(value))  # Text, not markup: stored strings may hold [brackets]
