"""Each candidate's builds in a folder of its own, named by a key only the judging process holds.

What is judged must be what the source builds to. A worker that could write a shared build folder
(the C libraries, cubins, inline extensions, Triton's and inductor's caches) could put a binary under
the name another source's build takes, and that source's later judgement would load it. So the
judging process keeps a secret key (`<cache>/keys/build.key`, which no worker may read), and a
candidate's builds go to `<cache>/builds/<HMAC(key, sha256(source))>`: its jobs (judged, measured
again, profiled, beside torch.compile) find there what the earlier ones built, and no candidate can
name another's folder.

No worker may write under `builds/` either: a worker is confined when it starts, before its job is
known (a pool keeps spares warm). For the job, the judging process lends it the folder: moves it into
the worker's scratch folder, which the worker may write, and leaves a link at its place, so that its
path (which inline builds and torch.compile's caches record) stays the same from job to job. When the
worker is gone, the folder goes back in place. A folder already lent (the same source judged twice at
once) is not lent again: that job builds in a folder of its own, thrown away after.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEYS, BUILDS = "keys", "builds"


def key(cache: Path) -> bytes:
    """The judging processes' build key of this cache, made on first use (readable by the user only)."""
    folder = Path(cache) / KEYS
    path = folder / "build.key"
    if not path.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        made = folder / f".build.key-{secrets.token_hex(6)}"
        fd = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        with contextlib.suppress(FileExistsError):  # another judge made it first: its key stands
            os.link(made, path)
        made.unlink()
    return path.read_bytes()


def folder(cache: Path, source: str) -> Path:
    """The build folder of the candidate whose source is `source`."""
    digest = hashlib.sha256(source.encode()).digest()
    return Path(cache) / BUILDS / hmac.new(key(cache), digest, hashlib.sha256).hexdigest()[:32]


@contextlib.contextmanager
def _locked(place: Path):
    """One judging process (thread) at a time moves a folder (a lock file beside it)."""
    with open(place.with_name(place.name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lend(place: Path, into: Path) -> Path:
    """Move the build folder `place` to `into` (a folder the worker may write) and link it from its place;
    returns the path the job builds under: `place`, or `into` itself where `place` is lent already."""
    place.parent.mkdir(parents=True, exist_ok=True)
    with _locked(place):
        if place.is_symlink() and not place.exists():  # lent by a judge that died: its builds are lost
            place.unlink()
        if place.is_symlink():
            into.mkdir(exist_ok=True)
            return into
        if place.is_dir():
            os.rename(place, into)
        else:
            into.mkdir()
        os.symlink(into, place)
    return place


def give_back(place: Path, into: Path) -> None:
    """Put a folder lent to `into` back in its place (before the worker's scratch folder is removed)."""
    with _locked(place):
        if place.is_symlink() and os.readlink(place) == str(into):
            place.unlink()
            if into.is_dir() and not into.is_symlink():
                os.rename(into, place)
