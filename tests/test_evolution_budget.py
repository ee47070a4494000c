"""Budget: reservations, limits, thread safety, stop reasons, resume."""
import threading
from types import SimpleNamespace

import pytest

from kernelevo.evolution.budget import Budget, BudgetLimits, estimate_cost


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_estimate_cost():
    info = SimpleNamespace(input=3.0, cached_input=0.3, output=15.0)
    assert estimate_cost(info, 10_000, 2_000) == pytest.approx(0.06)
    assert estimate_cost(info, 10_000, 2_000, cached_tokens=8_000) == pytest.approx((2000 * 3 + 8000 * 0.3 + 30000) / 1e6)
    assert estimate_cost(SimpleNamespace(input=None, cached_input=0.3, output=15.0), 10, 10) is None
    assert estimate_cost(SimpleNamespace(input=3.0, cached_input=None, output=None), 10, 10) is None
    no_cache = SimpleNamespace(input=3.0, cached_input=None, output=15.0)
    assert estimate_cost(no_cache, 1000, 0) == pytest.approx(0.003)
    assert estimate_cost(no_cache, 1000, 0, cached_tokens=500) is None


def test_reservation_refuses_over_limit():
    b = Budget(BudgetLimits(max_cost_usd=1.0))
    r1 = b.reserve(0.6)
    assert r1 is not None
    assert b.reserve(0.5) is None  # 0.6 held + 0.5 > 1.0: the call must not be made
    assert b.exhausted(0, 0) is None  # r1 is still in flight and may cost less
    b.settle(r1, 0.3)  # it did
    r2 = b.reserve(0.5)
    assert r2 is not None and b.reserved_usd == pytest.approx(0.5)
    b.release(r2)  # never made
    assert b.spent_usd == pytest.approx(0.3) and b.calls == 1 and b.reserved_usd == 0
    with pytest.raises(ValueError):
        b.release(r2)
    assert b.reserve(0.8) is None and b.exhausted(0, 0).text == "max-cost-usd reached ($0.3000 of $1.0000)"
    assert b.reserve(0.1) is not None  # a smaller call still fits: no longer exhausted
    assert b.exhausted(0, 0) is None


def test_call_limit_counts_in_flight():
    b = Budget(BudgetLimits(max_llm_calls=2))
    r1, r2 = b.reserve(0.01), b.reserve(0.01)
    assert r1 and r2 and b.reserve(0.01) is None
    b.release(r2)
    b.settle(r1, 0.01)
    r3 = b.reserve(None)  # unknown price
    b.settle(r3, None)
    assert b.calls == 2 and b.unknown_cost_calls == 1
    assert b.exhausted(0, 0).text.startswith("max-llm-calls")


def test_a_follow_up_holds_its_own_slot_and_the_cap_is_hard():
    b = Budget(BudgetLimits(max_llm_calls=3))
    r1, r2 = b.reserve(0.01), b.reserve(0.01)
    assert b.extend(r1, 0.01) == ""  # r1's follow-up takes the third slot
    assert b.reserve(0.01) is None  # so nothing else may start, though only two operations are in flight
    assert b.extend(r2, 0.01).startswith("max-llm-calls reached (0 made, 3 in flight, of 3)")
    b.settle(r2, 0.01)  # r2 made its first call only
    b.settle(r1, None, calls=1)  # r1's follow-up was never sent: its slot and estimate go back
    assert b.calls == 2 and b.spent_usd == pytest.approx(0.02) and b.in_flight == 0
    r3 = b.reserve(0.01)
    assert r3 is not None and b.extend(r3, 0.01) != "" and b.reserve(0.01) is None
    b.settle(r3, 0.01)
    assert b.calls == 3 and b.exhausted(0, 0).text.startswith("max-llm-calls")
    with pytest.raises(ValueError):
        b.extend(r3, 0.01)  # settled: nothing left to extend


def test_a_follow_up_is_held_against_money_too():
    b = Budget(BudgetLimits(max_cost_usd=1.0))
    r = b.reserve(0.4)
    assert b.extend(r, 0.4) == "" and b.reserved_usd == pytest.approx(0.8)
    assert b.extend(r, 0.4).startswith("max-cost-usd")
    b.settle(r, None, calls=2)  # unknown actual: the two calls' estimates count
    assert b.spent_usd == pytest.approx(0.8) and b.calls == 2


