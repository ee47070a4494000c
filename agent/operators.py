"""The LLM side of each operator: render the prompt, call the model, turn the reply into a candidate.

Each function returns a Proposal: a candidate source, or the outcome that explains why there is
none (a failed call, a reply without code, SEARCH/REPLACE blocks that did not apply even after
the model was shown the file's real lines, or that could not be shown them because the run's
budget allowed no further call). Running and judging the candidate is not done here.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from kernelevo.evaluation import Failure
from kernelevo.llm_call import LLMCall

from . import prompting
from .client import LLM, NotSent
from .edits import EditError, apply_edits, incomplete_blocks, parse_edits
from .prompting import Context, Variant
from .providers import Message
from .replies import Reply, account_of, candidate_source, parse_reply, why_no_candidate

# Outcomes: "candidate", or why there is none.
OUTCOMES = ("candidate", "no_code", "edit_failed", "failed_call")


@dataclass(frozen=True)
class Proposal:
    operator: str
    outcome: str  # one of OUTCOMES
    source: str | None = None
    problem: str = ""  # one line when there is no candidate
    calls: tuple[LLMCall, ...] = field(default_factory=tuple)
    analysis: str = ""  # reflect: why the fastest variant is fastest, as the model wrote it
    thinking: str = ""  # reasoning sections of the replies, kept apart from the code
    edited: bool = False  # the source came from SEARCH/REPLACE blocks applied to a parent
    unsent: str = ""  # why a follow-up this operator needed was not sent (the budget refused it)
    account: str = ""  # the model's own words on what its kernel changes and why (the prose before the code)

    @property
    def ok(self) -> bool:
        return self.outcome == "candidate"

    @property
    def cost_usd(self) -> float | None:
        costs = [c.cost_usd for c in self.calls]
        return None if any(c is None for c in costs) else sum(costs)


def _failed(operator: str, calls: list[LLMCall]) -> Proposal:
    return Proposal(operator, "failed_call", problem=calls[-1].error, calls=tuple(calls))


def _from_reply(operator: str, reply: Reply, calls: list[LLMCall], **extra) -> Proposal:
    source = candidate_source(reply)
    extra.setdefault("account", account_of(reply.text))
    if source is None:
        return Proposal(operator, "no_code", problem=why_no_candidate(reply), calls=tuple(calls),
                        thinking=reply.thinking, **extra)
    return Proposal(operator, "candidate", source, calls=tuple(calls), thinking=reply.thinking, **extra)


def _whole(llm: LLM, operator: str, messages: list[Message], analyse: bool = False) -> Proposal:
    """One call whose reply must hold a whole candidate file (and, to `analyse`, an analysis)."""
    answer = llm.ask(operator, messages)
    if answer.completion is None:
        return _failed(operator, [answer.call])
    reply = parse_reply(answer.text)
    if not analyse:
        return _from_reply(operator, reply, [answer.call])
    analysis, after = _split_analysis(reply.text)
    account = account_of(_KERNEL_HEADING.sub("", after, count=1)) if after is not None else ""
    return _from_reply(operator, reply, [answer.call], analysis=analysis, account=account or account_of(reply.text))


def translate(llm: LLM, ctx: Context, earlier: tuple[str, ...] = ()) -> Proposal:
    """Reference PyTorch to a first kernel; `earlier`: attempt lines of the run's translations so far."""
    return _whole(llm, "translate", prompting.translate(ctx, earlier))


def first_prompt(operator: str, ctx: Context, args: tuple, edit_format: str) -> list[Message]:
    """The messages the operator's first call would send with these arguments: known before a call
    is paid for, so a prompt answered before is not sent again."""
    if operator == "translate":
        return prompting.translate(ctx, *args)
    if operator in ("mutate", "repair"):
        return getattr(prompting, operator)(ctx, *args, edit_format)
    return getattr(prompting, operator)(ctx, *args)


def functional(llm: LLM, ctx: Context) -> tuple[str, LLMCall]:
    """A functional PyTorch rewrite of the reference ("" when the reply had none), for translate's context."""
    answer = llm.ask("functional", prompting.functional(ctx))
    reply = parse_reply(answer.text)
    blocks = [b.text for b in reply.blocks if "def module_fn" in b.text]
    return (blocks[-1] if blocks else ""), answer.call


def translate_via_functional(llm: LLM, ctx: Context) -> tuple[Proposal, str]:
    """Functional rewrite first, then translate with it in the task block; returns the rewrite too,
    so that later prompts of the run can share the same (cached) task block."""
    code, call = functional(llm, ctx)
    if code:
        ctx = dataclasses.replace(ctx, task=dataclasses.replace(ctx.task, functional=code))
    proposal = translate(llm, ctx)
    return dataclasses.replace(proposal, calls=(call, *proposal.calls)), code


