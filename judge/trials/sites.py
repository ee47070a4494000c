"""A task's call sites in its model, each a trial: so that a kernel placed at every site is verified at every one.

A task that is one part of a model folded over call sites of other sizes (`kernelevo split`: DenseNet's
layers, each built for its own channel count) lists them in `get_call_sites()`: each site's
constructor arguments and input shapes. Each site other than the task's own construction and inputs
becomes a shapes.Plan: both models built with its arguments, the inputs resized to its shapes. They
are checked in every shapes mode (they are the task's own sizes, not derived ones), and a kernel may
not refuse one: it would be placed there.
"""
from __future__ import annotations

from kernelevo.judge.trials.shapes import Plan, call_text


def site_plans(args: list, init: tuple, sites: list, names: tuple[str, ...] = ()) -> tuple[list[Plan], list[str]]:
    """The task's call sites in its model (get_call_sites(): (constructor arguments, input shapes) per
    site) other than its own construction and shapes, as variants: both models built with the site's
    arguments, the inputs resized to its shapes; and a note for each site not shaped like the task."""
    import torch

    tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    plans, notes = [], []
    for k, (site_init, site_shapes) in enumerate(sites, 1):
        site_init = tuple(site_init)
        if len(site_shapes) != len(tensors) or len(site_init) != len(init) or \
                any(len(shape) != a.dim() for shape, (_, a) in zip(site_shapes, tensors)):
            notes.append(f"call site {k} not checked: its arguments or inputs are not shaped like the task's")
            continue
        placement = tuple(((i, d), int(n)) for (i, a), shape in zip(tensors, site_shapes)
                          for d, n in enumerate(shape) if a.shape[d] != n)
        if site_init == tuple(init) and not placement:
            continue  # the task's own
        changed = [(j,) for j, (a, b) in enumerate(zip(init, site_init)) if a != b]
        plans.append(Plan(f"call site {k}", placement, site_init, call_text(site_init, names, changed)))
    return plans, notes
