"""Time a module spends in its own forward (matmuls, softmax, masked_fill written as torch calls, not
submodules) as parts: regions of its traced forward.

A module opened into its children whose own time is at least MIN_SHARE of the model's has its forward
traced by torch.fx's MetaTracer on meta copies of its first call's tensors, every submodule call a leaf
(their meta outputs computed on meta copies of their tensors: the live model is never run by the
tracer). The tracer turns shapes, and the device, into constants (`B, T, C = x.size()` unpacks), so the
trace holds for those only: the rewritten forward of an assembled model checks them (rewrite.py). The
traced forward is run once on the recorded arguments to record every node's value; numbers (sizes,
scale factors) become constants; a child that does no work (Dropout in eval) becomes its input. The
graph is then cut into regions (region_cut.py), each written as a task file (region_file.py) and timed
alone. Identical regions (the same task text: code, tensors and input shapes) at several sites, or at
several steps of an unrolled loop, fold into one task.

At block granularity (`block_regions`) a part's forward is traced through its submodules instead (a
Linear becomes F.linear on its weight) and cut at its residual joins (region_cut.blocks): a transformer
layer becomes its attention block and its MLP block, each a task that one fused kernel can hold.
"""
from __future__ import annotations

import dataclasses
import inspect
import warnings
from dataclasses import dataclass
from typing import Any

from .call import tensors_of
from .construct import literal, plain
from .record import Recording, Site, device_sync, fastest_ms
from .region_cut import blocks, lift, runs
from .rewrite import Forward, Spot, statements

MIN_SHARE = 0.05  # a module's own time below this share of the model's is not traced for regions
TIMED_RUNS = 5


@dataclass(frozen=True)
class Region:
    """One region task: its call sites (the modules whose forward holds it: one module twice where an
    unrolled loop repeats it), its time at each, the lifted sub-module with the first site's tensors,
    its recorded inputs and outputs there, where it sits in each site's forward, and the task file's text."""
    sites: tuple[Site, ...]
    site_ms: tuple[float, ...]
    module: Any  # torch.fx.GraphModule
    inputs: tuple
    outputs: tuple
    spots: tuple[Spot, ...]  # where it sits in each site's forward
    forwards: tuple[Forward, ...]  # each site's traced forward
    text: str
    name: str = ""
    file: str = ""
    checked: str = ""
    block: int = 0  # k: the k-th residual block of a forward traced through its submodules (--granularity block)

    @property
    def ms(self) -> float:
        return sum(self.site_ms)

    @property
    def cls(self) -> type:
        return type(self.sites[0].module)


@dataclass(frozen=True)
class Traced:
    """A site's forward as traced (numbers folded, idle children dropped), every node's recorded value
    by name, and the Forward record for the rewritten forward."""
    module: Any  # torch.fx.GraphModule
    values: dict
    forward: Forward


