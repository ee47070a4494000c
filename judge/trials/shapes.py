"""Other valid shapes for a task, derived by the judge itself, so that "verified" means drop-in.

A kernel written against `get_inputs()` alone often works only there: full tiles and no tail
handling, sizes baked in as constants, grids computed for one size. So besides the task's own
shapes the candidate is checked on inputs whose sizes are changed to odd primes (never a multiple
of 2, 8, 16, 32 or 64), each both below and above the task's: 16 -> 13 and 17, 4096 -> 4093 and
4099. Below, a grid sized for the task's shape runs past the end of the inputs (the bounds trial
sees that); above, it leaves elements unwritten, and the poisoned output shows them.

Which sizes may change, and how, is decided by role, never by a size's value:
- A size the module is built for changes together with its constructor argument: both the
  reference and the candidate are built again with the new value (`Model(features=509)` with
  inputs of 509 features). A dimension is found to be built for when the reference, built with the
  argument changed, accepts the changed dimension (and, where it rejects the original one, needs
  it). Every dimension of that size the rebuilt reference accepts changes with it: where shapes
  alone cannot tell a batch of 1024 from 1024 features (a module that never checks its feature
  count), changing both together is a valid input either way, while changing the features alone
  would ask a module built for 1024 to take 1021.
- Every other size changes alone, with the task's own construction: the leading dimension and up
  to two inner ones. A size changes as a symbol: every input dimension of that size not built for
  changes with it (a matmul's shared K in both operands), falling back to fewer places when the
  reference rejects that.

All of this is decided on shapes alone, before the candidate holds a device: on the meta device
(no memory, no kernels, so an invalid variant leaves no CUDA error behind), or where the reference
cannot run there, with real tensors. A variant is kept only where the reference runs on it.

Integer inputs that index a dimension (class targets, embedding ids, gather indices) follow it:
found on each trial's values (non-negative values reaching the upper half of a changed size, and
below it), they are rescaled to the new size, v -> v * new // old, which keeps their order and a
negative ignore value such as -100. So a cross-entropy's class count really varies, and a size
only an index input ties (an embedding's vocabulary, a constructor argument no input dimension
has) varies too. The reference, run on the result, confirms it stays valid. Integer inputs that
could still index a shrunk dimension out of range veto the variant.

A task folded over call sites of other sizes lists them in `get_call_sites()`: sites.py makes each a
trial of its own, beside the sizes derived here.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from kernelevo.judge.trials import indexes

MAX_CONSTRUCTOR = 3  # constructor arguments varied together with their sizes
MAX_VARIANTS = 5  # sizes varied in all (each below and above): constructor ones, then the leading dimension and inner ones
MAX_ALONE = 3  # of which sizes changed alone
MAX_INNER_TRIES = 4  # inner sizes tried before giving up
MAX_SUBSETS = 16  # placements tried per constructor argument
MIN_BYTES_BOUND = 64 << 20  # a variant may always use this much input memory
GROWTH_BOUND = 1.25  # ... or this factor of the task's own inputs

Dim = tuple[int, int]  # (input index, dimension)
Path = tuple[int, ...]  # a constructor argument: (position,) or (position, element) inside a tuple


@dataclass(frozen=True)
class Plan:
    """One derived variant, decided on shapes: where sizes change, and the construction if it changes."""
    label: str  # e.g. "leading dimension 16 -> 13", "features 512 -> 509"
    placement: tuple[tuple[Dim, int], ...]  # ((input, dim), new size)
    init: tuple | None = None  # constructor arguments both models are rebuilt with; None: the task's own
    built: str = ""  # "Model(features=509)" where rebuilt
    change: tuple[int, int] = (0, 0)  # (old size, new size): index inputs into the old size follow it
    paths: tuple[Path, ...] = ()  # the constructor arguments changed
    by_index: bool = False  # a size no input dimension has: kept only where an index input ties it

    @property
    def sizes(self) -> dict[Dim, int]:
        return dict(self.placement)


@dataclass(frozen=True)
class ShapeVariant:
    label: str  # e.g. "leading dimension 16 -> 13"
    args: list  # inputs on the device, drawn fresh
    shapes: str  # e.g. "float32[13, 16384]", or "float32[128, 509] with Model(features=509)"
    init: tuple | None = None
    built: str = ""


@dataclass
class Roles:
    """What planning found: the variants, and notes on what could not be varied."""
    plans: list[Plan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def other_size(n: int) -> int | None:
    """The size a dimension of size `n` is changed to: the largest odd prime below it, or the next
    one above for tiny sizes; None for size 1 (a broadcast or keepdim axis, not a size to vary)."""
    if n <= 1:
        return None
    if n <= 4:
        return {2: 3, 3: 5, 4: 3}[n]
    p = n - 1
    while not _is_prime(p):
        p -= 1
    return p


def size_above(n: int) -> int | None:
    """The size above the task's a dimension of size `n` is also tried at: the next odd prime; None
    for size 1."""
    if n <= 1:
        return None
    p = n + 1
    while p == 2 or not _is_prime(p):
        p += 1
    return p


def _is_prime(n: int) -> bool:
    if n < 2 or n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def describe(args: list) -> str:
    """'float32[13, 16384], int64[13]': the tensor inputs' dtypes and shapes."""
    import torch

    return ", ".join(f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}" for a in args
                     if isinstance(a, torch.Tensor))


