"""Dynamic anti-cheat checks: what the candidate's code does while it runs, watched from inside
the worker. Static checks (judge/static/) read the source; these catch what reading cannot: patched
functions, threads that keep working after a call returns, outputs that are not real tensors,
mutated inputs, calls into the reference model, and stale values in freed memory.

A failed check raises `Rejected` with a stable reason id, one readable line and evidence.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any

from kernelevo.judge.trials.compare import flatten

# Functions whose replacement would let a candidate forge its verdict or its timings.
WATCHED = (
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.time", "time.sleep",
    "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch.cuda.synchronize", "torch.cuda.current_stream",
    "torch.cuda.Stream.synchronize", "torch.cuda._sleep", "torch.cuda.memory_snapshot",
    "torch.equal", "torch.isfinite", "torch.sum", "torch.empty", "torch.full_like",
    "torch.Tensor.clone", "torch.Tensor.double", "torch.Tensor.to", "torch.Tensor.norm",
    "torch.Tensor.abs", "torch.Tensor.__sub__", "torch.Tensor.__eq__", "torch.Tensor.all",
    "torch.Tensor.copy_", "torch.nn.Module.__call__", "torch.nn.Module._call_impl",
    "torch.profiler.profile", "json.dumps", "builtins.isinstance", "builtins.type", "builtins.len",
    "builtins.sorted", "builtins.float", "builtins.max", "builtins.min", "builtins.abs",
)
# Numerics the judge fixed before the candidate ran (TF32 off): a change lowers the reference's
# precision or the candidate's, behind the comparison's back.
FLAGS = {
    "torch.backends.cuda.matmul.allow_tf32": lambda t: t.backends.cuda.matmul.allow_tf32,
    "torch.backends.cudnn.allow_tf32": lambda t: t.backends.cudnn.allow_tf32,
    "torch.get_float32_matmul_precision()": lambda t: t.get_float32_matmul_precision(),
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
        lambda t: t.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
        lambda t: t.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
}
JUDGE_MODULES = ("kernelevo.judge.trials.compare", "kernelevo.judge.measure.timing", "kernelevo.judge.trials.inputs",
                 "kernelevo.judge.trials.guards", "kernelevo.judge.run.jobs", "kernelevo.judge.trials.correctness", "kernelevo.judge.trials.reference",
                 "kernelevo.judge.measure.crosscheck", "kernelevo.judge.trials.policy", "kernelevo.judge.run.worker",
                 "kernelevo.judge.run.launcher", "kernelevo.judge.run.bounds")


class Rejected(Exception):
    """A candidate caught cheating (or doing something the judge cannot measure honestly)."""

    def __init__(self, reason: str, message: str, evidence: dict | None = None):
        super().__init__(message)
        self.reason, self.message, self.evidence = reason, message, evidence or {}


def _resolve(dotted: str) -> Any:
    module, _, rest = dotted.partition(".")
    obj: Any = sys.modules.get(module) or __import__(module)
    for part in rest.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return obj


class Integrity:
    """Identities of the judge's own functions and of the timers it trusts, taken before any
    candidate code runs, and checked after each phase of it."""

    def __init__(self) -> None:
        import importlib

        import torch

        self.objects = {name: _resolve(name) for name in WATCHED}
        self.modules = {name: importlib.import_module(name) for name in JUDGE_MODULES}
        self.functions = {f"{m}.{k}": (mod, k, v) for m, mod in self.modules.items()
                          for k, v in vars(mod).items() if callable(v) and not k.startswith("__")}
        self.flags = {name: read(torch) for name, read in FLAGS.items()}

    def verify(self, phase: str) -> None:
        import torch

        patched = [n for n, obj in self.objects.items() if _resolve(n) is not obj]
        patched += [n for n, mod in self.modules.items() if sys.modules.get(n) is not mod]
        patched += [n for n, (mod, k, v) in self.functions.items() if vars(mod).get(k) is not v]
        if patched:
            raise Rejected("monkeypatch", f"{patched[0]} was replaced during {phase}"
                           + (f" (and {len(patched) - 1} more)" if len(patched) > 1 else "")
                           + ": the judge's timers and checks must stay as they are", {"patched": patched})
        changed = {n: [v, FLAGS[n](torch)] for n, v in self.flags.items() if FLAGS[n](torch) != v}
        if changed:
            name, (was, now) = next(iter(changed.items()))
            raise Rejected("precision_downgrade", f"{name} changed from {was!r} to {now!r} during {phase}: "
                           "compute in the task's precision", {"changed": changed})


def _task_cpu_ticks() -> dict[int, tuple[int, str]]:
    """CPU ticks (user + system) and name of every thread of this process, from /proc."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            continue  # the thread ended meanwhile
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        found[int(tid)] = (int(fields[11]) + int(fields[12]), name)
    return found