def test_threads_with_follow_ups_never_pass_the_call_cap():
    b = Budget(BudgetLimits(max_llm_calls=25))
    sent = []
    lock = threading.Lock()

    def worker():
        while (r := b.reserve(0.01)) is not None:
            calls = 1 + sum(b.extend(r, 0.01) == "" for _ in range(r.id % 3))  # 0 to 2 follow-ups
            with lock:
                sent.append(calls)
            b.settle(r, 0.01 * calls, calls)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(sent) == b.calls == 25 and b.in_flight == 0


def test_unknown_actual_keeps_estimate():
    b = Budget(BudgetLimits(max_cost_usd=10))
    b.settle(b.reserve(0.25), None)
    assert b.spent_usd == 0.25 and b.unknown_cost_calls == 1


def test_threads_never_overspend():
    b = Budget(BudgetLimits(max_cost_usd=5.0, max_llm_calls=100))
    made = []
    lock = threading.Lock()

    def worker():
        while True:
            r = b.reserve(0.04)
            if r is None:
                return
            b.settle(r, 0.04 if r.id % 3 else None)
            with lock:
                made.append(r.id)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == len(set(made)) == 100  # limited by calls: 100 * 0.04 = 4.0 < 5.0
    assert b.calls == 100 and b.spent_usd == pytest.approx(4.0) and b.in_flight == 0

    b2 = Budget(BudgetLimits(max_cost_usd=1.0))
    threads = [threading.Thread(target=lambda: [b2.settle(r, r.estimate_usd) for r in iter(lambda: b2.reserve(0.03), None)])
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert b2.calls == 33 and b2.spent_usd == pytest.approx(0.99) and b2.spent_usd <= 1.0


def test_wall_time_generations_and_plateau():
    clock = FakeClock()
    b = Budget(BudgetLimits(max_wall_s=60, generations=10, plateau_generations=3), clock=clock)
    assert b.exhausted(2, 1) is None
    assert b.exhausted(3, 3).text == "plateau: no improvement in 3 generations"
    assert b.exhausted(10, 0).text.startswith("generations")
    clock.t += 59.5
    assert b.exhausted(2, 0) is None
    clock.t += 1
    assert b.exhausted(2, 0).text.startswith("max-wall-time")
    unlimited = BudgetLimits(generations=None, plateau_generations=None)  # the default stops at 10 generations
    assert Budget(unlimited, clock=clock).exhausted(10**6, 10**6) is None  # no limits, no reason
    assert Budget(clock=clock).exhausted(10, 0).text.startswith("generations")


def test_restore_for_resume():
    clock = FakeClock()
    b = Budget(BudgetLimits(max_cost_usd=2.0, max_llm_calls=50, max_wall_s=100), clock=clock).restore(
        spent_usd=1.5, calls=40, elapsed_s=90.0, unknown_cost_calls=2)
    assert (b.spent_usd, b.calls, b.unknown_cost_calls) == (1.5, 40, 2)
    assert b.elapsed_s == 90.0
    assert b.reserve(0.6) is None and b.reserve(0.4) is not None
    clock.t += 10
    assert b.exhausted(0, 0).text.startswith("max-wall-time")
    assert b.snapshot()["in_flight"] == 1


def test_a_search_stops_for_a_model_gone_first_then_its_budget_and_plateau():
    """Stopping (the search's stopping state): a server that is gone or a replay that ran out stops the search
    whatever the budget says, the first reason kept; a refused key is no stop but an error; the plateau counts
    generations since the last new best."""
    from kernelevo.agent.client import Stop, Unreachable
    from kernelevo.agent.replay import ReplayEnded
    from kernelevo.evolution.budget import StopKind
    from kernelevo.evolution.loop.stopping import Stopping

    stopping = Stopping(Budget(BudgetLimits(plateau_generations=2, generations=10)), generation=0)
    assert stopping.reason(1, None, None) is None
    stopping.improved(3)
    assert stopping.reason(4, None, None) is None
    assert stopping.reason(5, None, None).kind is StopKind.PLATEAU
    with pytest.raises(Stop, match="bad key"):
        stopping.models_gone(Stop("bad key"))
    stopping.models_gone(ReplayEnded("replay ended at call 3"))
    stopping.models_gone(Unreachable("connection refused"))
    assert stopping.reason(4, None, None).kind is StopKind.UNREACHABLE  # before the budget; then the replay's
    stopping.unreachable = ""
    assert stopping.reason(4, None, None).text == "replay ended at call 3"
    stopping.models_gone(ReplayEnded("replay ended at call 9"))
    assert stopping.replay_ended == "replay ended at call 3"