def _dims(args: list) -> dict[Dim, int]:
    import torch

    return {(i, d): n for i, a in enumerate(args) if isinstance(a, torch.Tensor) for d, n in enumerate(a.shape)}


# --- constructor arguments -------------------------------------------------------------------------

def size_arguments(init: tuple) -> list[tuple[Path, int]]:
    """Integer constructor arguments that could be sizes (over 1), top level or inside a tuple/list."""
    found = []
    for k, a in enumerate(init):
        if isinstance(a, int) and not isinstance(a, bool):
            found.append(((k,), a))
        elif isinstance(a, (tuple, list)):
            found += [((k, j), e) for j, e in enumerate(a) if isinstance(e, int) and not isinstance(e, bool)]
    return [(p, v) for p, v in found if v > 1 and other_size(v) is not None]


def with_value(init: tuple, paths: list[Path], value: int) -> tuple:
    """`init` with the arguments at `paths` set to `value`."""
    out = list(init)
    for path in paths:
        if len(path) == 1:
            out[path[0]] = value
        else:
            inner = list(out[path[0]])
            inner[path[1]] = value
            out[path[0]] = type(init[path[0]])(inner)
    return tuple(out)


def call_text(init: tuple, names: tuple[str, ...], changed: list[Path]) -> str:
    """'Model(in_features=1021, out_features=1024)'; long argument lists keep the changed ones only."""
    def one(k: int, a: Any) -> str:
        return f"{names[k]}={a!r}" if k < len(names) else repr(a)

    full = f"Model({', '.join(one(k, a) for k, a in enumerate(init))})"
    if len(full) <= 80:
        return full
    keep = sorted({p[0] for p in changed})
    return f"Model({', '.join(one(k, init[k]) for k in keep)}, ...)"


def _arg_name(path: Path, names: tuple[str, ...]) -> str:
    base = names[path[0]] if path[0] < len(names) else f"argument {path[0] + 1}"
    return base if len(path) == 1 else f"{base}[{path[1]}]"


def _subsets(dims: list[Dim]) -> list[tuple[Dim, ...]]:
    """Placements to try for a constructor argument, widest first, then the empty one."""
    if len(dims) <= 4:
        tries = [c for r in range(len(dims), 0, -1) for c in itertools.combinations(dims, r)]
    else:
        tries = [tuple(dims)] + [tuple(d for d in dims if d != x) for x in dims] + [(x,) for x in dims]
    return tries[:MAX_SUBSETS - 1] + [()]


def _placement_for(args: list, accepts: Callable[[tuple, list], bool], init: tuple, value: int,
                   new: int) -> tuple[Dim, ...] | None:
    """The widest set of dimensions of size `value` that the reference built with `init` accepts
    changed to `new` (possibly none); None where it accepts no placement at all."""
    same = [dim for dim, n in _dims(args).items() if n == value]
    for subset in _subsets(same):
        if accepts(init, moved(args, dict.fromkeys(subset, new), value, new)):
            return subset
    return None


