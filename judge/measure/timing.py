"""Timing several callables interleaved in one process, to a stated precision.

Method (GPU): each repetition flushes the L2 cache by reading a buffer twice its size, keeps
the GPU busy for a calibrated head start (longer than the host needs to enqueue the call), then
records a CUDA event, calls the function on the next of several rotated input sets, and
records a second event. The events so bracket device time only: measured on an H100, host
launch overhead otherwise leaked into 30-50 us kernels and made their medians bimodal across
processes (CV up to 15 %). Before each batch of repetitions the input sets move to new device
memory, so that one run averages over data placements. Host time per call is measured separately. Functions take turns in
alternating order (A B, B A, ...) so that drift in clocks or temperature falls on all of them
alike. Every batch of repetitions ends with a device-wide synchronize, so every stream has
finished before its events are read. A speedup is the median of per-round ratios (the two calls
of a round are adjacent in time, so the pairing cancels clock states that last longer than a
round), not a ratio of medians. Repetitions continue until the 95 % confidence interval of every
median and of every requested ratio is within `target_rel_ci` of it, or a cap is hit.

CPU: the same, with a host clock around each call, a buffer sized from the last-level cache,
and the inputs left where they are. The worker keeps its heap warm (executor.CPU_MALLOC: a call
would otherwise pay a page fault per 4 KiB of each tensor it allocates), the rest of the judge is
paused while it times (hold.py), and what other processes take of the machine is recorded
(LoadWatch).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelevo.evaluation import TimingStats
from kernelevo.judge.measure import l2


@dataclass(frozen=True)
class TimingConfig:
    target_rel_ci: float = 0.005
    min_reps: int = 30
    max_reps: int = 2000
    max_seconds: float = 1.5  # of measuring, per call of measure()
    warmup_calls: int = 3
    warmup_seconds: float = 0.05
    flush: bool = True


def interval(samples: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the median and its distribution-free 95 % confidence interval, from the
    order statistics 1.96 * sqrt(n) / 2 ranks either side of the middle (no normality assumed)."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    median = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    k = math.ceil(0.98 * math.sqrt(n))
    return median, xs[max(0, (n - 1) // 2 - k)], xs[min(n - 1, n // 2 + k)]


def summarize(samples: list[float]) -> TimingStats:
    """Median with a distribution-free 95 % interval (order statistics), p10, p90, min, mean."""
    xs = sorted(samples)
    n = len(xs)
    median, lo, hi = interval(xs)
    rel_ci = (hi - lo) / 2 / median if median > 0 else 0.0
    return TimingStats(median_ms=median, p10_ms=xs[int(0.1 * (n - 1))], p90_ms=xs[int(0.9 * (n - 1))],
                       min_ms=xs[0], mean_ms=sum(xs) / n, n=n, rel_ci=rel_ci)


@dataclass(frozen=True)
class Measurement:
    """Statistics per function and the raw samples, in round order (one per function per round);
    on the CPU, what other processes took of the machine meanwhile (LoadWatch)."""
    stats: dict[str, TimingStats]
    samples: dict[str, list[float]]
    load: dict | None = None
    l2: l2.Reset | None = None  # persisting L2 that was left set and reset before timed calls

    def ratio(self, numerator: str, denominator: str) -> tuple[float, float]:
        """Median of the per-round ratios numerator/denominator and its relative 95 % half-width."""
        return paired_ratio(self.samples[numerator], self.samples[denominator])

    def speedup(self, numerator: str, denominator: str) -> tuple[float, list[float]]:
        """Median of the per-round ratios numerator/denominator and its 95 % interval [low, high]."""
        median, lo, hi = interval(_ratios(self.samples[numerator], self.samples[denominator]))
        return median, [lo, hi]


def _ratios(numerator: list[float], denominator: list[float]) -> list[float]:
    return [a / b for a, b in zip(numerator, denominator) if b > 0]


def paired_ratio(numerator: list[float], denominator: list[float]) -> tuple[float, float]:
    s = summarize(_ratios(numerator, denominator))
    return s.median_ms, s.rel_ci


def combined(point: float, *intervals: tuple[float, float, float]) -> list[float]:
    """A 95 % interval of `point`, a product of independent factors each given as (median, low,
    high): their relative half-widths add in quadrature on a log scale, each side on its own."""
    down = math.sqrt(sum(math.log(m / lo) ** 2 for m, lo, _ in intervals if lo > 0 and m > 0))
    up = math.sqrt(sum(math.log(hi / m) ** 2 for m, _, hi in intervals if m > 0 and hi > 0))
    return [point * math.exp(-down), point * math.exp(up)]


LOADED_CORES = 0.2  # other processes busy on this many cores, on average, make a measurement "loaded"


class LoadWatch:
    """CPU time that other processes took while this one measured: the machine's busy time
    (/proc/stat, steal included: a virtual machine's neighbours) less this process's own. This
    process's judge workers are paused meanwhile (hold.py); what remains is not ours to stop."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        tick = os.sysconf("SC_CLK_TCK")
        busy = sum(fields[:3]) + sum(fields[5:8])  # user nice system, irq softirq steal
        own = os.times()
        return busy / tick, own.user + own.system, time.monotonic()

    def stop(self) -> dict | None:
        end = self._read()
        if self.start is None or end is None or end[2] <= self.start[2]:
            return None
        wall = end[2] - self.start[2]
        other = max(0.0, (end[0] - self.start[0]) - (end[1] - self.start[1])) / wall
        return {"other_cores": round(other, 2), "cores": os.cpu_count() or 1, "seconds": round(wall, 3),
                "loaded": other >= LOADED_CORES}


def load_note(load: dict | None) -> str:
    """One line for a verdict whose measurement other processes disturbed, else ''."""
    if not load or not load.get("loaded"):
        return ""
    return (f"other processes kept {load['other_cores']:.1f} of {load['cores']} cores busy while this was timed: "
            "the intervals are widened by what that share of the machine could have cost either side")


# The same kernel judged in fresh processes on an idle 2-core machine varied by up to 3.6 % between
# processes while each interval was about +-1.5 % (benchmarks/results/cpu_timing_noise-*.json): the
# order statistics see one process's noise, not where a process lands. So a CPU interval is at least
# this wide on each side, the spread that repeating the evaluation shows.
CPU_REPEAT_REL = 0.025


def reported(point: float, ci: list[float], load: dict | None, cpu: bool) -> list[float]:
    """The interval a speedup is reported with: widened for a loaded machine, and on the CPU at least
    CPU_REPEAT_REL either side of the figure."""
    low, high = widened(ci, load)
    if cpu:
        low, high = min(low, point * (1 - CPU_REPEAT_REL)), max(high, point * (1 + CPU_REPEAT_REL))
    return [low, high]


def widened(ci: list[float] | None, load: dict | None) -> list[float] | None:
    """`ci` as it must be reported when other processes loaded the machine: a steady load biases
    the calls without making them noisy (one busy core moved a kernel's speedup from 0.13x to
    0.25x with a tight interval), so the interval is stretched by the factor by which the cores
    others took could have slowed either side, cores / (cores - theirs), at most 4."""
    if not ci or not load or not load.get("loaded"):
        return ci
    free = max(load["cores"] - load["other_cores"], load["cores"] / 4)
    factor = load["cores"] / free
    return [ci[0] / factor, ci[1] * factor]


def _llc_bytes() -> int:
    """Last-level cache size of CPU 0, from sysfs; 32 MiB when it cannot be read."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1024, "M": 1024**2}.get(text[-1], 1)
        best = max(best, int(text.rstrip("KM")) * scale)
    return best or 32 * 1024**2


class Clock:
    """Events and an L2 flush on a CUDA device; a host clock and an LLC flush on the CPU."""

    def __init__(self, device, flush: bool):
        import torch

        self.cuda = torch.device(device).type == "cuda"
        if self.cuda:
            cache = torch.cuda.get_device_properties(device).L2_cache_size
        else:
            cache = _llc_bytes()
        # Flushing by reading leaves clean lines, which the timed call evicts for free. Writing
        # (zero_, as triton's do_bench does) left dirty lines whose write-back the call paid for,
        # and that depended on where the buffer sat: layernorm's speedup moved by up to 4 %
        # between buffers on an H100.
        self.buffer = torch.zeros(2 * cache // 4 + 1024, dtype=torch.int32, device=device) if flush else None
        self.sink = torch.zeros((), dtype=torch.int64 if self.cuda else torch.int32, device=device)
        self.head_start_cycles = 0
        self.cycles_per_ms = _sleep_rate() if self.cuda else 0.0
        self.l2 = l2.Guard(torch.cuda.current_stream(device).cuda_stream) if self.cuda else None

    def set_head_start(self, host_ms: float) -> None:
        """GPU spin before each timed call: twice the host's time per call, within [20 us, 5 ms]."""
        self.head_start_cycles = int(self.cycles_per_ms * min(5.0, max(0.02, 2 * host_ms)))

    def flush(self) -> None:
        if self.buffer is not None:
            import torch

            if self.cuda:
                torch.sum(self.buffer, dim=0, out=self.sink)
            else:  # a max reads every line as a sum does, but torch's integer sum on the CPU is scalar
                # code: 450 ms against 31 ms for a 600 MiB buffer (2-core Xeon VM whose LLC reads 300 MiB)
                torch.amax(self.buffer, dim=0, out=self.sink)
        if self.head_start_cycles:
            import torch

            torch.cuda._sleep(self.head_start_cycles)

    def time_batch(self, calls: list[tuple[str, Callable[[], Any]]]) -> list[tuple[str, float]]:
        import torch

        if not self.cuda:
            out = []
            for name, fn in calls:
                self.flush()
                t0 = time.perf_counter_ns()
                fn()
                out.append((name, (time.perf_counter_ns() - t0) / 1e6))
            return out
        events = []
        for name, fn in calls:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.l2.restore()  # persisting L2 left set would keep this call's data through the flush (l2.py)
            self.flush()
            start.record()
            fn()
            end.record()
            events.append((name, start, end))
        torch.cuda.synchronize()  # device-wide: every stream, not only the current one
        return [(name, start.elapsed_time(end)) for name, start, end in events]


def _sleep_rate() -> float:
    """GPU clock cycles per millisecond of torch.cuda._sleep, measured once per process."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    torch.cuda.synchronize()
    return 2_000_000 / max(start.elapsed_time(end), 1e-3)


def host_times(fns: dict[str, Callable[[list], Any]], input_sets: list[list], device, calls: int = 10
               ) -> dict[str, float]:
    """Median host milliseconds to issue one call (the device is synchronised between calls)."""
    import torch

    out = {}
    for name, fn in fns.items():
        xs = []
        for i in range(calls):
            if device_is_cuda(device):
                torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            fn(input_sets[i % len(input_sets)])
            xs.append((time.perf_counter_ns() - t0) / 1e6)
        if device_is_cuda(device):
            torch.cuda.synchronize()
        out[name] = sorted(xs)[len(xs) // 2]
    return out


def device_is_cuda(device) -> bool:
    return str(device).startswith("cuda")


def measure(fns: dict[str, Callable[[list], Any]], input_sets: list[list], device,
            config: TimingConfig = TimingConfig(), ratios: tuple[tuple[str, str], ...] = ()) -> Measurement:
    """Time each function interleaved with the others, until their medians and the paired
    `ratios` (numerator, denominator) are precise enough."""
    import torch

    clock = Clock(device, config.flush)
    names = list(fns)
    watch = None if clock.cuda else LoadWatch()
    with torch.no_grad():
        _warm_up(fns, input_sets, clock, config)
        # On the CPU the host time is the measurement itself; only a GPU needs it apart.
        host = host_times(fns, input_sets, device) if clock.cuda else dict.fromkeys(fns)
        if clock.cuda:
            clock.set_head_start(max(host.values()))
        samples: dict[str, list[float]] = {name: [] for name in names}
        started, rounds, batch, held = time.perf_counter(), 0, 4, None
        while True:
            if clock.cuda and rounds:
                input_sets, held = _relocated(input_sets, rounds // 4)  # held: the padding, until the next move
            calls = []
            for r in range(rounds, rounds + batch):
                inputs = input_sets[r % len(input_sets)]
                order = names if r % 2 == 0 else names[::-1]
                calls += [(name, _bind(fns[name], inputs)) for name in order]
            for name, ms in clock.time_batch(calls):
                samples[name].append(ms)
            rounds += batch
            stats = {name: summarize(xs) for name, xs in samples.items()}
            cis = [s.rel_ci for s in stats.values()] + [paired_ratio(samples[a], samples[b])[1] for a, b in ratios]
            precise = all(ci <= config.target_rel_ci for ci in cis)
            elapsed = time.perf_counter() - started
            if rounds >= config.max_reps or (rounds >= config.min_reps and precise) or elapsed > config.max_seconds:
                return Measurement({name: dataclasses.replace(s, host_ms=host[name]) for name, s in stats.items()},
                                   samples, watch.stop() if watch else None, clock.l2.reset() if clock.l2 else None)
            batch = min(64, max(4, rounds))


def _relocated(input_sets: list[list], step: int) -> tuple[list[list], Any]:
    """The same inputs in new device memory, behind a padding block of a size that varies by step.

    How fast a memory-bound kernel runs depends on where its data sits: on an H100 row_softmax's
    speedup moved by 2 % between placements (benchmarks/timing_spread.py). Moving the inputs
    before every batch of repetitions averages that over many placements within one run, where
    otherwise each run would measure one placement and runs would disagree.
    """
    import torch

    try:
        pad = torch.empty(((step * 37) % 96 + 1) << 20, dtype=torch.uint8, device=_device_of(input_sets))
        moved = [[a.clone() if isinstance(a, torch.Tensor) and a.is_contiguous() else a for a in s]
                 for s in input_sets]
    except torch.cuda.OutOfMemoryError:  # no room for a second copy: measure where they are
        return input_sets, None
    return moved, pad


def _device_of(input_sets: list[list]):
    for s in input_sets:
        for a in s:
            if hasattr(a, "device"):
                return a.device
    return "cuda"


def _bind(fn: Callable[[list], Any], inputs: list) -> Callable[[], Any]:
    return lambda: fn(inputs)


def _warm_up(fns, input_sets, clock: Clock, config: TimingConfig) -> None:
    """Run each function until caches, autotuners and lazy initialisation have settled."""
    import torch

    deadline = time.perf_counter() + config.warmup_seconds
    calls = 0
    while calls < config.warmup_calls or time.perf_counter() < deadline:
        for fn in fns.values():
            fn(input_sets[calls % len(input_sets)])
        if clock.cuda:
            torch.cuda.synchronize()  # so the deadline counts device time, not enqueued calls
        calls += 1
        if calls >= 1000:
            break
