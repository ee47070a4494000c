"""Reading kernels from outside: a folder of KernelBench-format candidate files, or CUDA-L1's published
collection (JSON lines). Pure parsing here; the caller stores what comes back (store.py writes).

An imported kernel keeps the numbers its source published as `claims`, apart from kernelevo's own
evaluations, and its task is stored by source hash, so an import and a run on the same task meet.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.M)
_MODEL = re.compile(r"^class\s+Model\b", re.M)


@dataclass(frozen=True)
class Imported:
    task_name: str
    task_source: str
    source: str  # the candidate file: defines ModelNew
    where: str  # file, or file:line, for messages
    claims: dict[str, Any] = field(default_factory=dict)


def kernelbench_folder(folder: Path, tasks: Path) -> tuple[list[Imported], list[str]]:
    """Candidates `*.py` in `folder` (defining ModelNew) and their task: `tasks` itself when it is a
    file, else `tasks/<stem>.py` for a candidate `<stem>__<anything>.py` or `<stem>.py`. Returns
    (kernels, one line per file skipped, saying why)."""
    found, skipped = [], []
    for path in sorted(Path(folder).glob("*.py")):
        text = path.read_text(errors="replace")
        if not _MODEL_NEW.search(text):
            skipped.append(f"{path.name}: defines no ModelNew class")
            continue
        task = tasks if tasks.is_file() else tasks / f"{path.stem.split('__')[0]}.py"
        if not task.is_file():
            skipped.append(f"{path.name}: no task file {task} (name candidates <task>__<label>.py, or give --task)")
            continue
        task_text = task.read_text(errors="replace")
        if not _MODEL.search(task_text):
            skipped.append(f"{path.name}: its task {task.name} defines no Model class")
            continue
        found.append(Imported(task.stem, task_text, text, path.name))
    return found, skipped


def cuda_l1_jsonl(path: Path) -> tuple[list[Imported], list[str]]:
    """CUDA-L1's collection: one JSON object per line with `level_id`, `task_id`, `ref_code` (the task),
    `custom_code` (the candidate) and `score_*` fields (kept as claims)."""
    found, skipped = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{Path(path).name}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                skipped.append(f"{where}: not JSON ({exc.msg})")
                continue
            missing = [k for k in ("ref_code", "custom_code") if not isinstance(row.get(k), str) or not row[k].strip()]
            if missing:
                skipped.append(f"{where}: no {' or '.join(missing)}")
                continue
            if not _MODEL_NEW.search(row["custom_code"]):
                skipped.append(f"{where}: custom_code defines no ModelNew class")
                continue
            claims = {k: v for k, v in row.items() if k.startswith("score")}
            claims.update(source="CUDA-L1", level_id=row.get("level_id"), task_id=row.get("task_id"))
            name = f"level{row.get('level_id', '?')}_task{row.get('task_id', number)}"
            found.append(Imported(name, row["ref_code"], row["custom_code"], where, claims))
    return found, skipped