def constructor_plans(args: list, init: tuple, accepts: Callable[[tuple, list], bool],
                      names: tuple[str, ...]) -> tuple[list[Plan], set[Dim], list[str]]:
    """Variants that rebuild both models with a size argument changed, the input dimensions they
    carry (never changed alone), and notes. An argument whose value is no input size ties no input
    dimension; where integer inputs exist it may be a size they index (a vocabulary): planned
    `by_index`, and kept only where one does (`variants`)."""
    sizes = {dim: n for dim, n in _dims(args).items()}
    by_value: dict[int, list[Path]] = {}
    indexed: list[Plan] = []
    for path, value in size_arguments(init):
        if value in sizes.values():
            by_value.setdefault(value, []).append(path)
        elif indexes.index_inputs(args) and accepts(changed := with_value(init, [path], other_size(value)),
                                             moved(args, {}, value, other_size(value))):
            indexed.append(Plan(f"{_arg_name(path, names)} {value} -> {other_size(value)}", (), changed,
                                call_text(changed, names, [path]), (value, other_size(value)), (path,), True))
    plans, carried, notes = [], set(), []
    for value, paths in by_value.items():
        new = other_size(value)
        # each argument of this value alone; if none can change alone, all of them together
        groups = [[p] for p in paths] + ([paths] if len(paths) > 1 else [])
        found = unrelated = False
        for group in groups:
            if found and len(group) > 1:
                break
            changed = with_value(init, group, new)
            subset = _placement_for(args, accepts, changed, value, new)
            unrelated |= subset == ()  # built with the new value, it takes the task's inputs as they are
            if not subset:
                continue
            found = True
            carried |= set(subset)
            label = " and ".join(_arg_name(p, names) for p in group) + f" {value} -> {new}"
            plans.append(Plan(label, tuple((d, new) for d in subset), changed, call_text(changed, names, group),
                              (value, new), tuple(group)))
            own = _own_dimensions(args, accepts, init, changed, subset, value, new)
            if own:
                plans.append(Plan(f"{label}, its own dimensions only", tuple((d, new) for d in own), changed,
                                  call_text(changed, names, group), (value, new), tuple(group)))
        if not found and not unrelated:
            notes.append(f"{value} is also a constructor argument ({', '.join(_arg_name(p, names) for p in paths)}) "
                         f"that the reference could not be built with as {new} for these inputs: "
                         "its dimensions change alone, where the reference accepts that")
    return (plans + indexed)[:MAX_CONSTRUCTOR], carried, notes


def _own_dimensions(args: list, accepts: Callable[[tuple, list], bool], init: tuple, changed: tuple,
                    subset: tuple[Dim, ...], value: int, new: int) -> tuple[Dim, ...]:
    """The fewest of `subset` the module is shown to be built for: the rebuilt reference accepts them
    changed, and the task's own rejects that (so they are its size, while the rest of `subset` only
    shares the value: rows as many as an RMSNorm's hidden size). Empty where no such proof exists (a
    module that never checks its feature count), or all of `subset` is needed."""
    for size in range(1, len(subset)):
        for own in itertools.combinations(subset, size):
            trial = moved(args, dict.fromkeys(own, new), value, new)
            if accepts(changed, trial) and not accepts(init, trial):
                return own
    return ()


def above(p: Plan, args: list, init: tuple, accepts: Callable[[tuple, list], bool], names: tuple[str, ...],
          bound: float) -> Plan | None:
    """`p`'s twin at a size above the task's, where the reference runs on it within `bound` bytes."""
    old = p.change[0]
    up = size_above(old)
    if up is None:
        return None
    placement = {d: up for d, _ in p.placement}
    changed = with_value(init, list(p.paths), up) if p.paths else None
    grown = moved(args, placement, old, up)
    if _nbytes(grown) > bound or not accepts(changed if changed is not None else init, grown):
        return None
    label = p.label.replace(f"{old} -> {p.change[1]}", f"{old} -> {up}", 1)
    built = call_text(changed, names, list(p.paths)) if changed is not None else ""
    return Plan(label, tuple(placement.items()), changed, built, (old, up), p.paths, p.by_index)


# --- sizes changed alone -----------------------------------------------------------------------------

