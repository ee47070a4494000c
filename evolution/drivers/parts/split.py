"""Split a recorded model into parts and write each as a KernelBench task file.

Which modules become parts: the model's submodules, outermost first. Lists and stacks (a Sequential
of blocks of one class) are opened into their children, and so is a module of more than MAX_LAYERS
working layers (a part is one kernel's worth of work) and one that cannot be rebuilt standalone (a
class defined inside a function, constructor arguments that cannot be found or written, a call or an
output a task cannot state); one whose written file does not give back its call site's output is
left out. The reason is kept. A module that does no work (Dropout in eval, Identity) is no part. How a part is
built again is construct.py's; how it is called, call.py's. Identical parts (the same class,
construction, call and input shapes: 24 transformer layers) fold into one task whose time is the sum
of its call sites. Time a module spends in its own forward (torch calls between its submodules) is
taken as regions of its traced forward (region.py), which rank with the parts. At block granularity a
part whose forward holds residual blocks (a transformer layer: attention, then MLP, each with its norm
and residual) is cut into them, each a region task (region.block_regions). Tasks are written
hottest first until they hold `cover` of the model's time or `top` are written; split.json maps each
task to its call sites and their shares of the model's time.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .call import Call, describe
from .call import of as call_of
from .construct import HOW, Construction, Constructions, literal
from .record import Recording, Site
from .rest import Rest
from .rest import rounded as _round
from .region import Region, block_regions, regions
from .region_file import entry
from .region_file import write as write_region
from .task_file import check, construction_text, task_text

SPLIT_JSON = "split.json"


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
        return sum(s.ms for s in self.sites)


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
    frontier = list(recording.sites[""].children)
    constructions = Constructions(recording.seen)
    written: list[Part] = []
    notes: list[str] = []
    candidates: list[Part] = []
    rest = Rest(opened=[""])  # where the time no part holds went
    while frontier:
        site = recording.sites[frontier.pop(0)]
        part, why = _as_part(site, recording, constructions)
        if part is None:
            opened = site.children and not site.no_work
            if why:
                notes.append(f"{site.path} ({type(site.module).__name__}): {why}" +
                             ("; split into its children" if opened else "; left out"))
            if opened:
                frontier[:0] = site.children
                rest.opened.append(site.path)
            elif not site.no_work:
                rest.left_out_ms += site.ms
            continue
        candidates.append(part)
    found, traced_in_vain = regions(recording, rest.own_ms(recording))  # time in forwards' own torch calls
    notes += traced_in_vain
    if not candidates and not found:
        notes.append("no submodule that does work could be a part: the model's time is in its own forward "
                     "(or in what is left out above); optimize the model file itself as one task")
    parts = _fold(candidates)
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
        elif reason := _write(part, recording, source, out_dir, taken):
            # the file does not rebuild its call site
            notes.append(f"{part.sites[0].path} ({part.cls.__name__}): {reason}; left out")
            rest.left_out_ms += part.ms
            continue
        written.append(part)
    data = _split_data(recording, model_path, written, notes)
    if data["covered"] is not None and data["covered"] < cover:
        data["rest"] = rest.shares(recording)
        if cover < 1.0:  # a target asked for and missed (1.0, "every part", is never met by measured shares)
            notes.append(Rest.line(data["rest"], data["covered"], cover, top))
    (out_dir / SPLIT_JSON).write_text(json.dumps(data, indent=1) + "\n")
    return data


def _blocks(parts: list[Part], recording: Recording) -> tuple[list, list[str]]:
    """Each part whose forward holds several residual blocks as those blocks (region tasks); the rest as
    they are. A note for each part cut, and for each that could not be traced through."""
    out: list = []
    notes: list[str] = []
    for part in parts:
        where = f"{part.sites[0].path} ({part.cls.__name__})"
        try:  # a forward the tracer cannot go through stays one part
            found, why = block_regions(part.sites, recording)
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


def _signature(part: Part) -> tuple:
    shapes = tuple((tuple(x.shape), str(x.dtype)) for x in part.inputs)
    return (part.cls.__module__, part.cls.__qualname__, construction_text(part.built, "", set()),
            repr(part.init), repr(part.call.spec()), shapes)


def _fold(parts: list[Part]) -> list[Part]:
    """Identical parts as one task; and parts of one class, call and input shapes whose constructor
    arguments differ only in what their forward never uses (a drop-path rate left as Identity): a
    site's module given another's weights computes the other's output exactly."""
    groups: dict[tuple, Part] = {}
    alike: dict[tuple, list[Part]] = {}
    for part in parts:
        key = _signature(part)
        if key in groups:
            groups[key].sites += part.sites
            continue
        loose = key[:2] + key[4:]  # the signature without the construction and its arguments
        same = next((g for g in alike.get(loose, []) if _same_forward(g, part)), None)
        if same is not None:
            same.sites += part.sites
            continue
        groups[key] = part
        alike.setdefault(loose, []).append(part)
    return list(groups.values())


def _same_forward(kept: Part, other: Part) -> bool:
    """Whether `other`'s module, holding `kept`'s weights, gives `kept`'s output on `kept`'s first inputs
    (copies of both modules and of the inputs: nothing of the live model moves)."""
    import copy

    import torch

    from .call import tensors_of

    site = kept.sites[0]
    mine, theirs = site.module.state_dict(), other.sites[0].module.state_dict()
    if mine.keys() != theirs.keys() or any(mine[k].shape != theirs[k].shape or mine[k].dtype != theirs[k].dtype
                                           for k in mine):
        return False
    twin = copy.deepcopy(other.sites[0].module)
    twin.load_state_dict(mine)
    try:
        with torch.no_grad():
            want = copy.deepcopy(site.module)(*copy.deepcopy(site.args), **copy.deepcopy(site.kwargs))
            got = twin(*copy.deepcopy(site.args), **copy.deepcopy(site.kwargs))
    except Exception:  # noqa: BLE001 - another's arguments that do not run here do matter
        return False
    a, b = tensors_of(want), tensors_of(got)
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _write(part: Part, recording: Recording, source: str, out_dir: Path, taken: set[str]) -> str:
    """Write the part's task file and check it rebuilds its first call site; "" or why not."""
    name = _name(part.cls.__name__, taken)
    path = out_dir / f"{name}.py"
    path.write_text(task_text(part, recording, source))
    reason, how = check(path, part)
    if reason:
        path.unlink()
        return reason
    part.name, part.file, part.checked = name, path.name, how
    return ""


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
            "ms": round(p.ms, 4), "share": _round(recording.share(p.ms)),
            "checked": p.checked,
            "call_sites": [{"path": s.path, "calls": s.calls, "ms": round(s.ms, 4),
                            "share": _round(recording.share(s.ms))}
                           for s in p.sites]}
