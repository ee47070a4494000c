"""Kernel source held in a candidate's string literals (CUDA C, C, C++): where each literal sits in
the file, and the patterns the static checks look for in the code a candidate compiles rather than
runs. Precision has none: a half type or a TF32 instruction in a kernel can be honest (an unused
dtype branch, error-compensated TF32), and the task dtype's tolerance judges what the kernel computes.

Patterns are matched with C comments blanked out, so prose about a construct is not the construct.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Literal:
    text: str   # the string's value with C comments blanked (newlines kept, offsets unchanged)
    first: int  # file line of the opening quote
    last: int   # file line of the closing quote


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def literals(tree: ast.Module) -> list[Literal]:
    """Every string constant except docstrings (prose, never compiled)."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            docstrings.add(id(body[0].value))
    return [Literal(_COMMENT.sub(_blank, node.value), node.lineno, node.end_lineno or node.lineno)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def _line(lit: Literal, lines: list[str], offset: int, text: str) -> int:
    # A raw triple-quoted literal maps offset to line exactly; escapes and implicit concatenation
    # do not, so fall back to the first line of the literal that shows the matched text.
    guess = lit.first + lit.text.count("\n", 0, offset)
    if guess <= lit.last and text in lines[guess - 1]:
        return guess
    for n in range(lit.first, lit.last + 1):
        if text in lines[n - 1]:
            return n
    return min(guess, lit.last)


def find(lits: list[Literal], lines: list[str], pattern: re.Pattern) -> list[tuple[int, str]]:
    """(file line, matched text) for every match of `pattern` in the literals."""
    return [(_line(lit, lines, m.start(), m.group(0)), m.group(0))
            for lit in lits for m in pattern.finditer(lit.text)]


def _any(*alternatives: str) -> re.Pattern:
    return re.compile("|".join(alternatives))


# Work queued on a stream the caller's stream never waits for finishes after the timer stops.
SIDE_STREAM = _any(r"\bcu(?:da)?StreamCreate\w*", r"\bcudaStreamPerThread\b", r"\bcudaStreamNonBlocking\b",
                   r"\bcu(?:da)?LaunchHostFunc\b", r"\bcudaStreamAddCallback\b", r"\bgetStreamFromPool\b",
                   r"\bsetCurrentCUDAStream\b")
STREAM_JOIN = _any(r"\bcu(?:da)?StreamSynchronize\b", r"\bcu(?:da)?StreamWaitEvent\b", r"\bcudaDeviceSynchronize\b",
                   r"\bcuCtxSynchronize\b", r"\.synchronize\s*\(")
# Threads and processes outlive the call; OpenMP regions join before the function returns.
THREADS = _any(r"\bstd::(?:j?thread|async)\b", r"\bpthread_create\b", r"\bv?fork\s*\(", r"\bsystem\s*\(",
               r"\bpopen\s*\(", r"\bexec[lv]p?e?\s*\(", r"\bposix_spawnp?\b")
# read()/write() on descriptors are too common a word to flag; opening one is not.
IO = _any(r"\bf?open\s*\(", r"\bfreopen\s*\(", r"\b(?:secure_)?getenv\s*\(", r"\b(?:set|put)env\s*\(",
          r"\bsocket\s*\(", r"\b(?:std::)?[io]?fstream\b", r"\bunlink\s*\(", r"\btorch::(?:save|load)\s*\(")
INTROSPECTION = _any(r"\bdl(?:open|sym)\s*\(", r"\bPy(?:Import|Run|Eval|Frame|Sys)_\w+",
                     r"\bPyObject_(?:Set|Del)Attr\w*", r"\bpy(?:bind11)?::module_?::import\b",
                     r"\bpy(?:bind11)?::(?:eval|exec|globals)\b")
