"""Split a recorded model into parts and write each as a KernelBench task file.

Which modules become parts: the model's submodules, outermost first. Lists and stacks (a Sequential
of blocks of one class) are opened into their children, and so is a module of more than MAX_LAYERS
working layers (a part is one kernel's worth of work) and one that cannot be rebuilt standalone (a
class defined inside a function, constructor arguments that cannot be found or written, a call or an
output a task cannot state); one whose written file does not give back its call site's output is
left out. The reason is kept. A module that does no work (Dropout in eval, Identity) is no part. How a
part is built again is construct.py's; how it is called, call.py's; which parts are one task, fold.py's
(identical parts, 24 transformer layers; and one class built for other sizes, DenseNet's layers). Time
a module spends in its own forward (torch calls between its submodules) is taken as regions of its
traced forward (region.py), which rank with the parts. At block granularity a part whose forward holds
residual blocks (a transformer layer: attention, then MLP, each with its norm and residual) is cut into
them, each a region task (region.block_regions). Tasks are written hottest first until they hold
`cover` of the model's time or `top` are written; split.json maps each task to its call sites and their
shares of the model's time.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelevo.tasks import SPLIT_JSON

from .call import Call, describe
from .call import of as call_of
from .construct import HOW, Construction, Constructions, literal
from .fold import fold
from .record import Recording, Site
from .rest import Rest
from .rest import rounded as _round
from .region import Region, block_regions, regions
from .region_file import entry
from .region_file import write as write_region
from .task_file import check, task_text


MAX_LAYERS = 8  # a part holds at most this many working layers: a larger module is opened into its children
COVER = 0.9  # parts are written until they hold this share of the model's time (or `top` of them)
GRANULARITIES = ("module", "block")  # parts are submodules; or their residual blocks where they hold several


@dataclass
class Part:
    """One task: the call sites of identical parts, in model order."""
    sites: list[Site]
    built: Construction
    call: Call
    inputs: tuple  # the first call site's input tensors, as the task takes them
    name: str = ""
    file: str = ""
    checked: str = ""  # how the written file matched its call site
    kin: list[Part] = field(default_factory=list)  # parts of its class built or called at other sizes, folded in

    @property
    def builds(self) -> list[tuple[tuple, list[list[int]]]]:
        """(constructor arguments, input shapes) of its own sites, then of each kin's: get_call_sites()."""
        return [(p.init, [list(x.shape) for x in p.inputs]) for p in [self, *self.kin]]

    def built_at(self, site: Site) -> int:
        """Which of `builds` the call site is built and called as."""
        return next(k for k, p in enumerate([self, *self.kin]) if any(s is site for s in p.sites))

    @property
    def all_sites(self) -> list[Site]:
        return [s for p in [self, *self.kin] for s in p.sites]

    @property
    def cls(self) -> type:
        return type(self.sites[0].module)

    @property
    def params(self) -> tuple[str, ...]:
        return self.built.params

    @property
    def init(self) -> tuple:
        return self.built.values

    @property
    def ms(self) -> float:
        return sum(s.ms for s in self.all_sites)


def split_model(model: Path | str, out_dir: Path, device: str, top: int, seed: int = 0,
                inputs: str | None = None, headroom: bool = False, cache_dir: Path | None = None,
                on_status=lambda text: None, cover: float = COVER, granularity: str = "module") -> dict:
    """Build the model (a KernelBench-format file, or `pkg.module:make_model` with `inputs` naming
    `pkg.module:make_inputs`), record it on `device`, and write its hottest parts into `out_dir`,
    until they hold `cover` of its time or `top` are written, at `granularity` (GRANULARITIES); with
    `headroom`, each part also timed under torch.compile against its speed of light, and the parts
    ranked by what the compiler leaves (headroom.py). TaskError (one line) for a model that cannot be used."""
    import torch

    from .record import build, record

    make, args, get_inputs, source = _model_of(str(model), inputs)
    torch.manual_seed(seed)
    built, inits = build(make, *args)
    recording = record(built, list(get_inputs()), device, inits)
    data = split(recording, source, str(model), out_dir, top, cover, granularity)
    if headroom and data["tasks"]:
        from .headroom import measure

        data = measure(data, out_dir, device, cache_dir, seed, on_status)
        (out_dir / SPLIT_JSON).write_text(json.dumps(data, indent=1) + "\n")
    return data


def _model_of(spec: str, inputs: str | None) -> tuple[Any, tuple, Any, str]:
    """(factory, its arguments, inputs factory, the source part classes are copied from): a file's
    source, or "" for a factory in an importable module (its parts are imported from there)."""
    from kernelevo.tasks import TaskError, load_task

    if spec.endswith(".py") or Path(spec).is_file():
        task = load_task(spec)
        return task.model_cls, task.init_args, task.get_inputs, task.source
    if ":" not in spec or not inputs:
        raise TaskError(f"{spec}: give a KernelBench-format model file, or pkg.module:make_model with "
                        "--inputs pkg.module:make_inputs")
    return _named(spec), (), _named(inputs), ""


