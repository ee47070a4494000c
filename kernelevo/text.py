"""How a figure reads as text, the same in every room: a speedup with its interval, a time in ms or
µs, a share as a percentage, the host-inclusive loop timing in one line. Plain strings, no rich:
the library's reports, prompts and notes use them as the terminal does, so they live on the ground."""
from __future__ import annotations

from collections.abc import Sequence

from kernelevo.twins import GraphTiming, LoopTiming

WIDE = 0.02  # an interval narrower than 2 % of its speedup adds digits, not information


def speedup_text(value: float | None, ci: Sequence[float | None] | None = None) -> str:
    """'1.78x', or '1.78x (1.52-2.05)' where its 95 % interval `ci` is wider than 2 % of it: the one
    way every command prints a speedup, so a figure inside the noise says so wherever it is shown."""
    if value is None:
        return "-"
    text = f"{value:.2f}x"
    if ci is not None and len(ci) == 2 and None not in ci and value > 0 and (ci[1] - ci[0]) / value > WIDE:
        text += f" ({ci[0]:.2f}-{ci[1]:.2f})"
    return text


def ms_text(value: float) -> str:
    """A time in ms as read: '12.3 µs' below a millisecond, else '1.234 ms'."""
    return f"{value * 1000:.1f} µs" if value < 1 else f"{value:.3f} ms"


def share_text(value: float | None, none: str = "-") -> str:
    """A share (0..1) as a whole percentage, '42%'; `none` where there is no figure."""
    return none if value is None else f"{100 * value:.0f}%"


def loop_text(loop: LoopTiming) -> str:
    """The host-inclusive twin in one line: per call back to back, its speedups, the host's share."""
    compiled = f", torch.compile {ms_text(loop.compiled_ms)}" if loop.compiled_ms is not None else ""
    against = f", {speedup_text(loop.speedup_compile, loop.speedup_compile_ci)} vs torch.compile" \
        if loop.speedup_compile is not None else ""
    host = f"; host work {100 * loop.host_share:.0f} % of a call" if loop.host_share is not None else ""
    return (f"{ms_text(loop.candidate_ms)} per call back to back (eager {ms_text(loop.eager_ms)}{compiled}): "
            f"{speedup_text(loop.speedup_eager, loop.speedup_eager_ci)} vs eager{against}{host}")


def graph_text(graph: GraphTiming) -> str:
    """Each replayed in a CUDA graph, in one line: the candidate's time and its speedups; or why not measured."""
    if graph.why:
        return f"not measured: {graph.why}"
    against = f"{speedup_text(graph.speedup_compile, graph.speedup_compile_ci)} vs torch.compile " \
        f"({ms_text(graph.compiled_ms)}), " if graph.speedup_compile is not None else ""
    return (f"{ms_text(graph.candidate_ms)} a replay: {against}"
            f"{speedup_text(graph.speedup_eager, graph.speedup_eager_ci)} vs eager (as a model's graph runs it)")
