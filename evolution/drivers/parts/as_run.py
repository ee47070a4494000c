"""The assembled model judged as its user runs it: through kernelevo_compile, in the mode chosen for it.

The judge's trials call a candidate's forward. In eager a part calls its kernel directly; under torch.compile
each part is its custom op (drop_in.py: the op's wiring, the fake's shapes, `_stateless`), and under
reduce-overhead the whole forward is a CUDA graph replayed on new inputs, where a kernel's host logic ran once,
at capture. That is other code than the eager trials checked. So before a compiled mode is the assembly's
headline, the drop-in is judged again with a forward that runs `kernelevo_compile(self)`: every trial, derived
shape, timed output and fresh-values check of the judge goes through the compiled graph, the comparisons in the
judge's checker as for any candidate. Wrong (or failing) there, the mode is not the assembly's, and the next
best is tried; eager was judged already. Only the verdict is taken: the figures are the user's loop's
(judge/run/modes.py), timed on the file as delivered.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

# Appended to the drop-in for that judgement. Its outputs are copied as they come back: under reduce-overhead an
# output lives in the graph's pool until the next call overwrites it (so the user's loop uses it first, and the
# judge keeps the outputs of several calls). It compiles in its own thread (compile_threads=1): the judge
# refuses a candidate that starts threads, and a compiler's pool of them would be one. A forward that dynamo
# runs eagerly instead of compiled (a recompile limit, a skipped frame) would be eager's path again: it
# raises, so that no trial passes untested.
AS_RUN = '''


# ---- judged as it runs: the forward through kernelevo_compile (kernelevo assemble's check of the chosen mode) ----
class ModelNew(ModelNew):
    def forward(self, *args, **kwargs):
        if torch.compiler.is_compiling():
            return super().forward(*args, **kwargs)
        if self.__dict__.get("_kernelevo_inside"):
            raise RuntimeError("torch.compile ran the model's forward eagerly, not compiled (a recompile limit?)")
        run = self.__dict__.get("_kernelevo_run")
        if run is None:
            run = self.__dict__["_kernelevo_run"] = kernelevo_compile(self)
        self.__dict__["_kernelevo_inside"] = True
        try:
            with torch._inductor.config.patch(compile_threads=1):
                return _kernelevo_copied(run(*args, **kwargs))
        finally:
            self.__dict__["_kernelevo_inside"] = False


def _kernelevo_copied(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_kernelevo_copied(o) for o in out)
    if isinstance(out, dict):
        return type(out)((key, _kernelevo_copied(value)) for key, value in out.items())
    return out
'''


def as_run_text(drop_in: str) -> str:
    """The drop-in `drop_in` (its KERNELEVO_MODE the mode to judge) with a forward that runs as kernelevo_compile."""
    return drop_in + AS_RUN


def verified_as_run(loop, judged: Callable[[str], Any]) -> tuple[Any, Any]:
    """(`loop` with each compiled mode the assembly fails in as it runs moved from its samples to its errors,
    the passing evaluation of the mode now best, or None where that is eager or nothing): `judged(mode)` is the
    judge's evaluation of the as-run drop-in in `mode`."""
    while (mode := loop.best("assembled")) not in (None, "eager"):
        evaluation = judged(mode)
        if evaluation.ok:
            return loop, evaluation
        key = f"assembled@{mode}"
        why = (f"not verified as kernelevo_compile runs it in {mode}: {evaluation.verdict} ({evaluation.reason}): "
               f"{evaluation.message}")
        loop = dataclasses.replace(loop, samples={k: v for k, v in loop.samples.items() if k != key},
                                   errors={**loop.errors, key: why})
    return loop, None
