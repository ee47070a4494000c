"""A gate the checker opens and a flag it watches: the clock of a block of calls, kept outside the
process that makes them.

One page of shared memory (a file in /dev/shm) holds two 32-bit words: the gate, which the checker
writes, and the done flag, which the block writes as its last act. On a GPU the page is pinned and
mapped for the device (cudaHostRegister): the worker queues a wait on the gate
(cuStreamWaitValue32), its calls, and a write of the done flag (cuStreamWriteValue32) on its
stream, and says so; the checker then writes the block's inputs, opens the gate and reads its own
clock until the flag shows. So the block's device time is measured by the checker's clock alone,
with the host's launch work kept out of it (everything was queued before the gate opened). Measured
on an H100 (2026-11-28): 20 matrix products timed 52.99 ms by the checker's clock and 52.96 ms by
events in the worker. On the CPU the worker itself waits on the gate, then calls, and the checker counts
the CPU time of the thread that makes them (threads_ns, main_thread_ms).

Both words are nonces the checker draws: a process that is not the block's cannot open its gate or
forge its flag by guessing. On the CPU the flag is also sealed with a checksum of the block's outputs
(`seal`): written before the calls end it cannot match them, however late the checker looks. (Unsealed,
a flag written the moment the gate opened went unseen on a loaded machine, where the checker read the
outputs only after the calls had ended: the fixture that does so was judged `ok`, 2026-11-28.) The checker reads the page through its file descriptor (pread), never a
mapping, so a page cut short by someone else ends a confirmation, not the checker.
"""
from __future__ import annotations

import os
import secrets
import time
import zlib
from pathlib import Path

GATE, DONE = 0, 64  # byte offsets of the two words: a cache line apart
SIZE = 4096
FOLDER = Path("/dev/shm")  # pinned-and-mapped registration needs shared memory (a file on disk was refused)
# On the CPU the worker naps while its gate is shut, rather than spin: the checker counts the worker's thread's
# CPU time from just before it opens the gate (clock.py), and spinning through a pause of the checker there
# was counted as the calls' (20 ms between the two read an honest 0.2 ms call as 2.5 ms a call: timing_mismatch).
NAP_S = 0.001


def available() -> bool:
    return FOLDER.is_dir() and os.access(FOLDER, os.W_OK)