def _named(spec: str) -> Any:
    """The object `pkg.module:name` names; TaskError (one line) when it cannot be imported."""
    import importlib

    from kernelevo.tasks import TaskError

    module, _, name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise TaskError(f"{spec}: cannot be imported: {type(exc).__name__}: {exc}") from exc
    if not callable(found):
        raise TaskError(f"{spec}: is a {type(found).__name__}, not a function that builds the model or its inputs")
    return found


def split(recording: Recording, source: str, model_path: str, out_dir: Path, top: int, cover: float = COVER,
          granularity: str = "module") -> dict:
    """Write the hottest parts of `recording` into `out_dir` with split.json, until they hold `cover`
    of the model's time or `top` are written; returns split.json's data."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity {granularity!r}: one of {', '.join(GRANULARITIES)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    rest = Rest(opened=[""])  # where the time no part holds went
    candidates = _walk(recording, Constructions(recording.seen), notes, rest)
    written: list[Part] = []
    found, traced_in_vain = regions(recording, rest.own_ms(recording))  # time in forwards' own torch calls
    notes += traced_in_vain
    if not candidates and not found:
        notes.append("no submodule that does work could be a part: the model's time is in its own forward "
                     "(or in what is left out above); optimize the model file itself as one task")
    parts = fold(candidates)
    if granularity == "block":
        parts, cut = _blocks(parts, recording)
        notes += cut
    for part in sorted(parts + found, key=lambda p: -p.ms):
        if sum(recording.share(p.ms) or 0.0 for p in written) >= cover:
            break
        if len(written) >= top:
            rest.past_top_ms += part.ms
            rest.held(part)
            continue
        taken = {p.name for p in written}
        if isinstance(part, Region):
            kind = f"Part{part.block}" if part.block else "Region"  # decoder_block_part1: its first block
            part, reason = write_region(part, out_dir, _name(part.cls.__name__ + kind, taken))
            if reason:  # its time stays in its module's own forward
                where = part.sites[0].path or "the model"
                notes.append(f"a region of {where}'s forward ({part.cls.__name__}): {reason}; left out")
                continue
            rest.held(part)
        else:
            ms = part.ms
            reason, kin_notes = _write(part, recording, source, out_dir, taken)
            notes += kin_notes
            if reason:  # the file does not rebuild its call site
                notes.append(f"{part.sites[0].path} ({part.cls.__name__}): {reason}; left out")
                rest.left_out_ms += ms
                continue
            rest.left_out_ms += ms - part.ms  # the kin it does not rebuild
        written.append(part)
    data = _split_data(recording, model_path, written, notes)
    if data["covered"] is not None and data["covered"] < cover:
        data["rest"] = rest.shares(recording)
        if cover < 1.0:  # a target asked for and missed (1.0, "every part", is never met by measured shares)
            notes.append(Rest.line(data["rest"], data["covered"], cover, top))
    (out_dir / SPLIT_JSON).write_text(json.dumps(data, indent=1) + "\n")
    return data


def _walk(recording: Recording, constructions: Constructions, notes: list[str], rest: Rest) -> list[Part]:
    """The submodules that can be parts, outermost first: a module that cannot is opened into its children
    (noted with why), or left out with its time counted in `rest`."""
    frontier = list(recording.sites[""].children)
    candidates: list[Part] = []
    while frontier:
        site = recording.sites[frontier.pop(0)]
        part, why = _as_part(site, recording, constructions)
        if part is not None:
            candidates.append(part)
            continue
        opened = site.children and not site.no_work
        if why:
            notes.append(f"{site.path} ({type(site.module).__name__}): {why}" +
                         ("; split into its children" if opened else "; left out"))
        if opened:
            frontier[:0] = site.children
            rest.opened.append(site.path)
        elif not site.no_work:
            rest.left_out_ms += site.ms
    return candidates


def _blocks(parts: list[Part], recording: Recording) -> tuple[list, list[str]]:
    """Each part whose forward holds several residual blocks as those blocks (region tasks); the rest as
    they are. A note for each part cut, and for each that could not be traced through."""
    out: list = []
    notes: list[str] = []
    for part in parts:
        where = f"{part.sites[0].path} ({part.cls.__name__})"
        try:  # a forward the tracer cannot go through stays one part
            found, why = block_regions(part.all_sites, recording)
        except Exception as exc:  # noqa: BLE001 - the reason, in one line
            found, why = [], f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
        if found:
            notes.append(f"{where}: cut into {len(found)} residual blocks")
            out += found
            continue
        if not why.startswith("its forward is one block"):
            notes.append(f"{where}: kept whole at block granularity: {why}")
        out.append(part)
    return out, notes


def _as_part(site: Site, recording: Recording, constructions: Constructions) -> tuple[Part | None, str]:
    """The site as a part, or (None, why not); why is "" for what is only opened (containers, unused)."""
    import torch

    module = site.module
    if isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)):
        return None, ""
    if site.calls == 0:
        return None, "" if site.children else "never called"
    if site.no_work:
        return None, "does no work (returns its input unchanged, or a view of it)"
    if _stack(site, recording):
        return None, ""
    layers = recording.layers(site.path)
    if layers > MAX_LAYERS:
        return None, "" if isinstance(module, torch.nn.Sequential) else \
            f"{layers} layers, more than a part holds ({MAX_LAYERS})"
    cls = type(module)
    if "<locals>" in cls.__qualname__:
        return None, "its class is defined inside a function"
    if cls.__name__ == "Model":
        return None, "its class is named Model, the name a task gives its reference"
    built, why = constructions.of(module)
    if built is None:
        return None, why
    try:
        call, inputs = call_of(module.forward, site.args, site.kwargs, site.output, recording.unused_outputs(site))
    except ValueError as exc:
        return None, f"forward {exc}"
    return Part([site], built, call, tuple(inputs)), ""


def _stack(site: Site, recording: Recording) -> bool:
    """A Sequential of blocks of one class (each with layers of its own): a stack, opened so that
    its blocks fold into one task, as a model's layers do."""
    import torch

    kids = [recording.sites[c] for c in site.children if recording.sites[c].calls]
    return isinstance(site.module, torch.nn.Sequential) and len(kids) > 1 and \
        len({type(k.module) for k in kids}) == 1 and all(k.children for k in kids)


