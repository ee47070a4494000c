"""A model that answers from recorded replies: `--model replay:SOURCE[,then:MODEL]`.

SOURCE is a run id or a bench id of the archive (the loop reads its calls: evolution/replays.py), or a
folder of replies: `<folder>/<task>/NNNN.reply.md`, each beside the `NNNN.prompt.md` this module wrote
when the recording ran out (its header names the operator and the prompt's hash). A request is answered
with the first recorded reply not yet served of the same operator, the one whose prompt is the same
where there is one: the k-th mutation of a replay gets the k-th mutation of the recording. Where none of that
operator is left, the first reply left of another is served (counted as to a prompt of another form): a replay
whose search draws other operators than the recording's does not end with paid replies unserved. A reply whose
prompt has changed (a prompt or the judge changed since) is still served, and counted.

The first request with no recorded reply goes to MODEL where `then:` names one; else its prompt is
written to `<prompts>/NNNN.prompt.md` and the replay ends (`ReplayEnded`): the search stops there, and
whoever answers that prompt writes `NNNN.reply.md` beside it for the next round. A recorded reply comes back at
once, where the model took a minute: so that each prompt shows what the judge said of every kernel before it (as
the recording's run did, and the same each time), the search asks a replay only with nothing in flight.
Replayed calls cost nothing and are recorded as provider `replay`; the search's call cap counts them, so a
replay of a run with its cap makes the same number of calls.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kernelevo.llm_call import LLMCall

from .client import LLM, Answer, Stop, form_of, prompt_body, prompt_form, prompt_hash
from .models import ModelInfo
from .providers import Completion, Message, ModelRef, Usage

PREFIX = "replay:"
THEN = ",then:"
_NUMBERED = re.compile(r"^(\d{4,})\.reply\.md$")
_HEADER = re.compile(r"^<!-- kernelevo prompt: (.*?) -->$", re.M)


@dataclass(frozen=True)
class ReplaySpec:
    source: str  # a run id, a bench id, or a folder of replies
    then: str = ""  # the model that answers past the recording ("" : the replay ends there)


@dataclass(frozen=True)
class Recorded:
    """One recorded reply of a task's search."""
    number: int  # its place among the task's calls, from 1
    operator: str  # the operator it answered ("": unknown, it answers any)
    reply: str
    prompt_hash: str = ""  # of the prompt it answered ("": unknown)
    prompt_form: str = ""  # that prompt's form (agent.client.prompt_form; "": unknown)


class ReplayEnded(Stop):
    """A request the recording has no reply for, and no model to go on with: the search stops there.
    `written`: this request's prompt is the one written out for an answer (the first such request); a
    resumed run asks it first, so that the answer is served to the call it was written for."""

    def __init__(self, message: str, written: bool = False):
        super().__init__(message)
        self.written = written


def parse_spec(spec: str) -> ReplaySpec | None:
    """The replay a model name asks for; None for any other model. ValueError where SOURCE is missing."""
    if not spec.startswith(PREFIX):
        return None
    source, _, then = spec[len(PREFIX):].partition(THEN)
    if not source.strip():
        raise ValueError(f"model {spec!r}: replay:SOURCE needs a run id, a bench id or a folder of replies "
                         "(replay:RUN or replay:RUN,then:MODEL)")
    return ReplaySpec(source.strip(), then.strip())


def served_by_text(recorded: list[Recorded], texts: list[str]) -> list[Recorded | None]:
    """Per text served (in order), the recorded reply it was, found by its text: each reply once, the first of
    equal ones first; None for a text the recording does not hold. A recording's name can change (the yardstick
    copies its folder to a new place each round); its replies do not."""
    left = list(recorded)
    out: list[Recorded | None] = []
    for text in texts:
        found = next((r for r in left if r.reply == text), None)
        if found is not None:
            left.remove(found)
        out.append(found)
    return out


def read_folder(folder: Path) -> list[Recorded]:
    """The replies of one task's folder (`NNNN.reply.md`, each with its `NNNN.prompt.md` where there is one),
    in order of their numbers."""
    found = []
    for path in sorted(Path(folder).glob("*.reply.md")) if Path(folder).is_dir() else ():
        match = _NUMBERED.match(path.name)
        if not match:
            continue
        number = int(match.group(1))
        prompt = path.with_name(f"{match.group(1)}.prompt.md")
        text = prompt.read_text() if prompt.is_file() else ""
        header = _prompt_header(text)
        # a prompt file written before the header named its form: the form of the body it holds
        form = header.get("form") or (form_of(text.split("\n", 3)[-1]) if header else "")
        found.append(Recorded(number, header.get("operator", ""), path.read_text(), header.get("hash", ""), form))
    return sorted(found, key=lambda r: r.number)


def _prompt_header(text: str) -> dict[str, str]:
    """The `key=value` pairs of a prompt file's first line (its `text`), written by write_prompt; {} where there
    is none."""
    match = _HEADER.search(text.split("\n", 1)[0])
    if not match:
        return {}
    return dict(part.split("=", 1) for part in match.group(1).split() if "=" in part)


