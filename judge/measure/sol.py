"""Speed of light: the least time the reference's work can take on this device.

Work: the reference's FLOPs as torch.utils.flop_counter counts them (matmuls, convolutions,
attention; elementwise math counts nothing, so for such tasks only memory bounds), and the
minimum bytes any implementation must move: every input, output, parameter and buffer once.
Peaks: measured once per device model and torch version (calibrate), cached as JSON beside the
baselines: bandwidth as the better of a large device-to-device copy (bytes read + written) and
a large sum (bytes read); compute as a large square matmul per dtype, with TF32 off for float32
as the judge's references run. The bound is max(FLOPs / peak FLOPs, bytes / peak bandwidth);
"% of speed of light" is bound / measured median time.

Measured on an H100 80GB HBM3 (torch 2.11, 2026-11-22): copy 2.86 TB/s at 1 GiB (2.70 at
256 MiB), sum 2.72 TB/s; matmul float32 51 TFLOP/s, TF32 382, float16 713, bfloat16 724.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from kernelevo.evaluation import SpeedOfLight

FEWER_FLOPS = 0.8  # under this share of the compute bound, a candidate is taken to skip arithmetic
PEAK_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64"}


def count_work(model, args: list) -> dict[str, Any]:
    """FLOPs of one forward of `model` on `args`, its minimum bytes, and its floating dtype."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        outputs = model(*args)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers())
    tensors += [t for t in _flatten(outputs) if isinstance(t, torch.Tensor)]
    seen: dict[tuple, int] = {}
    for t in tensors:  # a storage shared by two tensors is moved once
        key = (t.untyped_storage().data_ptr(), t.device.type) if t.numel() else (id(t), "empty")
        seen[key] = max(seen.get(key, 0), t.numel() * t.element_size())
    floating = [t for t in tensors if t.is_floating_point()]
    by_dtype: dict[str, int] = {}
    for t in floating:
        name = str(t.dtype).removeprefix("torch.")
        by_dtype[name] = by_dtype.get(name, 0) + t.numel() * t.element_size()
    dtype = max(by_dtype, key=by_dtype.get) if by_dtype else "float32"
    return {"flops": float(counter.get_total_flops()), "bytes": int(sum(seen.values())), "dtype": dtype}


def _flatten(value) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten(v)]
    return [value]


def bound(work: dict, peaks: dict, reference_ms: float | None, candidate_ms: float | None) -> SpeedOfLight:
    """The speed-of-light record for measured times (ms per forward) against calibrated peaks."""
    peak_flops = peaks["flops"].get(PEAK_DTYPES.get(work["dtype"], "float32")) or peaks["flops"]["float32"]
    peak_bytes = peaks["bandwidth"]
    compute_ms = 1e3 * work["flops"] / peak_flops if peak_flops else 0.0
    memory_ms = 1e3 * work["bytes"] / peak_bytes if peak_bytes else 0.0
    bound_ms = max(compute_ms, memory_ms)

    def pct(ms: float | None, of: float) -> float | None:
        return 100.0 * of / ms if ms and of else None

    # A candidate well under the compute bound changed the algorithm (diag(a) @ b as a row scaling:
    # 15x under it on an H100); the bytes it must move are then its bound.
    fewer = bool(candidate_ms and compute_ms > memory_ms and candidate_ms < FEWER_FLOPS * compute_ms)
    return SpeedOfLight(flops=work["flops"], bytes=work["bytes"], dtype=work["dtype"], peak_flops=peak_flops,
                        peak_bytes=peak_bytes, bound="compute" if compute_ms > memory_ms else "memory",
                        bound_ms=bound_ms, compute_ms=compute_ms, memory_ms=memory_ms,
                        reference_pct=pct(reference_ms, bound_ms),
                        candidate_pct=pct(candidate_ms, memory_ms if fewer else bound_ms), fewer_flops=fewer,
                        calibration=f"{peaks.get('method', '')}, measured {peaks.get('measured_at', '?')}"
                        + "".join(f"; {k}: {v}" for k, v in (peaks.get("used") or {}).items() if v != "calibrated"))


# -- calibration: once per device model and torch version --------------------------------------------

def calibration_path(cache_dir: Path, device_name: str, torch_version: str) -> Path:
    from kernelevo.runtime import slug

    return Path(cache_dir) / "calibration" / f"{slug(device_name, torch_version)}.json"