def regions(recording: Recording, own: dict[str, float]) -> tuple[list[Region], list[str]]:
    """The regions of the opened modules whose own time (`own`, ms per forward by path) is at least
    MIN_SHARE of the model's, identical ones folded; and a note for each module traced in vain."""
    from .region_file import task_text

    found: list[Region] = []
    notes: list[str] = []
    for path, site in recording.sites.items():  # in model order, the order a folded task lists its call sites in
        ms = own.get(path, 0.0)
        if (recording.share(ms) or 0.0) < MIN_SHARE:
            continue
        where = f"{path}'s own forward" if path else "the model's own forward"
        where += f" ({type(site.module).__name__})"
        try:  # regions are found in whatever the user's forward does: no failure of theirs stops the split
            traced, why = trace(site, recording)
            if traced is None:
                notes.append(f"{where} is left as it is: {why}")
                continue
            lifted = []
            for run in runs(traced.module.graph):
                region, why = _region(run, site, traced, task_text)
                if region is None:
                    notes.append(f"{where}: a region at {run[0].name} is left as it is: {why}")
                else:
                    lifted.append(region)
            found += _timed(lifted, site, ms, recording.device)
        except Exception as exc:  # noqa: BLE001 - the reason, in one line
            notes.append(f"{where} is left as it is: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
    return _fold(found), notes


def block_regions(sites: list[Site], recording: Recording) -> tuple[list[Region], str]:
    """The residual blocks of the sites' forward (one part's call sites), each a region task, identical
    ones folded; or ([], why not in one line) where it is one block or cannot be cut."""
    from .region_file import BLOCK_HEADER, task_text

    found: list[Region] = []
    for site in sites:
        traced, why = trace(site, recording, inline=True)
        if traced is None:
            return [], why
        cut = blocks(traced.module.graph)
        if len(cut) < 2:
            return [], "its forward is one block (no residual join to cut at)"
        lifted = []
        for k, run in enumerate(cut, 1):
            region, why = _region(run, site, traced, lambda *a: task_text(*a, header=BLOCK_HEADER))
            if region is None:
                return [], f"a block at {run[0].name} cannot be a task: {why}"
            lifted.append(dataclasses.replace(region, block=k))
        found += _timed(lifted, site, site.ms, recording.device, whole=True)
    return _fold(found), ""


def trace(site: Site, recording: Recording, inline: bool = False) -> tuple[Traced | None, str]:
    """The site's forward traced on its first call's shapes (`inline`: through its submodules' forwards
    down to torch calls), or (None, why not in one line)."""
    import torch

    module = site.module
    try:
        params = list(inspect.signature(type(module).forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return None, "its forward has no signature to read"
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return None, "its forward takes *args or **kwargs"
    try:
        bound = inspect.signature(module.forward).bind(*site.args, **site.kwargs)
    except TypeError as exc:
        return None, f"its first call does not bind to its forward: {exc}"
    bound.apply_defaults()
    meta, concrete = {}, {}
    for name, value in bound.arguments.items():
        if isinstance(value, torch.Tensor):
            meta[name] = value.to("meta")
        elif plain(value) and not tensors_of(value):
            concrete[name] = value
        else:
            return None, f"its forward takes a {type(value).__name__} ({name})"
    try:
        gm = _traced(module, meta, concrete, module.training, recording.device, inline)
    except Exception as exc:  # noqa: BLE001 - any failure of the tracer is the one-line reason
        return None, f"its forward cannot be traced: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
    try:  # whether the forward reads self.training: then the trace holds in this mode only
        depends = _traced(module, meta, concrete, not module.training, recording.device, inline).code != gm.code
    except Exception:  # noqa: BLE001 - the other mode cannot be traced: it differs
        depends = True
    made = [n.target for n in gm.graph.nodes if n.op == "call_module" and not _has(module, n.target)]
    if made:  # a module the forward builds as it runs: the live module has none of that name
        return None, f"its forward makes a module as it runs ({made[0]})"
    values = _values(gm, list(bound.arguments.values()))
    # a child idle in this mode (Dropout in eval) may work in the other: the rewritten forward holds in this one only
    depends = _drop_idle(gm, recording, site.path, values) or depends
    _fold_numbers(gm, values)
    forward, why = _forward_of(site, gm, bound, params, module.training if depends else None,
                              recording.device)
    if forward is None:
        return None, why
    return Traced(gm, values, forward), ""


def _has(module, path: str) -> bool:
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True


def _dynamo_rules_first() -> None:
    """Have torch.compile build its table of torch functions now. MetaTracer swaps torch.arange, zeros,
    ones ... for wrappers while it traces; a table first built then keys the wrappers, and for the rest
    of the process torch.compile refuses the real torch.arange (fullgraph fails on a model that makes a
    position index). Seen on a GPU: the assembly of gpt_stack no longer compiled after a split."""
    try:
        from torch._dynamo import trace_rules

        trace_rules.get_torch_obj_rule_map()
    except (ImportError, AttributeError):  # another torch: no such table to build early
        pass


def _traced(module, meta: dict, concrete: dict, training: bool, device: str, inline: bool = False):
    """The GraphModule of `module`'s forward traced in `training` mode, on a shell of it: the tracer
    adds attributes to the module it traces (constants, stateless modules made in forward), and the
    live model keeps none of them. A tensor's device is `device`, as recorded: a forward that checks
    it (`if x.device != self.w.device: raise`) is traced as shapes are, for that device."""
    import copy

    import torch
    from torch.fx.experimental.meta_tracer import MetaProxy, MetaTracer

    class Proxy(MetaProxy):
        @property
        def device(self):
            return torch.device(device)

        def size(self, dim=None):  # MetaProxy.size(0) gives the whole size (it tests `if dim`)
            meta = self._tensor_meta if hasattr(self, "_tensor_meta") else None
            if meta is None:
                return super().size(dim)
            return meta.size() if dim is None else meta.size(dim)

    class Tracer(MetaTracer):
        proxy_buffer_attributes = True  # a buffer (a causal mask) is read where the region is, not folded in

        def is_leaf_module(self, m, qualname) -> bool:
            return not inline

        def proxy(self, node):
            return Proxy(node, self)

        def call_module(self, m, forward, args, kwargs):
            self.orig_forward = lambda *a, **k: _meta_call(m, a, k)
            return torch.fx.Tracer.call_module(self, m, forward, args, kwargs)

    _dynamo_rules_first()
    shell = copy.copy(module)
    shell.__dict__.update(_parameters=dict(module._parameters), _buffers=dict(module._buffers),
                          _modules=dict(module._modules))
    shell.training = training
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer warns of every value it computes no meta for
        graph = Tracer().trace(shell, meta_args=dict(meta), concrete_args=dict(concrete) or None)
    for node in list(graph.nodes):  # the tracer's checks of concrete arguments: the rewritten forward's guard holds them
        if node.op == "call_function" and getattr(node.target, "__module__", "") == "torch.fx._symbolic_trace":
            graph.erase_node(node)
    return torch.fx.GraphModule(shell, graph)


def _meta_call(module, args: tuple, kwargs: dict) -> Any:
    """A submodule's output on meta tensors, computed on meta copies of its own tensors with the
    tracer's hooks off: the live submodule never runs (a BatchNorm in training would count a call)."""
    import torch
    from torch.fx._symbolic_trace import _orig_module_call

    patched = torch.nn.Module.__call__
    torch.nn.Module.__call__ = _orig_module_call
    try:
        state = {n: t.to("meta") for n, t in [*module.named_parameters(), *module.named_buffers()]}
        return torch.func.functional_call(module, state, args, kwargs)
    finally:
        torch.nn.Module.__call__ = patched


def _values(gm, args: list) -> dict:
    """Every node's value, by name, on the site's recorded arguments (tensors copied as made: a later
    in-place call does not change what a node gave)."""
    import torch

    from .record import copy

    values: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n.name] = copy(out)
            return out

    with torch.no_grad():
        Recorder(gm).run(*args)
    return values


def _drop_idle(gm, recording: Recording, path: str, values: dict) -> bool:
    """A child that does no work and returns a tensor of its input's shape (Dropout in eval, Identity)
    is replaced by its input, so that a region runs on through it; whether any was."""
    import torch

    dropped = False
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        site = recording.sites.get(f"{path}.{node.target}" if path else node.target)
        out, given = values.get(node.name), values.get(node.args[0].name)
        if site is not None and site.no_work and isinstance(out, torch.Tensor) and isinstance(given, torch.Tensor) \
                and out.shape == given.shape and out.dtype == given.dtype:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            dropped = True
    gm.recompile()
    return dropped


def _fold_numbers(gm, values: dict) -> None:
    """Nodes that give numbers, sizes or dtypes become constants: the trace holds for one set of shapes,
    and a region then takes tensors only."""
    import torch

    def number(v: Any) -> bool:
        return isinstance(v, (bool, int, float, torch.dtype)) or \
            isinstance(v, (tuple, list, torch.Size)) and all(isinstance(x, (bool, int, float)) for x in v)

    for node in list(gm.graph.nodes):
        if node.op not in ("call_function", "call_method") or not number(values.get(node.name, None)):
            continue
        value = values[node.name]
        value = tuple(value) if isinstance(value, torch.Size) else value
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args, lambda n, node=node, value=value: value if n is node else n)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n, node=node, value=value: value if n is node else n)
        gm.graph.erase_node(node)
    gm.recompile()


