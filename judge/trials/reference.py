"""The reference side of a correctness trial: the task's model, its float64 copy and a probing twin,
both models built again for a derived shape's constructor arguments, and whether the reference
accepts inputs of a shape (what trials/shapes.py plans with).
"""
from __future__ import annotations

import copy
from typing import Any, Callable

from kernelevo.judge.trials import compare, generality, guards, inputs


def forward(model, args: list):
    return model(*args)


class Reference:
    """The task's model in its own dtype (TF32 off), in float64 where it runs, and a twin that
    probes inputs (is the output finite?) without advancing the reference's own state: a
    recurrent task keeps its hidden state across calls, and so must an honest candidate."""

    def __init__(self, model, probes: bool = True):
        self.model = model
        self.model64 = _copy(model, double=True)  # float64 is a refinement, not a requirement
        self.twin = _copy(model) if probes else None

    def plain(self, args: list):
        return forward(self.model, args)

    def other_path(self, args: list):
        """The float32 model's output on `args` through torch's other float32 implementations (SDPA's math
        backend, convolutions without cuDNN), on the twin so that the reference's state does not advance; None
        without a twin or where that path fails. On the large-value trial of the KernelBench sample's attention
        (H200, 2026-11-30) SDPA's math backend was 13-38x less accurate than the efficient kernel that computes
        the reference, so "8x the reference's own error" refused honest float32 attention there."""
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if self.twin is None:
            return None
        try:
            with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), torch.backends.cudnn.flags(enabled=False):
                return forward(self.twin, args)
        except Exception:  # noqa: BLE001 - no other path here: the bounds stay the reference's
            return None

    def finite_on(self, args: list) -> bool:
        """Whether the reference runs on `args` with a finite output, probed on the twin with the values
        shuffled (inputs.shuffled: no output for the trial's own inputs exists before the candidate's)."""
        try:
            return all_finite(forward(self.twin or self.model, inputs.shuffled(args)))
        except Exception:  # noqa: BLE001 - the reference rejects these inputs
            return False

    def keeps_state(self, args: list) -> bool:
        """Whether two calls on the same inputs disagree: the reference carries state from call
        to call (an RNN's hidden state). Then only calls made in lockstep with it compare."""
        if self.twin is None:
            return False
        try:
            first = [t.clone() if hasattr(t, "clone") else t
                     for t in compare.flatten(forward(self.twin, inputs.shuffled(args)))]
            second = compare.flatten(forward(self.twin, inputs.shuffled(args)))
            return not all(_close(a, b) for a, b in zip(first, second)) or len(first) != len(second)
        except Exception:  # noqa: BLE001 - a probe (out of memory on a huge output...): the trials decide
            return False


    def slack(self, args: list, exact) -> list | None:
        """What each output element may differ by on these inputs because the problem is
        ill-conditioned there (generality.conditioning_slack), from the float64 model where it
        runs; its buffers (running statistics) are put back, so later trials see no extra calls."""
        model = self.model64 if exact is not None else self.twin
        if model is None:
            return None
        saved = {name: b.clone() for name, b in model.named_buffers()}
        try:
            if exact is None:
                exact = forward(model, inputs.clone_inputs(args))
            return generality.conditioning_slack(lambda moved: forward(model, moved),
                                                 inputs.to_float64(args) if model is self.model64 else args, exact)
        except Exception:  # noqa: BLE001 - the reference refuses moved inputs: no slack, the plain tolerance
            return None
        finally:
            with_names = dict(model.named_buffers())
            for name, value in saved.items():
                with_names[name].copy_(value)

    def sync(self) -> None:
        """Give the float64 model and the twin the reference's current weights (after a redraw)."""
        state = self.model.state_dict()
        for other in (self.model64, self.twin):
            if other is not None:
                for name, tensor in other.state_dict().items():
                    if name in state and tensor.is_floating_point():
                        tensor.copy_(state[name])

    def __call__(self, args: list):
        """(outputs, float64 outputs or None, all finite) on `args` (which may be mutated)."""

        exact = None
        if self.model64 is not None:
            try:
                exact = forward(self.model64, inputs.to_float64(args))
            except (RuntimeError, TypeError, NotImplementedError):
                self.model64 = None
        out = forward(self.model, args)
        return out, exact, all_finite(out)


