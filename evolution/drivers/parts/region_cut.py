"""A traced forward cut into regions: the maximal runs of consecutive torch calls between its submodule
calls (consecutive nodes in topological order are convex, so a run lifts out as a function of the nodes
before it), each lifted as a sub-GraphModule. A run of views, reshapes, indexing and sizes only does no
work and is no region. Views of what a run reads that something after it reads too stay statements of
the forward (a region never returns a view of its own input); the module's tensors a run reads
(weights, buffers, constants the forward made) become the region's own; a device the trace wrote into
a call is read from the region's first tensor instead.

At block granularity (`blocks`) a forward traced through its submodules is cut at its residual joins
instead: a part is everything from one point the whole computation passes through to the next such
point at or after a join (an add of a branch and its bypass). A pre-norm transformer layer gives its
attention with norm and residual, and its MLP with both matrix products, activation, norm and residual.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

from .rewrite import Spot

MAX_INPUTS = 16  # a region reads at most this many tensors (an unrolled loop's torch.stack of 256 steps is none)

# Calls that move no data: views, indexing by numbers, sizes (contiguous copies, but a kernel does that
# for free on the way). A run of these alone is no region.
_VIEW_METHODS = frozenset({"view", "reshape", "transpose", "permute", "contiguous", "size", "dim", "unsqueeze",
                           "squeeze", "expand", "expand_as", "flatten", "unflatten", "split", "chunk", "unbind",
                           "t", "narrow", "select", "view_as", "reshape_as", "movedim", "__getitem__", "numel"})
_VIEW_FUNCTIONS = frozenset({operator.getitem, getattr, "flatten", "reshape", "transpose", "permute", "squeeze",
                             "unsqueeze", "split", "chunk", "unbind", "t", "narrow", "select", "movedim"})


@dataclass(frozen=True)
class Lifted:
    """A run as a sub-module: the GraphModule (its tensors registered), its recorded inputs and outputs,
    where it sits in the forward, and which of its tensors the forward made (constants)."""
    module: Any
    inputs: tuple
    outputs: tuple
    spot: Spot
    constants: frozenset[str]


def runs(graph) -> list[list]:
    """Maximal runs of consecutive torch calls, cut at every submodule call; get_attr nodes belong to
    whichever run reads them."""
    runs: list[list] = [[]]
    for node in graph.nodes:
        if node.op in ("call_function", "call_method"):
            runs[-1].append(node)
        elif node.op != "get_attr" and runs[-1]:
            runs.append([])
    return [r for r in runs if r and any(_works(n) for n in r)]


def blocks(graph) -> list[list]:
    """The forward's nodes cut into residual blocks: a block ends at a node that every path from the
    inputs to the output passes through (nothing computed before it is read after it, but itself),
    once the block holds a join (a node reading two tensors the inputs flow into), and takes the chain
    of such nodes right after it (a post-norm layer's norm). A tail without a join joins the block
    before it; a forward without residuals is one block."""
    order = {n: k for k, n in enumerate(graph.nodes)}
    flows: set = set()  # nodes the inputs flow into (not weights, not constants the forward makes)
    found: list[list] = []
    block: list = []
    joined = trailing = False
    reach = -1  # the furthest node read by a flowing node seen so far (before the current one)
    for node in graph.nodes:
        if node.op == "placeholder" or any(a in flows for a in node.all_input_nodes):
            flows.add(node)
        if node.op in ("call_function", "call_method", "call_module"):
            reads = len([a for a in node.all_input_nodes if a in flows])
            through = node in flows and reach <= order[node]  # every path passes through it
            if trailing and through and reads <= 1:
                found[-1].append(node)
            else:
                trailing = False
                block.append(node)
                joined = joined or reads >= 2
                if joined and through:
                    found.append(block)
                    block, joined, trailing = [], False, True
        if node in flows:
            reach = max([reach, *(order[u] for u in node.users)])
    if block:
        if found and not joined:
            found[-1] += block
        else:
            found.append(block)
    return [b for b in found if any(_works(n) for n in b)]


def _works(node) -> bool:
    import torch

    if node.op == "call_method":
        return node.target not in _VIEW_METHODS
    if node.target is operator.getitem:  # indexing by numbers is a view; by a tensor, a gather
        found: list = []
        torch.fx.node.map_arg(node.args[1:], found.append)
        return bool(found)
    name = getattr(node.target, "__name__", None)
    return not (node.target in _VIEW_FUNCTIONS or (getattr(node.target, "__module__", "") == "torch"
                                                    and name in _VIEW_FUNCTIONS))


def lift(run: list, module, traced, values: dict) -> tuple[Lifted | None, str]:
    """The run of `traced` (the GraphModule of `module`'s forward; `values`, its nodes' recorded values by
    name) as a sub-module that takes the tensors it reads from before it and returns those read after
    it, with the module's tensors it reads as its own; or (None, why not)."""
    import torch

    hoisted = _views_read_after(run) | _step_views(run)
    run = [n for n in run if n not in hoisted]
    inside = set(run)
    inputs: list = []
    attrs: list = []
    for node in run:
        for a in node.all_input_nodes:
            bucket = attrs if a.op == "get_attr" else inputs
            if a not in inside and a not in bucket:
                bucket.append(a)
    outputs = [n for n in run if any(u not in inside for u in n.users)]
    if not outputs:
        return None, "nothing after it reads what it computes"
    if len(inputs) > MAX_INPUTS:
        return None, f"it reads {len(inputs)} tensors made before it, more than a task takes ({MAX_INPUTS})"
    for n in inputs + outputs:
        if not isinstance(values.get(n.name), torch.Tensor):
            return None, f"it {'reads' if n in inputs else 'gives'} {n.name}, a {type(values.get(n.name)).__name__}, not a tensor"
    for n in run:
        if _in_place(n) and n.args and n.args[0] in inputs:
            return None, f"{n.name} changes {n.args[0].name}, which it reads, in place"
    sub, root, env, tensors = torch.fx.Graph(), torch.nn.Module(), {}, []
    for a in inputs:  # a placeholder's name is its argument's: two inputs, two names
        env[a] = sub.placeholder(_unique(_plain_name(a.name), {p.target for p in env.values()}))
    owned = dict(module.named_parameters()) | dict(module.named_buffers())
    for a in attrs:
        name = _unique(a.target.replace(".", "_").lstrip("_") or "t", {n for n, _ in tensors})
        tensor = operator.attrgetter(a.target)(traced)
        if isinstance(tensor, torch.nn.Parameter):
            root.register_parameter(name, tensor)
        else:
            root.register_buffer(name, tensor)
        tensors.append((name, a.target if a.target in owned else None))
        env[a] = sub.get_attr(name)
    for n in run:  # named without the trace's counters: the same code at another step or site is the same text
        env[n] = sub.create_node(n.op, n.target, torch.fx.node.map_arg(n.args, env.__getitem__),
                                 torch.fx.node.map_arg(n.kwargs, env.__getitem__), _plain_name(n.name))
    sub.output(env[outputs[0]] if len(outputs) == 1 else tuple(env[o] for o in outputs))
    _devices_read(sub)
    spot = Spot(tuple(n.name for n in run), tuple(a.name for a in inputs), tuple(o.name for o in outputs), tuple(tensors))
    return Lifted(torch.fx.GraphModule(root, sub), tuple(values[a.name] for a in inputs),
                  tuple(values[o.name] for o in outputs), spot, frozenset(n for n, s in tensors if s is None)), ""


def _views_read_after(run: list) -> set:
    """The run's views of what it reads (x.view(-1, D) of an input) that something after it reads too,
    with the views they are made from: left out of the region, as statements of the forward, so that
    the region never returns a view of its own input (an output aliasing an input), and the region
    after it reads them as they are."""
    inside, views = set(run), set()
    for n in run:
        if not _works(n) and all(a in views or a not in inside for a in n.all_input_nodes):
            views.add(n)
    out = {n for n in views if any(u not in inside for u in n.users)}
    todo = list(out)
    while todo:
        for a in todo.pop().all_input_nodes:
            if a in views and a not in out:
                out.add(a)
                todo.append(a)
    return out


def _step_views(run: list) -> set:
    """The run's views that pick one index of a tensor made before it (`x[t]`, `x.select(0, t)`: a step of
    an unrolled loop): left out of the region, as statements of the forward, so that the region takes the
    step's slice and every step's region is the same text (one task, folded over the steps)."""
    inside = set(run)

    def picks(n) -> bool:
        index = n.args[1] if len(n.args) > 1 else None
        if n.op == "call_function" and n.target is operator.getitem:
            return isinstance(index, int) or isinstance(index, tuple) and any(isinstance(i, int) for i in index)
        return n.op == "call_method" and n.target == "select"

    return {n for n in run if not _works(n) and picks(n) and all(a not in inside for a in n.all_input_nodes)}


def _devices_read(graph) -> None:
    """The recorded device, where the trace wrote it into a call (`h.to(x.device)`), read from the region's
    first tensor instead: the task runs wherever the judge puts it."""
    import torch

    anchor = next((n for n in graph.nodes if n.op in ("placeholder", "get_attr")), None)
    device = None
    for node in list(graph.nodes):
        if anchor is None or node.op not in ("call_function", "call_method"):
            continue
        found: list = []
        torch.fx.node.map_aggregate((node.args, node.kwargs), lambda v: found.append(v) if isinstance(v, torch.device) else v)
        if not found:
            continue
        if device is None:
            with graph.inserting_before(node):
                device = graph.call_function(getattr, (anchor, "device"))

        def swap(v, device=device):
            return device if isinstance(v, torch.device) else v

        node.args = torch.fx.node.map_aggregate(node.args, swap)
        node.kwargs = torch.fx.node.map_aggregate(node.kwargs, swap)


def _plain_name(name: str) -> str:
    return re.sub(r"_\d+$", "", name)


def _in_place(node) -> bool:
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or node.kwargs.get("inplace") is True


def _unique(name: str, taken: set[str]) -> str:
    found, n = name, 2
    while found in taken:
        found, n = f"{name}_{n}", n + 1
    return found
