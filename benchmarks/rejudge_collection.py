"""Re-judge a published kernel collection (CUDA-L1's) with kernelevo's judge: their claims beside its verdicts.
Run on a GPU machine, again until it says nothing is left (a call may stop early and lose no verdict):

    python benchmarks/rejudge_collection.py COLLECTION.jsonl --archive A.sqlite [--rows cuda|all] [--levels 1,2]
        [--limit N] [--again L1-T15,...] [--max-seconds S] [--gpus all|0,1] [--device cuda|cuda:N|cpu] [--policy mixed|strict]
        [--trials N] [--shapes general|exact] [--build-timeout S] [--cache-dir DIR]
    python benchmarks/rejudge_collection.py table --archive A.sqlite --out rejudge_cuda_l1-<gpu>-<date>.json
        [--justifications rejudge_cuda_l1_justifications.json] [--markdown OUT.md]
    python benchmarks/rejudge_collection.py show L1-T23 --archive A.sqlite [--justifications FILE]

What is judged: COLLECTION is CUDA-L1's file of published kernels (JSON lines: level_id, task_id, ref_code
= the KernelBench task, custom_code = their kernel or null, score_* = their speedups). Rows with a kernel
are stored as `kernelevo archive import` stores them (task by source hash, kernel once per task and
source, scores as claims) and named L<level_id>-T<task_id>. `--rows cuda` keeps those whose kernel builds
CUDA (load_inline, or cpp_extension.load of files it writes); `--rows all` adds the PyTorch rewrites.

How: each selected kernel without a 'rejudge' verdict on this GPU model is judged as `archive import
--rejudge` judges (evolution.drivers.rejudge; builds in parallel on the CPU cores, one kernel at a time in each
GPU's correctness and timing phase, the least busy GPU first), with the judge's defaults unless given
(5 trials, policy mixed) and a 300 s build limit. Verdicts are stored as they arrive, so a stop loses
only the kernels in flight: --max-seconds S starts no kernel after S seconds (420 suits 10-minute
calls), --limit N judges at most N, Ctrl-C or a kill. Each call logs its method in the archive's
events (the collection's name, sha256 and row count, which row is which kernel, GPUs, torch and CUDA
versions, the judge's options); `table` reads it back.

Columns of `table`, one row per selected row with a kernel: key, level, task_id, task (the archive's
name), kernel_id (`kernelevo archive show ID`), code (load_inline,
cpp_extension.load, or torch: no CUDA of its own), verdict and reason (null: not judged yet), message
(the judge's line), claimed_eager / claimed_compile (score_default / score_torch_compile_default as
published), measured_eager / measured_compile (the judge's, null unless ok), shapes (general,
specialized: refused some derived shapes cleanly, or exact: only the task's own were checked), gpu,
torch, date, and justification: from a JSON object of key -> the line a GPU engineer accepts after
reading the refused kernel (`show KEY` prints what to read). The summary counts verdict x reason and
code x verdict, compares geometric means of claimed and measured speedups over the rows that passed,
and lists refused rows (any verdict but ok) lacking a justification and rows without a kernel.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import json
import math
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

EVENT = "rejudge_collection"  # one per judging call: the method, and which row became which kernel


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def code_kind(source: str) -> str:
    """'load_inline', 'cpp_extension.load' (CUDA from files the kernel writes) or 'torch' (none of its own)."""
    from kernelevo.formats import called_names

    try:
        called = called_names(source)
    except SyntaxError:  # a published kernel may not parse; then read its calls from the text
        called = set(re.findall(r"\b(load_inline|load)\s*\(", source))
    if "load_inline" in called:
        return "load_inline"
    return "cpp_extension.load" if "load" in called and "cpp_extension" in source else "torch"


def _order(key: str) -> tuple:
    """Sort key of 'L<level>-T<task>': by level, then task number; other keys last."""
    found = re.fullmatch(r"L(\d+)-T(\d+)", key)
    return (int(found[1]), int(found[2]), "") if found else (1 << 30, 0, key)


def read_collection(path: Path, rows: str, levels: set[int] | None) -> dict:
    """The selected rows as (key, Imported) pairs, the selected rows without a kernel (key -> why, and
    what they claim: some rows claim a speedup and hold no code), and the file's identity."""
    from kernelevo.archive import importing

    raw, bad = importing.read_rows(path)
    if importing.is_sakana(raw):
        sys.exit(f"{path}: Sakana's archive rows; this reads CUDA-L1's collection (`kernelevo archive import` "
                 "takes both)")
    keys = {where: f"L{row['level_id']}-T{row['task_id']}" if isinstance(row, dict) and row.get("level_id")
            is not None and row.get("task_id") is not None else where for where, row in raw}
    found, skipped = importing.cuda_l1_rows(raw)

    def wanted(key: str) -> bool:
        return levels is None or _order(key)[0] in levels

    items = [(keys[i.where], i) for i in found
             if wanted(keys[i.where]) and (rows == "all" or code_kind(i.source) != "torch")]
    absent, by_where = {}, dict(raw)
    for line in bad + skipped:
        where, _, why = line.partition(": ")
        row = by_where.get(where)
        if wanted(keys.get(where, where)):
            absent[keys.get(where, where)] = {"why": why, "claimed_eager": row.get("score_default")
                                              if isinstance(row, dict) else None}
    return {"items": items, "absent": absent, "file": path.name, "rows": len(raw) + len(bad),
            "rows_with_kernel": len(found), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def store_items(store, items: list) -> dict[str, int]:
    """Key -> kernel id, stored as `kernelevo archive import` stores them."""
    from kernelevo.evolution.drivers.rejudge import store_imported

    return {key: kernel_id for (key, _), (kernel_id, _) in zip(items, store_imported(store, [i for _, i in items]))}


def unjudged(store, ids: dict[str, int], device_names: set[str]) -> list[int]:
    """Kernel ids, in row order, without a 'rejudge' evaluation on a device of these models."""
    return list(dict.fromkeys(k for k in ids.values() if not any(
        e.purpose == "rejudge" and e.device_name in device_names for e in store.kernel(k).evaluations)))


def _devices(device: str, gpus: str) -> tuple[str, ...]:
    if device == "cpu":
        return ("cpu",)
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        sys.exit("no CUDA device here: run this on a GPU machine (--device cpu only tries the plumbing)")
    picked = [str(i) for i in range(count)] if gpus == "all" else [g.strip() for g in gpus.split(",") if g.strip()]
    picked = [device.split(":")[1]] if device.startswith("cuda:") else picked
    if not picked or not all(g.isdigit() and int(g) < count for g in picked):
        sys.exit(f"--gpus {gpus}: use all, or indices below {count} such as 0,1")
    return tuple(f"cuda:{g}" for g in picked)


def judge_collection(args: argparse.Namespace) -> int:
    """Import the selected rows, then judge those not judged on this GPU model yet."""
    from kernelevo import runtime
    from kernelevo.archive.store import Archive
    from kernelevo.judge.api import Judge, JudgeOptions, WorkerLimits

    started = time.monotonic()
    deadline = started + args.max_seconds if args.max_seconds else None
    collection = read_collection(args.collection, args.rows, args.levels)
    devices = _devices(args.device, args.gpus)
    cache = args.cache_dir or runtime.cache_dir()
    extra = {"shapes": args.shapes} if args.shapes else {}  # else the judge's default, whichever it has
    options = JudgeOptions(devices=devices, trials=args.trials, policy=args.policy,
                           limits=WorkerLimits(build=args.build_timeout), spares=1, **extra)
    with Archive.open(args.archive) as store:
        ids = store_items(store, collection["items"])
        note(f"{collection['file']}: {collection['rows']} rows, {len(ids)} selected with a kernel, in {args.archive}")
        try:
            with Judge(cache, options) as judge:
                infos = {d: judge.executor.device_info(d) for d in devices}
                store.add_event(None, EVENT, {
                    "collection": {k: collection[k] for k in ("file", "sha256", "rows", "rows_with_kernel")},
                    "kernels": ids, "absent": collection["absent"], "devices": infos,
                    "judge_options": dataclasses.asdict(options), "shapes": getattr(options, "shapes", None),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:]})
                todo = unjudged(store, ids, {i.get("device_name", "") for i in infos.values()})
                todo = [ids[k] for k in args.again if k in ids] + [k for k in todo if k not in {ids.get(a) for a in args.again}]
                chosen = todo[:args.limit] if args.limit is not None else todo
                if not chosen:
                    note("nothing left to judge here; `table` writes the results")
                    return 0
                note(f"judging {len(chosen)} of {len(todo)} not yet judged on {', '.join(devices)} "
                     "(Ctrl-C keeps every verdict already in)")
                tally = _judge(store, judge, ids, chosen, len(devices), cache / "imports", deadline)
        except KeyboardInterrupt:
            note("stopped: every verdict so far is in the archive; the same command judges the rest")
            return 130
    left = len(todo) - sum(n for verdict, n in tally.items() if verdict != "not judged")
    note(f"{dict(tally)} in {time.monotonic() - started:.0f} s; "
         + (f"{left} left: run it again" if left else "all judged: `table` writes the results"))
    return 0


