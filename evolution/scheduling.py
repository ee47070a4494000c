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

Which model makes an operator's call, when a run has several (an ensemble), is the same bandit one
level down, with the improvement rate split in two: the share of attempts judged correct, times
the share of correct kernels that improved. Improvements are rare (a few in a run), correct
verdicts are not, and a model whose kernels never compile can never improve: the split lets the
dense signal move the draws early. Per model m, over the other operators (attempts A, correct
S, improvements I, USD C) and on this operator (a, s, i, c), with the model table's price of a
typical call as the cost prior k0_m:

    S_m = (S + P * C0) / (A + P)              s_m = (s + P * S_m) / (a + P)
    G_m = (I + P * R0 / C0) / (S + P)         g_m = (i + P * G_m) / (s + P)
    K_m = (C + P * k0_m) / (A + P)            k_m = (c + P * K_m) / (a + P)
    w_m = s_m * g_m / max(k_m, MIN_CALL_USD)
    p_m = (1 - MODEL_EXPLORE) * w_m / sum(w) + MODEL_EXPLORE / |models|

An untried model starts at the operators' prior rate (C0 * R0 / C0 = R0), and a model untried on
an operator starts from what it earns on the others, so a model that mostly writes broken
kernels loses every operator's calls at once, while one that is good at reflection alone can
still win reflect. An attempt of unknown cost counts at the model's table price (the mean price
of the others when it has none), and a free model still costs MIN_CALL_USD a call (its time): a
price of zero must not take every call.
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
MODEL_EXPLORE = 0.1  # share of an operator's calls spread uniformly over the models it may use
MIN_CALL_USD = 0.0005  # the least a call is taken to cost, whatever the model's price
PRIOR_CORRECT = 0.5  # C0: share of an untried model's attempts assumed judged correct

# After the first correct kernel, more translations mostly add diversity (new islands, niches);
# they matter less than working on what exists.
DEFAULT_BASE_WEIGHTS = {"translate": 0.5, "repair": 1.0, "mutate": 1.0, "crossover": 1.0, "reflect": 1.0, "tune": 1.0}


@dataclass(frozen=True)
class OperatorStats:
    attempts: int = 0
    successes: int = 0  # candidates judged ok
    improvements: int = 0  # new best of its island, or a new niche
    cost_usd: float = 0.0  # known LLM cost of its attempts (unknown costs add nothing)
    unknown_costs: int = 0  # attempts whose cost is unknown (a model without a price, a cut call)

    def record(self, success: bool, improvement: bool, cost_usd: float | None = None) -> "OperatorStats":
        """These stats after one more attempt."""
        return replace(self, attempts=self.attempts + 1, successes=self.successes + bool(success),
                       improvements=self.improvements + bool(improvement), cost_usd=self.cost_usd + (cost_usd or 0.0))


def eligible_operators(has_correct: bool, n_correct: int, has_failed_fixable: bool, has_tunable: bool,
                       translate_ok: bool = True) -> list[str]:
    """Operators that can run now; only translate before any kernel is correct (or repair, while a
    translation that failed to build, crashed or was wrong has had none: a missing macro is no reason
    to give up an approach and pay for another), and afterwards translate only when `translate_ok`
    (an island is empty or has collapsed: islands.needing_seed)."""
    if not has_correct or n_correct < 1:
        return ["repair"] if has_failed_fixable else ["translate"]
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


def _minus(a: OperatorStats, b: OperatorStats) -> OperatorStats:
    return OperatorStats(max(0, a.attempts - b.attempts), max(0, a.successes - b.successes),
                         max(0, a.improvements - b.improvements), max(0.0, a.cost_usd - b.cost_usd),
                         max(0, a.unknown_costs - b.unknown_costs))


def _spent(s: OperatorStats, price: float) -> float:
    return s.cost_usd + s.unknown_costs * price


def _split_rate(here: OperatorStats, everywhere: OperatorStats) -> float:
    """s * g of the module docstring: the share of attempts judged correct times the share of
    correct kernels that improved, each smoothed towards `everywhere` (and that towards the priors)."""
    p = PRIOR_ATTEMPTS
    correct_all = (everywhere.successes + p * PRIOR_CORRECT) / (everywhere.attempts + p)
    correct = (here.successes + p * correct_all) / (here.attempts + p)
    gain_all = (everywhere.improvements + p * PRIOR_RATE / PRIOR_CORRECT) / (everywhere.successes + p)
    gain = (here.improvements + p * gain_all) / (here.successes + p)
    return correct * gain


