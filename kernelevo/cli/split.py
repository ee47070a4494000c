"""`kernelevo split`: a whole model's hot parts as a suite of KernelBench task files."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kernelevo.cli.common import CacheDirOpt, CompileBaselineOpt, check_choice, fail, resolve_device


def split(
    model: str = typer.Argument(..., help="KernelBench-format model file (Model, get_inputs, get_init_inputs), "
                                "or pkg.module:make_model (with --inputs)"),
    inputs: Optional[str] = typer.Option(None, help="with MODEL as pkg.module:make_model: pkg.module:make_inputs, "
                                         "a function returning the forward's inputs"),
    out: Path = typer.Option(..., "-o", "--out", help="folder for the part task files and split.json (a suite)"),
    device: Optional[str] = typer.Option(None, help="cuda, cuda:N or cpu [default: cuda if present]"),
    top: int = typer.Option(16, min=1, help="write at most the N hottest parts (identical parts count once)"),
    cover: float = typer.Option(0.9, min=0.0, max=1.0, help="stop once the parts hold this share of the model's time"),
    granularity: str = typer.Option("module", help="module: submodules as parts; block: a submodule holding "
                                    "residual blocks (a transformer layer) cut into them (attention with its "
                                    "norm and residual, the MLP)"),
    as_json: bool = typer.Option(False, "--json", help="print split.json's data"),
    compile_baseline: CompileBaselineOpt = True,
    cache_dir: CacheDirOpt = None,
) -> None:
    """Run a model once, find where its time goes, and write its hot submodules as task files."""
    from kernelevo.evolution.drivers.parts.split import split_model
    from kernelevo.tasks import TaskError

    from kernelevo.evolution.drivers.parts.split import GRANULARITIES

    check_choice("--granularity", granularity, GRANULARITIES)
    dev = resolve_device(device)
    try:
        data = split_model(model, out, dev, top, inputs=inputs, headroom=compile_baseline, cache_dir=cache_dir,
                           on_status=lambda text: typer.echo(text, err=True), cover=cover,
                           granularity=granularity)
    except TaskError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(data, indent=1))
        return
    from kernelevo.cli.views.parts import print_split

    print_split(data, out)
