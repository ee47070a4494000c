"""Static checks of work the timer cannot see end: a stream the caller's stream never waits
for (`side_stream`), threads or processes that run on after forward returns (`threads`)."""
from __future__ import annotations

from . import cuda as cu
from .context import Context, Finding, _attr_call, _findings, _in_strings, _refs


def side_stream(ctx: Context) -> list[Finding]:
    # Work on a stream the current stream never waits for runs on after the timer's end event.
    hits = []
    if not any(_attr_call(c, ("wait_stream", "wait_event", "synchronize")) for c in ctx.nodes):
        hits += [(line, f"{name} creates or selects a stream or event that is never joined to the current stream",
                  "launch on torch.cuda.current_stream(), or join with current_stream().wait_stream(s)")
                 for line, name in _refs(ctx, r"torch\.(cuda\.)?(Stream|stream|Event|ExternalStream|set_stream|"
                                              r"StreamContext|streams\.\w+)", outer=True)]
    if not cu.find(ctx.literals, ctx.lines, cu.STREAM_JOIN):
        hits += _in_strings(ctx, cu.SIDE_STREAM, "queues work the caller's stream never waits for",
                            "launch on at::cuda::getCurrentCUDAStream(), or cudaStreamSynchronize before returning")
    return _findings("side_stream", hits)


def threads(ctx: Context) -> list[Finding]:
    # A thread or process can keep computing after forward returns, outside the timed window.
    todo = "do all the work inside forward's kernel calls (OpenMP pragmas in C are fine: they join)"
    hits = [(line, f"{name} starts threads or processes", todo) for line, name in _refs(
        ctx, r"(threading|_thread|multiprocessing|torch\.multiprocessing|concurrent|subprocess|asyncio|pty)(\..*)?"
             r"|os\.(fork\w*|system|popen|spawn\w*|exec\w*|posix_spawn\w*)")]
    return _findings("threads", hits + _in_strings(ctx, cu.THREADS, "starts a thread or process", todo))