def model_weights(per_operator: Mapping[str, OperatorStats], overall: Mapping[str, OperatorStats],
                  prices: Mapping[str, float]) -> dict[str, float]:
    """p_m of the module docstring for the models in `prices` (they sum to 1): `per_operator` holds
    each model's stats on the operator being chosen for, `overall` on all operators, `prices` the
    cost prior of each (USD of a typical call)."""
    p = PRIOR_ATTEMPTS
    raw = {}
    for name, price in prices.items():
        here = per_operator.get(name) or OperatorStats()
        everywhere = _minus(overall.get(name) or OperatorStats(), here)  # the other operators: no evidence twice
        cost_all = (_spent(everywhere, price) + p * price) / (everywhere.attempts + p)
        cost = (_spent(here, price) + p * cost_all) / (here.attempts + p)
        raw[name] = _split_rate(here, everywhere) / max(cost, MIN_CALL_USD)
    total, n = sum(raw.values()), len(raw)
    return {name: (1 - MODEL_EXPLORE) * w / total + MODEL_EXPLORE / n for name, w in raw.items()}


def choose_model(per_operator: Mapping[str, OperatorStats], overall: Mapping[str, OperatorStats],
                 prices: Mapping[str, float], rng: random.Random) -> str:
    """The model for the next call of an operator: a draw from model_weights (no draw for one model)."""
    if len(prices) == 1:
        return next(iter(prices))
    weights = model_weights(per_operator, overall, prices)
    names = list(weights)
    return rng.choices(names, weights=[weights[m] for m in names], k=1)[0]


# -- which candidate format a call asks for (--format auto) -----------------------------------------

FORMAT_EXPLORE = 0.15  # share of draws spread uniformly over the formats


def format_weights(per_model: Mapping[str, OperatorStats], overall: Mapping[str, OperatorStats],
                   formats: tuple[str, ...]) -> dict[str, float]:
    """p_f for each format (they sum to 1): the model bandit's split rate without the cost (a call
    costs the same whatever format it asks for). Per format f, over all of the run's models (A, S,
    I) and for the model about to be called (a, s, i):

        S_f = (S + P * C0) / (A + P)              s_f = (s + P * S_f) / (a + P)
        G_f = (I + P * R0 / C0) / (S + P)         g_f = (i + P * G_f) / (s + P)
        p_f = (1 - FORMAT_EXPLORE) * s_f * g_f / sum + FORMAT_EXPLORE / |formats|

    So a format whose calls come back correct and faster gets more of them, for this model first
    (a model may write good Triton and poor CUDA), from what all models showed before it has
    evidence of its own; and no format starves."""
    raw = {fmt: _split_rate(per_model.get(fmt) or OperatorStats(), overall.get(fmt) or OperatorStats())
           for fmt in formats}
    total, n = sum(raw.values()), len(raw)  # every rate is above 0: the priors are
    return {fmt: (1 - FORMAT_EXPLORE) * w / total + FORMAT_EXPLORE / n for fmt, w in raw.items()}


def choose_format(per_model: Mapping[str, OperatorStats], overall: Mapping[str, OperatorStats],
                  formats: tuple[str, ...], rng: random.Random) -> str:
    """The format the next call asks for: a draw from format_weights (no draw for one format)."""
    if len(formats) == 1:
        return formats[0]
    weights = format_weights(per_model, overall, formats)
    return rng.choices(list(weights), weights=list(weights.values()), k=1)[0]


def format_stats(rows: list, model: str | None = None) -> dict[str, OperatorStats]:
    """Per asked format, the attempts, correct kernels and improvements of Archive.format_yield's
    rows: of one model's calls, or of all (model None)."""
    out: dict[str, OperatorStats] = {}
    for r in rows:
        if r.format and (model is None or r.model == model):
            s = out.get(r.format, OperatorStats())
            out[r.format] = replace(s, attempts=s.attempts + r.attempts, successes=s.successes + r.correct,
                                    improvements=s.improvements + r.improvements)
    return out