class ThreadWatch:
    """Threads the candidate leaves behind: Python threads at all, native ones still working.

    Idle thread pools (OpenMP's, torch's, the CUDA driver's) are fine; a thread that keeps
    computing after the candidate's call returned is work that escapes any clock.
    """

    def __init__(self) -> None:
        self.python = {t.ident for t in threading.enumerate()}
        self.native = set(_task_cpu_ticks())

    def verify(self, phase: str) -> None:
        new = [t for t in threading.enumerate() if t.ident not in self.python and t.is_alive()]
        if new:
            raise Rejected("threads", f"the candidate started a Python thread ({new[0].name}) during {phase}; "
                           "kernels must finish inside forward", {"threads": [t.name for t in new]})

    def verify_idle(self, settle_s: float = 0.05, window_s: float = 0.2) -> dict:
        """Raise if any thread but this one burns CPU while no candidate code is being called."""
        time.sleep(settle_s)  # let spinning pools (OpenMP waits ~ms before sleeping) go idle
        me = threading.get_native_id()
        before = _task_cpu_ticks()
        time.sleep(window_s)
        after = _task_cpu_ticks()
        ticks = os.sysconf("SC_CLK_TCK")
        busy = {tid: round((after[tid][0] - before[tid][0]) * 1000 / ticks, 1)
                for tid in after if tid in before and tid != me}
        evidence = {"threads_before": len(self.native), "threads_after": len(after), "window_ms": window_s * 1000}
        _refuse_busy(busy, window_s * 1000, {tid: name for tid, (_, name) in after.items()}, evidence, "used")
        return evidence


def watch_peer(pid: int, threads_ns, settle_s: float = 0.05, window_s: float = 0.2, most_s: float = 3.0) -> dict:
    """ThreadWatch.verify_idle's check made from another process (the checker), on the worker `pid` while it waits
    for an answer: the window is this process's clock, which the candidate's native code cannot reach (patched in
    the worker, clock_gettime made its sleeps return at once, and its own watch measured nothing). The waiting
    thread is left out: no work of the candidate's runs there while it waits. On the CPU another job's timing may
    pause the worker (measure/hold.py), so the window is made of slices in which it was not stopped, at most
    `most_s` in all. A thread's time is what it ran and waited for a CPU while runnable: four spinning threads held
    to one loaded core ran 18 ms each of 220, and wanted all of it. `threads_ns(pid, waiting=True)`: that time
    (ns) per thread (gate.threads_ns). Raises Rejected."""
    time.sleep(settle_s)  # let spinning pools go idle
    seen_ms, busy, threads, begun = 0.0, {}, 0, time.perf_counter()
    while seen_ms < window_s * 1000 and time.perf_counter() - begun < most_s:
        if _stopped(pid):
            time.sleep(SLICE_S)
            continue
        before, mark = threads_ns(pid, waiting=True), time.perf_counter()
        time.sleep(SLICE_S)
        after, took = threads_ns(pid, waiting=True), (time.perf_counter() - mark) * 1000
        if before is None or after is None:
            return {"where": "checker", "why": f"the threads of process {pid} could not be read"}
        if _stopped(pid):
            continue
        seen_ms, threads = seen_ms + took, len(after)
        for tid in after:
            if tid in before and tid != pid:
                busy[tid] = busy.get(tid, 0.0) + (after[tid] - before[tid]) / 1e6
    evidence = {"where": "checker", "threads": threads, "window_ms": round(seen_ms, 1),
                "busiest_ms": round(max(busy.values(), default=0.0), 1)}
    if seen_ms < window_s * 500:
        return {**evidence, "why": f"the worker was paused for most of {most_s:.0f} s (another job's timing)"}
    _refuse_busy({tid: round(ms, 1) for tid, ms in busy.items()}, seen_ms, {}, evidence, "ran or waited for")
    return evidence


