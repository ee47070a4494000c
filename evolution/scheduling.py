"""Which operator to apply next: a smoothed bandit over improvement per dollar.

The formula, per eligible operator o (attempts a, improvements i, USD spent c):

    r_o = (i + P * R0) / (a + P)                        improvement rate, prior R0 over P attempts
    k_o = (c + P * K) / (a + P)                         USD per attempt, prior K over P attempts
    k_tune = TUNE_COST_FRACTION * K                     tune makes no LLM call: a small epsilon
    w_o = base_o * r_o / k_o                            improvements per dollar
    p_o = (1 - EXPLORE) * w_o / sum(w) + EXPLORE / |eligible|

K is the mean USD per attempt of all LLM operators so far (DEFAULT_CALL_USD before any is
known), so the prior, and tune's epsilon, follow the price of the model in use. The prior
counts let an untried operator start at the average rate and cost instead of at zero, and the
EXPLORE floor keeps a once-unlucky operator from starving: the weights drift towards what pays
as evidence accumulates, never all the way to one operator. "Improvement" is what the loop
records: a new best of the kernel's island, or a new niche.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Mapping

OPERATORS = ("translate", "repair", "mutate", "crossover", "reflect", "tune")

PRIOR_ATTEMPTS = 2.0  # P: how many pseudo-attempts the prior is worth
PRIOR_RATE = 0.25  # R0: improvements per attempt assumed for an untried operator
DEFAULT_CALL_USD = 0.02  # K before any LLM cost is known (a mid-size prompt on a mid-price model)
TUNE_COST_FRACTION = 0.2  # a tune attempt (judge time only) counts as a fifth of an LLM call
EXPLORE = 0.1  # share of draws spread uniformly over eligible operators

# After the first correct kernel, more translations mostly add diversity (new islands, niches);
# they matter less than working on what exists.
DEFAULT_BASE_WEIGHTS = {"translate": 0.5, "repair": 1.0, "mutate": 1.0, "crossover": 1.0, "reflect": 1.0, "tune": 1.0}


@dataclass(frozen=True)
class OperatorStats:
    attempts: int = 0
    successes: int = 0  # candidates judged ok
    improvements: int = 0  # new best of its island, or a new niche
    cost_usd: float = 0.0  # known LLM cost of its attempts (unknown costs add nothing)

    def record(self, success: bool, improvement: bool, cost_usd: float | None = None) -> "OperatorStats":
        """These stats after one more attempt."""
        return replace(self, attempts=self.attempts + 1, successes=self.successes + bool(success),
                       improvements=self.improvements + bool(improvement), cost_usd=self.cost_usd + (cost_usd or 0.0))


def eligible_operators(has_correct: bool, n_correct: int, has_failed_fixable: bool, has_tunable: bool,
                       translate_ok: bool = True) -> list[str]:
    """Operators that can run now; only translate before any kernel is correct, and afterwards
    translate only when `translate_ok` (an island is empty or has collapsed: islands.needing_seed)."""
    if not has_correct or n_correct < 1:
        return ["translate"]
    out = ["translate", "mutate"] if translate_ok else ["mutate"]
    if has_failed_fixable:
        out.append("repair")
    if n_correct >= 2:
        out += ["crossover", "reflect"]
    if has_tunable:
        out.append("tune")
    return [o for o in OPERATORS if o in out]


def mean_call_usd(stats: Mapping[str, OperatorStats]) -> float:
    """K: mean USD per attempt over the LLM operators, or DEFAULT_CALL_USD before any cost is known."""
    llm = [s for name, s in stats.items() if name != "tune"]
    cost, attempts = sum(s.cost_usd for s in llm), sum(s.attempts for s in llm)
    return cost / attempts if cost > 0 and attempts else DEFAULT_CALL_USD


def operator_weights(stats: Mapping[str, OperatorStats], eligible: list[str],
                     base_weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """p_o of the module docstring for each eligible operator (they sum to 1)."""
    base = {**DEFAULT_BASE_WEIGHTS, **(base_weights or {})}
    eligible = [o for o in eligible if base.get(o, 1.0) > 0] or eligible  # weight 0 turns one off
    k = mean_call_usd(stats)
    raw = {}
    for name in eligible:
        s = stats.get(name) or OperatorStats()
        rate = (s.improvements + PRIOR_ATTEMPTS * PRIOR_RATE) / (s.attempts + PRIOR_ATTEMPTS)
        if name == "tune":
            per_attempt = TUNE_COST_FRACTION * k
        else:
            per_attempt = (s.cost_usd + PRIOR_ATTEMPTS * k) / (s.attempts + PRIOR_ATTEMPTS)
        raw[name] = max(0.0, base.get(name, 1.0)) * rate / max(per_attempt, 1e-12)
    total = sum(raw.values())
    n = len(eligible)
    if total <= 0:
        return {name: 1.0 / n for name in eligible}
    return {name: (1 - EXPLORE) * w / total + EXPLORE / n for name, w in raw.items()}


def choose_operator(stats: Mapping[str, OperatorStats], has_correct: bool, n_correct: int,
                    has_failed_fixable: bool, has_tunable: bool, rng: random.Random,
                    base_weights: Mapping[str, float] | None = None, translate_ok: bool = True) -> str:
    """The next operator: "translate" until a kernel is correct, then a draw from operator_weights."""
    eligible = eligible_operators(has_correct, n_correct, has_failed_fixable, has_tunable, translate_ok)
    if len(eligible) == 1:
        return eligible[0]
    weights = operator_weights(stats, eligible, base_weights)
    names = list(weights)
    return rng.choices(names, weights=[weights[o] for o in names], k=1)[0]