def _close(a, b) -> bool:
    """Equal, or within float32 noise (a nondeterministic reduction): without float64 copies, since an
    output can be gigabytes."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b
    if a.shape != b.shape or a.dtype != b.dtype or torch.equal(a, b):
        return a.shape == b.shape and a.dtype == b.dtype
    if not a.is_floating_point():
        return False
    scale = float(b.float().norm())
    return float((a.float() - b.float()).norm()) <= 1e-5 * scale if scale > 0 else False


def _copy(model, double: bool = False):
    try:
        twin = copy.deepcopy(model)
        return twin.double() if double else twin
    except Exception:  # noqa: BLE001 - some modules hold handles that cannot be copied
        return None


def all_finite(out) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in compare.flatten(out)
               if isinstance(t, torch.Tensor) and t.is_floating_point())


class Skip(Exception):
    """A derived shape the reference itself does not handle (its output is not finite there, or it
    cannot be built so on the device): not a test of anything."""

    def __init__(self, why: str = "the reference's output is not finite there"):
        super().__init__(why)
        self.why = why


def build(task, init: tuple, seed: int, device: str):
    """The reference built with `init` under `seed` on `device`, or Skip where it cannot be."""
    import torch

    try:
        inputs.seed_all(seed)
        return task.Model(*init).to(device)
    except torch.OutOfMemoryError as exc:  # the judge's own memory, not the candidate's fault
        raise Skip("no device memory left to build the models again") from exc
    except Exception as exc:  # noqa: BLE001 - meta built it, the device could not
        raise Skip(f"the reference cannot be built so on the device ({type(exc).__name__})") from exc


class Rebuilt:
    """Both models built again with a derived shape's constructor arguments, under the same seed and
    with redrawn weights, watched like the task's own: used for that one trial."""

    def __init__(self, task, candidate, init: tuple, seed: int, device: str):
        import torch

        reference = build(task, init, seed, device)
        inputs.seed_all(seed)
        built = type(candidate)(*init)  # an exception here is the candidate refusing the construction
        inputs.copy_weights(reference, built)
        self.candidate = built.to(device)
        guards.check_not_reference(type(built), built, task.Model)
        self.ref = Reference(reference, probes=False)  # one trial, no probes: no twin to keep in memory
        twins = generality.value_twins(self.ref.model, self.candidate)
        with torch.no_grad():
            generality.redraw(self.ref.model, self.candidate, twins, seed)
        self.ref.sync()
        self.watch = guards.ReferenceWatch(self.ref.model, self.ref.model64)


def acceptor(model_cls, device: str) -> Callable[[tuple, list], bool]:
    """`accepts(init, args)`: does `model_cls(*init)` run on tensors shaped like `args`? On `device`
    "meta" (shapes only), else with real tensors there. Models are built once per construction."""
    import torch

    built: dict[str, Any] = {}

    def model(init: tuple):
        key = repr(init)
        if key not in built:
            try:
                with torch.device(device):
                    built[key] = model_cls(*init)
            except Exception:  # noqa: BLE001 - the module cannot be built so (or not on this device)
                built[key] = None
        return built[key]

    def accepts(init: tuple, args: list) -> bool:
        m = model(init)
        if m is None:
            return False
        moved = [torch.empty_like(a, device=device) if device == "meta" and isinstance(a, torch.Tensor)
                 else a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
        try:
            with torch.no_grad():
                out = m(*moved)
        except Exception:  # noqa: BLE001 - the reference rejects these shapes
            return False
        outs = out if isinstance(out, (list, tuple)) else [out]
        return all(not isinstance(o, torch.Tensor) or o.numel() > 0 for o in outs)

    return accepts

def parameter_names(model_cls) -> tuple[str, ...]:
    """The reference constructor's positional parameter names, for labels."""
    import inspect

    try:
        params = list(inspect.signature(model_cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