def alone_plans(args: list, frozen: set[Dim]) -> list[tuple[str, list[dict[Dim, int]]]]:
    """(label, placements to try in order) per size changed alone: the leading dimension, then inner
    ones; dimensions in `frozen` (carried by a constructor argument) never change here."""
    import torch

    dims = [(i, d, n) for (i, d), n in _dims(args).items() if (i, d) not in frozen]
    if not dims:
        return []
    plans = []
    first = next(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
    lead = args[first].shape[0] if args[first].dim() else 1
    if (first, 0) not in frozen and args[first].dim() and (new := other_size(lead) if lead > 1 else 3) is not None:
        at = {(i, 0): new for i, d, n in dims if d == 0 and n == lead}
        plans.append((f"leading dimension {lead} -> {new}", [at]))
    inner = [n for i, d, n in dims if d > 0 and n > 1]
    last = args[first].shape[-1] if args[first].dim() > 1 and (first, args[first].dim() - 1) not in frozen else None
    order = ([last] if last and last > 1 else []) + sorted(set(inner) - {last}, reverse=True)
    for n in order[:MAX_INNER_TRIES]:
        new = other_size(n)
        everywhere = {(i, d): new for i, d, m in dims if m == n}
        inner_only = {(i, d): new for i, d, m in dims if m == n and d > 0}
        own = {(first, d): new for i, d, m in dims if i == first and m == n and d > 0}
        tries: list[dict] = []
        for placement in (everywhere, inner_only, own):  # the widest change first
            if placement and placement not in tries:
                tries.append(placement)
        plans.append((f"inner dimension {n} -> {new}", tries))
    return plans


def plan(args: list, init: tuple, accepts: Callable[[tuple, list], bool], names: tuple[str, ...] = ()) -> Roles:
    """The derived variants of inputs like `args` (only their shapes matter) for a module built with
    `init`; `accepts(init, args)` says whether the reference built so runs on such inputs."""
    roles = Roles()
    ctor, carried, roles.notes = constructor_plans(args, init, accepts, names)
    roles.plans = list(ctor)
    bound = max(MIN_BYTES_BOUND, GROWTH_BOUND * _nbytes(args))
    refused = []
    for label, tries in alone_plans(args, carried):
        if len(roles.plans) >= MAX_VARIANTS or len(roles.plans) - len(ctor) >= MAX_ALONE:
            break
        for placement in tries:
            old, new = _dims(args)[next(iter(placement))], next(iter(placement.values()))
            shrunk = moved(args, placement, old, new)
            if _nbytes(shrunk) <= bound and accepts(init, shrunk):
                roles.plans.append(Plan(label, tuple(placement.items()), change=(old, new)))
                break
        else:
            refused.append(label)
    # every size varied below is also tried above: a grid sized for the task leaves elements unwritten there
    roles.plans = [q for p in roles.plans for q in (p, above(p, args, init, accepts, names, bound)) if q is not None]
    roles.notes += [f"not checked on another {kind} dimension: the reference runs on none of "
                    + ", ".join(r.removeprefix(f"{kind} dimension ") for r in refused if r.startswith(kind))
                    for kind in ("leading", "inner")
                    if not any(p.label.startswith(kind) for p in roles.plans) and any(r.startswith(kind) for r in refused)]
    return roles


# --- from plans to inputs ----------------------------------------------------------------------------

def resized(args: list, placement: dict[Dim, int]) -> list:
    """`args` with the placed dimensions cut (or repeated, then cut) to their new sizes, contiguous.
    Meta tensors (planning) are made anew in their new shape."""
    import torch

    out = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if a.is_meta:
                shape = [placement.get((i, d), n) for d, n in enumerate(a.shape)]
                out.append(torch.empty(shape, dtype=a.dtype, device="meta"))
                continue
            for (j, d), new in placement.items():
                if j == i:
                    if new > a.shape[d]:
                        a = torch.cat([a] * -(-new // a.shape[d]), dim=d)
                    a = a.narrow(d, 0, new)
            a = a.contiguous().clone()
        out.append(a)
    return out


def moved(args: list, placement: dict[Dim, int], old: int, new: int) -> list:
    """`args` resized by `placement`, the index inputs into size `old` following it to `new`."""
    return indexes.follow(args, resized(args, placement), old, new)[0]


def _nbytes(args: list) -> int:
    import torch

    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def variants(base: list, roles: Roles) -> tuple[list[ShapeVariant], list[str]]:
    """The planned variants on `base` (one trial's fresh inputs on the device), index inputs following
    the size they index, and notes on those an integer input vetoes."""
    out, notes = [], []
    for p in roles.plans:
        old, new = p.change
        args, followed = indexes.follow(base, resized(base, p.sizes), old, new) if old else (resized(base, p.sizes), [])
        if p.by_index and not followed:
            continue  # a size argument that no input indexes: it ties nothing to vary
        if indexes.indexes_into(base, p.sizes, skip=set(followed)):
            notes.append(f"not checked on {p.label}: an integer input indexes the dimension it shrinks")
            continue
        shown = describe(args) + (f" with {p.built}" if p.built else "")
        label = p.label + (" (index inputs follow)" if followed else "")
        out.append(ShapeVariant(label, args, shown, p.init, p.built))
    return out, notes
