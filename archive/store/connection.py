"""The archive's connection: opening a file (creating it, bringing its schema up to date) or opening
one for reading only, closing, and the four doors to the connection (`write`, `tx`, `read`, `one`) that
every part of `Archive` goes through; no other code touches the connection (the Archive keeps its Store
private, and hands it to its parts only).

Every write is committed before its method returns, so a run killed with SIGKILL loses nothing it
was told was stored. The loop calls in from its main thread and from LLM worker threads, so one
connection is shared under a lock (SQLite connections are not safe to use from two threads at once,
and one connection keeps the writes of one process serialised without leaning on busy retries).
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from ..migrations import MIGRATIONS
from ..rows import split_script

BUSY_TIMEOUT_MS = 10_000


class Store:
    """An open archive file's connection and schema; the parts of `Archive` (each holding it) read and write what
    it stores."""

    def __init__(self, conn: sqlite3.Connection, path: Path, readonly: bool) -> None:
        self._conn = conn
        self._lock = threading.RLock()
        self.path = path
        self.readonly = readonly

    # ---- opening and closing -------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path) -> Self:
        """Open (creating it and its folder if needed) and bring the schema up to date."""
        path = Path(path).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            cls._create(path)
        # isolation_level=None: no implicit transactions; single statements commit at once and
        # multi-statement writes say BEGIN IMMEDIATE themselves
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                               timeout=BUSY_TIMEOUT_MS / 1000)
        archive = cls(conn, path, readonly=False)
        try:
            archive._setup(("journal_mode=WAL", "synchronous=NORMAL"))
            archive._migrate()
        except BaseException:
            conn.close()
            raise
        return archive

    @classmethod
    def _create(cls, path: Path) -> None:
        """A new archive appears whole: its schema is made under a temporary name and linked into place,
        so that a reader (`archive ls` beside a starting run, a test polling it) never finds the file
        before its tables. A file another process linked first is kept; where the file system has no
        hard links, the archive is made in place, as `open` does with an existing file."""
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".new")
        os.close(fd)
        try:
            fresh = cls(sqlite3.connect(tmp, isolation_level=None), Path(tmp), readonly=False)
            try:
                fresh._setup(("journal_mode=WAL", "synchronous=NORMAL"))
                fresh._migrate()
            finally:
                fresh.close()  # the last connection: its write-ahead log is folded into the file
            with contextlib.suppress(OSError):  # FileExistsError: another's came first; others: no links
                os.link(tmp, path)
        finally:
            for leftover in (tmp, f"{tmp}-wal", f"{tmp}-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)

    @classmethod
    def open_readonly(cls, path: str | Path) -> Self:
        """Open another archive for reading only (`--seed-from FILE`); any write raises sqlite3.Error."""
        path = Path(path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such archive file")
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False,
                               isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        archive = cls(conn, path, readonly=True)
        try:
            archive._setup(("query_only=ON",))
            if not archive.one("SELECT name FROM sqlite_master WHERE type='table' AND name='migrations'"):
                raise ValueError(f"{path}: not a kernelevo archive (no migrations table)")
        except BaseException:
            conn.close()
            raise
        return archive

    def _setup(self, pragmas: Sequence[str]) -> None:
        self._conn.row_factory = sqlite3.Row
        for pragma in (f"busy_timeout={BUSY_TIMEOUT_MS}", "foreign_keys=ON", *pragmas):
            self._conn.execute(f"PRAGMA {pragma}")

    def _migrate(self) -> None:
        self.write("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        applied = set(self.applied_migrations())
        for name, sql in (m for m in MIGRATIONS if m[0] not in applied):
            with self.tx() as conn:
                # checked again inside the write transaction: two processes opening a new file at
                # once must not both apply the same migration
                if conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone():
                    continue
                for statement in split_script(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))

    def applied_migrations(self) -> list[str]:
        return [r["name"] for r in self.read("SELECT name FROM migrations ORDER BY name")]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the only doors to the connection --------------------------------------------------

    def write(self, sql: str, params: Sequence[Any] | dict = ()) -> int:
        """One statement, committed on return; the new row's id (or the rows changed, for UPDATE)."""
        with self._lock:
            cur = self._conn.execute(sql, params)
            return cur.lastrowid if sql.lstrip().upper().startswith("INSERT") else cur.rowcount

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """Several statements committed together (IMMEDIATE: take the write lock up front)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def read(self, sql: str, params: Sequence[Any] | dict = ()) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(row) for row in self._conn.execute(sql, params).fetchall()]

    def one(self, sql: str, params: Sequence[Any] | dict = ()) -> dict[str, Any] | None:
        rows = self.read(sql, params)
        return rows[0] if rows else None

    @staticmethod
    def expect_one(changed: int, what: str, key: object) -> None:
        if changed != 1:
            raise KeyError(f"no {what} {key!r} in the archive")
