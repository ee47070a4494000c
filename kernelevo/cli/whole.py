"""`kernelevo assemble`, and `kernelevo optimize MODEL.py --parts N`: a whole model handed back with
verified kernels in place of its hot parts, judged end to end."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from kernelevo.cli.common import (SEARCH_FLAGS, EXIT_INTERRUPTED, EXIT_NOTHING_PLACED, ArchiveOpt, BaselineOpt,
                                  CacheDirOpt, CompileBaselineOpt, ConfigOpt, JsonOpt, SeedOpt, ShapesOpt,
                                  TimingSecondsOpt, TrialsOpt, check_choice, fail, flag_overrides, resolve_device,
                                  resolved, say)
from kernelevo.evaluation import Verdict


def assemble(
    ctx: typer.Context,
    model: Path = typer.Argument(..., help="the KernelBench-format model file that was split"),
    bench: str = typer.Option(..., help="the bench of its parts (`kernelevo bench ls` lists them)"),
    out: Path = typer.Option(..., "-o", "--out", help="the drop-in file to write (its result beside it as .json)"),
    device: Optional[str] = typer.Option(None, help="cuda, cuda:N or cpu [default: cuda if present]"),
    min_speedup: float = typer.Option(1.0, help="try a part in place whose kernel is faster than this, against the "
                                      "baseline, beyond noise (its interval wholly above)"),
    seed: SeedOpt = 42,
    trials: TrialsOpt = 5,
    shapes: ShapesOpt = "general",
    compile_baseline: CompileBaselineOpt = True,
    baseline: BaselineOpt = None,
    timing_seconds: TimingSecondsOpt = 1.5,
    archive: ArchiveOpt = None,
    config: ConfigOpt = None,
    cache_dir: CacheDirOpt = None,
    modes: Optional[str] = typer.Option(None, help="compile modes to time the model in, comma-separated, of eager, "
                                        "default, max-autotune-no-cudagraphs, reduce-overhead [default: all four on a "
                                        "GPU; eager,default on the CPU]"),
    as_json: JsonOpt = False,
) -> None:
    """Write MODEL with the verified kernels its parts' bench found, judge it end to end, and time it in
    the user's loop in every compile mode. Exit 3: nothing placed (the line says which mode to run)."""
    from kernelevo.evolution.drivers.whole import assemble_model
    from kernelevo.tasks import TaskError

    if not model.is_file():
        fail(f"{model}: no such file; give the model file that `kernelevo split` split")
    # the model is judged and timed on this machine's device (no --executor: kernelevo.toml's does not apply)
    overrides = {**flag_overrides(ctx, ASSEMBLE_FLAGS), "run.devices": (resolve_device(device),),
                 "run.out_dir": out.parent, "judge.executor": "local"}
    options = resolved(model, overrides, config, search=False).options
    try:
        data = assemble_model(model, bench, out, options, min_speedup, mode_list(modes), on_status=say)
    except (TaskError, ValueError) as exc:
        fail(str(exc).splitlines()[0])
    show(data, as_json)
    finish(data)


def mode_list(modes: Optional[str]) -> tuple[str, ...] | None:
    """--modes as a tuple, each checked; None for the device's default."""
    if modes is None:
        return None
    from kernelevo.judge.api import MODES

    chosen = tuple(m.strip() for m in modes.split(",") if m.strip())
    for mode in chosen:
        check_choice("--modes", mode, MODES)
    return chosen or None


# assemble's flags -> the leaves of the settings tree they set (kernelevo.evolution.settings)
ASSEMBLE_FLAGS = {name: SEARCH_FLAGS[name] for name in ("seed", "trials", "shapes", "compile_baseline", "baseline",
                                                        "timing_seconds", "archive", "cache_dir")}


def show(data: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=1))
        return
    from kernelevo.cli.views.parts import print_assembly

    print_assembly(data)


def run_parts(options: Any, parts: int, parts_dir: Optional[Path], min_speedup: float, modes: Optional[str],
              granularity: str) -> None:
    """`optimize MODEL.py --parts N`: split, search the parts as a bench, assemble; every way it
    ends leaves a line saying what to do next."""
    from kernelevo.agent.client import Stop
    from kernelevo.evolution.drivers.bench import BenchError
    from kernelevo.evolution.drivers.whole import PartsWaiting, optimize_model
    from kernelevo.tasks import TaskError
    from kernelevo.cli.views.bench import LiveBench

    model, out = Path(options.task_path), Path(options.out_dir)
    parts_dir = parts_dir or out / f"{model.stem}_parts"
    out_file = out / f"{model.stem}_kernelevo.py"
    total = options.budget.max_cost_usd  # the model's whole budget, shared by the parts' time
    search = dataclasses.replace(options, budget=dataclasses.replace(options.budget, max_cost_usd=None), resume=None)
    try:
        with LiveBench(f"kernelevo: {model.name} in parts") as live:
            data = optimize_model(search, parts, parts_dir, out_file, total, resume=options.resume,
                                  min_speedup=min_speedup, modes=mode_list(modes), granularity=granularity,
                                  on_progress=live,
                                  on_status=live.status)
    except (BenchError, Stop, TaskError, ValueError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except KeyboardInterrupt as exc:
        bench_id = getattr(exc, "run_id", None)
        how = (f"`kernelevo optimize {model} --parts {parts} --parts-dir {parts_dir} --resume {bench_id}`"
               if bench_id else "a new run")
        typer.echo(f"stopped: every part's search is stored and resumable; continue with {how}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except OSError as exc:
        fail(f"{exc.strerror or exc}: {exc.filename or ''} (a full disk or an unwritable archive?)")
    if isinstance(data, PartsWaiting):  # like a bench or a run whose replay ended: not a failure, exit 0
        say(f"{data.waiting} part(s) wait for a reply, so the model is not assembled yet: answer each prompt in "
            f"{out}/prompts/<part>/ (NNNN.reply.md beside it), then continue with "
            f"`kernelevo optimize {model} --parts {parts} --parts-dir {parts_dir} --resume {data.bench_id}`")
        return
    show(data, as_json=False)
    say(f"bench {data['bench']}: the model with its kernels in place: {out_file} ({data['verdict']})")
    finish(data)


def finish(data: dict) -> None:
    """The exit code of an assembly: 1 where the judge rejected the model, 3 where nothing was placed."""
    if data["verdict"] != Verdict.OK:
        sys.exit(1)
    if data["nothing_placed"]:
        sys.exit(EXIT_NOTHING_PLACED)
