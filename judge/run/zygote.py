"""Judge workers forked from a process that imported torch once, instead of each importing it again.

    python -s -P -m kernelevo.judge.run.zygote DEVICE CONTROL_FD

Each worker used to start as a new interpreter: `import torch` and, on the CPU, the profiler's first
start cost about 3 s of CPU a worker on a quiet 2-core machine (5 to 7 s with the other core busy),
more than the checks and timing of a small kernel. So per device a zygote imports torch, the
judge's modules and (on the CPU) starts the profiler once; then, for each worker, the judging
process sends it the worker's environment, folder and file descriptors (SCM_RIGHTS on a
SOCK_SEQPACKET pair), and it forks. The child takes a session of its own, moves the descriptors
where the judging process numbered them, takes the environment and folder given, and runs
`worker.main`, which confines it (sandbox.confine) before any job exists, as a spawned worker is.

The zygote runs no candidate code and holds nothing worth stealing: it is started with the
sandbox's allowlisted environment and its own scratch folder. It never creates a CUDA context (a
forked child could not use it); each GPU worker creates its own. It reaps its children and reports
each exit status, so a crash is classified from the status as before (`Forked.returncode`). When
the judging process goes away, its end of the pair closes, and the zygote kills its children and
exits; a worker whose zygote died exits within a second (worker._die_with_parent).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from kernelevo.judge.run.sandbox import Parent

MAX_MESSAGE = 1 << 20  # a request holds a worker's environment and sandbox plan: some kB


class Forked:
    """A worker forked by a zygote, as the executor uses a subprocess.Popen: pid, stdin, wait, returncode."""

    def __init__(self, pid: int, stdin_fd: int, zygote: "Zygote"):
        self.pid, self.stdin, self._zygote = pid, os.fdopen(stdin_fd, "wb"), zygote
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        code = self._zygote.exit_status(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"judge worker {self.pid}", timeout or 0)
        self.returncode = code
        return code


def launch(device: str, event_fd: int, parent: Parent, log: IO[bytes],
           zygote: Zygote | None) -> subprocess.Popen | Forked:
    """A judge worker for `device` in the sandbox `parent` (sandbox.Parent), its output to `log`: forked by
    `zygote`, or started as a new interpreter where there is none (a Ray node runs one job per task)."""
    argv = [device, str(event_fd)]
    if zygote is None:  # -s -P: its folder and HOME, which the candidate may write, are not on its import path
        return subprocess.Popen(
            [sys.executable, "-s", "-P", "-m", "kernelevo.judge.run.worker", *argv], stdin=subprocess.PIPE, stdout=log,
            stderr=subprocess.STDOUT, pass_fds=(event_fd, parent.child_end.fileno()), start_new_session=True,
            env=parent.env, cwd=parent.plan.scratch)
    stdin_r, stdin_w = os.pipe()
    fds = {0: stdin_r, 1: log.fileno(), 2: log.fileno(), event_fd: event_fd, parent.plan.channel: parent.child_end.fileno()}
    try:
        return zygote.spawn(argv, parent.env, parent.plan.scratch, fds, stdin_w)
    except BaseException:
        os.close(stdin_w)
        raise
    finally:
        os.close(stdin_r)


class Zygote:
    """The judging process's end of one device's zygote: started on first use, started again if it died."""

    def __init__(self, device: str, cache_dir: Path, extra: dict[str, str], startup: float, key: str = ""):
        self.device, self.cache_dir, self.extra, self.startup = device, Path(cache_dir).resolve(), extra, startup
        self.key = key  # how it is started, for acquire()
        self._scratch = self.cache_dir / "scratch" / f"zygote-{secrets.token_hex(6)}"
        self.log = self.cache_dir / "logs" / f"{self._scratch.name}.log"
        self._proc: subprocess.Popen | None = None
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()  # one request at a time
        self._changed = threading.Condition()  # guards the fields below, set by the listener
        self._gone = True
        self._replies: list[int] = []
        self._live: set[int] = set()
        self._exits: dict[int, int] = {}

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, fds: dict[int, int], stdin_fd: int) -> Forked:
        """Fork a worker running `python -s -P -m kernelevo.judge.run.worker *argv` with `env` in `cwd`, each
        descriptor of `fds` (its number in the worker -> the descriptor here) in place."""
        targets = sorted(fds)
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd, "targets": targets}).encode()
        with self._lock:
            for _ in range(2):  # a zygote found dead (killed, out of memory) is started again, once
                if self._gone:
                    self._start()
                with contextlib.suppress(OSError):  # a zygote that died is reported by its listener
                    socket.send_fds(self._socket, [request], [fds[t] for t in targets])
                pid = self._reply(self.startup)
                if pid is not None:
                    return Forked(pid, stdin_fd, self)
        tail = Path(self.log).read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"the judge's zygote for {self.device} did not fork a worker: {' | '.join(tail)}")

    def exit_status(self, pid: int, timeout: float | None) -> int | None:
        """The worker's exit status as Popen gives it (-N for signal N); None if it has not exited in time."""
        # read, not taken: a cancelled job's worker is waited for by the thread that drives it and by the one
        # that cancelled it, and a second waiter must not sit out its whole timeout (a record goes when the pid is
        # forked again)
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits, timeout)
            return self._exits.get(pid)

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                with contextlib.suppress(OSError):  # it reads end of input: kills its children, exits
                    self._socket.shutdown(socket.SHUT_RDWR)
                self._socket.close()
            try:
                if self._proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout=10)
            finally:  # a wait cut short (Ctrl-C while the process exits) kills it rather than leaving it behind
                if self._proc is not None and self._proc.poll() is None:
                    self._proc.kill()
                shutil.rmtree(self._scratch, ignore_errors=True)
                with contextlib.suppress(OSError):
                    self.log.unlink()

    def _start(self) -> None:
        from kernelevo.judge.run import sandbox

        for folder in (self._scratch / "home", self._scratch / "tmp", self.log.parent):
            folder.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # -s -P: neither the current folder nor a user site under HOME on sys.path (a module there would be
        # imported before the installed one): a worker's are its scratch folder, which its candidate writes
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-s", "-P", "-m", "kernelevo.judge.run.zygote", self.device, str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),),
                start_new_session=True, cwd=self._scratch,  # its own session: Ctrl-C reaches the judge, not it
                env=sandbox.environment(self.cache_dir, self._scratch, self.extra))
        theirs.close()
        self._socket, self._gone, self._replies = ours, False, []
        threading.Thread(target=self._listen, args=(ours,), daemon=True, name="kernelevo-zygote").start()

    def _reply(self, timeout: float) -> int | None:
        """The pid of the worker just asked for; None if the zygote went away or did not answer in time."""
        with self._changed:
            self._changed.wait_for(lambda: self._replies or self._gone, timeout)
            if not self._replies:
                self._stop()
                return None
            return self._replies.pop(0)

    def _stop(self) -> None:
        """A zygote that did not answer is killed; its listener then says it is gone."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self._changed.wait_for(lambda: self._gone, 10)

    def _listen(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            with self._changed:
                if not data:  # the zygote is gone, and its children with it
                    self._exits.update({pid: -signal.SIGKILL for pid in self._live})
                    self._live.clear()
                    self._gone = True
                    self._changed.notify_all()
                    return
                message = json.loads(data)
                if "forked" in message:
                    self._exits.pop(message["forked"], None)  # a pid used again: the old worker's status is moot
                    self._replies.append(message["forked"])
                    self._live.add(message["forked"])
                else:
                    self._live.discard(message["exited"])
                    self._exits[message["exited"]] = message["code"]
                self._changed.notify_all()


_kept: dict[str, Zygote] = {}  # per device, the zygote the last closed judge of this process left
_kept_lock = threading.Lock()


def acquire(device: str, cache_dir: Path, extra: dict[str, str], startup: float) -> Zygote:
    """A zygote for a new judge: the one a closed judge left, if it would be started the same way now
    (device and the environment it would get), else a new one. A bench runs one judge per task;
    each would otherwise import torch again (2.5 s on 2 cores).

    The cache folder is not part of how it is started: a zygote imports, and forks workers that each
    take the folder, environment and sandbox plan of their own judge before anything else runs; nothing
    it imports reads the cache folder at import (kernelevo.runtime reads it per call). Its own scratch
    folder and log stay in the cache of the judge that started it, and go when it is closed."""
    from kernelevo.judge.run import sandbox

    passed = {k: v for k, v in os.environ.items() if sandbox.passes(k) and k != "KERNELEVO_CACHE_DIR"}
    key = json.dumps([device, sorted(extra.items()), sorted(passed.items())])
    with _kept_lock:
        kept = _kept.pop(device, None)
    if kept is not None and kept.key == key:
        return kept
    if kept is not None:
        kept.close()
    return Zygote(device, cache_dir, extra, startup, key)


def release(zygote: Zygote) -> None:
    """A judge is done with `zygote`: kept for the next judge of this process (one per device), the one
    kept before closed. What is kept is closed at exit; if this process dies, it exits on its own."""
    with _kept_lock:
        previous, _kept[zygote.device] = _kept.get(zygote.device), zygote
    if previous is not None and previous is not zygote:
        previous.close()


@atexit.register
def _close_kept() -> None:
    with _kept_lock:
        kept = list(_kept.values())
        _kept.clear()
    for zygote in kept:
        try:
            zygote.close()
        except KeyboardInterrupt:  # the process is ending: each zygote is closed still, and no traceback is printed
            continue


# --- in the zygote -------------------------------------------------------------------------------


def _warm(device: str) -> None:
    """Import what every worker of `device` imports. Not the profiler's first start, which a worker
    still makes (worker._warm_profiler): it leaves a thread behind, and a child forked after it hung
    or aborted in its exit handlers (a C candidate calling exit(3)). Its imports are most of its cost
    (1.2 s of 1.2 s here), and they are made here."""
    if not device.startswith("cuda"):
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch
    import torch._dynamo  # noqa: F401 - the shape checks' and the profiler's imports
    import torch.profiler  # noqa: F401

    with contextlib.suppress(ImportError):
        import triton  # noqa: F401
    if device.startswith("cuda"):
        with contextlib.suppress(ImportError):  # the checker's shared memory (trials/arena.py): no context made
            from cuda.bindings import runtime  # noqa: F401
    from kernelevo.judge.job import Job  # noqa: F401
    from kernelevo.judge.run import baseline, jobs, landlock, launcher, profiling, sandbox, seccomp, worker  # noqa: F401
    from kernelevo.judge.run import check  # noqa: F401

    assert not torch.cuda.is_initialized(), "a zygote must not create a CUDA context"


def serve(device: str, control: socket.socket) -> None:
    _warm(device)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    try:
        while True:
            ready, _, _ = select.select([control, wake_r], [], [])
            if wake_r in ready:
                os.read(wake_r, 4096)
                _reap(children, control)
            if control in ready:
                data, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 8)
                if not data:
                    return  # the judging process closed its end, or died
                pid = os.fork()
                if pid == 0:
                    _become_worker(json.loads(data), fds)  # never returns
                children.add(pid)
                for fd in fds:
                    os.close(fd)
                control.send(json.dumps({"forked": pid}).encode())
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def _reap(children: set[int], control: socket.socket) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            with contextlib.suppress(OSError):
                control.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _become_worker(request: dict, fds: list[int]) -> None:
    """In the forked child: a session of its own, the descriptors where they were numbered, the given
    environment and folder; then the worker's own start, which confines it first."""
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _place(fds, request["targets"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])  # not on sys.path (-s -P, as a started worker): the candidate writes there
        tempfile.tempdir = None  # computed again from this worker's TMPDIR
        sys.argv = [sys.argv[0], *request["argv"]]
        with contextlib.suppress(OSError, ValueError, IndexError):
            _retitle(request["argv"])
        from kernelevo.judge.run import worker

        worker.main()  # ends with os._exit
        code = 0
    except SystemExit as stop:  # the judging process went away (worker.Channel.receive)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:  # noqa: BLE001 - whatever happens, this process must not go back to serving
        import traceback

        traceback.print_exc()
        code = 1  # as an interpreter ends on an uncaught exception
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _retitle(argv: list[str]) -> None:
    """Make this process's command line (/proc/PID/cmdline: ps, pkill -f, a cluster's process list) read as
    a worker's, not the zygote's it was forked with, by writing over the memory the kernel reads it from.
    The module's name has the same length; the arguments are written too where they fit."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end, fields 48 and 49 of stat
    parts = Path("/proc/self/cmdline").read_bytes().split(b"\0")[:-1]
    at = parts.index(b"kernelevo.judge.run.zygote")
    title = b"\0".join([*parts[:at], b"kernelevo.judge.run.worker", *(a.encode() for a in argv)]) + b"\0"
    if len(title) > end - start:
        title = b"\0".join([*parts[:at], b"kernelevo.judge.run.worker", *parts[at + 1:]]) + b"\0"
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        memory.seek(start)
        memory.write(title.ljust(end - start, b"\0"))


def _place(fds: list[int], targets: list[int]) -> None:
    """dup2 each received fd onto its target number, and close every other descriptor."""
    above = max(targets) + 1
    moved = [_dup_above(fd, above) for fd in fds]
    for fd in fds:
        os.close(fd)
    for source, target in zip(moved, targets):
        os.dup2(source, target, inheritable=True)
    keep = set(targets)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _dup_above(fd: int, lowest: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)


if __name__ == "__main__":
    serve(sys.argv[1], socket.socket(fileno=int(sys.argv[2])))
