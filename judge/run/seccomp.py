"""seccomp: a filter on the worker's system calls, and the parent's supervisor that answers for it.

The filter (installed by the worker on itself before any candidate code exists, inherited by every
thread and child process) sends a few calls to the parent instead of the kernel
(SECCOMP_RET_USER_NOTIF, Linux 5.0):
- `socket()` of a network family: refused, so no candidate talks to a network. AF_UNIX sockets are
  refused by the kernel itself, unreported, except SOCK_SEQPACKET ones, which the CUDA driver makes as it
  starts (seen on an H100 with driver 580); netlink sockets too. (The bounds trial's launcher lets UNIX
  stream sockets through as well: run/launcher.py.) The C library tries a UNIX socket on its own
  (a user lookup asks nscd's first), and without them no stream socket of another program (a container
  runtime's, an SSH agent's) can be reached;
- an `open` that may write (O_WRONLY, O_RDWR, O_CREAT, O_TRUNC): let through when its path lies in the
  worker's folders, refused otherwise (Landlock, where the kernel has it, makes the same decision
  without the race of reading a path from another process's memory: here the path is evidence);
- `ptrace`, `process_vm_readv/writev` and `io_uring_setup` (whose requests would bypass this filter):
  refused.
Every refusal is written down with what was asked, so that a verdict can show it. Calls of another
ABI (i386 on x86_64, x32) are refused outright. Without user notification (older kernels) the same
calls are refused by the kernel directly, except opens, and nothing is written down.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import platform
import re
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_ARCH = {  # audit arch, {call: number}, the filter's seccomp() number
    "x86_64": (0xC000003E, {"socket": 41, "open": 2, "creat": 85, "openat": 257, "openat2": 437, "ptrace": 101,
                            "process_vm_readv": 310, "process_vm_writev": 311, "io_uring_setup": 425}, 317),
    "aarch64": (0xC00000B7, {"socket": 198, "openat": 56, "openat2": 437, "ptrace": 117,
                             "process_vm_readv": 270, "process_vm_writev": 271, "io_uring_setup": 425}, 277),
}
_FLAGS_ARG = {"open": 1, "openat": 2}  # which argument holds an open's flags
_PATH_ARG = {"open": 0, "creat": 0, "openat": 1, "openat2": 1}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
_REFUSED = ("ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup")
_FAMILIES = {v: k for k, v in vars(socket).items() if k.startswith("AF_") and isinstance(v, int)}

_ALLOW, _NOTIFY, _ERRNO = 0x7FFF0000, 0x7FC00000, 0x00050000
_LD, _AND, _JEQ, _JGE, _JSET, _RET = 0x20, 0x54, 0x15, 0x35, 0x45, 0x06
QUIET = _ERRNO | errno.EACCES  # AF_UNIX and netlink sockets: refused, unreported
_NEW_LISTENER, _TSYNC = 1 << 3, 1 << 0
_CONNECT = {"x86_64": 42, "aarch64": 203}
_RECV, _SEND, _ID_VALID, _ADDFD = 0xC0502100, 0xC0182101, 0x40082102, 0x40182103
_ADDFD_SEND = 1 << 1  # SECCOMP_ADDFD_FLAG_SEND: add the fd and answer the call with it (Linux 5.14)
_CONTINUE = 1


@dataclass(frozen=True)
class Refusal:
    """One call the sandbox refused, as the supervisor saw it."""

    call: str  # "socket", "open", "ptrace"...
    detail: str  # "AF_INET, SOCK_STREAM"; the path; the target pid
    pid: int


def arch() -> tuple[int, dict[str, int], int] | None:
    return _ARCH.get(platform.machine())


def program(notify: bool, stream: bool = False) -> bytes:
    """The BPF filter: its instructions as the kernel reads them (struct sock_filter, 8 bytes each).
    `stream`: UNIX stream sockets are let through too (the bounds trial's launcher, run/launcher.py)."""
    _, calls, _ = arch()
    deny = _NOTIFY if notify else _ERRNO | errno.EPERM
    code = _native("foreign") + [("jeq", calls["socket"], "socket", None)]
    for name in ("open", "openat"):
        if name in calls:
            code += [("jeq", calls[name], name, None)]
    for name in ("creat", "openat2", *_REFUSED):
        if name in calls:
            code += [("jeq", calls[name], "notify" if name not in _REFUSED else "deny", None)]
    code += [("ret", _ALLOW),
             ("label", "socket"), ("ld", 16), ("jeq", socket.AF_UNIX, "unix", None),
             ("jeq", socket.AF_NETLINK, "quiet", "deny"),
             ("label", "unix"), ("ld", 24), ("and", 0xF), ("jeq", socket.SOCK_SEQPACKET, "allow", "stream"),
             ("label", "stream"), ("jeq", socket.SOCK_STREAM, "allow" if stream else "quiet", "quiet")]
    for name in ("open", "openat"):
        if name in calls:
            code += [("label", name), ("ld", 16 + 8 * _FLAGS_ARG[name]), ("jset", _WRITE_FLAGS, "notify", "allow")]
    code += [("label", "allow"), ("ret", _ALLOW),  # BPF jumps only forward: every target comes last
             ("label", "notify"), ("ret", _NOTIFY if notify else _ALLOW),
             ("label", "deny"), ("ret", deny),
             ("label", "quiet"), ("ret", QUIET),
             ("label", "foreign"), ("ret", _ERRNO | errno.EPERM)]
    return _assemble(code)


def _native(foreign: str) -> list[tuple]:
    """A filter's start: a call of another ABI is refused (i386), or goes to label `foreign` (x32); the
    call's number is then loaded."""
    code: list[tuple] = [("ld", 4), ("jeq", arch()[0], "native", None), ("ret", _ERRNO | errno.EPERM),
                         ("label", "native"), ("ld", 0)]
    if platform.machine() == "x86_64":
        code += [("jge", 0x40000000, foreign, None)]  # x32 calls
    return code


def _assemble(code: list[tuple]) -> bytes:
    """Resolve labels into the relative jumps BPF uses (a jump's target follows it)."""
    labels, index = {}, 0
    for op in code:
        if op[0] == "label":
            labels[op[1]] = index
        else:
            index += 1
    out, index = [], 0
    for op in code:
        if op[0] == "label":
            continue
        if op[0] == "ld":
            out.append(struct.pack("HBBI", _LD, 0, 0, op[1]))
        elif op[0] == "and":
            out.append(struct.pack("HBBI", _AND, 0, 0, op[1]))
        elif op[0] == "ret":
            out.append(struct.pack("HBBI", _RET, 0, 0, op[1]))
        else:
            taken = labels[op[2]] - index - 1
            fall = labels[op[3]] - index - 1 if op[3] else 0
            assert 0 <= taken < 256 and 0 <= fall < 256, "BPF jumps go forward, at most 255 instructions"
            out.append(struct.pack("HBBI", {"jeq": _JEQ, "jge": _JGE, "jset": _JSET}[op[0]], taken, fall, op[1]))
        index += 1
    return b"".join(out)


def install(channel: socket.socket, also: tuple[int, ...] = ()) -> str:
    """Filter this process (call before any thread exists); the listener goes to the parent over
    `channel`, with the listeners in `also` (the bounds trial's launcher's, run/launcher.py), and all
    are closed here, so that code running later cannot answer for itself. Returns "notify" (refusals
    reported), "errno" (refused by the kernel, unreported) or "" (no filter)."""
    listener, filtered = -1, ""
    if arch() is not None:
        listener = _set(program(True), _NEW_LISTENER)
        filtered = "notify" if listener >= 0 else "errno" if _set(program(False), 0) >= 0 else ""
    fds = [fd for fd in (listener, *also) if fd >= 0]
    if fds:
        socket.send_fds(channel, [b"fd"], fds)
    else:
        channel.send(b"none")
    for fd in fds:
        os.close(fd)
    return filtered


def install_for_launcher() -> int:
    """The worker's filter with UNIX stream sockets let through (the bounds trial's launcher,
    run/launcher.py): its listener, which the worker sends on with its own (install), or -1 where the
    kernel cannot notify (the launcher then does not serve)."""
    return _set(program(True, stream=True), _NEW_LISTENER) if arch() is not None else -1


def refuse_connect() -> bool:
    """A filter on every thread of this process (TSYNC: threads a preloaded library started too) that
    refuses connect(): the process the bounds trial checks listens for its checker and reaches nothing."""
    if arch() is None:
        return False
    code = _native("refuse") + [("jeq", _CONNECT[platform.machine()], "refuse", None), ("ret", _ALLOW),
                                ("label", "refuse"), ("ret", _ERRNO | errno.EACCES)]
    return _set(_assemble(code), _TSYNC) == 0


def _set(code: bytes, flags: int) -> int:
    """seccomp(SECCOMP_SET_MODE_FILTER, flags, program): its listener fd, 0, or -1 where refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: needed to install a filter without privileges
    filters = ctypes.create_string_buffer(code)
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(filters)))
    return libc.syscall(arch()[2], 1, flags, fprog)


class Supervisor:
    """The parent's side: answers the worker's notified calls on a thread of its own and keeps the
    refusals. `writable(path)` says whether an open for writing may go through."""

    def __init__(self, channel: socket.socket, writable):
        self.refusals: list[Refusal] = []
        # The bounds trial's launcher (run/launcher.py), where the worker forked one: its listener came with
        # the worker's, and it reports each outcome here on the same socket, which the worker has closed.
        self.launched, self.reports = False, []
        self._channel, self._writable = channel, writable
        self._calls = {number: name for name, number in (arch() or (0, {}, 0))[1].items()}
        self._thread = threading.Thread(target=self._serve, daemon=True, name="kernelevo-sandbox")
        self._thread.start()

    def _serve(self) -> None:
        try:  # the worker's listener, and its bounds trial launcher's where it forked one
            _, fds, _, _ = socket.recv_fds(self._channel, 16, 2)
        except OSError:
            fds = []
        self.launched = len(fds) == 2
        if not self.launched:
            self._channel.close()
        live, pending = set(fds) | ({self._channel.fileno()} if self.launched else set()), b""
        try:
            while live:
                for fd in select.select(sorted(live), [], [])[0]:
                    if fd == self._channel.fileno():
                        pending = self._report(pending)
                        if pending is None:
                            live.discard(fd)
                    elif not self._next(fd):
                        live.discard(fd)
        finally:
            for fd in fds:
                os.close(fd)
            self._channel.close()

    def settled_reports(self, wait_s: float = 2.0) -> list[dict]:
        """The launcher's reports, once none waits unread (it reports before it answers the worker, so
        a report the worker acted on is in the socket by the time the worker's result comes)."""
        deadline = time.monotonic() + wait_s
        with contextlib.suppress(OSError, ValueError):
            while self._channel.fileno() >= 0 and select.select([self._channel], [], [], 0)[0] \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
        return list(self.reports)

    def _report(self, pending: bytes) -> bytes | None:
        """Read the launcher's reports (a JSON line each); None once it has ended."""
        try:
            data = self._channel.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            return None
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                if len(self.reports) < 16:
                    self.reports.append(json.loads(line))
        return pending[-(1 << 22):]

    def _next(self, listener: int) -> bool:
        """Answer one notified call; False once no process is left under this listener's filter."""
        request = bytearray(80)
        try:
            fcntl.ioctl(listener, _RECV, request)
        except OSError as exc:
            # answered elsewhere, or the caller died
            return exc.errno in (errno.ENOENT, errno.EINTR) and not self._gone(listener)
        try:
            self._answer(listener, request)
        except Exception:  # noqa: BLE001 - an unanswered call would hang the worker: refuse it
            ident = struct.unpack_from("=Q", request, 0)[0]
            with contextlib.suppress(OSError):
                fcntl.ioctl(listener, _SEND, struct.pack("=QqiI", ident, 0, -errno.EPERM, 0))
        return True

    @staticmethod
    def _gone(listener: int) -> bool:
        """No process is left under the filter: the listener reports a hang-up."""
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        return any(event & select.POLLHUP for _, event in poller.poll(0))

    def _answer(self, listener: int, request: bytearray) -> None:
        ident, pid, _, number, _, _ = struct.unpack_from("=QIIiIQ", request, 0)
        args = struct.unpack_from("=6Q", request, 32)
        name = self._calls.get(number, str(number))
        refusal = None
        if name == "socket":
            refusal = Refusal("socket", _family(args[0], args[1]), pid)
        elif name in _REFUSED:
            refusal = Refusal(name, f"target pid {args[1] if name == 'ptrace' else args[0]}", pid)
        elif name in _PATH_ARG:
            path = _path(pid, name, args)
            if not _valid(listener, ident):
                return
            flags = args[_FLAGS_ARG[name]] if name in _FLAGS_ARG else os.O_WRONLY  # creat; openat2's are in memory
            if path is not None and _opened_for(listener, ident, pid, path, flags):
                return
            if path is None or not self._writable(path):
                refusal = Refusal("open", path or "(unreadable path)", pid)
        if refusal is None:
            response = struct.pack("=QqiI", ident, 0, 0, _CONTINUE)
        else:
            if len(self.refusals) < 64:
                self.refusals.append(refusal)
            code = errno.EACCES if refusal.call == "open" else errno.EPERM
            response = struct.pack("=QqiI", ident, 0, -code, 0)
        try:
            fcntl.ioctl(listener, _SEND, response)
        except OSError:  # the caller died meanwhile
            pass


_THREAD_NAME = re.compile(r"/proc/(self|thread-self|\d+)(/task/(\d+))?/comm")


def _opened_for(listener: int, ident: int, tid: int, path: str, flags: int) -> bool:
    """Open a thread's own name file (/proc/self/task/TID/comm) on the caller's behalf and hand it the
    fd, answering the call. The CUDA driver names its threads so, and fails to start where it cannot;
    Landlock, which keeps the rest of /proc read-only, would refuse it. The path opened is the one
    built here, inside the caller's own process, whatever its memory says meanwhile."""
    found = _THREAD_NAME.fullmatch(path)
    if not found:
        return False
    try:
        tgid = int(next(line.split()[1] for line in open(f"/proc/{tid}/status") if line.startswith("Tgid:")))
    except (OSError, StopIteration, ValueError):
        return False
    owner, thread = found.group(1), found.group(3) or (str(tid) if found.group(1) == "thread-self" else None)
    if owner not in ("self", "thread-self", str(tgid)) or (owner == "thread-self" and found.group(2)):
        return False
    target = f"/proc/{tgid}/task/{thread}/comm" if thread else f"/proc/{tgid}/comm"
    try:
        fd = os.open(target, (flags & os.O_ACCMODE) | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        addfd = struct.pack("=QIIII", ident, _ADDFD_SEND, fd, 0, flags & os.O_CLOEXEC)
        fcntl.ioctl(listener, _ADDFD, addfd)
        return True
    except OSError:  # a kernel before 5.14, or the caller died: the kernel decides as usual
        return False
    finally:
        os.close(fd)


def _valid(listener: int, ident: int) -> bool:
    """The request is still pending (its pid was not reused while its memory was read)."""
    try:
        fcntl.ioctl(listener, _ID_VALID, struct.pack("=Q", ident))
        return True
    except OSError:
        return False


def _family(domain: int, kind: int) -> str:
    family = _FAMILIES.get(domain & 0xFFFFFFFF, f"family {domain & 0xFFFFFFFF}")
    kinds = {socket.SOCK_STREAM: "SOCK_STREAM", socket.SOCK_DGRAM: "SOCK_DGRAM", socket.SOCK_RAW: "SOCK_RAW"}
    return f"{family}, {kinds.get(kind & 0xF, f'type {kind & 0xF}')}"


def _path(pid: int, name: str, args: tuple[int, ...]) -> str | None:
    """The absolute path an open names, read from the caller's memory; None when it cannot be read."""
    raw = _string(pid, args[_PATH_ARG[name]])
    if raw is None:
        return None
    if raw.startswith("/"):
        return os.path.normpath(raw)
    dirfd = args[0] & 0xFFFFFFFF if name in ("openat", "openat2") else None
    if dirfd is not None and dirfd >= 0x80000000:
        dirfd -= 1 << 32
    try:
        base = os.readlink(f"/proc/{pid}/cwd" if dirfd in (None, -100) else f"/proc/{pid}/fd/{dirfd}")
    except OSError:
        return None
    return os.path.normpath(os.path.join(base, raw))


def _string(pid: int, address: int, limit: int = 4096) -> str | None:
    """A NUL-terminated string at `address` in process `pid`, read page by page (its end may lie
    just before an unmapped page)."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = b""
        while len(data) < limit:
            at = address + len(data)
            chunk = os.pread(fd, 4096 - at % 4096, at)
            if not chunk:
                return None
            data += chunk
            if b"\0" in chunk:
                return data.split(b"\0", 1)[0].decode(errors="replace")
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def writable_under(roots: list[Path], files: list[Path]):
    """The supervisor's rule for opens that may write: under one of `roots` or one of `files`, by
    the path as written or with its folder's links resolved. /dev and /proc are left to the kernel."""
    roots = [str(Path(r).resolve()) for r in roots]
    exact = {str(Path(f).resolve()) for f in files}

    def inside(path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots) or path in exact

    def writable(path: str) -> bool:
        if path.startswith(("/dev/", "/proc/")) or inside(path):
            return True
        resolved = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        return inside(resolved)

    return writable