def _write(part: Part, recording: Recording, source: str, out_dir: Path, taken: set[str]) -> tuple[str, list[str]]:
    """Write the part's task file and check it rebuilds its first call site, and each kin's first with
    the kin's arguments (a kin it does not rebuild is left out, with a note); ("" or why not, notes)."""
    name = _name(part.cls.__name__, taken)
    path = out_dir / f"{name}.py"
    path.write_text(task_text(part, recording, source))
    reason, how = check(path, part)
    if reason:
        path.unlink()
        return reason, []
    notes = []
    for kin in list(part.kin):
        why, _ = check(path, kin, kin.init)
        if why:
            notes.append(f"{kin.sites[0].path} ({kin.cls.__name__}, built as {kin.init!r}): {why}; left out")
            part.kin.remove(kin)
    if notes:  # the file lists its call sites: write it again without those left out
        path.write_text(task_text(part, recording, source))
    part.name, part.file, part.checked = name, path.name, how
    return "", notes


def _name(class_name: str, taken: set[str]) -> str:
    base = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", class_name).lower().strip("_") or "part"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _split_data(recording: Recording, model_path: str, parts: list, notes: list[str]) -> dict:
    """split.json: the model's time (alone, and with a wait around every module: the basis of the
    shares), then each task with its call sites, then the notes; with regions, each of their modules'
    forward as traced (rewrite.py), which an assembly rewrites with their kernels in place."""
    forwards = {f.path: f.as_json() for p in parts if isinstance(p, Region) for f in p.forwards}
    return {
        "model": model_path, "device": recording.device, "device_name": recording.device_name,
        "model_ms": round(recording.total_ms, 4), "model_ms_waiting": round(recording.sites[""].ms, 4),
        "covered": _round(sum(recording.share(p.ms) or 0.0 for p in parts)),
        "tasks": [entry(p, recording) if isinstance(p, Region) else _entry(p, recording) for p in parts],
        **({"forwards": forwards} if forwards else {}),
        "notes": notes,
    }


def _entry(p: Part, recording: Recording) -> dict:
    return {"task": p.file, "class": p.cls.__qualname__, "init": list(map(repr, p.init)),
            "built_from": HOW[p.built.how], "inputs": [describe(x) for x in p.inputs],
            "call": literal(p.call.spec()), **({"left_out": list(p.call.left_out)} if p.call.left_out else {}),
            **({"defaults": literal(p.call.defaults)} if p.call.defaults else {}),
            "ms": round(p.ms, 4), "share": _round(recording.share(p.ms)),
            "checked": p.checked,
            "call_sites": [{"path": s.path, "calls": s.calls, "ms": round(s.ms, 4),
                            "share": _round(recording.share(s.ms)), **({"built": p.built_at(s)} if p.kin else {})}
                           for s in p.all_sites]}
