"""The run's models: which may make an operator's call, what each has earned, which dropped out.

A run has one model or several (an ensemble). Each call's model is drawn by
scheduling.choose_model from what the models' earlier calls of this run earned, read from the
archive's rows (Archive.model_yield) whenever a call or a judgement finishes: a resumed run
starts from the same statistics the killed one had, and there is no counter to keep in step.

An operator can be pinned to a model (`--model-for reflect=smart`); a model given only as a pin
makes only that operator's calls. A model whose key is refused or whose server stops answering
drops out; its pinned operators fall back to the rest, and the run stops when none is left.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping

from kernelevo.agent.client import LLM, Stop, label_of
from kernelevo.agent.replay import parse_spec
from kernelevo.config import Config
from kernelevo.llm_call import LLMCall

from . import budget as budgets
from . import replays
from .scheduling import DEFAULT_CALL_USD, OPERATORS, OperatorStats, choose_model

CALL_OPERATORS = tuple(op for op in OPERATORS if op != "tune")  # the operators that call a model


class Ensemble:
    def __init__(self, members: Mapping[str, LLM], pins: Mapping[str, str] | None = None,
                 general: Iterable[str] | None = None, dropped: Mapping[str, str] | None = None,
                 call_tokens: tuple[int, int] = (12000, 6000)):
        """`members`: label -> model; `pins`: operator -> label; `general`: the labels any operator
        may use (default: all); `dropped`: labels left out before the run began, with why;
        `call_tokens`: the prompt and output tokens of a typical call (for the price prior)."""
        self.members = dict(members)
        self.pins = dict(pins or {})
        self.general = tuple(general if general is not None else self.members)
        self.dropped: dict[str, str] = dict(dropped or {})
        self.prices = _prices(self.members, call_tokens)
        self.per_operator: dict[tuple[str, str], OperatorStats] = {}
        self.overall: dict[str, OperatorStats] = {}

    @property
    def labels(self) -> list[str]:
        """Every model of the run, in the order given (dropped ones too)."""
        return [*self.members, *(m for m in self.dropped if m not in self.members)]

    @property
    def active(self) -> list[str]:
        return [m for m in self.members if m not in self.dropped]

    def llm(self, label: str) -> LLM:
        return self.members[label]

    def replay_notes(self) -> dict[str, str]:
        """What each replaying member served (agent/replay.py), by label; {} without one."""
        return {label: llm.note() for label, llm in self.members.items() if hasattr(llm, "note") and llm.note()}

    @property
    def instant(self) -> bool:
        """Every model still in answers at once (replays with replies left, agent/replay.py): the search then
        settles what is in flight before each call, so that its prompt carries every verdict so far."""
        return bool(self.active) and all(getattr(self.members[m], "instant", False) for m in self.active)

    def set_on_call(self, on_call: Callable[[LLMCall], None]) -> None:
        for llm in self.members.values():
            llm.on_call = on_call

    def eligible(self, operator: str) -> list[str]:
        """The models that may make `operator`'s next call: its pin while that model is in, else the
        general models still in, else any model still in."""
        active = self.active
        pin = self.pins.get(operator)
        if pin in active:
            return [pin]
        return [m for m in self.general if m in active] or active

    def choose(self, operator: str, rng: random.Random) -> str | None:
        """The model for `operator`'s next call (None when every model dropped out). A model that is
        pausing (a rate limit, a server failing) waits while another can take the call."""
        eligible = self.eligible(operator)
        if not eligible:
            return None
        ready = [m for m in eligible if not self.members[m].paused_for()] or eligible
        return choose_model({m: self.per_operator.get((operator, m), OperatorStats()) for m in ready},
                            self.overall, {m: self.prices[m] for m in ready}, rng)

    def estimate_usd(self, label: str, prompt_tokens: int, output_tokens: int) -> float:
        """What a call of `label` is reserved at (0 when its price is unknown: see Budget.reserve)."""
        estimate = budgets.estimate_cost(self.members[label].info, prompt_tokens, output_tokens)
        return estimate if estimate is not None else 0.0

    def drop(self, label: str, reason: str) -> bool:
        """Take `label` out of the ensemble; True the first time (the caller says so once)."""
        if label in self.dropped:
            return False
        self.dropped[label] = reason
        return True

    def update(self, rows: Iterable) -> None:  # Archive.model_yield: ModelYield records
        """The statistics the choice reads, from Archive.model_yield rows of this run."""
        self.per_operator, self.overall = stats_from_rows(rows)


def stats_from_rows(rows: Iterable) -> tuple[dict[tuple[str, str], OperatorStats], dict[str, OperatorStats]]:
    """(operator, model) -> stats, and model -> stats over all operators, from model_yield rows."""
    per: dict[tuple[str, str], OperatorStats] = {}
    overall: dict[str, OperatorStats] = {}
    for r in rows:
        s = OperatorStats(attempts=r.attempts, successes=r.correct, improvements=r.improvements,
                          cost_usd=r.cost_usd, unknown_costs=r.unknown_cost_calls)
        per[(r.operator, r.model)] = s
        o = overall.get(r.model, OperatorStats())
        overall[r.model] = OperatorStats(o.attempts + s.attempts, o.successes + s.successes,
                                            o.improvements + s.improvements, o.cost_usd + s.cost_usd,
                                            o.unknown_costs + s.unknown_costs)
    return per, overall


def given_or_stored(models: Iterable[str], pins: Iterable[tuple[str, str]] | None,
                    stored: Mapping) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The models and pins given (pins None: not given), else those a run or bench stored in its
    config: the names as given (runs before ensembles stored one provider:model as "model")."""
    names = tuple(models) or tuple(stored.get("models") or ([stored["model"]] if stored.get("model") else ()))
    pinned = tuple(pins) if pins is not None else tuple((stored.get("model_for") or {}).items())
    return names, pinned


