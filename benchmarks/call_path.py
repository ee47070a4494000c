"""The host cost of a placed part's call path in a drop-in file, before and after the cheap call path.
Run on a GPU machine, REV being the commit before the cheap call path (in drop_in.py):

    python benchmarks/call_path.py --before REV --out benchmarks/results/call_path-<gpu>-<date>.json

`--before` defaults to HEAD, which is right only while the cheap call path is uncommitted in the tree.
`--mode M` (default, max-autotune-no-cudagraphs) times the three compiled whole in mode M instead (fullgraph;
each compiled and warmed on every input set before it is timed): there every call of a part is its op,
so with REV the commit before the plain ops (rewrite.custom_op_text) it measures the custom op's host
cost per site against the plain op's.

Method: a two-part model (gemm_bias_gelu's Model as `up`, layernorm's as `norm`, hidden 1024, so
both tasks' default constructors chain) is written as a drop-in with both parts placed (the starter
candidates of each format) twice: by the drop_in.py of REV (every call through the part's
torch.library custom op, with a dict of the part's weights built per call) and by the working tree's
(in eager the kernel module called directly). The original model and the two drop-ins, with the
original's weights, are timed in one process under no_grad by judge/measure/loop.back_to_back: blocks
of calls back to back, host included, interleaved (A B C, C B A ...), as a user's loop would pay them;
the figures are medians and paired-ratio 95 % intervals. Two batches: 2 rows, where the host
dominates, so (before - after) / 2 sites is the host cost per site of the old call path; and the
gemm task's own 1024 rows (64 on the CPU, to keep a smoke run short). (after - original) / 2 is what a
placed site still costs against the untouched model (kernel and host together). A cost's interval is
its paired ratio's interval times the denominator's median. The drop-ins' outputs are checked against
the original's (allclose, rtol = atol = 1e-2: TF32 GEMMs differ from fp32 at ~1e-3).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CANDIDATES = HERE / "tasks" / "candidates"
PARTS = Path("evolution/drivers/parts")
HIDDEN = 1024  # gemm_bias_gelu's IN = OUT_FEATURES = layernorm's HIDDEN: the parts chain as the tasks are
TASK_ROWS = 1024  # gemm_bias_gelu's BATCH
SITES = 2  # one site per part

# The two task Models as written in benchmarks/tasks, renamed, and a Model calling them in sequence.
MODEL_SOURCE = '''"""gemm_bias_gelu then layernorm: the parts of a call_path benchmark."""
import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN = 1024


class Up(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x))


class Norm(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        return self.ln(x)


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.up = Up(hidden, hidden)
        self.norm = Norm(hidden)

    def forward(self, x):
        return self.norm(self.up(x))


def get_inputs():
    return [torch.randn(1024, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
'''


def _relative_imports(source: str) -> set[str]:
    """The sibling modules `source` imports relatively (`from .x import y`, `from . import x`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
    return found


def _source(rev: str, name: str) -> str:
    """A module of the parts package as of `rev`: a revision, or a folder holding an older checkout (a
    machine with no history of the repository, the GPU's)."""
    if Path(rev).is_dir():
        return (Path(rev) / PARTS / f"{name}.py").read_text()
    return subprocess.run(["git", "show", f"{rev}:{PARTS / name}.py"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def old_drop_in(rev: str, folder: Path) -> types.ModuleType:
    """drop_in.py as of `rev`, with the siblings it imports (transitively) as of `rev`, imported as a
    package of its own: the working tree's package is already imported, and may differ."""
    package = f"call_path_before_{abs(hash(rev))}"
    root = folder / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    todo, done = ["drop_in"], set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        source = _source(rev, name)
        (root / f"{name}.py").write_text(source)
        done.add(name)
        todo += sorted(_relative_imports(source) - done)
    spec = importlib.util.spec_from_file_location(package, root / "__init__.py", submodule_search_locations=[str(root)])
    sys.modules[package] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[package])
    return importlib.import_module(f"{package}.drop_in")


def placed(drop_in: types.ModuleType, fmt: str) -> list:
    """Both parts, placed with the starter candidate of `fmt`, as `drop_in`'s own Placed."""
    parts = (("gemm_bias_gelu", (HIDDEN, HIDDEN), "up"), ("layernorm", (HIDDEN,), "norm"))
    return [drop_in.Placed(name=name, kernel_source=(CANDIDATES / f"{name}__{fmt}.py").read_text(), init=init,
                           inputs=("tensor",), sites=(site,), label=f"starter {fmt} candidate")
            for name, init, site in parts]


def models(fmt: str, device: str, before: types.ModuleType, after: types.ModuleType, mode: str = "eager") -> dict:
    """The original model and its two drop-ins, all with the original's weights, on `device`; compiled
    whole in `mode` unless it is eager."""
    import torch

    from kernelevo.tasks import load_module

    torch.manual_seed(0)
    original = load_module(MODEL_SOURCE, "<call_path model>", "task").Model(HIDDEN)
    out = {"original": original}
    for tag, drop_in in (("before", before), ("after", after)):
        text = drop_in.drop_in_text(MODEL_SOURCE, "call_path", placed(drop_in, fmt))
        model = load_module(text, f"<call_path {tag} {fmt}>", "candidate").ModelNew(HIDDEN)
        model.load_state_dict(original.state_dict())
        out[tag] = model
    out = {tag: model.to(device).eval() for tag, model in out.items()}
    if mode != "eager":
        out = {tag: torch.compile(model, mode=None if mode == "default" else mode, fullgraph=True)
               for tag, model in out.items()}
    return out


def agreement(models: dict, x) -> dict:
    """Each drop-in's output against the original's: allclose (loose) and the largest difference."""
    import torch

    ref = models["original"](x)
    found = {}
    for tag in ("before", "after"):
        y = models[tag](x)
        found[tag] = {"allclose": bool(torch.allclose(y, ref, rtol=1e-2, atol=1e-2)),
                      "max_abs_diff": float((y - ref).abs().max())}
    return found


def per_site_us(fig: dict, a: str, b: str) -> list[float]:
    """(a - b) / SITES in microseconds: the point from the medians, the interval from the paired
    ratio a/b's (the rounds' noise shared by a and b cancels in a ratio, not in two medians)."""
    ms = fig["ms"]
    _, low, high = fig[f"{a}/{b}"]
    return [(ms[a] - ms[b]) * 1e3 / SITES, ms[b] * (low - 1) * 1e3 / SITES, ms[b] * (high - 1) * 1e3 / SITES]


def measure(models: dict, rows: int, device: str, seconds: float) -> dict:
    """One batch size: the three timed back to back, interleaved; ms per call and the costs per site."""
    import torch

    from kernelevo.judge.measure import loop

    over = (("before", "after"), ("after", "original"))
    input_sets = [[torch.randn(rows, HIDDEN, device=device)] for _ in range(3)]
    fns = {tag: (lambda xs, m=model: m(*xs)) for tag, model in models.items()}
    for xs in input_sets * 2:  # a compiled model traces (again, for a new size) on its first calls: not timed
        for fn in fns.values():
            fn(xs)
    measured, calls = loop.back_to_back(fns, input_sets, device, seconds=seconds, ratios=over)
    fig = loop.figures(measured, calls, over)
    return {"rows": rows, "agree": agreement(models, input_sets[0][0]), **fig,
            "host_cost_per_site_us": per_site_us(fig, "before", "after"),
            "remaining_per_site_us": per_site_us(fig, "after", "original")}


def table(results: dict) -> str:
    lines = [f"{'format':8} {'rows':>5} {'original ms':>12} {'before ms':>10} {'after ms':>9} "
             f"{'(b-a)/site us [95%]':>26} {'(a-o)/site us [95%]':>26} agree"]
    for fmt, sizes in results.items():
        for r in sizes:
            ms, h, rem = r["ms"], r["host_cost_per_site_us"], r["remaining_per_site_us"]
            agree = all(v["allclose"] for v in r["agree"].values())
            lines.append(f"{fmt:8} {r['rows']:5} {ms['original']:12.4f} {ms['before']:10.4f} {ms['after']:9.4f} "
                         f"{h[0]:8.1f} [{h[1]:6.1f},{h[2]:6.1f}] {rem[0]:8.1f} [{rem[1]:6.1f},{rem[2]:6.1f}] {agree}")
    return "\n".join(lines)


def main() -> None:
    import torch

    from kernelevo.evolution.drivers.parts import drop_in as after
    from kernelevo.host import cpu_name

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--before", default="HEAD", help="the revision before the cheap call path, or a folder with its checkout")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--formats", default=None, help="default nvrtc,triton on CUDA, c on the CPU")
    parser.add_argument("--rows", type=int, default=None, help=f"the larger batch: {TASK_ROWS} on CUDA, 64 on CPU")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing budget per measurement")
    parser.add_argument("--mode", default="eager", help="eager, or a torch.compile mode to run all three in")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    formats = (args.formats or ("nvrtc,triton" if cuda else "c")).split(",")
    rev = args.before if Path(args.before).is_dir() else subprocess.run(
        ["git", "rev-parse", args.before], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    report: dict = {"gpu": torch.cuda.get_device_name(args.device) if cuda else cpu_name(),
                    "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "method": __doc__,
                    "before": rev, "device": args.device, "formats": formats, "mode": args.mode, "results": {}}
    with tempfile.TemporaryDirectory(prefix="kernelevo-call-path-") as tmp, torch.no_grad():
        before = old_drop_in(rev, Path(tmp))
        # the renaming of a kernel's names is today's in both (an older one broke Triton kernels whose
        # parameters share a module constant's name): what differs is the call path alone
        before._prefixed = after._prefixed
        # with the default HEAD after the change is committed, "before" would be "after": say so
        old = "is_compiling" not in Path(before.__file__).read_text() if args.mode == "eager" else \
            "_nograd" not in Path(before.__file__).with_name("rewrite.py").read_text()
        report["before_has_the_old_path"] = old
        if not old:
            print(f"warning: {rev[:12]} already has the cheap call path; pass --before REV", file=sys.stderr)
        for fmt in formats:
            built = models(fmt, args.device, before, after, args.mode)
            report["results"][fmt] = [measure(built, rows, args.device, args.seconds)
                                      for rows in (2, args.rows or (TASK_ROWS if cuda else 64))]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(table(report["results"]))


if __name__ == "__main__":
    main()
