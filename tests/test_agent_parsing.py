"""Reply parsing and SEARCH/REPLACE edits: tolerant to read, strict to apply."""
import pytest
from kernelevo.agent.edits import (
    EditError,
    apply_edits,
    closest_lines,
    incomplete_blocks,
    parse_edits,
)
from kernelevo.agent.replies import (
    candidate_source,
    code_blocks,
    parse_reply,
    split_thinking,
    why_no_candidate,
)

FILE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
"""

PARENT = """KERNEL = r'''
extern "C" __global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
'''
BLOCK = 256
"""


def test_thinking_is_split_from_the_code_and_kept():
    text, thinking = split_thinking("<think>try tiles of 64</think>Here:\n<think>and unroll</think>done")
    assert text == "Here:\ndone" and thinking == "try tiles of 64\n\nand unroll"
    text, thinking = split_thinking("<think>the reply was cut off here")
    assert text == "" and thinking == "the reply was cut off here"


def test_code_blocks_tolerate_tags_tildes_and_a_missing_closing_fence():
    blocks = code_blocks("a\n```Python title\nx = 1\n```\n~~~~cuda\n```\n__global__\n~~~~\n```py\ny = 2\n")
    assert [(b.language, b.text, b.closed) for b in blocks] == [
        ("python", "x = 1\n", True), ("cuda", "```\n__global__\n", True), ("py", "y = 2\n", False)]
    assert [b.line for b in blocks] == [2, 5, 9]


def test_candidate_is_the_last_python_block_defining_model_new():
    draft = FILE.replace("x * 2", "x * 3")
    reply = parse_reply(f"Draft:\n```python\n{draft}```\nFinal:\n```python\n{FILE}```\n```cuda\nint x;\n```")
    assert candidate_source(reply) == FILE


def test_mislabelled_fence_and_bare_file_still_give_the_candidate():
    assert candidate_source(parse_reply(f"```cpp\n{FILE}```")) == FILE
    assert candidate_source(parse_reply("<think>plan</think>\n" + FILE)) == FILE


@pytest.mark.parametrize("reply, reason", [
    ("<think>only thoughts</think>", "only reasoning"),
    ("I cannot help with that.", "no code block"),
    ("```python\nclass ModelNew(:\n```", "does not parse"),
    ("```python\nclass Model:\n    pass\n```", "no Python block defines"),
    ("```cuda\n__global__ void k() {}\n```", "none is a Python file"),
])
def test_no_candidate_is_an_outcome_with_a_reason(reply, reason):
    parsed = parse_reply(reply)
    assert candidate_source(parsed) is None
    assert reason in why_no_candidate(parsed)


def block(search: str, replace: str, marks: tuple[str, str, str] = ("<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE")) -> str:
    return f"{marks[0]}\n{search}{marks[1]}\n{replace}{marks[2]}\n"


def test_parse_is_tolerant_of_marker_length_spacing_and_fences():
    reply = ("```python\n" + block("BLOCK = 256\n", "BLOCK = 128\n", ("<<<<<<<SEARCH", "=========", ">>>>>>>  REPLACE"))
             + "```\ntext\n" + block("x\n", "", ("<<<<< search", "=====", ">>>>> replace")) + "<<<<<<< SEARCH\nlost\n")
    edits = parse_edits(reply)
    assert [(e.search, e.replace, e.number) for e in edits] == [("BLOCK = 256\n", "BLOCK = 128\n", 1), ("x\n", "", 2)]
    assert incomplete_blocks(reply) == 1


def test_exact_edit_applies():
    edits = parse_edits(block("BLOCK = 256\n", "BLOCK = 128\n"))
    assert apply_edits(PARENT, edits) == PARENT.replace("BLOCK = 256", "BLOCK = 128")


def test_whitespace_insensitive_match_keeps_the_parents_indentation():
    search = "  if (i < n)   y[i] = 2.0f * x[i];  \n"  # indented by 2, not 4, and with extra blanks
    replace = "  if (i < n) y[i] = 3.0f * x[i];\n"
    out = apply_edits(PARENT, parse_edits(block(search, replace)))
    assert "    if (i < n) y[i] = 3.0f * x[i];\n" in out and "2.0f" not in out


def test_failed_block_reports_closest_real_lines_and_others_still_apply():
    edits = parse_edits(block("    if (i <= n) y[i] = 2.0f * x[i];\n", "nothing\n") + block("BLOCK = 256\n", "BLOCK = 64\n"))
    with pytest.raises(EditError) as info:
        apply_edits(PARENT, edits)
    error = info.value
    assert error.applied == 1 and "BLOCK = 64" in error.text
    (failure,) = error.failures
    assert failure.problem == "no match" and failure.edit.number == 1
    assert failure.closest == "    if (i < n) y[i] = 2.0f * x[i];\n" and failure.line == 4
    assert "block 1: no match (closest at line 4)" in str(error)


def test_ambiguous_and_empty_blocks_fail():
    twice = "a = 1\nb = 2\na = 1\n"
    with pytest.raises(EditError) as info:
        apply_edits(twice, parse_edits(block("a = 1\n", "a = 9\n") + block("", "new\n")))
    assert [(f.problem, f.line) for f in info.value.failures] == [("ambiguous", 1), ("empty search", 0)]


def test_nothing_fuzzy_is_applied():
    # One character differs: a fuzzy matcher would apply this; the strict one must not.
    with pytest.raises(EditError):
        apply_edits(PARENT, parse_edits(block("BLOCK = 255\n", "BLOCK = 1\n")))


def test_closest_lines_window():
    text = "one\ntwo\nthree\nfour\n"
    assert closest_lines(text, "thre\nfour\n") == ("three\nfour\n", 3)
