"""Which of a model's parts (split.Part) are one task.

Identical parts (the same class, construction, call and input shapes: 24 transformer layers) are one
task whose time is the sum of their call sites; so are parts whose constructor arguments differ only in
what their forward never uses (a drop-path rate). Parts of one class, construction and call built or
called at other sizes (DenseNet's layers, each built for its channel count) are one task too: the
hottest, the others its kin (split.Part.kin), whose file lists every site in get_call_sites(), so that
the judge checks a kernel at each (judge/trials/sites.py) and the assembly builds it at each with that
site's arguments.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .task_file import construction_text

if TYPE_CHECKING:
    from .split import Part


def _signature(part: Part) -> tuple:
    shapes = tuple((tuple(x.shape), str(x.dtype)) for x in part.inputs)
    return (part.cls.__module__, part.cls.__qualname__, construction_text(part.built, "", set()),
            repr(part.init), repr(part.call.spec()), shapes)


def fold(parts: list[Part]) -> list[Part]:
    """Identical parts as one task (_alike); then parts of one class, construction and call built for
    other sizes only (DenseNet's layers, each for its channel count: every argument that differs, at
    the top or inside a module argument, is a size of its inputs or outputs, never a kernel size, a
    stride or a group count of another kind), as one task of the hottest, the others its kin: its file
    lists every one in get_call_sites(), sizes inside module arguments lifted to the task's constructor
    parameters, and the judge checks a kernel at each."""
    groups: dict[tuple, list[Part]] = {}
    for part in _alike(parts):
        key = (_skeleton(part.built), repr(part.call.spec()), tuple((x.dim(), str(x.dtype)) for x in part.inputs))
        groups.setdefault(key, []).append(part)
    out: list[Part] = []
    for group in groups.values():
        heads: list[Part] = []
        for part in sorted(group, key=lambda p: -p.ms):  # the hottest of each kind is its task
            head = next((h for h in heads if _sizes_apart(h, part)), None)
            if head is None:
                heads.append(part)
            else:
                head.kin.append(part)
        for head in heads:
            _lift([head, *head.kin])
        out += heads
    return out


def _skeleton(built) -> str:
    """A construction with its plain values left out: the classes, argument names and nesting."""
    from .construct import Construction

    return f"{built.cls.__module__}.{built.cls.__qualname__}(" + ", ".join(
        f"{a.name}{'=' if a.keyword else ':'}{_skeleton(a.value) if isinstance(a.value, Construction) else '?'}"
        for a in built.args) + ")"


def _sizes_apart(a: Part, b: Part) -> bool:
    """Whether every plain argument in which `a` and `b` differ is, for each, a size of its own call's
    tensors (a channel count, a width), element by element for a tuple."""
    def sizes(part: Part) -> set[int]:
        from .call import tensors_of

        return {n for t in [*part.inputs, *tensors_of(part.sites[0].output)] for n in t.shape}

    def flat(v) -> tuple:
        return tuple(v) if isinstance(v, (tuple, list)) else (v,)

    mine, theirs = sizes(a), sizes(b)
    for (_, x), (_, y) in zip(a.built.leaves(), b.built.leaves()):
        if len(flat(x.value)) != len(flat(y.value)):
            return False
        for u, v in zip(flat(x.value), flat(y.value)):
            if u != v and not (type(u) is int and type(v) is int and u in mine and v in theirs):
                return False
    return True


def _lift(group: list[Part]) -> None:
    """The values inside module arguments that differ within the group, made the task's constructor
    parameters in every member's construction (named by their path: args_0_num_features)."""
    import dataclasses

    from .construct import Construction

    leaves = [p.built.leaves() for p in group]
    paths = [path for k, (path, arg) in enumerate(leaves[0])
             if len(path) > 1 and any(other[k][1].value != arg.value for other in leaves[1:])]

    def lifted(built, prefix: tuple):
        args = []
        for a in built.args:
            here = (*prefix, a.name)
            if isinstance(a.value, Construction):
                a = dataclasses.replace(a, value=lifted(a.value, here))
            elif here in paths:
                a = dataclasses.replace(a, lifted="_".join(here))
            args.append(a)
        return dataclasses.replace(built, args=tuple(args))

    if paths:
        for part in group:
            part.built = lifted(part.built, ())


def _alike(parts: list[Part]) -> list[Part]:
    """Identical parts as one task; and parts of one class, call and input shapes whose constructor
    arguments differ only in what their forward never uses (a drop-path rate left as Identity): a
    site's module given another's weights computes the other's output exactly."""
    groups: dict[tuple, Part] = {}
    alike: dict[tuple, list[Part]] = {}
    for part in parts:
        key = _signature(part)
        if key in groups:
            groups[key].sites += part.sites
            continue
        loose = key[:2] + key[4:]  # the signature without the construction and its arguments
        same = next((g for g in alike.get(loose, []) if _same_forward(g, part)), None)
        if same is not None:
            same.sites += part.sites
            continue
        groups[key] = part
        alike.setdefault(loose, []).append(part)
    return list(groups.values())


def _same_forward(kept: Part, other: Part) -> bool:
    """Whether `other`'s module, holding `kept`'s weights, gives `kept`'s output on `kept`'s first inputs
    (copies of both modules and of the inputs: nothing of the live model moves)."""
    import copy

    import torch

    from .call import tensors_of

    site = kept.sites[0]
    mine, theirs = site.module.state_dict(), other.sites[0].module.state_dict()
    if mine.keys() != theirs.keys() or any(mine[k].shape != theirs[k].shape or mine[k].dtype != theirs[k].dtype
                                           for k in mine):
        return False
    twin = copy.deepcopy(other.sites[0].module)
    twin.load_state_dict(mine)
    try:
        with torch.no_grad():
            want = copy.deepcopy(site.module)(*copy.deepcopy(site.args), **copy.deepcopy(site.kwargs))
            got = twin(*copy.deepcopy(site.args), **copy.deepcopy(site.kwargs))
    except Exception:  # noqa: BLE001 - another's arguments that do not run here do matter
        return False
    a, b = tensors_of(want), tensors_of(got)
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))
