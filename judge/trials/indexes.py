"""Integer inputs that index a dimension (class targets, embedding ids, gather indices), and how they
follow a size the judge varies (trials/shapes.py): rescaled into the new size, so that the reference
stays valid and the dimension really varies."""
from __future__ import annotations

Dim = tuple[int, int]  # (input index, dimension)


def index_inputs(args: list) -> list[int]:
    """Positions of integer tensor inputs (not bool): what could index a dimension."""
    import torch

    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and not a.is_floating_point()
            and not a.is_complex() and a.dtype != torch.bool]


def indexes_into(args: list, placement: dict[Dim, int], skip: set[int] = frozenset()) -> bool:
    """Whether an integer input (other than those in `skip`, which follow the change) could index a
    dimension this placement shrinks: its values reach the new size but stay below the old one. The
    reference would then fail on the device."""
    shrunk = [(args[i].shape[d], new) for (i, d), new in placement.items() if new < args[i].shape[d]]
    for i in index_inputs(args):
        if i not in skip and args[i].numel():
            top = int(args[i].max())
            if any(new <= top < old for old, new in shrunk):
                return True
    return False


def index_inputs_of(args: list, size: int) -> list[int]:
    """Integer inputs whose values index a dimension of `size`: their non-negative values reach its
    upper half and stay below it (class targets of 1000 classes reach 999; a count or a flag does not)."""
    found = []
    for i in index_inputs(args):
        a = args[i]
        if a.is_meta:  # planning on shapes alone: values are seen on each trial's inputs
            continue
        valid = a[a >= 0] if a.numel() else a
        if valid.numel() and size // 2 <= int(valid.max()) < size and size > 1:
            found.append(i)
    return found


def follow(args: list, moved: list, old: int, new: int) -> tuple[list, list[int]]:
    """`moved` with the integer inputs of `args` that index a size `old` rescaled to `new`
    (v -> v * new // old: order kept, within range, negative ignore values kept); and which."""
    import torch

    which = index_inputs_of(args, old)
    out = list(moved)
    for i in which:
        a = out[i]
        out[i] = torch.where(a >= 0, torch.div(a * new, old, rounding_mode="floor"), a).to(a.dtype)
    return out, which
