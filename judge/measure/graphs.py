"""What a function costs inside a CUDA graph: the device time a model captured whole pays for it.

The judge's main timer (timing.py) brackets each call with events, so it sees the time between a
function's own launches: a part written as five kernels pays four gaps that one fused kernel does not.
A model's CUDA graph (torch.compile's reduce-overhead, or the user's own capture) replays its kernels
back to back, and those gaps are gone. Measured on an H200 (2026-11-29): a bf16 MLP block's kernel read
1.16x torch.compile by events, and made the model 1.025x (0.998-1.042) under reduce-overhead, its GEMMs
slower than cuBLAS's; the events had counted the compiled block's launch gaps.

Method: each function is captured once in a torch.cuda.CUDAGraph on static copies of the first input
set, after warm-up calls on a side stream. A call copies its input set into the static tensors and
replays the graph; timing.measure times these calls as it times any (L2 flush, head start, events,
alternating order), so both sides pay the same copy. A replay that does not compute (a candidate
whose capture records no work, its answer kept from the warm-up) is caught by comparing its output on
another input set with the same function called plainly: the figure is then withheld, with the reason.
"""
from __future__ import annotations

from typing import Any, Callable

WARM = 3  # calls on a side stream before capture: lazy initialisation (cuBLAS workspaces, autotuning) done
AGREE_RTOL = AGREE_ATOL = 1e-2  # a replay against the plain call of the same function: loose, only to catch no work


class NotCaptured(Exception):
    """The function cannot be captured, or its replay does not compute what its call does."""


def capture(fn: Callable[[list], Any], example: list) -> Callable[[list], Any]:
    """`fn` as a replay: a function of an input set that copies it into the captured tensors and replays."""
    import torch

    static = [t.clone() if isinstance(t, torch.Tensor) else t for t in example]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        with torch.cuda.stream(side):
            for _ in range(WARM):
                fn(static)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out = fn(static)
        except Exception as exc:  # noqa: BLE001 - any failure of capture is the reason given
            torch.cuda.synchronize()
            raise NotCaptured(f"cannot be captured in a CUDA graph ({type(exc).__name__}: "
                              f"{(str(exc).splitlines() or [''])[0][:160]})") from exc

    def replay(inputs: list) -> Any:
        for mine, given in zip(static, inputs):
            if isinstance(mine, torch.Tensor):
                mine.copy_(given)
        graph.replay()
        return out

    replay.graph = graph  # kept alive with the replay
    return replay


def check_replay(replay: Callable[[list], Any], fn: Callable[[list], Any], inputs: list) -> None:
    """Raise NotCaptured where the replay's output on `inputs` is not what a plain call gives."""
    import torch

    from kernelevo.judge.trials import compare

    with torch.no_grad():
        got = [t.float().clone() for t in compare.flatten(replay(inputs)) if isinstance(t, torch.Tensor)]
        want = [t.float() for t in compare.flatten(fn(inputs)) if isinstance(t, torch.Tensor)]
    if len(got) != len(want) or any(g.shape != w.shape or not torch.allclose(g, w, rtol=AGREE_RTOL, atol=AGREE_ATOL)
                                    for g, w in zip(got, want)):
        raise NotCaptured("its CUDA graph's replay on new inputs gives another output than its call: the capture "
                          "did not record all of its work")


def figures(fns: dict[str, Callable[[list], Any]], sets: list[list], device: str, config,
            ratios: tuple[tuple[str, str], ...]) -> dict:
    """Each function's replay timed (timing.measure), as {"ms": {name: median}, "a/b": [median, low, high]
    for each ratio}; or {"why": ...} where a function cannot be captured or its replay does not compute."""
    from kernelevo.judge.measure import timing

    replays = {}
    for name, fn in fns.items():
        try:
            replays[name] = capture(fn, sets[0])
            check_replay(replays[name], fn, sets[-1])
        except NotCaptured as exc:
            return {"why": f"{name}: {exc}"}
    measured = timing.measure(replays, sets, device, config, ratios=ratios)
    out: dict[str, Any] = {"ms": {name: s.median_ms for name, s in measured.stats.items()}}
    for a, b in ratios:
        point, ci = measured.speedup(a, b)
        out[f"{a}/{b}"] = [point, *ci]
    return out
