"""Reading kernels from outside: a folder of KernelBench-format candidate files, CUDA-L1's published
collection (JSON lines), or rows of Sakana AI's AI CUDA Engineer Archive (Parquet or JSON lines).
Pure parsing here; the caller stores what comes back (archive/store/ writes).

An imported kernel keeps the numbers its source published as `claims`, apart from kernelevo's own
evaluations, and its task is stored by source hash, so an import and a run on the same task meet.
"""
from __future__ import annotations

import ast
import json
import math
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


def kernelbench_folder(folder: Path, tasks: Path | None = None) -> tuple[list[Imported], list[str]]:
    """Candidates `*.py` in `folder` (defining ModelNew) and their task: `tasks` itself when it is a
    file, else `<stem>.py` for a candidate `<stem>__<anything>.py` or `<stem>.py`, looked for in
    `tasks`, or by default beside the candidate, then one folder up (`tasks/candidates/`). Returns
    (kernels, one line per file skipped, saying why); task files in `folder` are not candidates."""
    folder = Path(folder)
    places = [tasks] if tasks is not None else [folder, folder.resolve().parent]
    found, skipped = [], []
    for path in sorted(folder.glob("*.py")):
        text = path.read_text(errors="replace")
        if not _MODEL_NEW.search(text):
            if not _MODEL.search(text):  # a task (class Model) beside its candidates is no news
                skipped.append(f"{path.name}: defines no ModelNew class")
            continue
        task = _task_file(path, places)
        if task is None:
            where = " or ".join(str(p) for p in places)
            skipped.append(f"{path.name}: no task file {path.stem.split('__')[0]}.py in {where} "
                           "(name candidates <task>__<label>.py beside <task>.py, or give --task)")
            continue
        task_text = task.read_text(errors="replace")
        if not _MODEL.search(task_text):
            skipped.append(f"{path.name}: its task {task.name} defines no Model class")
            continue
        found.append(Imported(task.stem, task_text, text, path.name))
    return found, skipped


def _task_file(candidate: Path, places: list[Path]) -> Path | None:
    """The candidate's task: the one file given, or the first `<task>.py` in `places` that is not a
    candidate itself (candidates named `<task>.py` keep their task one folder up)."""
    if len(places) == 1 and places[0].is_file():
        return places[0]
    name = f"{candidate.stem.split('__')[0]}.py"
    for place in places:
        task = place / name
        if task.is_file() and not _MODEL_NEW.search(task.read_text(errors="replace")):
            return task
    return None


def cuda_l1_rows(rows: list[tuple[str, Any]]) -> tuple[list[Imported], list[str]]:
    """CUDA-L1's collection, as read_rows() gives it: objects with `level_id`, `task_id`, `ref_code`
    (the task), `custom_code` (the candidate) and `score_*` fields (kept as claims)."""
    found, skipped = [], []
    for number, (where, row) in enumerate(rows, 1):
        if not isinstance(row, dict):
            skipped.append(f"{where}: not an object")
            continue
        missing = [k for k in ("ref_code", "custom_code") if not isinstance(row.get(k), str) or not row[k].strip()]
        if missing:
            skipped.append(f"{where}: no {' or '.join(missing)}")
            continue
        if not _MODEL_NEW.search(row["custom_code"]):
            skipped.append(f"{where}: custom_code defines no ModelNew class")
            continue
        claims = {k: _plain(v) for k, v in row.items() if k.startswith("score")}
        claims.update(source="CUDA-L1", level_id=_plain(row.get("level_id")), task_id=_plain(row.get("task_id")))
        name = f"level{claims['level_id'] if claims['level_id'] is not None else '?'}_task{claims['task_id'] or number}"
        found.append(Imported(name, row["ref_code"], row["custom_code"], where, claims))
    return found, skipped


# Sakana's rows hold a pybind11 extension whose `forward` takes the functional model's arguments:
# their evaluator calls the functional Model with fn=extension.forward. The generated ModelNew does
# the same, so the kernel is judged as it was published. The functional class is renamed: a
# candidate that names `Model` is (rightly) refused as using the reference.
_SAKANA_WRAPPER = '''"""{title}
Imported from Sakana AI's AI CUDA Engineer Archive. The CUDA extension's forward replaces module_fn,
the functional model's computation, as in that archive's own evaluation."""
from torch.utils.cpp_extension import load_inline

{functional}

CUDA_SRC = {cuda}

_ext = load_inline(name="sakana_{digest}", cpp_sources="", cuda_sources=CUDA_SRC, verbose=False)


class ModelNew(FunctionalModel):
    def forward(self, *args):
        return super().forward(*args, fn=_ext.forward)
'''
SAKANA_CLAIMS = ("Correct", "Max_Diff", "Error", "CUDA_Runtime", "PyTorch_Native_Runtime", "PyTorch_Compile_Runtime",
                 "CUDA_Speedup_Native", "CUDA_Speedup_Compile")