def write_prompt(folder: Path, number: int, operator: str, fmt: str, messages: list[Message]) -> Path:
    """A request's messages as one Markdown file, `NNNN.prompt.md`, headed by what a replay matches it by."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{number:04d}.prompt.md"
    head = (f"<!-- kernelevo prompt: operator={operator} format={fmt or '-'} hash={prompt_hash(messages)} "
            f"form={prompt_form(messages)} -->")
    answer = f"Answer in {path.with_suffix('').with_suffix('').name}.reply.md beside this file."
    path.write_text("\n".join([head, answer, "", prompt_body(messages)]))
    return path


class ReplayLLM:
    """An ensemble member (agent.client.LLM's interface) answering from `recorded`; thread-safe."""

    def __init__(self, spec: ReplaySpec, recorded: list[Recorded], prompts: Path, edit_format: str = "whole",
                 then: LLM | None = None, served: frozenset[int] = frozenset()):
        """`served`: the numbers of the replies a resumed run was served before: not served again."""
        self.spec, self.prompts, self.then = spec, Path(prompts), then
        self.ref = ModelRef("replay", spec.source)
        self.info = ModelInfo("replay", spec.source, input=0.0, cached_input=0.0, cache_write=0.0, output=0.0,
                              edit_format=then.edit_format if then else edit_format)
        self.choice = then.choice if then else None
        self._on_call = lambda call: None
        self._left = [r for r in recorded if r.number not in served]
        self._next_number = max((r.number for r in recorded), default=0) + 1
        # served: replies given; changed: to a prompt whose text differs from the one they answered; reshaped: of
        # those, to a prompt of another form (not only other figures: the search asked something else there)
        self.served, self.changed, self.reshaped, self.already = 0, 0, 0, len(recorded) - len(self._left)
        self.ended = ""  # why the replay ended, once it did
        self._lock = threading.Lock()

    @property
    def on_call(self):
        return self._on_call

    @on_call.setter
    def on_call(self, record) -> None:  # the model it goes on with records its calls the same way
        self._on_call = record
        if self.then is not None:
            self.then.on_call = record

    @property
    def name(self) -> str:
        return PREFIX + self.spec.source

    @property
    def label(self) -> str:
        return self.name + (THEN + self.then.label if self.then else "")

    @property
    def edit_format(self) -> str:
        return self.info.edit_format

    def paused_for(self) -> float:
        return self.then.paused_for() if self.then else 0.0

    @property
    def instant(self) -> bool:
        """Its next answer takes no time (a recorded reply, or the replay's end): while so, the search asks it
        only with nothing in flight (evolution.loop.search), as a model's 30-120 s would have let it settle."""
        with self._lock:
            return bool(self._left) or self.then is None

    def ask(self, operator: str, messages: list[Message], fmt: str = "") -> Answer:
        digest, form = prompt_hash(messages), prompt_form(messages)
        with self._lock:
            found = self._take(operator, digest)
            if found is None and self.then is None:
                written = not self.ended
                self.ended = self.ended or self._end(operator, fmt, messages)
                raise ReplayEnded(self.ended, written)
            if found is not None:
                self.served += 1
                changed = bool(found.prompt_hash) and found.prompt_hash != digest
                self.changed += changed
                self.reshaped += changed and bool(found.prompt_form) and found.prompt_form != form
        if found is None:
            return self.then.ask(operator, messages, fmt)
        started = time.time()
        request = f"{self.name}#{found.number}"
        call = LLMCall(provider="replay", model=self.spec.source, operator=operator, outcome="ok", cost_usd=0.0,
                       started_at=started, prompt_hash=digest, prompt_form=form, label=self.label, format=fmt, reply=found.reply,
                       request_id=request, stop_reason="replayed")
        self.on_call(call)
        return Answer(Completion(found.reply, Usage(), request, 0.0, "replayed"), call)

    def _take(self, operator: str, digest: str) -> Recorded | None:
        """The reply for this request, taken off the list: the same operator's with the same prompt, else the
        same operator's first, else the first of unknown operator, else the first left of any: a search whose
        choices differ from the recording's (another operator drawn) still spends every paid reply."""
        mine = [r for r in self._left if r.operator == operator]
        found = next((r for r in mine if r.prompt_hash == digest), None) or (mine[0] if mine else None)
        found = found or next((r for r in self._left if not r.operator), None) or next(iter(self._left), None)
        if found is not None:
            self._left.remove(found)
        return found

    def _end(self, operator: str, fmt: str, messages: list[Message]) -> str:
        """Write the first unanswered prompt; the sentence the search stops with."""
        number = self._next_number
        path = write_prompt(self.prompts, number, operator, fmt, messages)
        return f"replay ended at call {self.already + self.served + 1} ({operator}): its prompt is in {path}"

    def note(self) -> str:
        """What the replay served, for the run's summary; "" before any call."""
        if not self.served and not self.ended:
            return ""
        changed = f", {self.changed} of them to a prompt that has changed since" if self.changed else ""
        if self.changed:
            changed += f" ({self.reshaped} in more than its figures)"
        return f"{self.served} recorded repl{'y' if self.served == 1 else 'ies'} served{changed}"
