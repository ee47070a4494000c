"""Novelty: embed kernel sources and skip LLM outputs that are near-duplicates of known kernels.

Two embedders behind one protocol: `HashingEmbedder`, built in and offline (hashed n-grams of code
tokens), and `SentenceEmbedder`, a sentence-transformers model used only when that package is
installed and the model is already in the local cache (it never downloads).
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
from typing import Protocol, runtime_checkable

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


def default_embedder(model_name: str | None = None) -> Embedder:
    """The sentence model if asked for and available offline, else HashingEmbedder; `.why` says which."""
    if not model_name:
        return HashingEmbedder(why="built-in hashing embedder (no sentence model configured)")
    try:
        return SentenceEmbedder(model_name)
    except Exception as exc:  # ImportError, model not cached, broken install: all mean "fall back"
        why = f"sentence model {model_name} unavailable ({type(exc).__name__}: {str(exc)[:120]}); using hashing"
        log.info(why)
        return HashingEmbedder(why=why)


class NoveltyGate:
    """Decides whether an LLM's candidate is new enough to be judged.

    Not novel: (1) an exact duplicate of a known kernel once comments, docstrings and layout are
    dropped; (2) the same code up to a consistent renaming of identifiers (both are checked by
    fingerprint, whatever the threshold); (3) cosine similarity >= `threshold` to a known kernel.

    Threshold 0.98, measured with the hashing embedder on benchmarks/tasks/candidates (see
    tests/test_evolution_novelty.py): in the ~90-line row_softmax kernel file a changed BLOCK
    constant scores 0.998, one removed `#pragma unroll` 0.999, renaming one to four variables
    0.998 to 0.98 (renames are caught exactly by the fingerprint anyway); replacing expf by
    __expf at its ten call sites scores 0.97, dropping the float4 paths 0.88, and different
    kernels (other tasks, or the same kernel in another format) stay below 0.75. So at 0.98 an
    LLM output that changed about one line of a known kernel counts as a near-duplicate, while an
    edit at several sites passes. The LLM was paid for an idea, and a lone constant is what the
    tune operator explores systematically and for free: a changed BLOCK constant IS a
    meaningful variant for tune, so the loop does not send tune's outputs through this gate
    (tune dedupes by exact source). Cosine is size-relative: in a kernel three times longer, the
    same edit scores closer to 1. The numbers are this embedder's; a sentence model has its own
    scale, so pass a threshold measured for it.
    """

    def __init__(self, embedder: Embedder, threshold: float = 0.98):
        self.embedder = embedder
        self.threshold = threshold
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
        """Know a kernel by its fingerprints only: exact and renamed copies are blocked, near ones
        pass. For kernels not (yet) judged correct: a small edit of a failed kernel is what a fix
        looks like, and one of a kernel still being judged may be the fix of its failure."""
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

    def check(self, source: str) -> tuple[bool, int | None, float]:
        """(novel?, nearest known kernel id, its similarity); duplicates report similarity 1.0."""
        exact, struct = fingerprints(source)
        for table, key in ((self._exact, exact), (self._structure, struct)):
            if key in table:
                return False, table[key], 1.0
        nearest, sim = self.nearest(self.embedder.embed([source])[0])
        return (nearest is None or sim < self.threshold), nearest, sim
