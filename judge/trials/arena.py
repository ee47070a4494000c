"""Memory the checker and the candidate's worker share: the trial's inputs one way, its outputs back.

The checker (trials/checker.py) holds the reference and decides; it never loads candidate code. So
the candidate's worker gets each trial's inputs from it and hands back what the candidate returned,
through memory rather than a copy of every tensor through a pipe:
- on a GPU, one device allocation of the checker's (cudaMalloc, outside torch's caching allocator, so
  that no tensor of the checker's ever lies in it), opened by the worker through a CUDA IPC handle. The
  worker writes the outputs into the part the checker names; in-place changes to the inputs land in
  the checker's own memory, where it sees them;
- on the CPU, two files: the checker's (inputs), which the worker's sandbox can read but not write,
  and the worker's (outputs, and the inputs as the call left them), in the worker's own folder.
What crosses as text is a descriptor per argument (`describe`, read back by `rebuild`): a tensor's
dtype, shape and offset, or a plain value. The checker reads the worker's descriptors as claims: each
is checked against the memory it names before anything is read (`tensor`).
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

ALIGN = 256  # every tensor starts on a boundary any vector load accepts
_VALUES = (bool, int, float, str, type(None))


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def dtype_of(name: str):
    """The torch dtype named `name` ("float32"), or ValueError: a worker's descriptor is not trusted."""
    import torch

    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {name!r}")
    return dtype


def nbytes(value) -> int:
    """Bytes a value's tensors take in an arena, each aligned."""
    import torch

    if isinstance(value, torch.Tensor):
        return _aligned(value.numel() * value.element_size())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    return 0


class Region:
    """A byte range of an arena as a flat uint8 tensor, and what is placed in it, in order."""

    def __init__(self, flat, start: int = 0):
        self.flat, self.start, self.used = flat, start, 0

    def tensor(self, offset: int, shape: list, dtype):
        """The tensor at `offset` (absolute), checked to lie inside this region."""
        import math

        import torch

        dt = dtype_of(dtype) if isinstance(dtype, str) else dtype
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims) or not isinstance(offset, int) or offset % ALIGN:
            raise ValueError(f"a tensor descriptor out of shape: offset {offset}, shape {dims}")
        size = math.prod(dims) * torch.empty((), dtype=dt).element_size()
        begin = offset - self.start
        if begin < 0 or begin + size > self.flat.numel():
            raise ValueError(f"a tensor of {size} bytes at {offset} lies outside its region")
        return self.flat[begin:begin + size].view(dt).view(dims)

    def room(self, room: dict) -> "Region":
        """The part of this region that a room names ({"offset" (absolute), "size"}), with nothing placed."""
        begin = int(room["offset"]) - self.start
        return Region(self.flat[begin:begin + int(room["size"])], int(room["offset"]))

    def place(self, value) -> Any:
        """Copy `value`'s tensors in (contiguous), and say where: the descriptor `rebuild` reads."""
        import torch

        if isinstance(value, torch.Tensor):
            offset = self.start + self.used
            size = value.numel() * value.element_size()
            if self.used + size > self.flat.numel():
                raise ValueError("the arena is too small for this trial")  # sized by nbytes(): a judge bug
            target = self.tensor(offset, list(value.shape), value.dtype)
            target.copy_(value.detach())
            self.used += _aligned(size)
            return {"t": "tensor", "offset": offset, "shape": list(value.shape), "dtype": _name(value.dtype)}
        if isinstance(value, (list, tuple)):
            return {"t": type(value).__name__, "items": [self.place(v) for v in value]}
        return encode(value)


