"""Landlock (Linux 5.13 and later): the kernel's own allowlist of what a process may read, write and
connect to, which the process sets on itself and can never lift. Called from ctypes, nothing to build.

What the judge's worker asks of it (sandbox.py decides the folders):
- files: read and execute only under the read roots, write only under the write roots (and a few
  device files), so a candidate reads none of the user's files and writes nothing outside its folders;
- TCP (ABI 4, Linux 6.7): no bind and no connect at all;
- scopes (ABI 6, Linux 6.12): no signal to a process outside the sandbox, no abstract UNIX socket
  outside it; ptrace of a process outside it (and /proc/PID/mem) is refused at every ABI.

The rules hold for every thread created after `restrict`, and for every child process; the worker
calls it before any thread exists (worker.main).
"""
from __future__ import annotations

import ctypes
import os
import platform
import stat
import struct
from pathlib import Path

# Syscall numbers are the generic table's on both x86_64 and aarch64.
_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_PATH_BENEATH, _NET_PORT = 1, 2
_NO_NEW_PRIVS = 38  # PR_SET_NO_NEW_PRIVS

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << bit for bit in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
READ = EXECUTE | READ_FILE | READ_DIR
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE  # the rights a rule on a single file may carry
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args) -> int:
    result = _libc.syscall(number, *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def abi() -> int:
    """The Landlock ABI this kernel offers; 0 where it has none (too old, disabled, or not Linux)."""
    if platform.system() != "Linux":
        return 0
    try:
        return _syscall(_CREATE, None, 0, _VERSION)
    except OSError:
        return 0


def write_rights(version: int) -> int:
    rights = WRITE_FILE | _MAKE_AND_REMOVE
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    return rights


def restrict(read: list[Path], write: list[Path], write_files: list[Path], version: int) -> set[str]:
    """Confine this process (and its future threads and children) to the given folders; returns what
    holds: "files" always, "tcp" from ABI 4, "scopes" from ABI 6. Paths that do not exist are skipped."""
    writes = write_rights(version)
    net = BIND_TCP | CONNECT_TCP if version >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if version >= 6 else 0
    attr = struct.pack("=QQQ", READ | writes, net, scoped)[: 8 if version < 4 else 16 if version < 6 else 24]
    ruleset = _syscall(_CREATE, ctypes.c_char_p(attr), len(attr), 0)
    try:
        for path in read:
            _add(ruleset, path, READ)
        for path in write:
            _add(ruleset, path, READ | writes)
        for path in write_files:
            _add(ruleset, path, READ_FILE | WRITE_FILE | (TRUNCATE if version >= 3 else 0))
        _libc.prctl(_NO_NEW_PRIVS, 1, 0, 0, 0)
        _syscall(_RESTRICT, ruleset, 0)
    finally:
        os.close(ruleset)
    return {"files"} | ({"tcp"} if net else set()) | ({"scopes"} if scoped else set())


def _add(ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_ONLY
        rule = struct.pack("=Qi", rights, fd)
        _syscall(_ADD_RULE, ruleset, _PATH_BENEATH, ctypes.c_char_p(rule), 0)
    finally:
        os.close(fd)