def _forward_of(site: Site, gm, bound, params: list, training: bool | None,
                device: str) -> tuple[Forward | None, str]:
    """The Forward record of the traced forward, or (None, why it cannot be written)."""
    import torch

    declared = []
    for p in params:
        if p.default is not p.empty and not plain(p.default):
            return None, f"its forward's default for {p.name} cannot be written"
        declared.append((p.name, None if p.default is p.empty else literal(p.default), p.kind == p.KEYWORD_ONLY))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    renames = tuple((n.name, p.name) for n, p in zip(placeholders, params) if n.name != p.name and n.users)
    tensors = tuple((k, tuple(v.shape), str(v.dtype)) for k, v in bound.arguments.items() if isinstance(v, torch.Tensor))
    values = tuple((k, literal(v)) for k, v in bound.arguments.items() if not isinstance(v, torch.Tensor))
    code = gm.graph.python_code("self")
    body, names, why = statements(code.src, code.globals)
    if body is None:
        return None, why
    *lines, (_, returned) = body
    where = next((str(v.device) for v in bound.arguments.values() if isinstance(v, torch.Tensor)), str(device))
    return Forward(site.path, tuple(declared), renames, tensors, values, training, tuple(lines), returned, names,
                   where), ""


def _region(run: list, site: Site, traced: Traced, task_text) -> tuple[Region | None, str]:
    """The run lifted (region_cut.py) with its task file's text, or (None, why not)."""
    lifted, why = lift(run, site.module, traced.module, traced.values)
    if lifted is None:
        return None, why
    try:
        text = task_text(lifted.module, lifted.inputs, lifted.constants)
    except ValueError as exc:
        return None, str(exc)
    return Region((site,), (0.0,), lifted.module, lifted.inputs, lifted.outputs, (lifted.spot,), (traced.forward,),
                  text), ""