def peaks(cache_dir: Path, device: str, device_name: str, store: bool = True) -> tuple[dict, bool]:
    """(peaks, measured now?): the cached calibration for this device model, measured if missing, and
    kept for the next only with `store`: prompts show these peaks, so only a process that runs no
    candidate code (a baseline's) writes them (sandbox.OPPONENT_WRITES)."""
    import torch

    from kernelevo.runtime import write_atomic

    path = calibration_path(cache_dir, device_name, torch.__version__)
    if path.exists():
        try:
            return json.loads(path.read_text()), False
        except (OSError, ValueError):
            pass  # a broken cache file is measured again
    data = calibrate(device)
    data.update(device_name=device_name, torch=torch.__version__, measured_at=time.strftime("%Y-%m-%d %H:%M"))
    if store:
        write_atomic(path, json.dumps(data, indent=1).encode())
    return data, True


def calibrate(device: str) -> dict:
    """Measured peaks of `device`: {"bandwidth": bytes/s, "flops": {dtype: FLOP/s}, "method": ...}."""
    import torch

    cuda = device.startswith("cuda")
    free = torch.cuda.mem_get_info(device)[0] if cuda else 8 << 30
    size = int(min(1 << 30, free // 8)) if cuda else 256 << 20
    src = torch.empty(size // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    copy = 2 * src.nbytes / _seconds(lambda s=src, d=dst: d.copy_(s), device)
    read = src.nbytes / _seconds(lambda s=src: s.sum(), device)
    del src, dst
    n = 8192 if cuda else 1024
    flops = {}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # as the judge's references run
    try:
        for name in ("float32", "float16", "bfloat16", "float64") if cuda else ("float32", "float64"):
            dtype = getattr(torch, name)
            m = n // 2 if name == "float64" else n
            a = torch.randn(m, m, device=device).to(dtype)
            b = torch.randn(m, m, device=device).to(dtype)
            flops[name] = 2 * m ** 3 / _seconds(lambda a=a, b=b: a @ b, device, reps=5)
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return {"bandwidth": max(copy, read), "copy_bandwidth": copy, "read_bandwidth": read, "flops": flops,
            "method": f"copy and sum of {size >> 20} MiB, {n}x{n} matmuls, median of repeats"}


def _seconds(fn, device: str, reps: int = 10) -> float:
    """Median seconds of one call, CUDA events on a GPU, the host clock on the CPU."""
    import torch

    fn()
    times = []
    for _ in range(reps):
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


# -- the task's own peaks: the calibration raised where the task shows more ------------------------------

def task_peaks(peaks: dict, work: dict, device: str, baselines_ms: dict[str, float | None]) -> dict:
    """`peaks` raised to what this task's own figures show the device does: the bandwidth of a copy of its working
    set, flushed from the caches as a timed call is (a CPU kernel moving 2.4 MB ran under a bound from a 256 MiB
    copy), and the FLOP rate its baselines (`baselines_ms`: who -> ms per forward) reached on its work at its
    shapes (a large square matmul's rate was beaten by compiled GEMMs). "used" says where each peak came from."""
    used = {"bandwidth": "calibrated", "flops": "calibrated"}
    out = {**peaks, "flops": dict(peaks["flops"])}
    copied = _working_set_bandwidth(work["bytes"], device)
    if copied and copied > peaks["bandwidth"]:
        out["bandwidth"] = copied
        used["bandwidth"] = f"a copy of the task's working set ({work['bytes'] / 1e6:.2f} MB)"
    dtype = PEAK_DTYPES.get(work["dtype"], "float32")
    for who, ms in baselines_ms.items():
        rate = 1e3 * work["flops"] / ms if ms and work["flops"] else 0.0
        if rate > (out["flops"].get(dtype) or 0.0):
            out["flops"][dtype] = rate
            used["flops"] = f"{who}'s rate on the task's own work"
    out["used"] = used
    return out


WORKING_SET_MAX = 256 << 20  # bytes: the CPU calibration's copy; a GPU's is 1 GiB


def _working_set_bandwidth(nbytes: int, device: str, reps: int = 10) -> float:
    """Bytes per second of copying half of `nbytes` into the other half (so `nbytes` move), the caches flushed
    before each copy as the judge's clock does; 0.0 for a working set too small to time, or as large as the
    calibration's own copy (WORKING_SET_MAX: that copy measured it, and another would take the memory twice)."""
    import torch

    from kernelevo.judge.measure.timing import Clock

    half = nbytes // 8  # float32 elements in half the bytes
    if half < 1024 or nbytes > WORKING_SET_MAX:
        return 0.0
    src = torch.ones(half, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    clock = Clock(device, flush=True)
    times = []
    for _ in range(reps):
        ((_, ms),) = clock.time_batch([("copy", lambda: dst.copy_(src))])
        times.append(ms)
    return 2 * src.nbytes / (statistics.median(times) / 1e3)
