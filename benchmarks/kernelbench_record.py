"""The KernelBench yardstick's record from its rounds' state (issue 52).

    python benchmarks/kernelbench_record.py benchmarks/results/kernelbench-rounds [--json]

Reads the state `benchmarks/kernelbench_round.sh` keeps (the bench's archive, `bench_id`, every prompt and reply)
and prints what the issue asks to record: fast_1 against torch.compile and against eager, the geomean speedup over
torch.compile by device time and in the user's loop (host included), both also against the faster of eager and
torch.compile on each task (KernelBench v3's bar: where torch.compile is slower than eager, eager is the user's
one-line answer), per task its status, calls, best kernel's
format and share of the speed of light, and the total calls and tokens. Replayed calls carry no token counts in the
archive (nothing was sent), so the tokens are counted from the prompt and reply files: characters over
CHARS_PER_TOKEN, an estimate, said as one. A task still waiting for a reply counts as not fast in fast_1 and is left
out of the geomeans; its best so far is shown beside it."""
import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path

from kernelevo.agent.replay import read_folder, served_by_text
from kernelevo.archive.records import AnsweredCall
from kernelevo.archive.reports.bench_data import bench_table, geomean
from kernelevo.archive.store import Archive

CHARS_PER_TOKEN = 4.0  # English and code in the prompts and replies: about 4 characters a token


def files_chars(state: Path) -> dict[str, dict[str, int]]:
    """Per task: the prompts' and replies' characters, and how many replies there are."""
    out = {}
    for folder in sorted(p for p in (state / "prompts").iterdir() if p.is_dir()):
        prompts = sum(len(p.read_text()) for p in folder.glob("*.prompt.md"))
        replies = list(folder.glob("*.reply.md"))
        out[folder.name] = {"prompt_chars": prompts, "reply_chars": sum(len(p.read_text()) for p in replies),
                            "replies": len(replies)}
    return out


def served_to(calls: list[AnsweredCall], folder: Path) -> dict[str, int]:
    """Of a run's calls answered from the folder's replies (found by their text), how many were `served`; how many
    of those to a prompt other than the one the reply was written for (`changed`: the prompt's hash differs); of
    the calls whose prompt form was recorded (`formed`: archives from 0008 on), how many went to a prompt of another
    form (`reshaped`: more than its figures differ, so the search asked something else there)."""
    replayed = [c for c in calls if c.provider == "replay"]
    pairs = [(c, r) for c, r in zip(replayed, served_by_text(read_folder(folder), [c.reply for c in replayed]))
             if r is not None]
    served = len(pairs)
    changed = sum(bool(r.prompt_hash) and r.prompt_hash != c.prompt_hash for c, r in pairs)
    formed = [(c, r) for c, r in pairs if c.prompt_form and r.prompt_form]
    return {"served": served, "changed": changed, "formed": len(formed),
            "reshaped": sum(c.prompt_form != r.prompt_form for c, r in formed)}


def against_faster(tasks: list[dict], of: int) -> dict:
    """fast_1 (of all `of` tasks) and the geomean (over the done, correct ones) of each best kernel against the
    faster of eager and torch.compile on its task: the smaller of its two speedups."""
    mins = [min(t["speedup_compile"], t["speedup_eager"]) for t in tasks
            if t["status"] == "done" and t["speedup_compile"] and t["speedup_eager"]]
    return {"fast_1": sum(m > 1.0 for m in mins) / of if of else None,
            "geomean": geomean(mins)}