def _judge(store, judge, ids: dict[str, int], chosen: list[int], gpus: int, work_dir: Path,
           deadline: float | None) -> Counter:
    from kernelevo.evolution.drivers.rejudge import rejudge

    keys = {kernel_id: key for key, kernel_id in ids.items()}
    tally: Counter = Counter()

    def tell(r) -> None:
        tally[r.verdict] += 1
        speed = f" {r.speedup_eager:.2f}x" if r.speedup_eager is not None else ""
        claim = f" (claimed {r.claimed:.2f}x)" if r.claimed is not None else ""
        note(f"  {keys[r.kernel_id]} kernel {r.kernel_id}: {r.verdict} {r.reason}{speed}{claim}")

    # As many kernels in flight as the local executor has build slots (its default), so none sits
    # idle, and none started after the deadline: those are judged by the next call.
    rejudge(store, chosen, judge, work_dir, tell, in_flight=max(1, min(8, (os.cpu_count() or 2) - 1)) * gpus,
            deadline=deadline)
    return tally


# ---- table and show: the archive read back ------------------------------------------------------


def opened(path: Path):
    from kernelevo.archive.store import Archive

    try:
        return Archive.open_readonly(path)  # read-only: safe while a judging call writes
    except FileNotFoundError as exc:
        sys.exit(str(exc))


