"""Novelty gate and embedders, on real kernel sources; offline, CPU only."""
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from kernelevo.evolution import novelty
from kernelevo.evolution.novelty import HashingEmbedder, NoveltyGate

CANDIDATES = Path(__file__).resolve().parent.parent / "benchmarks" / "tasks" / "candidates"
SOFTMAX = (CANDIDATES / "row_softmax__nvrtc.py").read_text()
CUDA = SOFTMAX.split('r"""')[1].split('"""')[0]


def rename_in_cuda(source, mapping):
    cuda = source.split('r"""')[1].split('"""')[0]
    new = cuda
    for old, repl in mapping.items():
        new = re.sub(rf"\b{old}\b", repl, new)
    return source.replace(cuda, new)


def without_vec_paths(source):
    """The same kernel without its float4 paths: a genuinely different memory strategy."""
    pattern = re.compile(r"    if \(vec\) \{\n.*?\n    \} else \{\n(.*?)\n    \}\n", re.S)
    return pattern.sub(lambda m: m.group(1) + "\n", source)


@pytest.fixture(scope="module")
def gate():
    g = NoveltyGate(HashingEmbedder())
    g.add_source(1, SOFTMAX)
    g.add_source(2, (CANDIDATES / "layernorm__nvrtc.py").read_text())
    return g


def test_embedding_shape_and_norm():
    e = HashingEmbedder(dim=256)
    v = e.embed([SOFTMAX, "", "x = 1"])
    assert v.shape == (3, 256) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v[[0, 2]], axis=1), 1.0, atol=1e-5)
    assert not v[1].any()  # empty text: a zero row, not NaN
    assert e.name == "hashing-v1-256"
    assert isinstance(e, novelty.Embedder)


def test_comments_docstrings_and_layout_are_ignored():
    noisy = SOFTMAX.replace('"""One block per row', '"""A different docstring entirely. One block per row')
    noisy = noisy.replace("// Merge two", "// Combine two").replace("    x = x.contiguous()",
                                                                      "    x = x.contiguous()  # layout")
    noisy = noisy.replace("float mn = fmaxf(m, m2);", "float mn   =   fmaxf( m , m2 );")
    assert novelty.normalised(noisy) == novelty.normalised(SOFTMAX)
    # `//` is floor division in Python and a comment in C: the Python side keeps what follows it
    assert "rows" in novelty.normalised("n = a // 2; rows = n")


def test_exact_duplicate_is_never_novel(gate):
    noisy = SOFTMAX.replace("// Merge two", "// Combine two")
    seen = gate.check(noisy)
    assert (seen.novel, seen.copy, seen.nearest, seen.similarity) == (False, "copy", 1, 1.0)
    assert seen.problem() == "copy: the same code as kernel 1, comments and layout aside"


def test_renamed_copy_is_skipped_by_fingerprint(gate):
    renamed = rename_in_cuda(SOFTMAX, {"m": "run_max", "s": "run_sum", "inv": "rcp", "xr": "row_in"})
    seen = gate.check(renamed)
    assert (seen.novel, seen.copy, seen.nearest) == (False, "renamed_copy", 1)
    # the embedding alone agrees, without the structural fingerprint
    v = gate.embedder.embed([SOFTMAX, renamed])
    assert float(v[0] @ v[1]) > 0.98


@pytest.mark.parametrize("edit", [
    ("#define BLOCK 256", "#define BLOCK 128"),  # one constant: 0.998
    ("    x = x.contiguous()", "    x = x.contiguous().clone()"),  # one line of the Python side
])
def test_any_code_change_is_judged_however_similar(gate, edit):
    # a paid reply that changes code is never discarded: a run lost its winning idea (non-temporal
    # stores, similarity 0.981) to a similarity threshold; similarity is reported, not acted on
    changed = SOFTMAX.replace(*edit)
    assert changed != SOFTMAX
    seen = gate.check(changed)
    assert seen.novel and seen.nearest == 1 and 0.98 < seen.similarity < 1.0


