"""What a run may spend: dollars, LLM calls, wall time, generations, patience.

LLM calls run on threads, so the check is a reservation made *before* a call: one call slot and
its estimate are held until the call settles with its actual cost (or are released if it was
never made). Concurrent calls therefore cannot together overshoot `max_cost_usd` by more than the
error of their estimates, and never `max_llm_calls`: an operation that needs a further call (an
edit follow-up) must extend its reservation first, and does not make the call when refused.
"""
from __future__ import annotations

import enum
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class BudgetLimits:
    max_cost_usd: float | None = None
    max_llm_calls: int | None = None
    max_wall_s: float | None = None
    generations: int | None = 10
    plateau_generations: int | None = 4  # stop after this many generations without improvement


class StopKind(enum.Enum):
    """Why a search stopped; the budget's kinds (`budget`) end a run as 'budget' (exit code 3)."""

    MAX_COST_USD = "max-cost-usd"
    MAX_LLM_CALLS = "max-llm-calls"
    MAX_WALL_TIME = "max-wall-time"
    GENERATIONS = "generations"
    PLATEAU = "plateau"
    AT_BOUND = "at the bound"  # the best is within reach of the speed of light (bound.at_bound)
    UNREACHABLE = "model unreachable"  # the model server is gone
    REPLAY_ENDED = "replay ended"  # a recording had no reply for a call (agent/replay.py)
    NOTHING_LEFT = "nothing left to try"

    @property
    def waits(self) -> bool:
        """A replay's recording ran out: the run waits for that call's answer and goes on from it (--resume)."""
        return self is StopKind.REPLAY_ENDED

    @property
    def budget(self) -> bool:
        # a recording's end is the calls it holds running out: a limit, and the run can go on from it
        return self in (StopKind.MAX_COST_USD, StopKind.MAX_LLM_CALLS, StopKind.MAX_WALL_TIME, StopKind.REPLAY_ENDED)


@dataclass(frozen=True)
class StopReason:
    """Why a search stopped: its kind, and the sentence shown and stored (the run's stop_reason)."""

    kind: StopKind
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Reservation:
    id: int
    estimate_usd: float  # 0.0 when the price is unknown (see Budget.reserve)


