"""A part as a KernelBench task file, and the check that the file rebuilds its call site.

The file holds the part's class as the model file defines it (with the imports, constants, classes
and functions it needs, verbatim), or an import of it (a torch.nn class, or one from an importable
package); `Model` subclasses it with the constructor's parameters, so its weights keep their names;
get_inputs() draws inputs of the shapes and dtypes seen at the first call site (integer inputs in
the range seen there), get_init_inputs() gives the constructor arguments recorded as it was built.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from .call import forward_text, used
from .construct import literal

TOLERANCE = {"float64": 1e-9, "float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}


def task_text(part, recording, source: str) -> str:
    """The task file's text for `part` (split.Part) of `recording`."""
    cls = part.cls
    # Nothing of this model or this run in the text (its call sites and time shares are in split.json):
    # the same part of another model writes the same file, so its search is seeded from this one's kernels.
    header = (f"# {cls.__name__}, one part of a model, written by `kernelevo split`; its call sites and their\n"
              "# shares of the model's time are in split.json beside this file.\n")
    classes = part.built.classes()
    mine = [c.__name__ for c in classes
            if c.__module__ == type(recording.model).__module__ and _defines(source, c.__name__)]
    nn_line = "import torch.nn as nn\n" if any(_in_nn(c) for c in classes) else ""
    imports = "".join(_import_of(c) for c in classes if c.__name__ not in mine and not _in_nn(c))
    if mine:
        body = part_source(source, *mine).rstrip() + "\n"
        if not re.search(r"^import torch$", body, re.M):
            body += "\nimport torch  # noqa: E402 (for the inputs below; the part's source above is as written)\n"
        if nn_line and not re.search(r"^import torch\.nn as nn$", body, re.M):
            body += nn_line.rstrip() + "  # noqa: E402\n"
        body += imports
    else:
        body = "import torch\n" + nn_line + imports
    params = ", ".join(part.params)
    forward = "" if part.call.plain else "\n" + forward_text(part.call)
    dtype = _dtype(part.sites[0].module)
    cast = f"        self.to({dtype})  # the model's dtype at this part's call sites\n" if dtype else ""
    return (header + body + "\n\n"
            f"class Model({_name_of(cls, set(mine))}):\n"
            f"    def __init__(self{', ' if params else ''}{params}):\n"
            f"        super().__init__({construction_text(part.built, 'top', set(mine))})\n"
            f"{cast}{forward}\n\n"
            "def get_inputs():\n"
            f"    return [{', '.join(input_text(x) for x in part.inputs)}]\n\n\n"
            "def get_init_inputs():\n"
            f"    return [{', '.join(literal(v) for v in part.init)}]\n" + _sites_text(part))


def _sites_text(part) -> str:
    """get_call_sites() for a part folded over sites of other sizes (split.Part.kin); "" for one built once."""
    if not part.kin:
        return ""
    rows = "".join(f"        ({literal(list(init))}, {shapes!r}),\n" for init, shapes in part.builds)
    return ("\n\n"
            "def get_call_sites():\n"
            "    # Every call site of this part in the model, as (constructor arguments, input shapes); the\n"
            "    # first is get_init_inputs() and get_inputs(). A kernel is checked at every one.\n"
            f"    return [\n{rows}    ]\n")


def _dtype(module) -> str | None:
    """`torch.bfloat16` (say) where every floating tensor of `module` has that one dtype and it is not
    the default float32 (a bf16 model gives bf16 tasks); None where it is float32, mixed or absent."""
    import torch

    kinds = {t.dtype for t in [*module.parameters(), *module.buffers()] if t.is_floating_point()}
    if len(kinds) != 1 or kinds == {torch.get_default_dtype()}:
        return None
    return str(kinds.pop())


def construction_text(built, level: str, mine: set[str]) -> str:
    """The arguments of a construction's call: at the top level its plain arguments by their
    parameter names (the task's constructor arguments), inside it literals; modules as calls."""
    from .construct import Construction

    written = []
    for a in built.args:
        if isinstance(a.value, Construction):
            value = f"{_name_of(a.value.cls, mine)}({construction_text(a.value, '', mine)})"
        else:
            value = a.name if level == "top" else (a.lifted or literal(a.value))
        written.append(f"{a.name}={value}" if a.keyword else value)
    return ", ".join(written)


def _defines(source: str, name: str) -> bool:
    try:
        return any(getattr(node, "name", None) == name for node in ast.parse(source).body)
    except SyntaxError:
        return False


def _in_nn(cls: type) -> bool:
    import torch.nn as nn

    return getattr(nn, cls.__name__, None) is cls


def _name_of(cls: type, mine: set[str]) -> str:
    """How the task file names a class: nn.X for torch's, as written for the model file's or imported ones."""
    if cls.__name__ in mine:
        return cls.__qualname__
    return f"nn.{cls.__name__}" if _in_nn(cls) else cls.__qualname__


def _import_of(cls: type) -> str:
    """The import line of a class that is neither torch.nn's nor written in the task file."""
    return f"from {cls.__module__} import {cls.__qualname__.split('.')[0]}\n"


