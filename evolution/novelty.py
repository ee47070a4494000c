"""Novelty: embed kernel sources and skip LLM outputs that are copies of known kernels.

Two embedders behind one protocol: `HashingEmbedder`, built in and offline (hashed n-grams of code
tokens), and `SentenceEmbedder`, a sentence-transformers model used only when that package is
installed and the model is already in the local cache (it never downloads).
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kernelevo.config import DEFAULT_SENTENCE_MODEL

from .niches import code_parts

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"0[xX][0-9a-fA-F]+[uUlL]*|\d+\.?\d*(?:[eE][+-]?\d+)?[fFuUlL]*|\.\d+(?:[eE][+-]?\d+)?[fF]?"
                    r"|[A-Za-z_]\w*|<<<|>>>|<<=|>>=|->|::|\+\+|--|&&|\|\||\*\*|//|[<>=!+\-*/%&|^]=?|[^\s\w]")

# Identifiers that mean the same in every kernel: the structural channel keeps them as written
# and renames all others by order of first appearance, so that renaming a variable changes
# nothing there while swapping expf for __expf, or float for float4, does.
_KEEP = set("""
auto bool break case char class const constexpr continue default do double else enum extern float for goto if
inline int long namespace operator private public register restrict return short signed sizeof static
static_cast reinterpret_cast const_cast struct switch template this typedef typename union unsigned using
void volatile while true false nullptr size_t int8_t uint8_t int16_t uint16_t int32_t uint32_t int64_t
uint64_t uintptr_t half float2 float4 double2 int2 int4 uint2 uint4 char4 uchar4 short2 half2 nv_bfloat16
nv_bfloat162 threadIdx blockIdx blockDim gridDim warpSize dim3 extern_shared
expf exp2f logf log2f sqrtf rsqrtf powf fmaxf fminf fabsf tanhf erff erfcf sinf cosf floorf ceilf roundf
fmaf exp log sqrt rsqrt pow fmax fmin fabs tanh erf floor ceil min max abs make_float2 make_float4
make_int2 make_int4 atomicAdd atomicMax atomicMin atomicCAS atomicExch wmma mma load_matrix_sync
store_matrix_sync mma_sync fill_fragment fragment row_major col_major matrix_a matrix_b accumulator
pragma unroll define include omp parallel simd ifdef ifndef endif
def lambda None True False and or not in is return if elif else for while with as import from class
self super yield pass raise assert try except finally global nonlocal print len range int float tuple
list dict torch nn F functional Module forward cuda contiguous empty empty_like zeros shape numel
data_ptr dtype device runtime load_cuda load_c load_inline ModelNew math
""".split())
_DIRECTIVE = re.compile(r"^__\w+__$|^__\w+$|^_mm\w*$|^cp_async\w*$")  # __shared__, __syncthreads, __expf...


def code_tokens(source: str) -> list[str]:
    """Tokens of a candidate with comments, docstrings and layout dropped (Python and C parts)."""
    python, c_parts, _ = code_parts(source)
    tokens = _TOKEN.findall(python)
    for part in c_parts:
        tokens.append("<c>")
        tokens.extend(_TOKEN.findall(part))
    return tokens


def structural(tokens: list[str]) -> list[str]:
    """Tokens with user-chosen identifiers renamed v0, v1, ... in order of first appearance.

    Each part (Python, then each C string, separated by "<c>") has its own names, as C and
    Python scopes do: renaming a C variable must not shift the Python part's numbering."""
    names: dict[str, str] = {}
    out = []
    for t in tokens:
        if t == "<c>":
            names = {}
        elif (t[0].isalpha() or t[0] == "_") and t not in _KEEP and not _DIRECTIVE.match(t):
            t = names.setdefault(t, f"v{len(names)}")
        out.append(t)
    return out


def normalised(source: str) -> str:
    """One line of tokens: equal for sources that differ only in comments, docstrings, layout."""
    return " ".join(code_tokens(source))