def _prices(members: Mapping[str, LLM], call_tokens: tuple[int, int]) -> dict[str, float]:
    """The cost prior of each model: the table's price of a typical call; a model without a price
    gets the mean of the others' (DEFAULT_CALL_USD when none has one)."""
    known = {m: budgets.estimate_cost(llm.info, *call_tokens) for m, llm in members.items()}
    priced = [p for p in known.values() if p is not None]
    fallback = sum(priced) / len(priced) if priced else DEFAULT_CALL_USD
    return {m: p if p is not None else fallback for m, p in known.items()}


def build(config: Config, names: Iterable[str], pins: Mapping[str, str], call_tokens: tuple[int, int],
          say: Callable[[str], None] = lambda text: None, place: replays.ReplayPlace | None = None) -> Ensemble:
    """The ensemble of `names` (aliases of kernelevo.toml, provider:model specs, or replay:SOURCE with `place`)
    and the models `pins` names. A model that cannot be called (its key is not set) is left out with one
    line, while another can; ValueError for an unknown operator, a malformed model name or a recording that
    is not there; Stop when no model can be called."""
    names = list(dict.fromkeys(names))
    unknown = sorted(set(pins) - set(CALL_OPERATORS))
    if unknown:
        raise ValueError(f"--model-for {unknown[0]}=...: the operators that call a model are "
                         f"{', '.join(CALL_OPERATORS)}")
    members: dict[str, LLM] = {}
    labels: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for name in dict.fromkeys([*names, *pins.values()]):
        if (spec := parse_spec(name)) is not None:
            if place is None:
                raise ValueError(f"model {name!r}: a replay answers a search's calls (optimize, bench), not these")
            replaying = replays.member(spec, config, place)
            labels[name] = replaying.label
            members[replaying.label] = replaying
            continue
        if ":" not in name and name not in config.models:
            raise ValueError(f"model {name!r}: no [models.{name}] in {config.path or 'kernelevo.toml (none found)'}; "
                             "name an alias defined there, or anthropic:MODEL, openai:MODEL, local:MODEL@URL")
        choice = config.model(name)
        label = label_of(choice)
        labels[name] = label
        try:
            members[label] = LLM(choice)
        except Stop as exc:
            dropped[label] = str(exc)
    if not members:
        raise Stop(next(iter(dropped.values())))
    for label, why in dropped.items():
        say(f"model {label} left out of the ensemble: {why}")
    general = [labels[n] for n in names if labels[n] in members]
    return Ensemble(members, {op: labels[n] for op, n in pins.items() if labels[n] in members},
                    general, dropped, call_tokens)