def encode(value) -> Any:
    """A descriptor of a plain value (constructor arguments, a scalar input): no tensor in it."""
    if isinstance(value, (list, tuple)):
        return {"t": type(value).__name__, "items": [encode(v) for v in value]}
    if isinstance(value, _VALUES):
        return {"t": "value", "v": value}
    raise TypeError(f"a value of type {type(value).__name__} cannot be handed to the candidate's process")


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def rebuild(region: Region | None, desc: Any) -> Any:
    """The value a descriptor names: tensors are views of the region's memory (no copy)."""
    kind = desc.get("t") if isinstance(desc, dict) else None
    if kind == "tensor" and region is not None:
        return region.tensor(desc["offset"], desc["shape"], desc["dtype"])
    if kind in ("list", "tuple"):
        items = [rebuild(region, d) for d in desc["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "value" and isinstance(desc.get("v"), _VALUES):
        return desc["v"]
    raise ValueError(f"not a descriptor: {str(desc)[:80]}")


def describe(region: Region, values: list) -> list:
    """Descriptors of `values` placed in `region` from its start (the region is reused per trial)."""
    region.used = 0
    return [region.place(v) for v in values]


# ---- the memory itself ----------------------------------------------------------------------------

class HostFile:
    """A file mapped into memory (the CPU's arenas): created by its writer, opened read-only or
    read-write by the other process, grown by replacing it under a new name."""

    def __init__(self, path: Path, size: int, create: bool, writable: bool = True):
        import torch

        self.path, self.size = Path(path), max(ALIGN, size)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL if create else (os.O_RDWR if writable else os.O_RDONLY)
        fd = os.open(self.path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, self.size)
            access = mmap.ACCESS_WRITE if (create or writable) else mmap.ACCESS_COPY
            self.map = mmap.mmap(fd, self.size, access=access)
        finally:
            os.close(fd)
        # ACCESS_COPY: the reader gets its own copy of any page it writes; the file stays as the writer left it
        self.flat = torch.frombuffer(self.map, dtype=torch.uint8)

    def info(self) -> dict:
        return {"kind": "file", "path": str(self.path), "size": self.size}

    def close(self) -> None:
        """Unmap and remove the file (the checker's side, once the job's worker is gone)."""
        import contextlib

        self.flat = None
        with contextlib.suppress(BufferError, ValueError):
            self.map.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def grown(self, size: int) -> "HostFile":
        """A larger file beside this one, under the next number; this one stays as it is."""
        stem, _, number = self.path.name.rpartition("-")
        grown = HostFile(self.path.with_name(f"{stem}-{int(number) + 1}"), size, create=True)
        _kept.append(grown)
        return grown


class CudaMemory:
    """A device allocation shared through CUDA IPC: made by the checker, opened by the worker."""

    def __init__(self, size: int = 0, handle: str | None = None):
        import torch
        from cuda.bindings import runtime

        torch.cuda.init()  # torch and the runtime API then share the device's primary context
        self.size, self._runtime = max(ALIGN, size), runtime
        if handle is None:
            err, self.ptr = runtime.cudaMalloc(self.size)
            _ok(err, "cudaMalloc")
            err, ipc = runtime.cudaIpcGetMemHandle(self.ptr)
            _ok(err, "cudaIpcGetMemHandle")
            self.handle, self.opened = bytes(ipc.reserved).hex(), False
        else:
            ipc = runtime.cudaIpcMemHandle_t()
            ipc.reserved = bytes.fromhex(handle)
            err, self.ptr = runtime.cudaIpcOpenMemHandle(ipc, runtime.cudaIpcMemLazyEnablePeerAccess)
            _ok(err, "cudaIpcOpenMemHandle")
            self.handle, self.opened = handle, True
        self.flat = torch.as_tensor(_Interface(int(self.ptr), self.size), device="cuda")

    def info(self) -> dict:
        return {"kind": "ipc", "handle": self.handle, "size": self.size}

    def grown(self, size: int) -> "CudaMemory":
        """A larger allocation; this one is kept while the worker may still map it (release)."""
        grown = CudaMemory(size)
        _kept.append(grown)
        return grown

    def close(self) -> None:
        err = (self._runtime.cudaIpcCloseMemHandle(self.ptr) if self.opened else self._runtime.cudaFree(self.ptr))[0]
        _ok(err, "cudaFree")


class _Interface:
    """Just enough of __cuda_array_interface__ for torch.as_tensor to view raw device memory."""

    def __init__(self, ptr: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def _ok(err, what: str) -> None:
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")


_kept: list = []  # the checker's arenas of the job under way: alive until the job's worker is gone (release)


def release() -> None:
    """Free the arenas of a finished job (its worker is gone)."""
    while _kept:
        _kept.pop().close()


def checker_memory(device: str, size: int, folder: Path):
    """The checker's arena: device memory shared through CUDA IPC on a GPU (a file on the CPU, or where
    cuda-python cannot share memory here)."""
    import secrets

    if device.startswith("cuda"):
        try:
            memory = CudaMemory(size)
        except (ImportError, RuntimeError, AttributeError):
            memory = None
        if memory is not None:
            _kept.append(memory)
            return memory
    memory = HostFile(Path(folder) / f"arena-in-{secrets.token_hex(4)}-0", size, create=True)
    _kept.append(memory)
    return memory


def open_shared(info: dict, writable: bool = True):
    """The worker's view of memory the checker described (`info()` of a HostFile or CudaMemory)."""
    if info.get("kind") == "ipc":
        return CudaMemory(handle=str(info["handle"]), size=int(info["size"]))
    return HostFile(Path(info["path"]), int(info["size"]), create=False, writable=writable)