def record(state: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "archive.sqlite"
        with gzip.open(state / "archive.sqlite.gz") as src, open(db, "wb") as dst:
            shutil.copyfileobj(src, dst)
        with Archive.open_readonly(db) as store:
            table = bench_table(store, (state / "bench_id").read_text().strip())
            served = {t["name"]: served_to(store.recorded_replies(t["run_id"]), state / "prompts" / t["name"])
                      for t in table["tasks"] if t["run_id"]}
    chars = files_chars(state)
    tasks = [{"name": t["name"], "status": t["status"], "calls": t["calls"], "format": t["format"],
              "speedup_compile": t["speedup_compile"], "speedup_compile_ci": t["speedup_compile_ci"],
              "speedup_eager": t["speedup_eager"], "loop_speedup_compile": t["loop_speedup_compile"],
              "sol_share": t["sol_share"], "search_speedup_compile": t["search_speedup_compile"],
              **served.get(t["name"], {"served": 0, "changed": 0, "formed": 0, "reshaped": 0}), **chars.get(t["name"], {})}
             for t in table["tasks"]]
    suite = table["suite"]
    prompt_chars = sum(t.get("prompt_chars", 0) for t in tasks)
    reply_chars = sum(t.get("reply_chars", 0) for t in tasks)
    return {"bench": table["bench"]["id"], "tasks": tasks, "done": suite["done"], "of": suite["tasks"],
            "fast_1": {"compile": suite["fast_p"]["compile"]["1.0"], "eager": suite["fast_p"]["eager"]["1.0"]},
            "geomean": suite["geomean"], "geomean_loop": suite["geomean_loop"],
            "faster_of_both": against_faster(tasks, suite["tasks"]), "calls": suite["calls"],
            "replayed": suite["replayed"], "served": sum(t["served"] for t in tasks),
            "changed": sum(t["changed"] for t in tasks), "formed": sum(t["formed"] for t in tasks),
            "reshaped": sum(t["reshaped"] for t in tasks), "prompt_chars": prompt_chars, "reply_chars": reply_chars,
            "tokens_estimated": {"input": round(prompt_chars / CHARS_PER_TOKEN),
                                 "output": round(reply_chars / CHARS_PER_TOKEN)}}


def _x(v, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}x"


def print_markdown(r: dict) -> None:
    print(f"bench {r['bench']}: {r['done']} of {r['of']} tasks done")
    print("| task | status | calls | vs torch.compile | vs eager | in the loop vs torch.compile | format | "
          "share of the speed of light |")
    print("|---|---|---|---|---|---|---|---|")
    for t in r["tasks"]:
        if t["status"] == "done":
            ci = t["speedup_compile_ci"]
            vs = f"{_x(t['speedup_compile'])} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else _x(t["speedup_compile"])
            sol = "-" if t["sol_share"] is None else f"{100 * t['sol_share']:.0f} %"
            print(f"| {t['name']} | done | {t['calls']} | {vs} | {_x(t['speedup_eager'])} | "
                  f"{_x(t['loop_speedup_compile'])} | {t['format']} | {sol} |")
        else:
            print(f"| {t['name']} | {t['status']} | {t['calls']} | {_x(t['search_speedup_compile'])} so far | | | | |")
    g, gl = r["geomean"], r["geomean_loop"]
    print(f"\nfast_1: {100 * (r['fast_1']['compile'] or 0):.0f} % against torch.compile, "
          f"{100 * (r['fast_1']['eager'] or 0):.0f} % against eager (of all {r['of']} tasks)")
    print(f"geomean over the done tasks: {_x(g['compile'])} torch.compile, {_x(g['eager'])} eager; in the user's loop, "
          f"host included: {_x(gl['compile'])} torch.compile, {_x(gl['eager'])} eager")
    both = r["faster_of_both"]
    print(f"against the faster of eager and torch.compile on each task: fast_1 {100 * (both['fast_1'] or 0):.0f} %, "
          f"geomean {_x(both['geomean'])}")
    print(f"replies served: {r['served']}, {r['changed']} of them to a prompt that differs from the one they were "
          "written for (a prompt file changed since, other figures, or the search took another path)"
          + (f"; of the {r['formed']} whose prompt form was recorded, {r['reshaped']} to a prompt of another form, the "
             "rest to theirs with other figures" if r["formed"] else "; prompt forms not recorded (an archive from "
             "before 0008)"))
    te = r["tokens_estimated"]
    print(f"calls: {r['calls']} ({r['replayed']} replayed); tokens, estimated from the files at {CHARS_PER_TOKEN:g} "
          f"characters a token: {te['input']:,} in the prompts, {te['output']:,} in the replies")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("state", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    r = record(args.state)
    if args.json:
        print(json.dumps(r, indent=1))
    else:
        print_markdown(r)


if __name__ == "__main__":
    main()
