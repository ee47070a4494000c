"""What `kernelevo split` prints: each written part with its share of the model's time and its call
sites, then why other modules were opened into their children or left out."""
from __future__ import annotations

from pathlib import Path


def print_split(data: dict, out: Path) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    table = Table(title=f"{Path(data['model']).name} on {data['device']} ({data['device_name']}): "
                        f"{data['model_ms']:.3f} ms a forward")
    ranked = data.get("ranked_by") == "headroom_ms"  # each part also timed compiled, against its bound
    described = [] if ranked else [("class", "left"), ("inputs", "left")]  # ranked: the figures need the width
    columns = [("task", "left"), *described, ("share", "right"), ("ms", "right")]
    columns += [("compiled", "right"), ("bound", "right"), ("headroom", "right")] if ranked else []
    for name, justify in [*columns, ("call sites", "left")]:
        table.add_column(name, justify=justify, no_wrap=name in ("task", "share"))
    for t in data["tasks"]:
        sites = [s["path"] or "the model" for s in t["call_sites"]]
        shown = ", ".join(sites[:3]) + (f" … ({len(sites)})" if len(sites) > 3 else "")
        share = "-" if t["share"] is None else f"{100 * t['share']:.1f} %"
        extra = [_ms(t.get("ms_compiled")), _ms(t.get("sol_ms")),
                 "left to the compiler" if t.get("left_to_compiler") else _ms(t.get("headroom_ms"))] if ranked else []
        kind = f"{t['class']} (its own forward)" if "region" in t else t["class"]  # a region of it (region.py)
        about = [] if ranked else [kind, escape(", ".join(t["inputs"]))]
        table.add_row(t["task"], *about, share, f"{t['ms']:.3f}", *extra, shown)
    console.print(table)
    if ranked:
        console.print("ranked by headroom (ms): the part's time under torch.compile (compiled) less its speed of light "
                      "(bound), what a kernel can still win; within 1.2x of moving its bytes once, a part is left to the "
                      "compiler")
    covered = sum(t["share"] or 0.0 for t in data["tasks"])
    console.print(f"{len(data['tasks'])} parts, {100 * covered:.1f} % of the model's time (times with a wait "
                  f"around every module: they rank parts); a suite in {out}: kernelevo bench {out}")
    for t in data["tasks"]:
        if t.get("left_out"):
            console.print(f"{t['task']} returns what the model uses; left out of the comparison: "
                          f"{escape(', '.join(t['left_out']))}")
    for note in data["notes"]:
        console.print(f"[dim]{escape(note)}[/dim]")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_assembly(data: dict) -> None:
    """The model in its user's loop in each mode and the headline, the device-time figures beside them,
    then each part: share, its own speedup, its effect in place, in place or why not."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from kernelevo.text import speedup_text

    console = Console()
    console.print(f"{Path(data['model']).name}: {data['verdict']} {escape(data['message'])}")
    if data.get("modes"):
        console.print(_modes_table(data))
    if data.get("speedup"):
        point, low, high = data["speedup"]
        console.print(f"[bold]the model with its kernels, {speedup_text(point, [low, high])} the original in its "
                      f"best mode ({data['original_best_mode']})[/bold], run as kernelevo_compile(model) "
                      f"({data['chosen_mode']}); host included, interleaved in one process")
    if run := data.get("verified_as_run"):
        console.print(f"verified as kernelevo_compile(model) runs it ({run['mode']}): {run['trials']} trials, "
                      f"{len(run['shapes'])} shapes" + (f", {len(run['refused'])} refused" if run["refused"] else ""))
    if data.get("nothing_placed"):
        console.print(f"[bold]{escape(data['nothing_placed'])}[/bold]")
    eager = speedup_text(data["speedup_eager"], data["speedup_eager_ci"])
    compiled = speedup_text(data["speedup_compile"], data["speedup_compile_ci"]) \
        if data["speedup_compile"] is not None else "-"
    console.print(f"by device time only (the judge's clock, eager file): {eager} against eager, {compiled} against "
                  f"torch.compile (Amdahl bound of the parts in place: {data['amdahl_bound'] or '-'}x; "
                  f"estimate from the parts alone: {data['estimate_from_parts'] or '-'}x)")
    table = Table()
    for name, justify in (("part", "left"), ("sites", "right"), ("share", "right"), ("alone vs compile", "right"),
                          ("alone vs eager", "right"), ("in a CUDA graph vs compile", "right"), ("in place", "right"),
                          ("placed", "left")):
        table.add_column(name, justify=justify)
    for p in data["parts"]:
        effect = p.get("in_place_effect")
        table.add_row(p["task"], str(p["sites"]), f"{100 * p['share']:.1f} %",
                      speedup_text(p["speedup_alone_compile"], p["speedup_alone_compile_ci"])
                      if p.get("speedup_alone_compile") is not None else "-",
                      speedup_text(p["speedup_alone"], p["speedup_alone_ci"]), _graph_cell(p),
                      speedup_text(effect[0], effect[1:]) if effect else "-",
                      "yes" if p["in_place"] else escape(p["reverted"]))
    for p in data["left_as_they_were"]:
        share = "-" if p["share"] is None else f"{100 * p['share']:.1f} %"
        table.add_row(Path(p["task"]).stem, "", share, "-", "-", "-", "-", escape(p["why"]))
    console.print(table)
    console.print(f"written: {data['file']}" + (f"; report: {data['report']}" if data.get("report") else ""))


def _graph_cell(part: dict) -> str:
    """A part alone as a model's CUDA graph replays it, against torch.compile's replayed; why not, where measured
    nothing; '-' where its final was not measured so (the CPU)."""
    from rich.markup import escape

    from kernelevo.text import speedup_text

    if part.get("speedup_graph_compile") is not None:
        return speedup_text(part["speedup_graph_compile"], part.get("speedup_graph_compile_ci"))
    return escape(f"not measured ({part['graph_why']})") if part.get("graph_why") else "-"


def _modes_table(data: dict):
    """ms per forward in the user's loop, the original and with kernels, per compile mode."""
    from rich.table import Table

    table = Table(title="ms per forward, host included (median, 95 % interval)")
    # with no part in place, the second column is the model with the parts it tried, before they were reverted
    tried = "with kernels" if any(p["in_place"] for p in data["parts"]) else "with the parts tried"
    for name, justify in (("mode", "left"), ("original", "right"), (tried, "right"), ("", "left")):
        table.add_column(name, justify=justify)
    for mode, row in data["modes"].items():
        cells = [_interval(row["original_ms"]), _interval(row["assembled_ms"])]
        marks = [m for m, key in (("best of the original", "original_best_mode"), ("chosen", "chosen_mode"))
                 if data.get(key) == mode]
        failed = "; ".join(f"{who}: {why}" for who, why in row["errors"].items())
        table.add_row(mode, *cells, ", ".join(marks) + (f" failed ({failed})" if failed else ""))
    return table


def _interval(x: list | None) -> str:
    return "-" if x is None else f"{x[0]:.3f} ({x[1]:.3f}-{x[2]:.3f})"
