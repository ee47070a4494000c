"""Static checks of changes to what the judge itself runs: imported modules patched
(`monkeypatch`), the global random state the judge draws inputs from (`rng_control`), torch's
precision settings that the reference shares (`precision_downgrade`)."""
from __future__ import annotations

import ast

from .context import Context, Finding, _attr_call, _findings, _flat, _name_of, _refs


def monkeypatch(ctx: Context) -> list[Finding]:
    # Replacing a library function or class attribute changes what the judge itself runs.
    todo = "leave imported modules (torch, time, builtins, kernelevo, ...) untouched; keep state on self"
    hits = []
    for node in ctx.nodes:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in _flat(targets):
            if isinstance(t, ast.Subscript):  # __builtins__["open"] = f, torch.__dict__["sum"] = f
                t = t.value
                if getattr(t, "id", None) != "__builtins__" and getattr(t, "attr", None) != "__dict__":
                    continue
            if name := "__builtins__" if getattr(t, "id", None) == "__builtins__" else \
                    _name_of(ctx, t) if isinstance(t, ast.Attribute) else "":
                hits.append((t.lineno, f"assigning {name} replaces part of an imported module", todo))
        if isinstance(node, ast.Call) and node.args and (_name_of(ctx, node.func) in (
                "builtins.setattr", "builtins.delattr") or _attr_call(node, ("__setattr__", "__delattr__"))):
            # setattr(torch, "x", f), object.__setattr__(torch, "x", f), torch.__setattr__("x", f)
            obj = node.func.value if isinstance(node.args[0], ast.Constant) else node.args[0]
            if name := _name_of(ctx, obj):
                hits.append((node.lineno, f"setattr/delattr on {name} replaces part of an imported module", todo))
    return _findings("monkeypatch", hits)


def rng_control(ctx: Context) -> list[Finding]:
    # The judge seeds and draws the inputs; a candidate that seeds can predict them.
    return _findings("rng_control", [
        (line, f"{name} sets or forks the global random state the judge draws inputs from",
         "do not seed or restore RNG state; use a local torch.Generator if you need randomness")
        for line, name in _refs(ctx, r"torch(\.cuda|\.random|\.mps)?\.(manual_seed\w*|seed\w*|set_rng_state\w*)"
                                     r"|torch\.random\.fork_rng|torch\.(cuda\.)?default_generators?(\..*)?"
                                     r"|random\.(seed|setstate)|numpy\.random\.(seed|set_state)")])


# Torch's global numerics, which the judge fixes before anything runs (TF32 off, matmul precision
# "highest"): lowering them also lowers the reference the candidate is compared with, so no candidate
# sets them honestly. Dtypes, casts, fp16 headers and autocast are no such setting: what they compute
# is judged by the task dtype's tolerance (float32's 5e-5 rejects TF32 and fp16 compute).
_FLAGS = frozenset({"allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"})
_LOW_MODES = frozenset({"high", "medium", "tf32", "bf16"})  # below "highest" / "ieee"


def precision_downgrade(ctx: Context) -> list[Finding]:
    hits = []
    for node in ctx.nodes:
        value = getattr(node, "value", None)
        if isinstance(node, ast.Assign) and getattr(value, "value", None) is not False:  # `= False` restores
            hits += [(node.lineno, f"setting {t.attr}") for t in _flat(node.targets) if isinstance(t, ast.Attribute)
                     and _name_of(ctx, t).startswith("torch.") and (t.attr in _FLAGS or t.attr == "fp32_precision"
                                                                  and getattr(value, "value", None) in _LOW_MODES)]
        elif isinstance(node, ast.Call) and _name_of(ctx, node.func) == "torch.set_float32_matmul_precision" and \
                (mode := getattr(node.args[0] if node.args else None, "value", None)) in _LOW_MODES:
            hits.append((node.lineno, f"set_float32_matmul_precision({mode!r})"))
    return _findings("precision_downgrade", [
        (line, f"{what} lowers torch's precision for the judge's reference as well as the candidate",
         "leave torch's precision settings as the judge set them (TF32 off, matmul precision \"highest\")")
        for line, what in hits])