SLICE_S = 0.02  # a slice of watch_peer's window: one in which the worker was stopped at either end is not counted


def _stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP: state T) now."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return False
    return text[text.rindex(")") + 2:][:1] in ("T", "t")


def _refuse_busy(busy: dict[int, float], window_ms: float, names: dict[int, str], evidence: dict, used: str) -> None:
    """Rejected where the threads together ran more than half the window (`busy`: CPU ms per thread id): idle, an
    honest process's threads run next to nothing, and on a loaded machine one spinning thread among several may
    get less than half a core, where several together still show."""
    working = {tid: ms for tid, ms in busy.items() if ms > 0.05 * window_ms}
    total = sum(working.values())
    if total > 0.5 * window_ms:
        tid, ms = max(working.items(), key=lambda kv: kv[1])
        named = f" ({names[tid]})" if tid in names else ""
        others = f" ({len(working)} threads together {total:.0f} ms)" if len(working) > 1 else ""
        raise Rejected("background_work", f"thread {tid}{named} {used} {ms:.0f} ms of CPU in {window_ms:.0f} ms "
                       f"after the candidate returned{others}: work escapes the clock", {**evidence, "busy_ms": working})


class ReferenceWatch:
    """Notices the reference model being called while the candidate's code runs."""

    def __init__(self, *models) -> None:
        self.active, self.calls, self.handles = False, 0, []
        for model in models:
            if model is None:
                continue
            for module in model.modules():
                self.handles.append(module.register_forward_pre_hook(self._hook))
            original = model.forward  # a direct Model.forward(...) call skips the hooks
            model.forward = self._wrap(original)
            self.handles.append(_Restore(model, "forward"))

    def _hook(self, *_):
        if self.active:
            self.calls += 1

    def _wrap(self, forward):
        def watched(*args, **kwargs):
            self._hook()
            return forward(*args, **kwargs)
        return watched

    @contextlib.contextmanager
    def candidate_running(self):
        self.active = True
        try:
            yield
        finally:
            self.active = False
        if self.calls:
            raise Rejected("reference_called", "the candidate called the reference model while it ran; "
                           "it must compute the result itself", {"calls": self.calls})

    def remove(self) -> None:
        """Hooks slow the reference's forward down, so they go before anything is timed."""
        for handle in self.handles:
            handle.remove()
        self.handles = []


class _Restore:
    def __init__(self, obj, attr: str):
        self.obj, self.attr = obj, attr

    def remove(self) -> None:
        self.obj.__dict__.pop(self.attr, None)


def check_not_reference(candidate_cls, candidate, reference_cls) -> None:
    """ModelNew must not be, contain or inherit from the reference Model."""
    if isinstance(candidate_cls, type) and issubclass(candidate_cls, reference_cls):
        raise Rejected("reference_model", "ModelNew subclasses the reference Model; write its forward yourself")
    for name, module in candidate.named_modules():
        if isinstance(module, reference_cls) or getattr(type(module), "forward", None) is reference_cls.forward:
            raise Rejected("reference_model", f"ModelNew holds an instance of the reference Model ({name or 'self'})")


def poison_free_memory(device: str, sizes: list[int]) -> None:
    """Fill memory a candidate could receive uninitialised with NaN bits (0xFF bytes), so that an
    output it never writes cannot inherit a previous result and shows as unwritten.

    `sizes` (bytes: the inputs', the last outputs') are allocated, filled and freed first, so that
    even a first call finds poisoned blocks of the likely output sizes in the allocator's pool
    rather than fresh memory (which the driver hands out zeroed). On a GPU every other block the
    caching allocator holds free is then taken and filled too, twice, so that blocks split by the
    first pass are covered. On the CPU the heap is not inspectable; blocks of `sizes` are what
    malloc would reuse.
    """
    import torch

    try:
        held = [torch.empty(n, dtype=torch.uint8, device=device).fill_(255) for n in set(sizes) for _ in range(2)]
    except torch.OutOfMemoryError:  # no room for spares: what the allocator holds free is still covered
        held = []
    if device.startswith("cuda"):
        del held
        for _ in range(2):
            free = [b["size"] for seg in torch.cuda.memory_snapshot() for b in seg["blocks"]
                    if b["state"] == "inactive"]
            held = [torch.empty(n, dtype=torch.uint8, device=device).fill_(255) for n in free]
        torch.cuda.synchronize()
    del held