def estimate_cost(info, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float | None:
    """USD for a call, from prices per million tokens on `info` (input, cached_input, output).

    None when a price the call needs is unknown: a cost is never guessed. `cached_tokens` is the
    part of the prompt expected to be a cache hit; by default none is, which over- rather than
    under-estimates (the safe side for a reservation)."""
    input_price, cached_price, output_price = (getattr(info, f, None) for f in ("input", "cached_input", "output"))
    if input_price is None or output_price is None or (cached_tokens and cached_price is None):
        return None
    uncached = max(0, prompt_tokens - cached_tokens)
    return (uncached * input_price + cached_tokens * (cached_price or 0.0) + output_tokens * output_price) / 1e6


class Budget:
    """Counters of one run, safe to use from several threads.

    `spent_usd` counts settled calls (their actual cost, or the estimate when the actual is
    unknown); reservations outstanding are held apart until they settle or are released.
    A call whose price is unknown reserves $0, so `max_cost_usd` cannot bound it:
    `unknown_cost_calls` says how many such calls the spend leaves out, and `max_llm_calls`
    still bounds them."""

    def __init__(self, limits: BudgetLimits | None = None, clock: Callable[[], float] = time.monotonic):
        self.limits = limits or BudgetLimits()
        self._clock = clock
        self._start = clock()
        self._offset_s = 0.0  # wall time of earlier sessions of a resumed run
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._outstanding: dict[int, list[float]] = {}  # reservation id -> the estimate of each call it holds
        self._spent = 0.0
        self._calls = 0
        self._unknown = 0
        self._refused_usd: float | None = None  # the estimate last refused for money

    def restore(self, spent_usd: float, calls: int, elapsed_s: float, unknown_cost_calls: int = 0) -> "Budget":
        """Resume: counters derived from the archive's rows by the caller. Returns self."""
        with self._lock:
            self._spent, self._calls, self._unknown = float(spent_usd), int(calls), int(unknown_cost_calls)
            self._offset_s = float(elapsed_s)
            self._start = self._clock()
        return self

    @property
    def spent_usd(self) -> float:
        with self._lock:
            return self._spent

    @property
    def reserved_usd(self) -> float:
        with self._lock:
            return self._held_usd()

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    @property
    def unknown_cost_calls(self) -> int:
        with self._lock:
            return self._unknown

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._outstanding)

    @property
    def elapsed_s(self) -> float:
        return self._offset_s + (self._clock() - self._start)

    def reserve(self, estimate_usd: float | None) -> Reservation | None:
        """Hold one call slot and `estimate_usd` for a call about to be made; None: it must not be made.

        Refused when spent + held + estimate would exceed max_cost_usd, or when the calls made
        plus the slots held already reach max_llm_calls."""
        estimate = max(0.0, float(estimate_usd or 0.0))
        with self._lock:
            if self._refusal(estimate):
                return None
            r = Reservation(next(self._ids), estimate)
            self._outstanding[r.id] = [estimate]
            return r

    def extend(self, reservation: Reservation, estimate_usd: float | None) -> str:
        """Hold one more call slot on an outstanding reservation, for a further call of the same
        operation (an edit follow-up). Returns "" when granted, else why not: the call must not
        be made (the reservation's earlier slots stay held until it settles)."""
        estimate = max(0.0, float(estimate_usd or 0.0))
        with self._lock:
            held = self._outstanding.get(reservation.id)
            if held is None:
                raise ValueError(f"reservation {reservation.id} is not outstanding (settled or released?)")
            why = self._refusal(estimate)
            if not why:
                held.append(estimate)
            return why

    def _refusal(self, estimate: float) -> str:
        """Why one more call of `estimate` does not fit ("" when it does); the lock is held."""
        lim = self.limits
        slots = self._calls + sum(len(held) for held in self._outstanding.values())
        if lim.max_llm_calls is not None and slots >= lim.max_llm_calls:
            return (f"max-llm-calls reached ({self._calls} made, {slots - self._calls} in flight, "
                    f"of {lim.max_llm_calls})")
        held_usd = self._spent + self._held_usd()
        if lim.max_cost_usd is not None and held_usd + estimate > lim.max_cost_usd:
            self._refused_usd = estimate
            return f"max-cost-usd: ${held_usd:.4f} spent or held + ${estimate:.4f} > ${lim.max_cost_usd:.4f}"
        self._refused_usd = None  # a call fits again: money is not the reason to stop
        return ""

    def _held_usd(self) -> float:
        return sum(sum(held) for held in self._outstanding.values())

    def settle(self, reservation: Reservation, actual_usd: float | None, calls: int = 1) -> None:
        """The operation made `calls` calls (its first and any granted by `extend`) that cost
        `actual_usd` in all (None: unknown, their estimates count as spent); slots it held and did
        not use are freed."""
        with self._lock:
            held = self._take(reservation)
            self._calls += calls
            if actual_usd is None:
                self._unknown += 1
                self._spent += sum(held[:max(1, calls)])
            else:
                self._spent += max(0.0, float(actual_usd))

    def release(self, reservation: Reservation) -> None:
        """No call was made after all: free the reservation."""
        with self._lock:
            self._take(reservation)

    def _take(self, reservation: Reservation) -> list[float]:
        held = self._outstanding.pop(reservation.id, None)
        if held is None:
            raise ValueError(f"reservation {reservation.id} is not outstanding (settled or released twice?)")
        return held

    def exhausted(self, generation: int, generations_since_improvement: int) -> StopReason | None:
        """Why the run must stop, or None. `generation`: generations completed so far.

        Its text starts with its kind's value: "max-cost-usd reached", "max-llm-calls", "max-wall-time",
        "generations", "plateau: no improvement in N generations". Money counts as reached when
        it is spent, or when a call was refused for money and nothing is in flight that could
        still free part of the reservation."""
        lim = self.limits
        with self._lock:
            spent, calls, idle = self._spent, self._calls, not self._outstanding
            refused = self._refused_usd
        if lim.max_cost_usd is not None and (
                spent >= lim.max_cost_usd or (idle and refused is not None and spent + refused > lim.max_cost_usd)):
            return StopReason(StopKind.MAX_COST_USD, f"max-cost-usd reached (${spent:.4f} of ${lim.max_cost_usd:.4f})")
        if lim.max_llm_calls is not None and calls >= lim.max_llm_calls:
            return StopReason(StopKind.MAX_LLM_CALLS, f"max-llm-calls reached ({calls} of {lim.max_llm_calls})")
        elapsed = self.elapsed_s
        if lim.max_wall_s is not None and elapsed >= lim.max_wall_s:
            return StopReason(StopKind.MAX_WALL_TIME,
                              f"max-wall-time reached ({elapsed:.0f} s of {lim.max_wall_s:.0f} s)")
        if lim.generations is not None and generation >= lim.generations:
            return StopReason(StopKind.GENERATIONS, f"generations: {generation} of {lim.generations} done")
        if lim.plateau_generations is not None and generations_since_improvement >= lim.plateau_generations:
            return StopReason(StopKind.PLATEAU,
                              f"plateau: no improvement in {generations_since_improvement} generations")
        return None

    def snapshot(self) -> dict:
        """The counters as plain values, for events and the report."""
        with self._lock:
            out = {"spent_usd": self._spent, "reserved_usd": self._held_usd(),
                   "calls": self._calls, "in_flight": len(self._outstanding), "unknown_cost_calls": self._unknown}
        out["elapsed_s"] = self.elapsed_s
        return out