def input_text(x: Any) -> str:
    """Source that draws a value like `x` (a tensor of its shape, dtype and, for integers, range; else the literal)."""
    import torch

    if not isinstance(x, torch.Tensor):
        return literal(x)
    shape, dtype = list(x.shape), str(x.dtype)
    if x.dtype == torch.bool:
        return f"torch.rand({shape}) < 0.5"
    if x.is_floating_point() or x.is_complex():
        return f"torch.randn({shape}, dtype={dtype})"
    low, high = (int(x.min()), int(x.max())) if x.numel() else (0, 0)
    return f"torch.randint({low}, {high + 1}, {shape}, dtype={dtype})"


def check(path: Path, part, init: tuple | None = None) -> tuple[str, str]:
    """("", how it matched) when the task file loads, runs its own inputs, and, with the first call
    site's weights, gives back that site's output from its captured inputs (the tensors the model
    uses); else (why not, ""). With `init`, its Model is built with those arguments (a call site of
    other sizes)."""
    site = part.sites[0]
    got, reason = run_written(path, site.module.state_dict(), part.inputs, site.module.training, init)
    if reason:
        return reason, ""
    reason, worst = compare(got, used(part.call, site.output))
    if reason:
        return reason, ""
    if len(got) != part.call.outputs:
        return f"the written task returns {len(got)} tensors, its call site {part.call.outputs}", ""
    return "", f"gives back {site.path}'s output from its captured inputs (max difference {worst:.3g})"


def run_written(path: Path, state: dict, inputs, training: bool = False,
                init: tuple | None = None) -> tuple[list, str]:
    """(the outputs, "") of the task file at `path` built with the tensors `state` (and the constructor
    arguments `init`, where given), run on its own inputs (unless built otherwise) and then on copies of
    `inputs`; ([], why not) where it does not build or run."""
    import torch

    from kernelevo.tasks import TaskError, load_task

    try:
        task = load_task(path)
        model = task.make_model() if init is None else task.model_cls(*init)
        model.load_state_dict(state)
    except (TaskError, RuntimeError, TypeError, ValueError) as exc:
        return [], f"the written task does not rebuild: {str(exc).splitlines()[0][:200]}"
    device = inputs[0].device
    model = model.to(device).train(training)
    try:
        with torch.no_grad():
            if init is None:
                model(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()])
            out = model(*[x.clone() for x in inputs])
    except Exception as exc:  # noqa: BLE001 - any failure of the written code is a reason
        return [], f"the written task fails to run: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return (list(out) if isinstance(out, tuple) else [out]), ""


def compare(got: list, wanted: list) -> tuple[str, float]:
    """("", the largest difference) where each tensor written code returned is the recorded one within
    the tolerance of its dtype (relative to the recorded values' scale); else (why not, 0)."""
    import torch

    worst = 0.0
    for out, want in zip(got, wanted, strict=False):
        if not isinstance(out, torch.Tensor) or out.shape != want.shape or out.dtype != want.dtype:
            return "the written task returns another shape or dtype than its call site", 0.0
        diff = (out.double() - want.double()).abs().max().item() if out.numel() else 0.0
        scale = want.double().abs().max().item() if want.numel() else 0.0
        if not diff <= TOLERANCE.get(str(want.dtype).replace("torch.", ""), 0.0) * max(1.0, scale):
            return f"the written task differs from its call site's output by {diff:.3g}", 0.0
        worst = max(worst, diff)
    return "", worst


def part_source(source: str, *class_names: str) -> str:
    """The model file's source cut to what the part's classes need: its imports, and the top-level
    classes, functions and constants they refer to by name, transitively (never the model's
    own Model, input functions, docstring or `__main__` block). What is kept is verbatim, in order."""
    tree = ast.parse(source)
    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                defs |= {n.id: node for n in ast.walk(target) if isinstance(n, ast.Name)}
    need, todo = set(), list(class_names)
    while todo:
        name = todo.pop()
        if name in need or name not in defs or name in _TASK_NAMES:
            continue
        need.add(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)]
    kept = {id(defs[name]) for name in need}
    spans = {(n.lineno, n.end_lineno) for n in defs.values() if id(n) not in kept}
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        spans.add((tree.body[0].lineno, tree.body[0].end_lineno))  # the model's docstring
    return cut(source, lambda node: (node.lineno, node.end_lineno) in spans)


def cut(source: str, drop) -> str:
    """`source` without the top-level statements `drop(node)` is true of, nor its `__main__` block;
    the rest verbatim."""
    lines = source.splitlines(keepends=True)
    spans = []
    for node in ast.parse(source).body:
        main = isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
        if main or drop(node):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            spans.append((first, node.end_lineno))
    for first, last in sorted(spans, reverse=True):
        del lines[first - 1:last]
    return re.sub(r"\n{4,}", "\n\n\n", "".join(lines)).lstrip("\n")  # a dropped statement leaves no wider gap


_TASK_NAMES = frozenset({"Model", "get_inputs", "get_init_inputs", "get_test_inputs"})
