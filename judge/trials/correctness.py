"""The candidate's side of the correctness trials: run it on what the checker hands over, hand back
what it returned. Nothing here decides that a candidate is right: the checker (trials/checker.py),
a process that never loaded candidate code, holds the reference and compares. What is checked here
is what only the candidate's own process can see, and each check can only reject: the output is a
plain dense tensor of its own (not a lazy object, a subclass, an expanded view or an input's memory),
no Python thread was started, the reference model was not called, the output did not keep changing
after forward returned and the device was synchronised.

Every trial runs on inputs the candidate has never seen, with the allocator's free memory poisoned,
so that an output it never writes shows as NaN bits to the checker. For trial 2 the checker writes
new values into trial 1's memory and the same tensor objects are passed again (their version
counters unmoved): a result cached by address or tensor identity then comes out stale.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from kernelevo.judge import verdicts
from kernelevo.judge.job import Job
from kernelevo.judge.trials import arena, compare, gate, generality, guards, reference

forward = reference.forward


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Side:
    """The worker's end of one candidate's trials: its models, the shared memory, the last call."""

    def __init__(self, task, ref_model, candidate, job: Job, device: str, threads: guards.ThreadWatch):
        self.task, self.job, self.device, self.threads = task, job, device, threads
        self.ref_model, self.candidate = ref_model, candidate
        self.twins = generality.value_twins(ref_model, candidate)  # before anything runs: values still equal
        self.watch = guards.ReferenceWatch(ref_model)
        self.memory = self.region = None
        self.args = None  # the last trial's arguments, passed again where the checker says same place
        self.previous_out: list = []
        self.live = None  # (the last output as returned, its snapshot), for the checker's second look
        self.files = 0
        self.queued: _Queued | None = None  # the clock's block, from `clock` to `clock_end`
        self.block_failure: dict | None = None
        self.timed_at: dict | None = None  # from the checker's `end`: on a GPU, its room for the timed outputs

    def follow(self, receive, send) -> dict:
        """Answer the checker until it ends the trials; its last word: {"ok", "stateful", and its verdict}."""
        try:
            while True:
                message = receive()
                kind = message.get("check") if isinstance(message, dict) else None
                if kind == "end":
                    self.timed_at = message.get("timed")  # on a GPU, where the timed outputs go (Side.timed)
                    if isinstance(self.memory, arena.CudaMemory):
                        self.memory.close()  # the checker's memory: not mapped while the candidate is timed
                    return message
                if kind == "trial":
                    send(self.trial(message))
                elif kind == "redraw":
                    generality.redraw(self.ref_model, self.candidate, self.twins, self.job.seed)
                    send({"done": True})
                elif kind == "again":
                    send({"changed": self.again()})
                elif kind == "clock":
                    send(self.clock(message))
                    if self.queued is not None and not self.queued.block.cuda:
                        try:  # on the CPU the calls wait on the gate here, after `armed`
                            self._clock_calls()
                        except Exception as exc:  # noqa: BLE001 - told at clock_end
                            self.block_failure = self._failure(exc, "clock", "the checker's timed block")
                elif kind == "clock_end":
                    send(self.clock_end())
                else:
                    send({"failed": {"verdict": "runtime_error", "reason": "judge_error",
                                     "message": f"the worker got a message it does not know: {str(message)[:80]}"}})
        finally:
            self.watch.remove()

    def again(self) -> bool:
        """Whether the last output changed since it was handed over: a thread still writing it (on a
        busy machine) shows by now."""
        if self.live is None:
            return False
        time.sleep(0.05)
        out, snapshot = self.live
        return not _same(snapshot, compare.flatten(out))

    def trial(self, message: dict) -> dict:
        """Run the candidate on one trial's inputs: its outputs placed where the checker said, or why not."""
        if message.get("arena"):
            self.memory = arena.open_shared(message["arena"], writable=False)  # the checker's file: read only
            self.region = arena.Region(self.memory.flat)
        args = [_on(arena.rebuild(self.region, d), self.device) for d in message["args"]]
        if message.get("same_place") and self.args is not None:
            args = _same_place(self.args, args)
        kind, label = message.get("kind", "draw"), message.get("label", "")
        try:
            model, watch = self._model(message.get("init"))
            out = self._call(model, watch, args, message, label)
        except guards.Rejected as r:
            return {"rejected": {"reason": r.reason, "message": r.message, "evidence": r.evidence}}
        except Exception as exc:  # noqa: BLE001 - a refusal of a derived shape, or a failure
            return self._failure(exc, kind, label)
        self.args = args
        return self._hand_back(out, args, message["out"])

    def clock(self, message: dict) -> dict:
        """Queue the checker's timed block (trials/clock.py): on a GPU the wait on its gate, every call with
        its output copied where the checker said, and the done flag, all before answering `armed`."""
        if message.get("arena"):
            self.memory = arena.open_shared(message["arena"], writable=False)
            self.region = arena.Region(self.memory.flat)
        try:
            block = gate.Block(message, self.device)
        except (OSError, RuntimeError, ImportError, AttributeError) as exc:
            return {"unavailable": str(exc)[:300]}
        sets = [[_on(arena.rebuild(self.region, d), self.device) for d in descs] for descs in message["sets"]]
        rooms = list(message["out"])
        self.queued = _Queued(block, sets, rooms)
        if not block.cuda:  # the file its outputs go to, its pages touched now: a first write's fault is not a call's
            self.queued.memory, self.queued.file = self._new_file(sum(int(r["size"]) for r in rooms))
            self.queued.memory.flat.fill_(0)
            return {"armed": True, "file": self.queued.file}  # the checker reads it the moment the done word shows
        try:
            block.hold()
            self._clock_calls(held=True)
        except Exception as exc:  # noqa: BLE001 - a failure in the block: the gate opened from here, then the verdict
            block.words[gate.GATE // 4] = block.gate
            return self._failure(exc, "clock", "the checker's timed block")
        return {"armed": True}

    def _clock_calls(self, held: bool = False) -> None:
        import torch

        queued = self.queued
        block = queued.block
        if not held:
            block.hold()
        whole = None if block.cuda else arena.Region(queued.memory.flat)
        with torch.no_grad():
            for args, room in zip(queued.sets, queued.rooms):
                outs = compare.flatten(forward(self.candidate, args))
                queued.placed.append(_place_all(self.region.room(room) if block.cuda else whole, list(outs)))
        # on the CPU sealed with the outputs' checksum, no msync after: the checker reads the same pages, and
        # counts this thread's time
        block.finish(None if block.cuda else gate.digest(queued.memory.flat))

    def clock_end(self) -> dict:
        """The block finished: where each call's outputs are (its device errors, if any, are its verdict)."""
        if self.queued is None:
            return {"failed": {"verdict": "runtime_error", "reason": "judge_error", "message": "no block was queued"}}
        block, placed, file = self.queued.block, self.queued.placed, self.queued.file
        self.queued = None
        if self.block_failure is not None:
            block.close()
            return self.block_failure
        try:
            sync(self.device)
        except Exception as exc:  # noqa: BLE001
            return self._failure(exc, "clock", "the checker's timed block")
        finally:
            block.close()
        return {"outputs": placed, "file": file}

    def timed(self, kept: list, sets: list, fresh: list, send, receive) -> dict:
        """The outputs of the last timed calls (`kept`: (inputs, outputs) pairs), each with the index of the
        input set it was called on, and of the last fresh-values call (`fresh`: [(k, outputs)]), handed to the
        checker: on a GPU copied into the room of its memory that its `end` named (Checker.timed_room), on the
        CPU in a file of this worker's own; the checker compares them (Checker.timed). Its answer: {"ok", and
        its verdict where not}."""
        import torch

        found = []
        for args, out in kept:
            index = next((i for i, s in enumerate(sets) if _same(list(s), list(args))), None)
            if index is not None and index not in [i for i, _ in found]:
                found.append((index, list(compare.flatten(out))))
        last = [(k, list(compare.flatten(out))) for k, out in fresh[-1:]]
        if isinstance(self.timed_at, dict) and isinstance(self.timed_at.get("arena"), dict):  # a GPU: the checker's
            self.memory = arena.open_shared(self.timed_at["arena"])  # memory, copied into on the device
            region, file = arena.Region(self.memory.flat).room(self.timed_at["room"]), None
        else:
            tensors = [t for _, outs in found + last for t in outs if isinstance(t, torch.Tensor)]
            memory, file = self._new_file(arena.nbytes(tensors) + arena.ALIGN * (len(tensors) + 1))
            region = arena.Region(memory.flat)
        placed = [_place_all(region, outs) for _, outs in found]
        handed = {"k": last[0][0], "outputs": _place_all(region, last[0][1])} if last else None
        sync(self.device)  # no msync on the CPU: the checker maps the same pages
        if isinstance(self.memory, arena.CudaMemory):
            self.memory.close()
        send({"timed": {"sets": [i for i, _ in found], "outputs": placed, "fresh": handed, "file": file}})
        answer = receive()
        return answer if isinstance(answer, dict) else {"ok": False, "verdict": "runtime_error",
                                                        "reason": "judge_error", "message": "no answer from the checker"}

    def _model(self, init):
        """The candidate, or for a derived shape one built again with its constructor arguments."""
        if init is None:
            return self.candidate, self.watch
        rebuilt = reference.Rebuilt(self.task, self.candidate, tuple(arena.rebuild(None, init)), self.job.seed,
                                    self.device)
        return rebuilt.candidate, rebuilt.watch

    def _call(self, model, watch, args: list, message: dict, label: str):
        import torch

        guards.poison_free_memory(self.device, [int(n) for n in message.get("sizes", [])])
        try:
            with torch.no_grad(), watch.candidate_running():
                out = forward(model, args)
                sync(self.device)
        finally:
            if watch is not self.watch:
                watch.remove()
        returned = _values(out)  # what forward returned, before anything else runs
        self.threads.verify("a correctness trial")
        expected = _expected(message.get("expect") or [], self.device)
        if message.get("single") and len(expected) == 1:
            expected = expected[0]
        guards.check_outputs(out, expected, args, message.get("aliases") or [], self.previous_out)
        if not _same(returned, compare.flatten(out)):
            raise guards.Rejected("background_work", f"{label}: the output kept changing after forward returned "
                                  "(and the device was synchronised): its work runs outside the call")
        self.previous_out = compare.flatten(out)
        self.live = (out, returned)
        return returned

    def _hand_back(self, outs: list, args: list, room: dict) -> dict:
        """The outputs written where the checker said (on the CPU, into a file of this worker's own, with
        the inputs as the call left them)."""
        import torch

        if isinstance(self.memory, arena.CudaMemory):
            answer = {"outputs": _place_all(self.region.room(room), outs)}
            sync(self.device)
            return answer
        memory, file = self._new_file(arena.nbytes([o for o in outs if isinstance(o, torch.Tensor)])
                                      + arena.nbytes(args) + arena.ALIGN)
        region = arena.Region(memory.flat)
        answer = {"outputs": _place_all(region, outs), "inputs_after": _place_all(region, args), "file": file}
        memory.map.flush()
        return answer

    def _new_file(self, size: int) -> tuple[arena.HostFile, dict]:
        """A file of outputs in this worker's own folder, and how the checker names it (Checker._peer_file)."""
        memory = arena.HostFile(arena.Path(".").resolve() / f"arena-out-{self.files}", size, create=True)
        self.files += 1
        return memory, {"number": self.files - 1, "size": memory.size}

    def _failure(self, exc: Exception, kind: str, label: str) -> dict:
        """A derived shape's clean refusal (a Python-level exception, the device still healthy) marks the
        candidate specialized; anything else is its verdict."""
        failure = verdicts.classify_run(exc)
        if kind == "shape" and failure.reason == "exception":
            try:
                sync(self.device)
            except Exception:  # noqa: BLE001 - the refusal left the device broken: a crash after all
                pass
            else:
                return {"refused": failure.message}
        return {"failed": {"verdict": failure.verdict, "reason": failure.reason,
                           "message": f"{label}: {failure.message}", "excerpt": failure.excerpt}}


@dataclass
class _Queued:
    """The clock's block as the worker queued it: its gate, the calls' inputs and rooms, the descriptors of
    what each call placed, and on the CPU the file the outputs go to (its memory and how the checker names it)."""
    block: gate.Block
    sets: list
    rooms: list
    placed: list = field(default_factory=list)
    memory: arena.HostFile | None = None
    file: dict | None = None


def _place_all(region: arena.Region, values: list) -> list:
    """Descriptors of `values` placed in `region`; a tensor that does not fit is described by its shape
    alone (the checker rejects it by its shape), one on another device is copied here and marked so."""
    import torch

    placed = []
    for v in values:
        if isinstance(v, torch.Tensor):
            device = v.device.type
            if v.is_meta or v.layout != torch.strided or region.used + arena.nbytes(v) > region.flat.numel():
                placed.append({"t": "tensor", "offset": None, "shape": list(v.shape), "dtype": arena._name(v.dtype),
                               "device": device})
                continue
            d = region.place(v.to(region.flat.device) if v.device != region.flat.device else v)
            placed.append({**d, "device": device})
        else:
            try:
                placed.append(arena.encode(v))
            except TypeError:
                placed.append({"t": "value", "v": None, "type": type(v).__name__})
    return placed


def _on(value, device: str):
    """Inputs from a file arena go to the device (on a GPU without CUDA IPC); device views stay views."""
    import torch

    if isinstance(value, torch.Tensor) and value.device.type != device.split(":")[0]:
        return value.to(device)
    return value


def _same_place(previous: list, new: list) -> list:
    """The previous trial's tensor objects holding this trial's values (they already do where both view
    the checker's memory); written through `.data`, which leaves each version counter where it was."""
    import torch

    if len(previous) != len(new):
        return new
    for o, n in zip(previous, new):
        if isinstance(n, torch.Tensor) and not (isinstance(o, torch.Tensor) and o.shape == n.shape
                                                and o.dtype == n.dtype and o.device == n.device):
            return new
    for o, n in zip(previous, new):
        if isinstance(n, torch.Tensor) and o.data_ptr() != n.data_ptr():
            o.data.copy_(n)
    return previous


def _expected(specs: list, device: str) -> list:
    """Stand-ins for the reference's outputs, with their shape, strides and dtype and no values, for the
    structural checks (guards.check_outputs)."""
    import torch

    out = []
    for s in specs:
        if s is None:
            out.append(None)
            continue
        t = torch.empty_strided(s["shape"], s["stride"], dtype=arena.dtype_of(s["dtype"]), device="meta")
        out.append(_Spec(t, device))
    return out


class _Spec:
    """A meta tensor that says it is on the judged device: shape, strides and dtype are all a check reads."""

    def __init__(self, meta, device: str):
        import torch

        self.meta, self.device = meta, torch.device(device)
        self.shape, self.dtype = meta.shape, meta.dtype

    def stride(self):
        return self.meta.stride()


def _values(out) -> list:
    import torch

    return [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in compare.flatten(out)]


def _same(a: list, b: list) -> bool:
    import torch

    return len(a) == len(b) and all(not isinstance(x, torch.Tensor) or (isinstance(y, torch.Tensor)
                                                                         and guards.same_values(x, y))
                                    for x, y in zip(a, b))