def collection_events(store) -> list:
    """The judging calls' events of the collection judged last (one archive per collection reads best)."""
    events = store.events(kind=EVENT)
    if not events:
        sys.exit(f"{store.path}: no collection judged here yet; run the script on COLLECTION.jsonl first")
    sha256 = events[-1].data["collection"]["sha256"]
    return [e for e in events if e.data["collection"]["sha256"] == sha256]


def _merged(events: list[dict], field: str) -> dict:
    merged = {k: v for e in events for k, v in (e.data.get(field) or {}).items()}
    return dict(sorted(merged.items(), key=lambda kv: _order(kv[0])))


def _shapes(data: dict) -> str | None:
    """'specialized', 'general' or 'exact' from the verdict's shape report; None where it has none."""
    report = data.get("shapes")
    if not isinstance(report, dict):
        return report if isinstance(report, str) else None
    if report.get("refused"):
        return "specialized"
    return "exact" if report.get("mode") == "exact" else "general"


def _task_summary(source: str) -> str:
    try:
        model = next((n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    except SyntaxError:
        return ""
    doc = (ast.get_docstring(model) or "").strip() if model else ""
    return doc.splitlines()[0] if doc else ""


def latest_rejudge(kernel: dict):
    """The kernel's latest 'rejudge' evaluation (an EvaluationRecord), or None."""
    return next((e for e in reversed(kernel.evaluations) if e.purpose == "rejudge"), None)


def table_row(store, key: str, kernel_id: int) -> dict:
    from kernelevo.evolution.drivers.rejudge import claimed_speedup

    kernel = store.kernel(kernel_id)
    task, claims = store.task(kernel.task_id), kernel.claims or {}
    e = latest_rejudge(kernel)
    ok = e is not None and e.verdict == "ok"
    return {"key": key, "level": claims.get("level_id"), "task_id": claims.get("task_id"), "task": task.name,
            "kernel_id": kernel_id, "code": code_kind(kernel.source),
            "verdict": e and e.verdict, "reason": e and e.reason, "message": e and e.message,
            "claimed_eager": claimed_speedup(claims), "claimed_compile": claims.get("score_torch_compile_default"),
            "measured_eager": e.speedup_eager if ok else None,
            "measured_compile": e.speedup_compile if ok else None,
            "shapes": _shapes(e.data if e else {}), "gpu": e and e.device_name, "torch": e and e.torch_version,
            "date": time.strftime("%Y-%m-%d", time.localtime(e.created_at)) if e else None}


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summarize(rows: list[dict], justified: dict[str, str]) -> dict:
    judged = [r for r in rows if r["verdict"]]
    by_reason: dict[str, Counter] = {}
    by_code: dict[str, Counter] = {}
    for r in rows:
        by_code.setdefault(r["code"], Counter())[r["verdict"] or "not judged"] += 1
        if r["verdict"]:
            by_reason.setdefault(r["verdict"], Counter())[r["reason"] or "-"] += 1
    passed = [r for r in judged if r["verdict"] == "ok"]
    speedups = {}
    for what in ("eager", "compile"):  # over the rows with both numbers, so that the two means compare
        pairs = [r for r in passed if (r[f"claimed_{what}"] or 0) > 0 and (r[f"measured_{what}"] or 0) > 0]
        speedups[what] = {"n": len(pairs), "claimed_geomean": geomean([r[f"claimed_{what}"] for r in pairs]),
                          "measured_geomean": geomean([r[f"measured_{what}"] for r in pairs])}
    refused = [r["key"] for r in judged if r["verdict"] != "ok"]
    return {"rows": len(rows), "judged": len(judged), "not_judged": len(rows) - len(judged), "ok": len(passed),
            "verdict_reason": {v: dict(c) for v, c in sorted(by_reason.items())},
            "code_verdict": {k: dict(c) for k, c in sorted(by_code.items())}, "speedups_of_ok_rows": speedups,
            "refused_lacking_justification": [k for k in refused if k not in justified],
            "justifications_for_no_refused_row": sorted(set(justified) - set(refused), key=_order)}


def _justifications(path: Path | None) -> dict[str, str]:
    if path is None or not path.exists():
        if path is not None:
            note(f"{path}: not written yet; every refused row lacks a justification")
        return {}
    data = json.loads(path.read_text())
    return {str(k): (v.get("justification", "") if isinstance(v, dict) else str(v)) for k, v in data.items()}


def _distinct(values) -> list:
    return list({json.dumps(v, sort_keys=True, default=str): v for v in values}.values())


def write_table(args: argparse.Namespace) -> int:
    justified = _justifications(args.justifications)
    with opened(args.archive) as store:
        events = collection_events(store)
        rows = [table_row(store, key, kid) for key, kid in _merged(events, "kernels").items()]
    for row in rows:
        row["justification"] = justified.get(row["key"])
    data = [e.data for e in events]
    method = {"collection": data[-1]["collection"], **{f: sorted({r[k] for r in rows if r[k]}) for f, k in
                                                       (("gpus", "gpu"), ("torch", "torch"), ("dates", "date"))},
              **{f: _distinct(d.get(f) for d in data) for f in ("devices", "judge_options", "shapes")},
              "calls": [{"started": d["started"], "argv": d["argv"]} for d in data], "how": __doc__}
    summary = {**summarize(rows, justified), "rows_without_kernel": _merged(events, "absent")}
    report = {"what": "CUDA-L1's published kernels re-judged by kernelevo's judge: their claims beside its verdicts",
              "method": method, "summary": summary, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(report))
    print(json.dumps({k: v for k, v in report["summary"].items() if k != "rows_without_kernel"}, indent=1))
    note(f"wrote {args.out} ({len(rows)} rows)" + (f" and {args.markdown}" if args.markdown else ""))
    return 0


def _cell(value, empty: str = "") -> str:
    if value is None:
        return empty
    text = f"{value:.2f}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(report: dict) -> str:
    m, s = report["method"], report["summary"]
    lines = [f"# {report['what']}", "",
             f"Collection {m['collection']['file']} (sha256 {m['collection']['sha256']}, {m['collection']['rows']} "
             f"rows); GPU {', '.join(m['gpus'])}; torch {', '.join(m['torch'])}; judged {', '.join(m['dates'])}.", "",
             f"{s['judged']} of {s['rows']} rows judged, {s['ok']} ok. Verdict x reason: " + "; ".join(
                 f"{v}: " + ", ".join(f"{r} {n}" for r, n in c.items()) for v, c in s["verdict_reason"].items()), ""]
    for what, g in s["speedups_of_ok_rows"].items():
        lines.append(f"- over {what}, {g['n']} ok rows: geomean claimed {_cell(g['claimed_geomean'], '-')}, "
                     f"measured {_cell(g['measured_geomean'], '-')}")
    columns = ("key", "task", "code", "verdict", "reason", "claimed_eager", "measured_eager",
               "claimed_compile", "measured_compile", "shapes", "message", "justification")
    lines += ["", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in report["rows"]:
        lines.append("| " + " | ".join(_cell(row[c], "not judged" if c == "verdict" else "") for c in columns) + " |")
    return "\n".join(lines) + "\n"


def show(args: argparse.Namespace) -> int:
    """One row: the task, the kernel, its claims and its latest verdict in full, to write a justification from."""
    with opened(args.archive) as store:
        kernels = _merged(collection_events(store), "kernels")
        if args.key not in kernels:
            sys.exit(f"{args.key}: no such row with a kernel; rows look like L1-T23")
        kernel = store.kernel(kernels[args.key])
        task = store.task(kernel.task_id)
    print(f"== {args.key}: task {task.name} ({_task_summary(task.source)}), kernel {kernel.id} "
          f"({code_kind(kernel.source)}), claims {json.dumps(kernel.claims)}")
    print(f"\n== task source\n{task.source}\n\n== kernel source\n{kernel.source}\n")
    e = latest_rejudge(kernel)
    if e is None:
        print("== not judged yet")
        return 0
    data = e.data
    print(f"== verdict (evaluation {e.id}, {time.strftime('%Y-%m-%d %H:%M', time.localtime(e.created_at))}, "
          f"{e.device_name}, torch {e.torch_version})\n{e.verdict} {e.reason}: {e.message}\n"
          f"speedup over eager {e.speedup_eager}, over torch.compile {e.speedup_compile}; "
          f"shapes {_shapes(data)}; policy {data.get('policy')}")
    for field in ("excerpt", "correctness", "shapes", "evidence", "notes", "warnings", "resources"):
        if data.get(field):
            value = data[field]
            if not isinstance(value, str):  # a list of lines one per line; records as JSON
                lines = isinstance(value, list) and all(isinstance(v, str) for v in value)
                value = "\n".join(value) if lines else json.dumps(value, indent=1, default=str)
            print(f"\n-- {field}\n{value}")
    print(f"\n-- justification\n{_justifications(args.justifications).get(args.key) or '(none yet)'}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rejudge_collection.py", description=__doc__.splitlines()[0])
    command = argv[0] if argv[:1] in (["table"], ["show"]) else None
    if command:
        parser.add_argument("command", choices=("table", "show"))
        if command == "show":
            parser.add_argument("key", help="the row, as L<level>-T<task>")
        else:
            parser.add_argument("--out", type=Path, required=True)
            parser.add_argument("--markdown", type=Path)
        parser.add_argument("--justifications", type=Path)
    else:
        parser.add_argument("collection", type=Path)
        parser.add_argument("--rows", choices=("all", "cuda"), default="all")
        parser.add_argument("--levels", type=lambda t: {int(x) for x in t.split(",")}, help="e.g. 1,2 [all]")
        parser.add_argument("--limit", type=int, help="judge at most N kernels in this call")
        parser.add_argument("--again", type=lambda t: [k.strip() for k in t.split(",") if k.strip()], default=[],
                            help="rows to judge again although judged (after a change to the judge), e.g. L1-T15,L1-T36")
        parser.add_argument("--max-seconds", type=float, help="start no kernel after this many seconds")
        parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu [cuda]")
        parser.add_argument("--gpus", default="all", help="all, or indices such as 0,1 [all]")
        parser.add_argument("--policy", choices=("mixed", "strict"), default="mixed")
        parser.add_argument("--trials", type=int, default=5)
        parser.add_argument("--shapes", choices=("general", "exact"), help="shapes checked [the judge's default]")
        parser.add_argument("--build-timeout", type=float, default=300.0)
        parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--archive", type=Path, required=True)
    args = parser.parse_args(argv)
    return {"table": write_table, "show": show}.get(command, judge_collection)(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
