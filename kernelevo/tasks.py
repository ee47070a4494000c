"""KernelBench-format task files: `Model`, `get_inputs()`, `get_init_inputs()`.

A task may also define `get_test_inputs()`, returning extra input lists (other shapes) that the
judge uses for correctness only, and `get_call_sites()`, the constructor arguments and input shapes of
each call site of a model's part folded over sites of other sizes (`kernelevo split`), on every one of
which the judge checks a kernel. Loading validates the file and turns any problem into a
`TaskError` whose message is one line naming the file, the line where it applies, and the fix.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import linecache
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

_counter = itertools.count()


class TaskError(ValueError):
    """A task or candidate file that cannot be used; the message is one line."""


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" when it has none), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _where(exc: BaseException, filename: str) -> str:
    """'file:line' of the deepest traceback frame inside `filename`, else the file alone."""
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        return f"{Path(filename).name}:{exc.lineno}"
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename:
            line = frame.lineno
    return f"{Path(filename).name}:{line}" if line else Path(filename).name


def load_module(source: str, filename: str, kind: str = "task") -> types.ModuleType:
    """Execute `source` as a fresh module; errors become a one-line TaskError."""
    name = f"kernelevo_{kind}_{next(_counter)}"
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    # Tracebacks and inspect.getsource (Triton's @jit reads its function's source) find the lines here,
    # as they were executed: the file on disk may differ, or be out of a sandboxed judge's reach.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    try:
        code = compile(source, filename, "exec")
        exec(code, module.__dict__)
    except SyntaxError as exc:
        raise TaskError(f"{_where(exc, filename)}: syntax error: {exc.msg}") from exc
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is reported, not raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TaskError(f"{_where(exc, filename)}: {type(exc).__name__}: {first_line(exc)}") from exc
    return module


@dataclass(frozen=True)
class Task:
    """A loaded task: the reference model factory, its inputs, and the source's identity."""

    name: str
    path: str
    source: str
    source_hash: str
    model_cls: type
    get_inputs: Callable[[], list]
    init_args: tuple
    get_test_inputs: Callable[[], list] | None = None
    call_sites: tuple[tuple[tuple, tuple[tuple[int, ...], ...]], ...] = ()  # (init, input shapes) per site

    def make_model(self):
        return self.model_cls(*self.init_args)

    def input_summary(self) -> str:
        """'float32[16, 4096], int64[16]' for the inputs get_inputs() returns."""
        return ", ".join(_describe(x) for x in self.get_inputs())


def _describe(x: Any) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}"
    return repr(x)


def check_inputs(value: Any, what: str, filename: str) -> list:
    """Inputs must be a list/tuple holding at least one tensor, and otherwise only numbers."""
    import torch

    name = Path(filename).name
    if not isinstance(value, (list, tuple)):
        raise TaskError(f"{name}: {what} must return a list of tensors, got {type(value).__name__}")
    if not any(isinstance(x, torch.Tensor) for x in value):
        raise TaskError(f"{name}: {what} returned no tensor; return a list of input tensors")
    for i, x in enumerate(value):
        if not isinstance(x, (torch.Tensor, int, float, bool)):
            raise TaskError(f"{name}: {what} item {i} is a {type(x).__name__}; "
                            "inputs must be tensors (or plain numbers)")
    return list(value)


def load_task(path: str | Path) -> Task:
    """Load and validate a task file; raise TaskError with a one-line message on any problem."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such file; give the path of a task .py file")
    source = path.read_text()
    filename = str(path.resolve())
    module = load_module(source, filename, "task")
    name = path.name
    model_cls = getattr(module, "Model", None)
    if model_cls is None:
        raise TaskError(f"{name}: no `Model` class; a task defines class Model(nn.Module)")
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise TaskError(f"{name}: `Model` must be a subclass of torch.nn.Module")
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn, None)):
            raise TaskError(f"{name}: no `{fn}()` function; KernelBench tasks define get_inputs and get_init_inputs")
    init_args = _call(module.get_init_inputs, "get_init_inputs()", filename)
    if not isinstance(init_args, (list, tuple)):
        raise TaskError(f"{name}: get_init_inputs() must return a list, got {type(init_args).__name__}")
    check_inputs(_call(module.get_inputs, "get_inputs()", filename), "get_inputs()", filename)
    test_inputs = getattr(module, "get_test_inputs", None)
    if test_inputs is not None:
        sets = _call(test_inputs, "get_test_inputs()", filename)
        if not isinstance(sets, (list, tuple)) or not sets:
            raise TaskError(f"{name}: get_test_inputs() must return a non-empty list of input lists")
        for i, inputs in enumerate(sets):
            check_inputs(inputs, f"get_test_inputs()[{i}]", filename)
    sites = _call_sites(module, filename)
    try:
        model_cls(*init_args)
    except Exception as exc:  # noqa: BLE001
        raise TaskError(f"{_where(exc, filename)}: Model(*get_init_inputs()) failed: "
                        f"{type(exc).__name__}: {first_line(exc)}") from exc
    return Task(name=path.stem, path=filename, source=source, source_hash=source_hash(source),
                model_cls=model_cls, get_inputs=module.get_inputs, init_args=tuple(init_args),
                get_test_inputs=test_inputs, call_sites=sites)


def _call_sites(module, filename: str) -> tuple:
    """get_call_sites()'s (constructor arguments, input shapes) pairs, checked; () where it is absent."""
    fn = getattr(module, "get_call_sites", None)
    if fn is None:
        return ()
    sites = _call(fn, "get_call_sites()", filename)
    name = Path(filename).name
    out = []
    for i, site in enumerate(sites if isinstance(sites, (list, tuple)) else [None]):
        ok = isinstance(site, (list, tuple)) and len(site) == 2 and isinstance(site[0], (list, tuple)) and \
            isinstance(site[1], (list, tuple)) and all(isinstance(s, (list, tuple)) and
                                                       all(isinstance(n, int) and n >= 0 for n in s) for s in site[1])
        if not ok:
            raise TaskError(f"{name}: get_call_sites() item {i} must be ([constructor arguments], "
                            "[[input 0's shape], ...]); return a list of such pairs")
        out.append((tuple(site[0]), tuple(tuple(s) for s in site[1])))
    return tuple(out)


def _call(fn: Callable, what: str, filename: str) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        raise TaskError(f"{_where(exc, filename)}: {what} failed: {type(exc).__name__}: {first_line(exc)}") from exc


SPLIT_JSON = "split.json"  # what `kernelevo split` writes beside a model's part files


def model_part(path: str | Path) -> bool:
    """Whether the task file is one part of a model: split.json beside it lists it (`kernelevo split`)."""
    path = Path(path)
    try:
        data = json.loads((path.parent / SPLIT_JSON).read_text())
    except (OSError, ValueError):
        return False
    tasks = data.get("tasks") if isinstance(data, dict) else None
    return isinstance(tasks, list) and any(isinstance(t, dict) and t.get("task") == path.name for t in tasks)
