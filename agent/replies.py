"""Turning a model's reply into text parts: reasoning, fenced code, and the candidate source.

Parsing is tolerant (models forget closing fences, wrap files in the wrong language tag, or send
a bare file), while what counts as a candidate stays strict: a Python source that defines
`ModelNew`. A reply without one is an outcome the caller records, not an exception.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# <think>...</think> (DeepSeek-R1, Qwen) and <thinking>...</thinking>; an unclosed tag runs to the end.
_THINK = re.compile(r"<(think|thinking)>(.*?)(?:</\1>|\Z)", re.S | re.I)
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.M)
_PYTHON_TAGS = {"", "python", "py", "python3"}


@dataclass(frozen=True)
class CodeBlock:
    language: str  # the fence's info word, lower case ("" when none)
    text: str
    line: int  # 1-based line of the opening fence in the reply
    closed: bool  # False when the reply ended inside the block


@dataclass(frozen=True)
class Reply:
    text: str  # the reply without its reasoning sections
    thinking: str  # the reasoning sections, in order, joined by blank lines
    blocks: tuple[CodeBlock, ...]


def split_thinking(text: str) -> tuple[str, str]:
    """(visible text, reasoning) of a reply."""
    parts = [m.group(2).strip() for m in _THINK.finditer(text)]
    return _THINK.sub("", text).strip(), "\n\n".join(p for p in parts if p)


def code_blocks(text: str) -> list[CodeBlock]:
    """Fenced blocks (``` or ~~~, three or more) in order; a closing fence must match the opening one."""
    blocks, pos = [], 0
    while True:
        opening = _FENCE.search(text, pos)
        if opening is None:
            return blocks
        fence = opening.group("fence")
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        body_start = opening.end() + 1
        end = closing.search(text, body_start)
        body = text[body_start:end.start() if end else len(text)]
        language = (opening.group("info").split() or [""])[0].lower()
        blocks.append(CodeBlock(language, body.rstrip("\n") + "\n" if body.strip() else "",
                                text.count("\n", 0, opening.start()) + 1, end is not None))
        if end is None:
            return blocks
        pos = end.end()


def parse_reply(text: str) -> Reply:
    visible, thinking = split_thinking(text)
    return Reply(visible, thinking, tuple(code_blocks(visible)))


def defines_model_new(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def candidate_source(reply: Reply) -> str | None:
    """The Python source of the candidate in a reply, or None.

    Preferred: the last Python block that defines ModelNew (models often show a draft first, then
    the final file). Else, for a reply that is a bare file, the whole visible text.
    """
    defining = [b for b in reply.blocks if b.language in _PYTHON_TAGS and defines_model_new(b.text)]
    if not defining:
        defining = [b for b in reply.blocks if defines_model_new(b.text)]  # a mislabelled fence
    if defining:
        return defining[-1].text
    if not reply.blocks and defines_model_new(reply.text):
        return reply.text.rstrip("\n") + "\n"
    return None


def why_no_candidate(reply: Reply) -> str:
    """One line for the model and the archive: why this reply gave no candidate."""
    if not reply.text and reply.thinking:
        return "the reply held only reasoning, no code"
    python = [b for b in reply.blocks if b.language in _PYTHON_TAGS]
    for block in python:
        try:
            ast.parse(block.text)
        except SyntaxError as exc:
            return f"the Python block at reply line {block.line} does not parse: {exc.msg} (its line {exc.lineno})"
    if python:
        return "no Python block defines `class ModelNew`"
    if reply.blocks:
        return "the reply has code blocks, but none is a Python file defining `class ModelNew`"
    return "the reply has no code block"


# Where a reply's prose ends: its first fenced block or SEARCH/REPLACE block.
_CODE_START = re.compile(r"^[ \t]*(?:`{3,}|~{3,}|<{5,}[ \t]*SEARCH)", re.M)
# The line the prompts ask for, "Idea: ...", however the model decorated it.
_IDEA = re.compile(r"^[ \t>*_#-]*idea[ \t*_]*:[ \t*_]*(?P<idea>\S.*)$", re.I | re.M)
ACCOUNT_CHARS = 3000  # an account is a few paragraphs; a longer preamble is cut here
IDEA_CHARS = 220


def account_of(text: str) -> str:
    """The model's own account of its kernel: the reply's prose before its first code or edit block."""
    end = _CODE_START.search(text)
    prose = text[:end.start() if end else len(text)].strip()
    if len(prose) <= ACCOUNT_CHARS:
        return prose
    idea = _IDEA.search(prose)  # a long analysis ends in its Idea: line, what the later prompts name the kernel by
    if idea is None or idea.end() <= ACCOUNT_CHARS:
        return prose[:ACCOUNT_CHARS].rstrip() + " [...]"
    line = idea.group(0).strip()[:2 * IDEA_CHARS]  # idea_of cuts it to IDEA_CHARS again, at a sentence
    return prose[:min(idea.start(), ACCOUNT_CHARS)].rstrip() + f" [...]\n{line}"


def _plain_markdown(text: str) -> str:
    """Markdown's code and emphasis marks taken off the words they wrap; every other `*` and `_` kept
    (`x * rms * w`, `silu_gate`): the model's words come back as written."""
    text = re.sub(r"`([^`\n]*)`", r"\1", text)
    text = re.sub(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", r"\2", text)
    return re.sub(r"(?<![\w*])([*_])(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*])", r"\2", text)


def idea_of(account: str) -> str:
    """One sentence for prompts that list kernels: the account's `Idea:` line, else its first sentence."""
    found = _IDEA.search(account)
    text = found.group("idea") if found else account
    text = re.sub(r"^[ \t]*#{1,6}[^\n]*\n", "", text.strip()) if not found else text  # a leading heading
    text = _plain_markdown(text).strip()
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z(])|\n[ \t]*\n", text, maxsplit=1)[0]
    sentence = " ".join(sentence.split())
    return sentence if len(sentence) <= IDEA_CHARS else sentence[:IDEA_CHARS - 3].rstrip() + "..."
