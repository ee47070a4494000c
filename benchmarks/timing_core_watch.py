"""Which threads run on the cores the judge reserves for timing, while a bench runs (issue 52's false
`escaped_work` refusals: a synchronised call at 7.9 ms by the host clock, 3.9 ms by CUDA events, the calling
thread preempted in 24 of its 25 calls).

    python benchmarks/timing_core_watch.py --cores 30,31 --seconds 300 --out watch.json &
    kernelevo bench ...

Every INTERVAL seconds it reads /proc/*/task/*/stat and, for each thread last seen on one of CORES, adds the CPU
time it used since the previous sample (utime + stime, in clock ticks) to its process's command and thread name;
a thread seen runnable there counts a sample. The watcher itself runs on the first core not watched. It reads
/proc only: nothing in the bench changes. The JSON lists, per core, the commands and thread names that used
time there, most first. A core reserved for timing should show one timing worker's main thread at a time, and
nothing else."""
import argparse
import json
import os
import signal
import time
from collections import defaultdict


def _threads() -> dict[int, tuple[int, str, str, int, int]]:
    """tid -> (pid, thread name, state, cpu ticks used, last core)."""
    out = {}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            rest = stat[stat.rindex(")") + 2:].split()
            out[int(tid)] = (int(pid), name, rest[0], int(rest[11]) + int(rest[12]), int(rest[36]))
    return out


def _command(pid: int, seen: dict[int, str]) -> str:
    if pid not in seen:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                seen[pid] = " ".join(a.decode(errors="replace") for a in f.read().split(b"\0") if a)[:120]
        except OSError:
            seen[pid] = "?"
        seen[pid] += _gpu(pid)
    return seen[pid]


def _gpu(pid: int) -> str:
    """" GPU 1" where the process was given one GPU (CUDA_VISIBLE_DEVICES): a judge worker sees its own as cuda:0,
    so its command line alone does not say which GPU's timing it does."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
    except OSError:
        return ""
    visible = env.get(b"CUDA_VISIBLE_DEVICES", b"").decode(errors="replace")
    return f" GPU {visible}" if visible and "," not in visible else ""


def watch(cores: set[int], seconds: float, interval: float) -> dict:
    used: dict = defaultdict(lambda: defaultdict(int))  # core -> (command, thread) -> ticks
    runnable: dict = defaultdict(lambda: defaultdict(int))  # core -> (command, thread) -> samples seen runnable
    commands: dict[int, str] = {}
    last = _threads()
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    began, samples = time.monotonic(), 0
    while not stop[0] and time.monotonic() - began < seconds:
        time.sleep(interval)
        now = _threads()
        samples += 1
        for tid, (pid, name, state, ticks, core) in now.items():
            if core not in cores:
                continue
            key = f"{_command(pid, commands)} [{name}]"
            before = last.get(tid)
            if before is not None and ticks > before[3]:
                used[core][key] += ticks - before[3]
            if state == "R":
                runnable[core][key] += 1
        last = now
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    return {"cores": sorted(cores), "seconds": round(time.monotonic() - began, 1), "samples": samples,
            "interval_s": interval,
            "used_ms": {c: dict(sorted(((k, round(v * tick_ms)) for k, v in used[c].items()), key=lambda kv: -kv[1]))
                        for c in sorted(cores)},
            "runnable_samples": {c: dict(sorted(runnable[c].items(), key=lambda kv: -kv[1])) for c in sorted(cores)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", required=True, help="the cores to watch, as 30,31")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cores = {int(c) for c in args.cores.split(",")}
    free = sorted(os.sched_getaffinity(0) - cores)
    if free:
        os.sched_setaffinity(0, {free[0]})
    with open(args.out, "w") as f:
        json.dump(watch(cores, args.seconds, args.interval), f, indent=1)


if __name__ == "__main__":
    main()