def test_genuinely_different_kernels_pass(gate):
    seen = gate.check(without_vec_paths(SOFTMAX))
    assert seen.novel and seen.nearest == 1 and seen.similarity < 0.95
    for name in ("sum_reduction__nvrtc.py", "row_softmax__inline.py", "row_softmax__c.py"):
        seen = gate.check((CANDIDATES / name).read_text())
        assert seen.novel and seen.similarity < 0.8, name


def test_copies_of_unjudged_kernels_are_skipped_but_not_measured_against():
    g = NoveltyGate(HashingEmbedder())
    g.remember(7, SOFTMAX)
    assert g.check(SOFTMAX).copy == "copy"
    near = g.check(SOFTMAX.replace("#define BLOCK 256", "#define BLOCK 128"))
    assert near.novel and near.nearest is None and near.similarity == 0.0


def test_real_candidates_are_mutually_novel():
    e = HashingEmbedder()
    vectors = e.embed([p.read_text() for p in sorted(CANDIDATES.glob("*.py"))])
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, 0.0)
    assert sims.max() < 0.9


def test_gate_refuses_vectors_of_another_model():
    g = NoveltyGate(HashingEmbedder(dim=512))
    with pytest.raises(ValueError, match="not comparable"):
        g.add(1, np.ones(384, dtype=np.float32))
    assert g.check(SOFTMAX) == novelty.GateResult("", None, 0.0)  # empty gate: everything is novel


def test_hashing_is_stable_across_processes():
    here = HashingEmbedder().embed([SOFTMAX])[0]
    code = ("import json, sys; from kernelevo.evolution.novelty import HashingEmbedder; "
            "print(json.dumps(HashingEmbedder().embed([sys.stdin.read()])[0].tolist()))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # a different salt for str hash()
    out = subprocess.run([sys.executable, "-c", code], input=SOFTMAX, capture_output=True, text=True,
                         env=env, timeout=60, check=True)
    there = np.asarray(json.loads(out.stdout), dtype=np.float32)
    assert np.array_equal(here, there)


def test_default_embedder_falls_back_when_no_sentence_model(monkeypatch):
    e = novelty.default_embedder(None)
    assert isinstance(e, HashingEmbedder) and "no sentence model" in e.why
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # not installed
    e = novelty.default_embedder()
    assert isinstance(e, HashingEmbedder) and "install -e" in e.why and "[embed]'" in e.why  # this checkout's extra


def test_sentence_model_not_in_the_cache_falls_back(monkeypatch, tmp_path):
    pytest.importorskip("sentence_transformers")  # the `embed` extra; CI does not install it
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache: nothing may be downloaded
    e = novelty.default_embedder("sentence-transformers/all-MiniLM-L6-v2")
    assert isinstance(e, HashingEmbedder) and "unavailable offline" in e.why


def test_sentence_embedder_loads_offline_only(monkeypatch):
    # CI has no `embed` extra: a stand-in module shows what is asked of sentence-transformers
    seen = {}

    class FakeModel:
        def __init__(self, name, local_files_only=False):
            seen.update(name=name, local=local_files_only, offline=os.environ.get("HF_HUB_OFFLINE"))
            if name == "not-cached":
                raise OSError("not in the local cache")

        def get_sentence_embedding_dimension(self):
            return 4

        def encode(self, texts, normalize_embeddings, convert_to_numpy, show_progress_bar):
            return np.tile(np.array([0.5, 0.5, 0.5, 0.5]), (len(texts), 1))

    import importlib.machinery

    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = FakeModel
    module.__spec__ = importlib.machinery.ModuleSpec("sentence_transformers", None)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    e = novelty.default_embedder("tiny")
    assert isinstance(e, novelty.SentenceEmbedder) and e.name == "st:tiny" and e.dim == 4
    assert seen == {"name": "tiny", "local": True, "offline": "1"}
    assert "HF_HUB_OFFLINE" not in os.environ  # restored after loading
    assert e.embed(["a", "b"]).shape == (2, 4)
    fallback = novelty.default_embedder("not-cached")
    assert isinstance(fallback, HashingEmbedder) and "OSError" in fallback.why