def _timed(found: list[Region], site: Site, own_ms: float, device: str, whole: bool = False) -> list[Region]:
    """Each region with its time per model forward: the fastest of TIMED_RUNS runs alone on its
    recorded inputs, times the site's calls per forward. Alone it misses the waits around every
    module that the model's figures are measured with (record.py), and runs warm on one input, so
    the site's regions together are capped at the site's own time: shares still add up to the model's.
    Regions that are the `whole` forward (its residual blocks) share out the site's time by their own."""
    import torch

    sync = device_sync(device)
    alone = []
    with torch.no_grad():
        for region in found:
            region.module(*region.inputs)  # warm-up
            best = fastest_ms(lambda r=region: r.module(*r.inputs), sync, TIMED_RUNS)
            alone.append(best * max(site.calls, 1))
    total = sum(alone)
    scale = 1.0 if total <= 0 else own_ms / total if whole else min(1.0, own_ms / total)
    return [dataclasses.replace(r, site_ms=(ms * scale,)) for r, ms in zip(found, alone)]


def _fold(found: list[Region]) -> list[Region]:
    """Regions whose task files are the same text but for their weights' scales as one task, its call
    sites in order, drawn at the first site's scale."""
    from .region_file import unscaled

    groups: dict[str, Region] = {}
    for region in found:
        key = unscaled(region.text)
        kept = groups.get(key)
        groups[key] = region if kept is None else dataclasses.replace(
            kept, sites=kept.sites + region.sites, site_ms=kept.site_ms + region.site_ms,
            spots=kept.spots + region.spots, forwards=kept.forwards + region.forwards)
    return list(groups.values())