def repair(llm: LLM, ctx: Context, failed: Variant, feedback: Failure) -> Proposal:
    """A compile error, a crash or a wrong answer, sent back with the judge's own words."""
    messages = prompting.repair(ctx, failed, feedback, llm.edit_format)
    return _edit_or_whole(llm, "repair", messages, failed.source)


def mutate(llm: LLM, ctx: Context, parent: Variant) -> Proposal:
    messages = prompting.mutate(ctx, parent, llm.edit_format)
    return _edit_or_whole(llm, "mutate", messages, parent.source)


def crossover(llm: LLM, ctx: Context, parents: list[Variant]) -> Proposal:
    if not 2 <= len(parents) <= 3:
        raise ValueError(f"crossover takes two or three parents, got {len(parents)}")
    return _whole(llm, "crossover", prompting.crossover(ctx, parents))


def reflect(llm: LLM, ctx: Context, variants: list[Variant]) -> Proposal:
    """Contrastive: the analysis of why the fastest is fastest comes back as data, with the kernel."""
    if len(variants) < 2:
        raise ValueError("reflect needs at least two measured variants")
    return _whole(llm, "reflect", prompting.reflect(ctx, variants), analyse=True)


_ANALYSIS = re.compile(r"^#{1,4}\s*(?:performance\s+)?analysis\b[^\n]*\n", re.I | re.M)
_KERNEL_HEADING = re.compile(r"^#{1,4}\s*kernel\b[^\n]*(?:\n|$)", re.I)
_END = re.compile(r"^(?:#{1,4}\s*kernel\b|[ \t]*(?:`{3,}|~{3,}))", re.I | re.M)


def analysis_of(text: str) -> str:
    """The reply's analysis section: under an `Analysis` heading up to the kernel heading or the
    first code block; without the heading, the prose before the first code block."""
    return _split_analysis(text)[0]


def _split_analysis(text: str) -> tuple[str, str | None]:
    """(the analysis, the reply from where it ends): the second is None without an `Analysis`
    heading, where the analysis is all the prose there is."""
    heading = _ANALYSIS.search(text)
    start = heading.end() if heading else 0
    end = _END.search(text, start)
    stop = end.start() if end else len(text)
    return text[start:stop].strip(), text[stop:] if heading else None


def _edit_or_whole(llm: LLM, operator: str, messages: list[Message], parent: str) -> Proposal:
    """A whole file, or SEARCH/REPLACE blocks applied to `parent`; one follow-up when blocks fail."""
    answer = llm.ask(operator, messages)
    if answer.completion is None:
        return _failed(operator, [answer.call])
    calls, reply = [answer.call], parse_reply(answer.text)
    result = _apply(reply, parent)
    if not isinstance(result, EditError):
        return result_proposal(operator, reply, result, calls)
    follow = [*messages, Message("assistant", answer.text),
              Message("user", prompting.edit_failed(result.failures, result.applied))]
    try:
        second = llm.ask(f"{operator}_edit_followup", follow)
    except NotSent as exc:  # the cap is reached: the paid reply ends here, and says why
        return Proposal(operator, "edit_failed", problem=f"{result}; follow-up not sent: {exc}", calls=tuple(calls),
                        thinking=reply.thinking, unsent=str(exc), account=account_of(reply.text))
    calls.append(second.call)
    if second.completion is None:
        return _failed(operator, calls)
    reply2 = parse_reply(second.text)
    result2 = _apply(reply2, result.text)
    thinking = "\n\n".join(t for t in (reply.thinking, reply2.thinking) if t)
    if isinstance(result2, EditError):
        return Proposal(operator, "edit_failed", problem=str(result2), calls=tuple(calls), thinking=thinking,
                        account=account_of(reply.text))
    # the first reply says what the change is; the follow-up only fixes its blocks
    return dataclasses.replace(result_proposal(operator, reply2, result2, calls), thinking=thinking,
                               account=account_of(reply.text) or account_of(reply2.text))


def _apply(reply: Reply, parent: str) -> tuple[str | None, bool, str] | EditError:
    """(source, edited, problem) from a reply, or the EditError of its failed blocks."""
    whole = candidate_source(reply)
    if whole is not None:
        return whole, False, ""
    edits = parse_edits(reply.text)
    if not edits:
        broken = incomplete_blocks(reply.text)
        problem = (f"{broken} SEARCH/REPLACE block(s) never reach their >>>>>>> REPLACE line" if broken
                   else why_no_candidate(reply))
        return None, False, problem
    try:
        return apply_edits(parent, edits), True, ""
    except EditError as exc:
        return exc


def result_proposal(operator: str, reply: Reply, result: tuple[str | None, bool, str],
                    calls: list[LLMCall]) -> Proposal:
    source, edited, problem = result
    account = account_of(reply.text)
    if source is None:
        return Proposal(operator, "no_code", problem=problem, calls=tuple(calls), thinking=reply.thinking,
                        account=account)
    return Proposal(operator, "candidate", source, calls=tuple(calls), thinking=reply.thinking, edited=edited,
                    account=account)