def fingerprints(source: str) -> tuple[str, str]:
    """(exact, structural) digests: same code, and same code up to a consistent renaming."""
    tokens = code_tokens(source)
    return _digest(" ".join(tokens)), _digest(" ".join(structural(tokens)))


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> "numpy.ndarray":  # noqa: F821  (numpy imported lazily)
        """float32 array (len(texts), dim), rows L2-normalised."""
        ...


class HashingEmbedder:
    """Offline code embedder: signed feature hashing of token n-grams (1 to 3) in two channels.

    - structural channel (weight 1.0): identifiers renamed by first appearance (`structural`), so
      a renamed variable leaves it unchanged;
    - lexical channel (weight 0.5): the tokens as written.
    Counts are square-rooted so that long repeated runs (unrolled code) do not dominate. Hashes
    are blake2b, stable across processes and machines (Python's hash() is salted per process),
    so stored vectors stay comparable with new ones."""

    version = "hashing-v1"
    WEIGHTS = {"s": 1.0, "l": 0.5}

    def __init__(self, dim: int = 512, why: str = "built-in"):
        if dim < 8:
            raise ValueError("dim must be at least 8")
        self.dim = dim
        self.name = f"{self.version}-{dim}"
        self.why = why  # how this embedder was chosen, for the run's log

    def features(self, source: str) -> dict[str, float]:
        tokens = code_tokens(source)
        counts: dict[str, float] = {}
        for channel, stream in (("s", structural(tokens)), ("l", tokens)):
            for n in (1, 2, 3):
                for i in range(len(stream) - n + 1):
                    key = f"{channel}{n}:" + " ".join(stream[i:i + n])
                    counts[key] = counts.get(key, 0.0) + 1.0
        return {k: self.WEIGHTS[k[0]] * v ** 0.5 for k, v in counts.items()}

    def embed(self, texts: list[str]):
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for row, text in enumerate(texts):
            for key, value in self.features(text).items():
                h = int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
                out[row, h % self.dim] += value if (h >> 63) & 1 else -value
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
        return out.astype(np.float32)


class SentenceEmbedder:
    """A sentence-transformers model from the local cache only; raises if unavailable."""

    def __init__(self, model_name: str):
        import sentence_transformers  # optional dependency: ImportError when absent

        previous = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")  # never fetch, even metadata
        try:
            self._model = sentence_transformers.SentenceTransformer(model_name, local_files_only=True)
        finally:
            for key, value in previous.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        self.dim = int(self._model.get_sentence_embedding_dimension())
        self.name = f"st:{model_name}"
        self.why = f"sentence-transformers model {model_name} from the local cache"

    def embed(self, texts: list[str]):
        import numpy as np

        vectors = self._model.encode([normalised(t) for t in texts], normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)


def default_embedder(model_name: str | None = DEFAULT_SENTENCE_MODEL) -> Embedder:
    """A sentence-transformers model when the `embed` extra is installed and the model is in the
    local cache (nothing is downloaded), else HashingEmbedder; `.why` says which and why."""
    import importlib.util

    if not model_name:
        return HashingEmbedder(why="built-in hashing embedder (no sentence model configured)")
    try:
        installed = importlib.util.find_spec("sentence_transformers") is not None
    except (ValueError, AttributeError):  # a module entry without a spec (a stub): not usable
        installed = False
    if not installed:
        from kernelevo.host import install_extra

        return HashingEmbedder(why=f"built-in hashing embedder (sentence-transformers is not installed: "
                                   f"{install_extra('embed')})")
    try:
        return SentenceEmbedder(model_name)
    except Exception as exc:  # model not cached, broken install: all mean "fall back"
        why = (f"built-in hashing embedder (sentence model {model_name} unavailable offline: "
               f"{type(exc).__name__}: {str(exc)[:120]})")
        log.info(why)
        return HashingEmbedder(why=why)


