"""Times confirmed from outside the candidate's process: the checker's clock on a block of its calls.

The worker times the candidate (measure/timing.py) with events or a host clock in its own process,
where native code can patch the clock (cudaEventElapsedTime, clock_gettime) or slow the eager
reference it is timed beside. So the checker, after the trials, has the worker queue a block of
calls behind a gate (trials/gate.py): each call on a set of inputs the checker writes only once the
block is queued, each output copied where the checker says. The checker opens the gate and reads
its own clock until the block's last act shows; it then checks every call's output (a skipped call
is a wrong output), and times, the same way in its own process, the reference on the same inputs
and a block of the copies alone. `judge` sets the worker's figures against these.

What this cannot see: a worker that starts the block before its gate opens gains at most the time
the checker takes to write the inputs, since no input exists before. The done word's value is in the
worker's message, so native code there can write it from the host before the calls end, and finish them
before `clock_end` is answered: so the outputs are copied the moment the word shows (an honest block's
are complete by then, in stream order), and compared as they were then. Where the gate could not hold
the block (the candidate waits for the device inside its call: a synchronise, a `.item()`), the
checker opens it after FORCE_S and the block's time includes the host's: a bound, not a measure.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from kernelevo.judge.job_result import finite
from kernelevo.judge.measure import timing
from kernelevo.judge.trials import arena, compare, gate, handback, inputs
from kernelevo.judge.trials.correctness import _place_all, sync
from kernelevo.judge.trials.reference import forward

CALLS = 8  # per block: several calls, each on its own inputs, so that the gate's latency is noise
BUDGET = {"cuda": 1 << 30, "cpu": 1 << 27}  # bytes of inputs and outputs one block may take
FORCE_S = 0.5  # the gate opens by itself after this: a block that cannot be queued whole
WAIT_S = 60.0  # for the block's done flag once the gate is open
NAP_S = 0.0002  # between the checker's looks at the flag, on the CPU
# What a block can say of one call, on a GPU. Measured on an H100 (2026-11-28, 34 honest verdicts,
# benchmarks/results/clock_survey-H100-2026-11-28.json): a call in the worker's block took 1.00 to
# 2.56 times its timed figure, 0 to 52 us more (not the shared memory, not the copies: measured apart;
# the device's clocks after idling are suspected), while the checker's own eager block matched the
# eager figure within 5 %. So a call is taken to need at least max(seen - SLACK_MS, seen / SPAN).
SLACK_MS, SPAN = 0.06, 3.0
# Part of that excess is a block's, not a call's: a block of 8 calls of an honest 5.5 us kernel read about 0.14 ms
# more than its calls (below), and three honest kernels of 0.13-0.22 ms, whose inputs filled BUDGET at one call a
# block, read 0.15 ms more than their timed figure in it (H200, 2026-11-29: refused as timing mismatches). So a
# block of fewer than CALLS calls is allowed BLOCK_SLACK_MS over its calls, SLACK_MS a call at least.
BLOCK_SLACK_MS = 0.25
# A claim beyond that bound by more than this factor is disbelieved: the honest ones stayed within 0.85
# of it, the slowed reference claimed 2.7 times it.
BEYOND = 1.25
# On the CPU a block's wall time is no measure (load and the judge's own builds moved a C kernel's calls to
# 2-3x its timed figure, 2026-11-28, 2 cores); what the kernel counts of the calling thread is (gate.main_thread_ms).
# That may exceed a timed call by placing its outputs (65 us for 128 KiB) and spinning at a pool's barriers, and
# grows under load (an honest C LSTM: 4.13 ms timed, 6.77 in the block beside another test process). So a call
# needs at least (its thread's time - slack) / THREAD_SPAN, the slack THREAD_SLACK_MS and PLACE_MS_PER_MIB of
# its outputs. A fixed 0.5 ms of slack let the C fixture whose clock is patched through in CI (a faster CPU: its
# calls' thread time near 0.7 ms); an honest single-threaded C Linear under load read its thread 0.99-1.04 times
# its timed figure (2 cores, 3 busy processes beside it, 2026-11-29).
THREAD_SLACK_MS, PLACE_MS_PER_MIB, THREAD_SPAN = 0.1, 1.0, 2.0
# The median is the figure, but preemption lengthens a sample's wall time where the kernel's count of the thread
# does not grow: under a busy suite (2 cores) the C fixture whose clock is patched claimed more than half its
# thread's time and passed. Preemption cannot shorten a sample, so the worker's fastest call is held to the same
# test with FASTEST_SPAN: a call's wall time is never less than what its own thread ran.
FASTEST_SPAN = 3.0
BLOCKS = 3  # on a GPU, at most this many blocks: until two agree within AGREE (+ AGREE_SLACK_MS a call)
AGREE, AGREE_SLACK_MS = 1.25, 0.005
# 8 calls of a microsecond kernel last tens of us, where what a block pays once is no longer noise (an honest
# 5.5 us Triton kernel read 20.9 us a call in 8, 4.1-4.4 in 228: about 0.14 ms a block, H200 2026-11-29). So a
# shorter GPU block is followed by a longer one: at 1 ms, a 1 us kernel's block reads about 3.5 us a call,
# within the bound (SPAN times BEYOND is 3.75). Measured again (H200, 2026-11-29, session 16): ok_triton's
# 8-call blocks read 16-18 us a call and were refused; with longer blocks, 96 calls read 5.0-5.3 us: ok.
MIN_BLOCK_MS, MAX_CALLS = 1.0, 128


def confirm(checker) -> dict:
    """The clock evidence of one candidate, or why there is none: {"confirmed", "why" | figures}.

    On a GPU, blocks are timed until two agree (at most BLOCKS), each on inputs of its own, and the fastest
    is the figure: another process's kernels (a candidate being built beside it; the device time-slices
    between contexts) can only lengthen a block, and one block of 8 calls has no median to hide that
    behind (seen on an H100: an honest softmax's block at 4.4x its timed figure, once in 34)."""
    if not gate.available():
        return {"confirmed": False, "why": "no shared memory (/dev/shm) for the checker's gate here"}
    if checker.state["stateful"]:
        return {"confirmed": False, "why": "the reference keeps state: extra calls would leave the lockstep"}
    first, blocks, calls = checker.job.trials + 100, [], CALLS
    for _ in range(BLOCKS if checker.device.startswith("cuda") else 1):
        clocked = _block(checker, first, calls)
        if "verdict" in clocked:
            return clocked
        first += clocked.get("calls", calls)
        blocks.append(clocked)
        if _agreed(blocks):
            break
        calls = _longer(clocked, calls)
    return _fastest(blocks)


def _longer(clocked: dict, calls: int) -> int:
    """How many calls the next block takes: enough for MIN_BLOCK_MS where this one was shorter."""
    if not clocked.get("confirmed") or clocked["block_ms"] >= MIN_BLOCK_MS:
        return calls
    return min(MAX_CALLS, max(calls, math.ceil(calls * MIN_BLOCK_MS / max(clocked["block_ms"], 1e-3))))


def _agreed(blocks: list[dict]) -> bool:
    """Whether the two fastest confirmed blocks of the longest length are within AGREE of each other (a short
    block, the first of a microsecond kernel, pays its fixed costs on few calls: it agrees with nothing)."""
    longest = max((b["calls"] for b in blocks if b.get("confirmed")), default=0)
    seen = sorted(b["block_ms"] / b["calls"] for b in blocks if b.get("confirmed") and b["calls"] == longest)
    return len(seen) >= 2 and seen[1] <= AGREE * seen[0] + AGREE_SLACK_MS


def _block(checker, first: int, wanted: int = CALLS) -> dict:
    """One block of `wanted` calls (fewer where BUDGET's bytes end first) on fresh inputs, drawn as trials
    `first`, `first + 1`, ..."""
    import torch

    sets = [checker._plain(first)]
    with torch.no_grad():
        refs = [checker.ref(inputs.clone_inputs(sets[0]))]  # (expected, exact, finite) each
        out_bytes = arena.nbytes(list(compare.flatten(refs[0][0])))
        per_call = arena.nbytes(sets[0]) + out_bytes + 2 * arena.ALIGN
        calls = max(1, min(wanted, BUDGET["cuda" if checker.device.startswith("cuda") else "cpu"] // max(per_call, 1)))
        sets += [checker._plain(first + i) for i in range(1, calls)]
        refs += [checker.ref(inputs.clone_inputs(s)) for s in sets[1:]]
    return _Block(checker, sets, refs, out_bytes).run()


def _fastest(blocks: list[dict]) -> dict:
    """The confirmed blocks' figures, each the fastest seen (a block of the candidate's, of the checker's
    copies, of its eager calls: each one only lengthened by what ran beside it), and every block's figure;
    where none was confirmed, the first block's reason."""
    confirmed = [b for b in blocks if b.get("confirmed")]
    if not confirmed:
        return {**blocks[0], "blocks": len(blocks)}
    best = dict(min(confirmed, key=lambda b: b["block_ms"] / b["calls"]))
    copy = min(b["copy_ms"] for b in confirmed)
    best["candidate_ms"] = round(best["block_ms"] / best["calls"] - copy, 5)
    best["eager_ms"] = round(min(b["eager_ms"] + b["copy_ms"] for b in confirmed) - copy, 5)
    best["copy_ms"] = copy
    if len(blocks) > 1:
        best["blocks"] = len(blocks)
        best["blocks_ms"] = [b.get("candidate_ms") for b in blocks]
    return best


@dataclass(frozen=True)
class _Call:
    """A call of the timed block, as a verdict names it (handback.incorrect reads these two)."""
    label: str
    kind: str = "clock"


class _Block:
    def __init__(self, checker, sets: list, refs: list, out_bytes: int):
        self.checker, self.sets, self.refs, self.out_bytes = checker, sets, refs, out_bytes
        self.device, self.calls = checker.device, len(sets)
        self.lock, self.opened, self.forced = threading.Lock(), None, False
        self.threads: dict | None = None  # on the CPU: the worker's threads' CPU time (ns) as the gate opened

    def run(self) -> dict:
        checker = self.checker
        checker._ensure(sum(arena.nbytes(s) for s in self.sets) + self.calls * (self.out_bytes + 2 * arena.ALIGN))
        region = arena.Region(checker.memory.flat)
        descs = []
        for s in self.sets:  # placed to learn where, then poisoned: no input exists before the block is queued
            descs.append([region.place(v) for v in s])
            region.used = arena._aligned(region.used)
        rooms, start = [], arena._aligned(region.used)
        for i in range(self.calls):
            rooms.append({"offset": start + i * arena._aligned(self.out_bytes + arena.ALIGN),
                          "size": arena._aligned(self.out_bytes + arena.ALIGN)})
        checker.memory.flat[:start + self.calls * rooms[0]["size"]].fill_(255)
        checker.state["places"] = None  # the trials' memory is overwritten
        sync(self.device)
        page = gate.Page()
        try:
            return self._timed(page, region, descs, rooms)
        finally:
            if self.opened is None:  # a block still queued (the checker failed midway) must not hold the worker
                page.open_gate()
            page.close()

    def _timed(self, page, region, descs: list, rooms: list) -> dict:
        checker = self.checker
        message = {"check": "clock", "sets": descs, "out": rooms, **page.message()}
        if not checker.sent_arena:
            message["arena"], checker.sent_arena = checker.memory.info(), True
        timer = threading.Timer(FORCE_S, self._open, (page, region, descs, True))
        timer.start()
        try:
            answer = checker._tell(message)
        finally:
            timer.cancel()
        page.unlink()  # both ends have it open: no other process may find it from here on
        if answer.get("unavailable"):
            self._open(page, region, descs)  # nothing waits on it; the inputs were never written
            return {"confirmed": False, "why": f"the worker could not hold a block: {str(answer['unavailable'])[:200]}"}
        opened = self._open(page, region, descs)
        if self.device.startswith("cuda"):
            shown, word = page.wait_done(WAIT_S), None
        else:  # the CPU's flag is sealed with the outputs' checksum (gate.seal): any value, read now, checked below
            shown, word = page.wait_word(WAIT_S, NAP_S) or (None, None)
        threads = None if self.threads is None else gate.threads_ns(self.checker.job.peer_pid)  # at once: before clock_end
        taken = self._snapshot(rooms, answer.get("file")) if shown is not None else None
        end = checker._tell({"check": "clock_end"})
        if shown is None:
            return {"confirmed": False, "why": f"the block's last act did not show within {WAIT_S:.0f} s"}
        wrong = self._check_outputs(end, rooms, taken)
        if wrong is not None:
            return wrong
        sealed_ms = 0.0
        if word is not None and taken is not None:
            mark = time.perf_counter()
            if word != gate.seal(page.done, gate.digest(taken.flat)):
                return {"confirmed": False, "verdict": {
                    "verdict": "rejected", "reason": "forged_report", "evidence": {"clock_word": word},
                    "message": "the checker's timed block: its done word does not seal the outputs that were there "
                               "when it showed (gate.seal): it was written before the calls ended, or not by the block"}}
            sealed_ms = (time.perf_counter() - mark) * 1e3  # the worker's thread spent about as long sealing it
        calling = gate.main_thread_ms(self.checker.job.peer_pid, self.threads, threads)
        return self._figures(rooms, (shown - opened) / 1e6, None if calling is None else max(0.0, calling - sealed_ms))

    def _figures(self, rooms: list, block_ms: float, calling: float | None) -> dict:
        """The block's figures a call, beside the checker's own blocks on the same inputs (the copies alone, and
        eager), and whether they confirm anything (`calling`: the worker's calling thread's CPU ms, where read)."""
        checker = self.checker
        watch = None if self.device.startswith("cuda") else timing.LoadWatch()
        copy_ms = self._own_block(lambda i: self.refs[i][0], rooms)
        eager_ms = self._own_block(lambda i: forward(checker.ref.model, self.sets[i]), rooms)
        load = watch.stop() if watch is not None else None
        figures = {"calls": self.calls, "block_ms": round(block_ms, 4),
                   "candidate_ms": round((block_ms - copy_ms) / self.calls, 5),
                   "eager_ms": round((eager_ms - copy_ms) / self.calls, 5), "copy_ms": round(copy_ms / self.calls, 5),
                   "device": "cuda" if self.device.startswith("cuda") else "cpu"}
        if calling is not None:
            figures["thread_ms"] = round(calling / self.calls, 5)
            figures["slack_ms"] = round(THREAD_SLACK_MS + PLACE_MS_PER_MIB * self.out_bytes / 2**20, 5)
        if copy_ms != copy_ms or eager_ms != eager_ms:  # NaN: the checker's own block could not be queued whole
            return {"confirmed": False, "why": "the checker's own block could not be queued whole", **figures}
        if not self.device.startswith("cuda") and calling is None:
            return {"confirmed": False, "why": "more than one of the worker's threads ran in the block, or their CPU "
                    "time could not be read: on the CPU only one busy thread's time is a measure", **figures}
        if load and load["loaded"]:
            figures["load"] = load  # beside the checker's own blocks: its eager figure is the worse for it
        if self.forced:
            return {"confirmed": False, "why": "the candidate's calls waited for the device while they were queued "
                    f"(the gate opened by itself after {FORCE_S:.1f} s): the block's time includes the host's", **figures}
        return {"confirmed": True, **figures}

    def _open(self, page, region, descs: list, forced: bool = False) -> int:
        """Write the block's inputs and open its gate, once (the timer's thread or this one): the checker's
        clock at the opening (ns)."""
        with self.lock:
            if self.opened is None:
                for d, values in zip(descs, self.sets):
                    for desc, value in zip(d, values):
                        if isinstance(desc, dict) and desc.get("t") == "tensor":
                            arena.rebuild(region, desc).copy_(value)
                sync(self.device)
                self.threads = None if self.device.startswith("cuda") else gate.threads_ns(self.checker.job.peer_pid)
                self.forced, self.opened = forced, page.open_gate()
            return self.opened

    def _snapshot(self, rooms: list, file) -> arena.Region | None:
        """The block's outputs as they are the moment its done word shows: a copy of the rooms (on the CPU, of
        the worker's file), read against the descriptors `clock_end` brings. None where there is no file."""
        if isinstance(self.checker.memory, arena.HostFile):
            try:
                flat = self.checker._peer_file(file).flat.clone()
            except handback.Ended:
                return None
            return arena.Region(flat)
        start, end = int(rooms[0]["offset"]), int(rooms[-1]["offset"]) + int(rooms[-1]["size"])
        flat = self.checker.memory.flat[start:end].clone()
        sync(self.device)
        return arena.Region(flat, start)

    def _check_outputs(self, end: dict, rooms: list, taken: arena.Region | None) -> dict | None:
        """Every call's output as it was when the done word showed, compared with the reference's: a call
        skipped or computed elsewhere shows, and so does a done word written before the calls ended."""
        outputs = end.get("outputs")
        if not isinstance(outputs, list) or len(outputs) != self.calls or taken is None:
            raise handback.Ended(handback.protocol("no outputs for the clock's block"))
        for i, (descs, room, (expected, exact, _)) in enumerate(zip(outputs, rooms, self.refs)):
            region = taken if isinstance(self.checker.memory, arena.HostFile) else taken.room(room)  # GPU: copied rooms
            got = handback.read(region, descs, self.device)
            result = handback.against(got, expected, exact)
            if isinstance(result, compare.Mismatch):
                label = f"the checker's timed block, call {i + 1} of {self.calls}"
                if _poisoned(got, expected):
                    return {"confirmed": False, "verdict": {
                        "verdict": "rejected", "reason": "escaped_work", "evidence": {"clock_call": i + 1},
                        "message": f"{label}: NaN where the reference has none, though every trial was right: its work "
                                   "read the inputs before the checker wrote them, so it does not wait for the stream "
                                   "it is called on (a side stream not joined to it)"}}
                if self._right_later(descs, room, end, expected, exact):
                    return {"confirmed": False, "verdict": {
                        "verdict": "rejected", "reason": "forged_report", "evidence": {"clock_call": i + 1},
                        "message": f"{label}: its output was not there when the block's done word showed, and was "
                                   "right afterwards: the word was written before the calls ended"}}
                return {"confirmed": False, "verdict": handback.incorrect(result, _Call(label), 1)}
        return None

    def _right_later(self, descs, room: dict, end: dict, expected, exact) -> bool:
        """Whether the output reads right now, after `clock_end`, where it was wrong when the word showed."""
        if isinstance(self.checker.memory, arena.HostFile):
            region = self.checker._peer_file(end.get("file"))
        else:
            region = self.checker.region.room(room)
        got = handback.read(region, descs, self.device)
        return not isinstance(handback.against(got, expected, exact), compare.Mismatch)

    def _own_block(self, make, rooms: list) -> float:
        """Milliseconds of a block of this process's own, timed as the worker's: each call's output
        copied into its room, the host's queueing kept out by the same gate (on a GPU)."""
        region = arena.Region(self.checker.memory.flat)

        def one(i: int) -> None:
            out = [t for t in compare.flatten(make(i)) if hasattr(t, "data_ptr")]
            at = int(rooms[i]["offset"])
            for t in out:
                region.tensor(at, list(t.shape), t.dtype).copy_(t)
                at += arena._aligned(t.numel() * t.element_size())

        import torch

        if not self.device.startswith("cuda"):
            return self._cpu_block(make, rooms)
        with torch.no_grad():
            for i in range(self.calls):  # the allocator then holds every block the gated pass asks for: a
                one(i)  # cudaMalloc there may wait for the device, which waits for the gate (seen: a hang)
            sync(self.device)
            page = gate.Page()
            fired: list[int] = []  # queueing stuck all the same: no hang, and no figure
            timer = threading.Timer(FORCE_S, lambda: (fired.append(1), page.open_gate()))
            try:
                block = gate.Block(page.message(), self.device)
                try:
                    block.hold()
                    timer.start()
                    for i in range(self.calls):
                        one(i)
                    block.finish()
                    timer.cancel()
                    opened = page.open_gate()
                    shown = page.wait_done(WAIT_S)
                    sync(self.device)
                finally:
                    timer.cancel()
                    block.close()
            finally:
                page.close()
        if fired or shown is None:
            return float("nan")
        return (shown - opened) / 1e6

    def _cpu_block(self, make, rooms: list) -> float:
        """The CPU's twin of the worker's block, made as the worker makes it (correctness.Side.clock): one
        pass, each output placed by the same code into a file of this process's own whose pages were touched
        first, and its checksum taken (gate.seal). A placement there costs tens of microseconds, as much as a small call: alike on both sides."""
        import torch

        size = sum(int(r["size"]) for r in rooms)
        folder = self.checker.memory.path.parent  # the checker's own folder, where its arena is
        memory = arena.HostFile(folder / f"clock-{gate.secrets.token_hex(4)}", size, create=True)
        try:
            memory.flat.fill_(0)
            whole = arena.Region(memory.flat)
            with torch.no_grad():
                start = time.perf_counter_ns()
                for i in range(self.calls):
                    _place_all(whole, list(compare.flatten(make(i))))
                gate.digest(memory.flat)  # and sealed, as the worker's block is
                return (time.perf_counter_ns() - start) / 1e6
        finally:
            memory.close()


def _poisoned(got: list, expected) -> bool:
    """Whether an output holds NaN where the reference's has none: what computing on the poisoned inputs
    (all bits set, NaN in every floating dtype) gives."""
    import torch

    for o, e in zip(got, compare.flatten(expected)):
        if (isinstance(o, torch.Tensor) and isinstance(e, torch.Tensor) and o.is_floating_point()
                and o.shape == e.shape and o.device.type != "meta"):
            if bool((torch.isnan(o) & ~torch.isnan(e.to(o.device))).any()):
                return True
    return False


def judge(result: dict, clock: dict | None) -> dict | None:
    """`timing_mismatch` where the worker's figures are beyond what the checker's clock allows; else None.
    `result`: the worker's passing result; `clock`: confirm's evidence."""
    claimed, speedup, fastest = _claimed(result)
    calling = (clock or {}).get("thread_ms")
    if claimed and calling is not None:
        # what the kernel counted of the worker's own thread: load lengthens it, but by less than THREAD_SPAN
        fastest = min(claimed, fastest or claimed)
        least = calling - clock.get("slack_ms", THREAD_SLACK_MS)
        if claimed * THREAD_SPAN < least or fastest * FASTEST_SPAN < least:
            figure = f"{claimed:.4f} ms a call" + (f" (its fastest {fastest:.4f} ms)" if fastest < claimed else "")
            return _mismatch(f"the worker's clock says the candidate takes {figure}, but the thread that made its "
                             f"calls ran {calling:.4f} ms a call in the checker's timed block of {clock['calls']} "
                             "calls (CPU time, as the kernel counts it)",
                             {"clock": clock, "claimed_ms": claimed, "fastest_ms": fastest})
    if not clock or not clock.get("confirmed"):
        return None
    seen, eager = clock["candidate_ms"], clock["eager_ms"]
    if not claimed or not speedup or seen <= 0 or eager <= 0:
        return None
    evidence = {"clock": clock, "claimed_ms": claimed, "speedup_eager": speedup}
    said = (f"the checker's clock saw {clock['calls']} calls on fresh inputs take {seen:.4f} ms each and the "
            f"reference, in the checker's own process, {eager:.4f} ms")
    if clock["device"] != "cuda":  # a CPU block's wall clock is no measure: only its busy thread's time above
        return None
    least = max(seen - max(SLACK_MS, BLOCK_SLACK_MS / clock["calls"]), seen / SPAN)
    if claimed * BEYOND < least:
        return _mismatch(f"the worker's clock says the candidate takes {claimed:.4f} ms a call, but {said}: a call "
                         f"needs at least {least:.4f} ms", evidence)
    if speedup > BEYOND * eager / least + 0.1:
        return _mismatch(f"the worker's timing puts the candidate at {speedup:.2f}x eager, but {said}: at most "
                         f"{eager / least:.2f}x (eager slowed where the candidate runs, or its time understated)", evidence)
    return None


def _claimed(result: dict) -> tuple[float | None, float | None, float | None]:
    """The worker's median time of the candidate, its speedup over eager and its fastest timed call, each where it
    reads as a positive finite number, else None: this reads the worker's JSON before JobResult does, and a forged
    type must not raise here (JobResult.of turns a passing result whose figures do not read into judge_error)."""
    timing = result.get("timing")
    role = timing.get("candidate") if isinstance(timing, dict) else None
    role = role if isinstance(role, dict) else {}
    return (_positive(role.get("median_ms")), _positive(result.get("speedup_eager")),
            _positive(role.get("min_ms")))


def _positive(figure) -> float | None:
    found = finite(figure)
    return found if found is not None and found > 0 else None


def _mismatch(message: str, evidence: dict) -> dict:
    return {"verdict": "rejected", "reason": "timing_mismatch", "message": message, "evidence": evidence}