def read_rows(path: Path) -> tuple[list[tuple[str, Any]], list[str]]:
    """(where, row) pairs of a .parquet file (needs pandas and pyarrow) or a JSON-lines file, and the
    lines skipped as not JSON."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pandas

        frame = pandas.read_parquet(path)
        return [(f"{path.name}:row {i}", row) for i, row in enumerate(frame.to_dict("records"), 1)], []
    rows, skipped = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append((f"{path.name}:{number}", json.loads(line)))
            except json.JSONDecodeError as exc:
                skipped.append(f"{path.name}:{number}: not JSON ({exc.msg})")
    return rows, skipped


def is_sakana(rows: list[tuple[str, Any]]) -> bool:
    """Sakana's archive has CUDA_Code columns; CUDA-L1's collection has custom_code."""
    return any(isinstance(row, dict) and "CUDA_Code" in row for _, row in rows[:50])


def sakana_rows(rows: list[tuple[str, Any]]) -> tuple[list[Imported], list[str]]:
    """Sakana AI's AI CUDA Engineer Archive rows: the task is PyTorch_Code_Module, the candidate a
    generated ModelNew that calls CUDA_Code's forward through PyTorch_Code_Functional."""
    found, skipped = [], []
    for where, row in rows:
        if not isinstance(row, dict):
            skipped.append(f"{where}: not an object")
            continue
        missing = [k for k in ("CUDA_Code", "PyTorch_Code_Module", "PyTorch_Code_Functional")
                   if not isinstance(row.get(k), str) or not row[k].strip()]
        if missing:
            skipped.append(f"{where}: no {' or '.join(missing)}")
            continue
        try:
            source = sakana_candidate(row)
        except (SyntaxError, ValueError) as exc:
            skipped.append(f"{where}: {type(exc).__name__}: {exc}")
            continue
        claims = {k: _plain(row.get(k)) for k in SAKANA_CLAIMS if k in row}
        claims.update(source="AI CUDA Engineer Archive", op_name=row.get("Op_Name"),
                      level_id=_plain(row.get("Level_ID")), task_id=_plain(row.get("Task_ID")),
                      kernel_name=row.get("Kernel_Name"))
        name = f"level{claims['level_id']}_{claims['task_id']}_{row.get('Op_Name') or 'task'}"
        found.append(Imported(name, row["PyTorch_Code_Module"], source, where, claims))
    return found, skipped


def sakana_candidate(row: dict) -> str:
    """The ModelNew file for one archive row (raises ValueError or SyntaxError when it cannot make one)."""
    from kernelevo.tasks import source_hash

    if "PYBIND11_MODULE" not in row["CUDA_Code"]:
        raise ValueError("CUDA_Code defines no PYBIND11_MODULE, so it has no forward to call")
    tree = ast.parse(row["PyTorch_Code_Functional"])
    if not any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in tree.body):
        raise ValueError("PyTorch_Code_Functional defines no Model class")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            node.name = "FunctionalModel"
        elif isinstance(node, ast.Name) and node.id == "Model":
            node.id = "FunctionalModel"
    title = " / ".join(str(row[k]) for k in ("Op_Name", "Kernel_Name") if row.get(k)) or "An archive kernel"
    return _SAKANA_WRAPPER.format(title=title.replace('"', "'"), functional=ast.unparse(tree),
                                  cuda=_literal(row["CUDA_Code"]), digest=source_hash(row["CUDA_Code"])[:12])


def _literal(text: str) -> str:
    """A Python literal for `text`: a readable raw triple-quoted string where that parses back to the
    same text, else repr()."""
    raw = f'r"""{text}"""'
    try:
        if ast.literal_eval(raw) == text:
            return raw
    except (SyntaxError, ValueError):
        pass
    return repr(text)


def _plain(value: Any) -> Any:
    """A JSON-ready value: numpy scalars as Python numbers, NaN as None."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and not math.isfinite(value) else value
