"""Where a replay's recording comes from (`--model replay:SOURCE`): the archive's calls of a run, or of the
run a bench made for this task, or a folder of replies. The replaying model itself is agent/replay.py."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelevo.agent.client import LLM
from kernelevo.agent.models import lookup
from kernelevo.agent.providers import parse_model
from kernelevo.agent.replay import Recorded, ReplayLLM, ReplaySpec, read_folder, served_by_text
from kernelevo.config import Config


@dataclass(frozen=True)
class ReplayPlace:
    """What a replay needs to know of the run it answers for."""
    task: str  # the task's name: a folder's and a bench's replies are found by it
    archive: Path
    prompts: Path  # where the first prompt with no recorded reply is written (<out>/prompts/<task>)
    resumed: str = ""  # the run being resumed: the replies it was served are not served again


def member(spec: ReplaySpec, config: Config, place: ReplayPlace) -> ReplayLLM:
    """The replaying model of `spec` for one task; ValueError where SOURCE is neither a folder (or a path) nor a
    run or bench of the archive, or is a run of another task."""
    then = LLM(config.model(spec.then)) if spec.then else None
    folder = Path(spec.source).expanduser()
    if folder.is_dir() or "/" in spec.source:  # a path not made yet: the first round, with nothing answered
        mine = folder / place.task
        recorded, model = read_folder(mine if mine.is_dir() else folder), ""
    else:
        recorded, model = _from_archive(spec.source, place)
    return ReplayLLM(spec, recorded, place.prompts, _edit_format(model), then, frozenset(_served(recorded, place)))


def _served(recorded: list[Recorded], place: ReplayPlace) -> set[int]:
    """The numbers of the recorded replies the resumed run was served already (agent.replay.served_by_text)."""
    if not place.resumed or not place.archive.exists():
        return set()
    from kernelevo.archive.store import Archive

    with Archive.open_readonly(place.archive) as archive:
        texts = archive.replayed_replies(place.resumed)
    return {r.number for r in served_by_text(recorded, texts) if r is not None}


def _from_archive(source: str, place: ReplayPlace) -> tuple[list[Recorded], str]:
    """The recorded replies of run `source`, or of the run bench `source` made for this task, and the model
    that wrote the first of them (provider:model, "" where none)."""
    from kernelevo.archive.store import Archive

    if not place.archive.exists():
        raise ValueError(f"replay:{source}: no archive at {place.archive}, and no folder of that name")
    with Archive.open_readonly(place.archive) as archive:
        run_id = _run_of(archive, source, place.task)
        rows = archive.recorded_replies(run_id)
    recorded = [Recorded(i + 1, r.operator, r.reply, r.prompt_hash, r.prompt_form) for i, r in enumerate(rows)]
    model = next((f"{r.provider}:{r.model}" for r in rows if r.provider != "replay"), "")
    return recorded, model


def _run_of(archive, source: str, task: str) -> str:
    run = archive.run(source)
    if run is not None:
        recorded = run.task_name
        if recorded != task:
            raise ValueError(f"replay:{source}: that run searched task {recorded!r}, not {task!r}")
        return source
    if archive.bench(source) is not None:
        for row in archive.bench_tasks(source):
            if row.name == task and row.run_id:
                return row.run_id
        raise ValueError(f"replay:{source}: that bench has no search of task {task!r}")
    raise ValueError(f"replay:{source}: no run or bench of that id in {archive.path}, and no folder of that name")


def _edit_format(model: str) -> str:
    """The edit format the recorded model was asked for (its replies are in it); "whole" where unknown."""
    if not model:
        return "whole"
    try:
        return lookup(parse_model(model)).edit_format
    except ValueError:
        return "whole"