def _extent(t) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _overlaps(a, b) -> bool:
    (a0, a1), (b0, b1) = _extent(a), _extent(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0


def aliased_inputs(out, args: list) -> list[int]:
    """Indices of the inputs whose storage some output shares."""
    import torch

    found = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and any(isinstance(o, torch.Tensor) and _overlaps(o, a) for o in flatten(out)):
            found.append(i)
    return found


def check_outputs(out, expected, args: list, reference_aliases: list[int], previous: list) -> None:
    """Outputs must be plain dense tensors with storage of their own, computed by this call.

    `reference_aliases` are the inputs the reference's own outputs share storage with (then the
    candidate may too); `previous` holds the candidate's outputs of its last call, still alive.
    """
    import torch

    for i, (o, e) in enumerate(zip(flatten(out), flatten(expected))):
        if e is None or not hasattr(e, "stride"):  # a tensor, or the checker's description of one
            continue
        label = f"output {i}" if isinstance(expected, (list, tuple)) else "the output"
        if not isinstance(o, torch.Tensor):
            if hasattr(o, "shape") or hasattr(o, "__torch_function__"):
                raise Rejected("lazy_output", f"{label} is a {type(o).__name__}, not a torch.Tensor: "
                               "return the computed tensor itself")
            continue  # a plain wrong type: the comparison says so
        if type(o) not in (torch.Tensor, torch.nn.Parameter):
            raise Rejected("tensor_subclass", f"{label} is a {type(o).__name__}, a tensor subclass: "
                           "return a plain torch.Tensor")
        if o.layout != torch.strided or o.is_meta or o.device.type != e.device.type:
            raise Rejected("lazy_output", f"{label} is a {o.layout} tensor on {o.device}, not dense memory "
                           f"on {e.device.type}")
        _check_dense(o, e, label)
    _check_fresh(out, expected, args, reference_aliases, previous)


def _check_dense(o, e, label: str) -> None:
    zero = [d for d, (n, s) in enumerate(zip(o.shape, o.stride())) if n > 1 and s == 0]
    ref_zero = [d for d, (n, s) in enumerate(zip(e.shape, e.stride())) if n > 1 and s == 0]
    if zero and zero != ref_zero:
        raise Rejected("output_not_dense", f"{label} is an expanded view (stride 0 along dim {zero[0]}): "
                       "it holds fewer values than its shape; write every element", {"stride": list(o.stride())})
    if o.numel():
        last = o.storage_offset() + sum((n - 1) * s for n, s in zip(o.shape, o.stride()) if n > 0)
        if (last + 1) * o.element_size() > o.untyped_storage().nbytes():
            raise Rejected("output_not_dense", f"{label} reaches past the end of its storage")


def _check_fresh(out, expected, args: list, reference_aliases: list[int], previous: list) -> None:
    import torch

    shared = [i for i in aliased_inputs(out, args) if i not in reference_aliases]
    if shared:
        raise Rejected("output_aliases_input", f"an output shares memory with input {shared[0]}, which the "
                       "reference's output does not: allocate the output", {"inputs": shared})
    for i, o in enumerate(flatten(out)):
        if isinstance(o, torch.Tensor) and any(isinstance(p, torch.Tensor) and p.numel() and _overlaps(o, p)
                                               for p in previous):
            raise Rejected("output_reused", "an output shares memory with an output of the previous call, "
                           "which the caller still holds: allocate each call's outputs afresh")


def changed_inputs(before: list, after: list) -> list[int]:
    """Indices of tensor inputs whose values differ from their copies taken before the call."""
    import torch

    return [i for i, (b, a) in enumerate(zip(before, after))
            if isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor) and not same_values(b, a)]


def same_values(a, b) -> bool:
    """Equal shape, dtype and values, NaN equal to NaN (an unwritten poisoned element included)."""
    return (a.shape == b.shape and a.dtype == b.dtype
            and bool(((a == b) | ((a != a) & (b != b))).all()))  # noqa: PLR0124 - x != x is the NaN test
