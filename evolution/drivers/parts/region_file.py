"""A region (region.py) as a KernelBench task file, and the check that the file gives back what the
region gave in the model.

The file's Model takes the region's input tensors and returns its outputs (a tuple when several); its
forward is torch.fx's code of the lifted region, as plain Python. Its tensors are registered in
`__init__` with their shapes and dtypes: the module's weights and buffers drawn in their own character
(the judge draws them again), a 0/1 mask or a constant tensor written as its structure (torch.ones(...)
.tril(k), torch.full, torch.arange: the judge keeps a mask, a kernel may rely on it), and a tensor the
forward itself made (a constant of the trace) written exactly, or the region is left out.
get_inputs() draws inputs of the recorded shapes and dtypes; get_init_inputs() is empty.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING

from .call import describe
from .construct import literal
from .task_file import compare, input_text, run_written

if TYPE_CHECKING:
    from .region import Region

SMALL = 64  # a constant tensor of at most this many elements is written value by value

HEADER = ("# A region of a module's own forward (torch calls between its submodules), one part of a model,\n"
          "# written by `kernelevo split`; its call sites and their shares of the model's time are in split.json\n"
          "# beside this file.\n")
BLOCK_HEADER = ("# A residual block of a module's forward (its submodules' work written out as torch calls on their\n"
                "# weights), one part of a model, written by `kernelevo split --granularity block`; its call sites\n"
                "# and their shares of the model's time are in split.json beside this file.\n")


def task_text(module, inputs: tuple, constants: frozenset[str], header: str = HEADER) -> str:
    """The task file's text for the lifted region `module` (a GraphModule) on `inputs`; `constants`
    names its tensors the forward made, which must be written exactly. ValueError (why) where a
    global its code reads or a constant cannot be written."""
    from .rewrite import statements

    code = module.graph.python_code("self")
    body, names, why = statements(code.src, code.globals)
    if body is None:
        raise ValueError(why)
    init = [f"        self.{name} = nn.Parameter({tensor_text(t, exact=False)})\n" for name, t in module.named_parameters()]
    for name, tensor in module.named_buffers():
        made = tensor_text(tensor, exact=name in constants)
        if made is None:
            raise ValueError(f"the forward makes a {describe(tensor)} constant that a file cannot write")
        init.append(f"        self.register_buffer({name!r}, {made})\n")
    imports = "".join(f"{s}\n" for _, s in names if s.startswith("import "))
    bound = "".join(f"{n} = {s}\n" for n, s in names if not s.startswith("import "))
    return (header + imports + "import torch\nimport torch.nn as nn\n" + (f"\n{bound}" if bound else "") + "\n\n"
            "class Model(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n" + "".join(init) + "\n"
            + _forward(code.src) + "\n\n"
            "def get_inputs():\n"
            f"    return [{', '.join(input_text(x) for x in inputs)}]\n\n\n"
            "def get_init_inputs():\n"
            "    return []\n")


def _forward(src: str) -> str:
    """torch.fx's forward as a method: its statements that free names early, and the tracer's wrap
    lines, left out."""
    lines = []
    for line in src.strip("\n").splitlines():
        if line.startswith("torch.fx._symbolic_trace.wrap(") or re.fullmatch(r"\s+(\w+ = )+None", line) \
                or not line.strip():
            continue
        lines.append("    " + re.sub(r";  (\w+ = )+None$", "", line.rstrip()) + "\n")
    return "".join(lines)


def tensor_text(t, exact: bool) -> str | None:
    """Source for a weight or buffer like `t`: its structure (a triangle of ones, one value, a range);
    else a draw in its character (character_text: identical modules with other values differ only in
    its figures, which folding looks past), or where `exact` (a constant the forward made) its values
    if it is small; None where nothing fits."""
    found = _structure(t)
    if found is not None:
        return found
    if not exact:
        return character_text(t.detach())
    return f"torch.tensor({literal(t.tolist())}, dtype={t.dtype})" if t.numel() <= SMALL else None


def character_text(t) -> str:
    """A draw at the scale of `t`, a weight or buffer of the model: a normal draw of its spread (and its
    mean where that is not small beside it); for a non-negative tensor (a variance, a scale) a uniform
    draw of its mean and spread that stays non-negative. A unit normal draw in its place would judge
    kernels off the model's value range: a block's attention weights at unit scale saturate its
    softmax, where the model's are smooth. Figures keep two significant digits; folding looks past
    them (unscaled)."""
    if not t.is_floating_point():
        return input_text(t)
    x = t.double()
    shape, dtype, mean, std = list(t.shape), t.dtype, float(x.mean()), float(x.std())
    if float(x.min()) >= 0:
        low = max(0.0, mean - 3 ** 0.5 * std)  # uniform on [low, 2 mean - low]: its mean, its spread if it can
        drawn = f"torch.rand({shape}, dtype={dtype}) * {_rough(2 * (mean - low))}"
        return f"{_rough(low)} + {drawn}" if low > 0 else drawn
    drawn = f"torch.randn({shape}, dtype={dtype}) * {_rough(std)}"
    return f"{_rough(mean)} + {drawn}" if abs(mean) > std / 4 else drawn


def _rough(value: float) -> float:
    return float(f"{value:.1e}")


_SCALED = re.compile(r"(?:-?[0-9.e+-]+ \+ )?(torch\.randn?\(\[[0-9, ]*\], dtype=[\w.]+\)) \* -?[0-9.e+-]+")


def unscaled(text: str) -> str:
    """A task text with its draws' scales (character_text) left out: layers whose weights round to
    other figures are still one task, drawn at its first site's scale."""
    return _SCALED.sub(r"\1", text)