class Page:
    """The checker's end: create, open the gate, watch the flag."""

    def __init__(self) -> None:
        self.path = FOLDER / f"kernelevo-clock-{secrets.token_hex(8)}"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(self.fd, SIZE)
        self.gate, self.done = _nonce(), _nonce()

    def message(self) -> dict:
        return {"page": str(self.path), "gate": self.gate, "done": self.done}

    def open_gate(self) -> int:
        """Open the gate; the checker's clock at that moment (ns)."""
        now = time.perf_counter_ns()
        os.pwrite(self.fd, self.gate.to_bytes(4, "little"), GATE)
        return now

    def wait_word(self, timeout_s: float, nap_s: float = 0.0, want: int | None = None) -> tuple[int, int] | None:
        """(the checker's clock in ns, the flag) once the flag shows `want`, or where `want` is None once it is
        written at all (a sealed flag's value is known only from the outputs: `seal`); None if not within
        `timeout_s`. `nap_s` between looks: on the CPU a core spent looking is one the calls lack (an OpenMP
        kernel waited 15 times as long with the checker spinning beside it on 2 cores)."""
        deadline = time.perf_counter() + timeout_s
        while True:
            word = int.from_bytes(os.pread(self.fd, 4, DONE), "little")
            if word if want is None else word == want:
                return time.perf_counter_ns(), word
            if time.perf_counter() > deadline:
                return None
            if nap_s:
                time.sleep(nap_s)

    def wait_done(self, timeout_s: float, nap_s: float = 0.0) -> int | None:
        """The checker's clock (ns) when the flag showed the nonce; None if it did not within `timeout_s`."""
        found = self.wait_word(timeout_s, nap_s, self.done)
        return None if found is None else found[0]

    def unlink(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass

    def close(self) -> None:
        self.unlink()
        try:
            os.close(self.fd)
        except OSError:
            pass


def threads_ns(pid: int, waiting: bool = False) -> dict[int, int] | None:
    """CPU time (ns) of each thread of process `pid`, as the kernel counts it (schedstat); None if unread.
    `waiting`: with the time it waited for a CPU while runnable, so what a thread wanted, however loaded the machine."""
    if pid <= 0:
        return None
    out = {}
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                fields = f.read().split()
            out[int(task)] = int(fields[0]) + (int(fields[1]) if waiting else 0)
    except (OSError, ValueError, IndexError):
        return None
    return out


def main_thread_ms(pid: int, before: dict | None, after: dict | None) -> float | None:
    """The CPU time (ms) the worker's main thread, the one that makes the calls, ran meanwhile, where no other
    thread of it ran a quarter as long (torch's pool copying an output ran 7 % of it); else None. No thread runs longer than the wall clock, so the calls took
    at least this long however loaded the machine was. Not so with a thread pool at work: at its barriers
    each thread spins for a descheduled other, and on a loaded machine that is time no call needed."""
    if before is None or after is None or pid not in before or pid not in after:
        return None
    main = after[pid] - before[pid]
    if any(after[t] - before.get(t, 0) > 0.25 * main for t in after if t != pid):
        return None
    return main / 1e6


def digest(flat) -> int:
    """The checksum of a CPU block's outputs: its file of outputs, all of it (a uint8 tensor)."""
    return zlib.crc32(flat.numpy())


def seal(done: int, checksum: int) -> int:
    """The flag a CPU block writes: its nonce with the checksum of its outputs, never 0 (the page's first value)."""
    return (done ^ checksum) or done


def _nonce() -> int:
    return secrets.randbelow(2**32 - 2) + 1  # never 0, the page's first value


class Block:
    """The calling end (the worker, and the checker for its own blocks): the page mapped, and on a GPU
    registered for the device."""

    def __init__(self, message: dict, device: str):
        import mmap

        import numpy as np

        self.device, self.cuda = device, device.startswith("cuda")
        self.gate, self.done = int(message["gate"]), int(message["done"])
        fd = os.open(str(message["page"]), os.O_RDWR)
        try:
            self.map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self.words = np.frombuffer(self.map, dtype=np.uint32)
        self.registered = self.device_ptr = None
        if self.cuda:
            from cuda.bindings import runtime

            address = self.words.__array_interface__["data"][0]
            driver_ok(runtime.cudaHostRegister(address, SIZE, runtime.cudaHostRegisterMapped), "cudaHostRegister")
            self.registered = address
            self.device_ptr = int(driver_ok(runtime.cudaHostGetDevicePointer(address, 0), "cudaHostGetDevicePointer"))

    def hold(self) -> None:
        """Queue the wait on the gate (GPU); on the CPU, wait for it here (up to a minute)."""
        if self.cuda:
            from cuda.bindings import driver

            stream = _stream()
            driver_ok(driver.cuStreamWaitValue32(stream, self.device_ptr + GATE, self.gate,
                                           driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_EQ), "cuStreamWaitValue32")
            return
        deadline = time.perf_counter() + 60.0
        while int(self.words[GATE // 4]) != self.gate:
            if time.perf_counter() > deadline:
                raise TimeoutError("the checker's gate did not open")
            time.sleep(NAP_S)

    def finish(self, checksum: int | None = None) -> None:
        """Write the done flag: on a GPU, queued after the block's work on its stream; on the CPU sealed with
        the `checksum` of the outputs where given (`seal`)."""
        if self.cuda:
            from cuda.bindings import driver

            driver_ok(driver.cuStreamWriteValue32(_stream(), self.device_ptr + DONE, self.done,
                                            driver.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT),
                "cuStreamWriteValue32")
        else:
            self.words[DONE // 4] = self.done if checksum is None else seal(self.done, checksum)
            self.map.flush()

    def close(self) -> None:
        if self.registered is not None:
            from cuda.bindings import runtime

            runtime.cudaHostUnregister(self.registered)
            self.registered = None
        self.words = None
        try:
            self.map.close()
        except (BufferError, ValueError):
            pass


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def driver_ok(result, what: str):
    """A cuda-python call's result: its value, or a RuntimeError naming `what` where it failed."""
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return result[1] if isinstance(result, tuple) and len(result) > 1 else None