@dataclass(frozen=True)
class GateResult:
    """What the gate found for one candidate. `copy` is "" (judge it), "copy" (the same code as
    kernel `nearest` once comments, docstrings and layout are dropped) or "renamed_copy" (the same
    code up to a consistent renaming of identifiers). `similarity` is the cosine to the nearest
    correct kernel: information for steering, never a reason to discard."""

    copy: str
    nearest: int | None
    similarity: float

    @property
    def novel(self) -> bool:
        return not self.copy

    def problem(self) -> str:
        """The stored reason a copy was not judged."""
        what = "comments and layout aside" if self.copy == "copy" else "up to renamed identifiers"
        return f"{self.copy}: the same code as kernel {self.nearest}, {what}"


class NoveltyGate:
    """Decides whether an LLM's candidate is worth judging: every reply that changes code is.

    Discarded are only (1) exact copies of a known kernel once comments, docstrings and layout are
    dropped and (2) the same code up to a consistent renaming of identifiers, both by fingerprint.
    A reply costs 30-120 s and cents to dollars, judging it about two seconds: a one-line change
    can be the winning idea (a run lost non-temporal stores to a 0.98 similarity threshold, and
    the crossover that carried them was that run's best kernel), so similarity never discards.

    Similarity to the known correct kernels (cosine of the embeddings) is still measured and
    returned, for the record and for steering. Measured with the hashing embedder on
    benchmarks/tasks/candidates: in the ~90-line row_softmax kernel a changed BLOCK constant
    scores 0.998, renaming variables 0.98 to 0.998, replacing expf by __expf at ten sites 0.97,
    dropping the float4 paths 0.88, and different kernels stay below 0.75.
    """

    def __init__(self, embedder: Embedder):
        self.embedder = embedder
        self._ids: list[int] = []
        self._rows: list = []
        self._matrix = None  # stacked rows, rebuilt lazily after adds
        self._exact: dict[str, int] = {}
        self._structure: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, kernel_id: int, vector, source: str | None = None) -> None:
        """Remember a known kernel by its vector (e.g. stored in the archive) and, if given, its source."""
        import numpy as np

        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        if v.shape[0] != self.embedder.dim:
            raise ValueError(f"vector of dim {v.shape[0]} for an embedder of dim {self.embedder.dim} "
                             f"({self.embedder.name}): embeddings of another model are not comparable")
        norm = float(np.linalg.norm(v))
        self._ids.append(kernel_id)
        self._rows.append(v / norm if norm > 0 else v)
        self._matrix = None
        if source is not None:
            exact, struct = fingerprints(source)
            self._exact.setdefault(exact, kernel_id)
            self._structure.setdefault(struct, kernel_id)

    def remember(self, kernel_id: int, source: str) -> None:
        """Know a kernel by its fingerprints only: its copies are skipped, but it is not measured
        against. For kernels not (yet) judged correct, whose similarity steers nothing."""
        exact, struct = fingerprints(source)
        self._exact.setdefault(exact, kernel_id)
        self._structure.setdefault(struct, kernel_id)

    def add_source(self, kernel_id: int, source: str):
        """Embed and remember a kernel; returns its vector (for the archive to store)."""
        vector = self.embedder.embed([source])[0]
        self.add(kernel_id, vector, source)
        return vector

    def nearest(self, vector) -> tuple[int | None, float]:
        import numpy as np

        if not self._ids:
            return None, 0.0
        if self._matrix is None:
            self._matrix = np.stack(self._rows)
        sims = self._matrix @ np.asarray(vector, dtype=np.float32).reshape(-1)
        i = int(np.argmax(sims))
        return self._ids[i], float(sims[i])

    def check(self, source: str) -> GateResult:
        """Copies by fingerprint; otherwise novel, with the nearest correct kernel and its similarity."""
        exact, struct = fingerprints(source)
        for kind, table, key in (("copy", self._exact, exact), ("renamed_copy", self._structure, struct)):
            if key in table:
                return GateResult(kind, table[key], 1.0)
        nearest, sim = self.nearest(self.embedder.embed([source])[0]) if self._ids else (None, 0.0)
        return GateResult("", nearest, sim)
