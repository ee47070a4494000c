"""Nsight Compute's view of a candidate's kernels: a small curated set of metrics, when ncu is there.

ncu replays each kernel several times to read its hardware counters, so it profiles a separate
process (run/ncu_target.py) that builds the candidate as the judge did and runs one forward inside
an NVTX range; everything before that range (imports, the build, warm-up calls) is not profiled.
ncu's report goes to a log file, never to stdout, which the candidate's code could write to.
Clocks are left as they are (--clock-control none). One profile took 9-10 s on an H100 (most of
it Python, torch and the build cache starting in the profiled process).
"""
from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kernelevo.judge.trials.policy import _short
from kernelevo.judge.job import Job
from kernelevo.evaluation import NcuKernel

RANGE = "kernelevo_profile"
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
                 "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
                 "not_selected", "short_scoreboard", "sleeping", "tex_throttle", "wait")
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
METRICS = {
    "duration": "gpu__time_duration.sum",
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "registers": "launch__registers_per_thread",
}
_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
_NO_COUNTERS = ("ERR_NVGPUCTRPERM", "permission to access NVIDIA GPU Performance Counters")


def find() -> str | None:
    """The ncu executable: on PATH, in the CUDA toolkit, or in a standalone Nsight Compute install."""
    found = shutil.which("ncu")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    for candidate in [os.path.join(home, "bin", "ncu"), *sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))]:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def command(ncu: str, log: Path, job_file: Path, device: str) -> list[str]:
    metrics = list(METRICS.values()) + [_STALL.format(r) for r in STALL_REASONS]
    return [ncu, "--csv", "--page", "raw", "--log-file", str(log), "--clock-control", "none",
            "--metrics", ",".join(metrics), "--nvtx", "--nvtx-include", f"{RANGE}/",
            sys.executable, "-s", "-P", "-m", "kernelevo.judge.run.ncu_target", str(job_file), device]


def parse(text: str) -> list[NcuKernel]:
    """Kernels of ncu's raw CSV page (header row, units row, one row per launch), launches of one
    kernel merged (durations summed, percentages weighted by duration), longest first."""
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    units = next((r for r in rows if not r.get("ID")), {})
    merged: dict[str, dict] = {}
    for row in rows:
        if not row.get("ID"):
            continue
        values = {key: _number(row.get(metric)) for key, metric in METRICS.items()}
        values["duration"] *= _TO_US.get((units.get(METRICS["duration"]) or "ns").strip(), 1e-3)
        stalls = {r: _number(row.get(_STALL.format(r))) for r in STALL_REASONS}
        name = _short(row.get("Kernel Name", "?"))
        into = merged.setdefault(name, {"duration": 0.0, "weighted": {}, "stalls": {}, "registers": 0})
        weight = values["duration"] or 1e-9
        into["duration"] += values["duration"]
        into["registers"] = max(into["registers"], int(values["registers"]))
        for key in ("occupancy", "dram", "l2", "sm"):
            into["weighted"][key] = into["weighted"].get(key, 0.0) + weight * values[key]
        for reason, v in stalls.items():
            into["stalls"][reason] = into["stalls"].get(reason, 0.0) + weight * v
    kernels = []
    for name, m in merged.items():
        total = m["duration"] or 1e-9
        stall_sum = sum(m["stalls"].values()) or 1.0
        stalls = sorted(((r, v / stall_sum) for r, v in m["stalls"].items() if v > 0), key=lambda s: -s[1])
        kernels.append(NcuKernel(name=name, duration_us=m["duration"],
                                 **{k: m["weighted"][k] / total for k in ("occupancy", "dram", "l2", "sm")},
                                 registers=m["registers"], stalls=tuple((r, round(s, 4)) for r, s in stalls[:3])))
    return sorted(kernels, key=lambda k: -k.duration_us)


def _number(value: str | None) -> float:
    try:
        return float((value or "0").replace(",", ""))
    except ValueError:
        return 0.0


def run(job: Job, device: str, timeout: float = 120.0) -> tuple[list[NcuKernel], str]:
    """Profile the job's candidate under ncu; (kernels, note), the note saying why there are none."""
    ncu = find()
    if ncu is None:
        return [], "Nsight Compute (ncu) not found: hardware metrics skipped (install it, or put it on PATH)"
    with tempfile.TemporaryDirectory(prefix="kernelevo-ncu-") as tmp:
        job_file, log = Path(tmp) / "job.json", Path(tmp) / "ncu.csv"
        job_file.write_text(json.dumps(job.to_dict()))
        try:
            done = subprocess.run(command(ncu, log, job_file, device), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            return [], f"ncu took over {timeout:.0f} s: hardware metrics skipped"
        text = log.read_text(errors="replace") if log.exists() else ""
    if any(marker in text + done.stderr for marker in _NO_COUNTERS):
        return [], ("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): hardware metrics "
                    "skipped; run as root or set NVreg_RestrictProfilingToAdminUsers=0")
    kernels = parse(text)
    if done.returncode != 0 and not kernels:
        last = (done.stderr.strip().splitlines() or text.strip().splitlines() or ["no output"])[-1]
        return [], f"ncu failed (exit {done.returncode}): {last[:160]}"
    if not kernels:
        return [], "ncu saw no kernel in the profiled forward"
    return kernels, ""
