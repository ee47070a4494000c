"""Static anti-cheat checks: read a candidate's source (never run it) for the obvious ways to fool
the judge. Each check is a small function in `CHECKS`, registered under its stable reason id; the
dynamic checks (trials/guards.py, correctness, the kernel policy) catch what reading cannot. A finding
rejects the candidate unrun, so a pattern is a finding only where it can never be honest; where it is
merely suspicious (a half type, a try around the build, state on self), the dynamic checks decide.
The reasons in SUSPICIONS are of that second kind: a lookup keyed by tensor identity, or data kept from
forward for a later call, is also how honest CUDA-graph caches work (a graph keyed by placement holds
its static output, as make_graphed_callables does). Their findings reject nothing: they go with the
candidate to the trials, where the second trial rewrites the first one's inputs in place, without
moving their version counters, and a stale answer is `input_cache` with that evidence.

The package: context.py (the tree read once, names resolved, the helpers every check shares) and
cuda.py (kernel source in string literals) below one module per family of checks: streams.py (work
the timer cannot see end), patching.py (changes to what the judge runs), borrowing.py (outputs the
kernels did not compute), reach.py (files, environment, interpreter), state.py (results kept across
calls, constructor arguments).
"""
from __future__ import annotations

from collections.abc import Callable

from . import borrowing, patching, reach, state, streams
from .context import Context, Finding, build_context

__all__ = ["CHECKS", "SUSPICIONS", "Context", "Finding", "check"]

# The registry, in reporting order: each reason id with the function that finds it.
CHECKS: dict[str, Callable[[Context], list[Finding]]] = {
    "side_stream": streams.side_stream,
    "threads": streams.threads,
    "monkeypatch": patching.monkeypatch,
    "rng_control": patching.rng_control,
    "reference_fallback": borrowing.reference_fallback,
    "reference_model": borrowing.reference_model,
    "tensor_subclass": borrowing.tensor_subclass,
    "precision_downgrade": patching.precision_downgrade,
    # what the code reaches beyond its inputs, then state kept across calls and the constructor
    "io_access": reach.io_access,
    "introspection": reach.introspection,
    "input_cache": state.input_cache,
    "init_args": state.init_args,
}
# Reasons whose findings could be honest: handed to the dynamic checks instead of rejecting.
SUSPICIONS = frozenset({"input_cache"})
# On a line both flag, the more specific reason wins (a TF32 flag is also an assignment into torch).
_SUPERSEDED_BY = {"monkeypatch": ("precision_downgrade", "io_access")}



def check(source: str, *, task_source: str | None = None) -> list[Finding]:
    """All findings, in registry order then line order. A source that does not parse returns [] (the
    judge reports syntax errors itself). No check depends on the task's dtype: its tolerance judges
    lower-precision compute."""
    try:
        ctx = build_context(source, task_source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found = {reason: fn(ctx) for reason, fn in CHECKS.items()}
    for reason, specific in _SUPERSEDED_BY.items():
        taken = {f.line for s in specific for f in found[s]}
        found[reason] = [f for f in found[reason] if f.line not in taken]
    return [f for fs in found.values() for f in fs]