def _structure(t) -> str | None:
    import torch

    shape, dtype = list(t.shape), t.dtype
    flat = t.detach().reshape(-1)
    if not flat.numel():
        return f"torch.empty({shape}, dtype={dtype})"
    if bool((flat == flat[0]).all()):
        return f"torch.full({shape}, {literal(flat[0].item())}, dtype={dtype})"
    if t.dim() == 1 and not t.is_complex() and torch.equal(t.cpu(), torch.arange(t.numel(), dtype=dtype)):
        return f"torch.arange({t.numel()}, dtype={dtype})"
    if t.dim() < 2 or not bool(((t == 0) | (t == 1)).all()):
        return None
    ones = torch.ones(shape, dtype=dtype, device=t.device)
    rows, cols = torch.nonzero(t.reshape(-1, *shape[-2:])[0] != 0, as_tuple=True)
    if not rows.numel():
        return None
    for side, k in (("tril", int((cols - rows).max())), ("triu", int((cols - rows).min()))):
        if torch.equal(t, getattr(ones, side)(k)):
            return f"torch.ones({shape}, dtype={dtype}).{side}({k})"
    return None


def check(path: Path, region: Region) -> tuple[str, str]:
    """("", how it matched) when the file loads, runs its own inputs and, with the region's tensors
    copied in, gives back on the region's recorded inputs what the region gave in the model; else
    (why not, "")."""
    got, reason = run_written(path, region.module.state_dict(), region.inputs)
    if reason:
        return reason, ""
    if len(got) != len(region.outputs):
        return f"the written task returns {len(got)} tensors, the region {len(region.outputs)}", ""
    reason, worst = compare(got, list(region.outputs))
    if reason:
        return reason, ""
    where = region.sites[0].path or "the model"
    return "", f"gives back the region of {where}'s forward from its recorded inputs (max difference {worst:.3g})"


def write(region: Region, out_dir: Path, name: str) -> tuple[Region, str]:
    """(the region as written, "") with its task file `name`.py in `out_dir`, checked; or (the region,
    why not) with no file left."""
    path = out_dir / f"{name}.py"
    path.write_text(region.text)
    reason, how = check(path, region)
    if reason:
        path.unlink()
        return region, reason
    return dataclasses.replace(region, name=name, file=path.name, checked=how), ""


def call_spec(inputs: int, outputs: int) -> tuple:
    """A region task's call as call.py states calls: its tensors in order, one tensor or a tuple back."""
    returned = ("out", 0) if outputs == 1 else ("tuple", tuple(("out", j) for j in range(outputs)))
    return (tuple(("in", k) for k in range(inputs)), (), returned)


def entry(region: Region, recording) -> dict:
    """The region's task in split.json, as a module part's, with where it sits in its parents' forward."""
    def share(ms: float) -> float | None:
        found = recording.share(ms)
        return None if found is None else round(found, 4)

    return {"task": region.file, "class": region.cls.__qualname__, "init": [],
            "built_from": "a residual block of its forward" if region.block else "a region of its own forward",
            "inputs": [describe(x) for x in region.inputs],
            "call": literal(call_spec(len(region.inputs), len(region.outputs))),
            "ms": round(region.ms, 4), "share": share(region.ms), "checked": region.checked,
            "region": region.spots[0].as_json(region.sites[0].path),
            "call_sites": [{"path": s.path, "calls": s.calls, "ms": round(ms, 4), "share": share(ms),
                            "region": spot.as_json(s.path)}
                           for s, ms, spot in zip(region.sites, region.site_ms, region.spots)]}
