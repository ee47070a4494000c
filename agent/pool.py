"""Several LLM calls in flight, at most `cap` at once, cancellable.

Threads, not asyncio: the SDK calls block, and the orchestrator's other work (judging) runs in
other processes. The threads are daemons, so a call stuck in the network never holds the
process open after Ctrl-C; every reply that did arrive was already handed to the client's
`on_call` (and stored) before its thread returned.
"""
from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from typing import Any, Callable

_STOP = object()


class CallPool:
    def __init__(self, cap: int = 4):
        if cap < 1:
            raise ValueError("the number of LLM calls in flight must be at least 1")
        self.cap = cap
        self._queue: queue.Queue = queue.Queue()
        self._running = 0
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"llm-call-{i}", daemon=True)
                         for i in range(cap)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        if self._closed:
            raise RuntimeError("the call pool is shut down")
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((future, fn, args, kwargs))
        return future

    @property
    def in_flight(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            with self._lock:
                self._running += 1
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)
            finally:
                with self._lock:
                    self._running -= 1

    def cancel_queued(self) -> int:
        """Cancel every call not yet started; returns how many."""
        cancelled = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return cancelled
            if item is not _STOP and item[0].cancel():
                cancelled += 1

    def shutdown(self, grace_s: float = 0.0) -> int:
        """Stop taking calls, cancel queued ones, wait up to `grace_s` for those in flight.

        Returns how many were still in flight when it gave up on them (their threads are daemons;
        a reply that still arrives is recorded by the client as usual).
        """
        self._closed = True
        self.cancel_queued()
        for _ in self._threads:
            self._queue.put(_STOP)
        deadline = time.monotonic() + grace_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self._running

    def __enter__(self) -> "CallPool":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.shutdown(0.0 if exc_type is KeyboardInterrupt else 600.0)
