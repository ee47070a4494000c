"""The archive store: the one place in kernelevo that speaks SQL. Every read and write of the
archive file goes through it.

One SQLite file (WAL, foreign keys on) holds every task, run, kernel, evaluation, LLM call,
reflection, embedding and event. Read methods return records (archive/records.py), JSON columns decoded:
a kernel is a KernelRecord (kernels, kernel, lineage, best_kernel, stepping_stones), an evaluation an
EvaluationRecord (evaluation, final_evaluations, remeasurements, a kernel's `evaluations`). export_rows alone gives
dicts: each is one JSON line of an export.

`Archive` is made of one part per thing stored, each a mixin over `connection.Store` (opening,
migrations, and the four doors to the connection: `_write`, `_tx`, `_read`, `_one`):
runs.py: tasks, runs and their events; kernels.py: kernels, evaluations, profiles, stepping stones,
lineage and reflections; embeddings.py: vectors of kernels and tasks; calls.py: LLM calls and the
counters derived from a run's rows; benches.py: benches. The parts import only connection.py, never
each other or this package, so nothing imports in a circle; where one part needs another's reading
(call_yield counts events, stepping_stones looks a task up by hash), it calls it through `self`.
"""
from .benches import BenchesMixin
from .calls import CallsMixin
from .connection import BUSY_TIMEOUT_MS, Store
from .embeddings import EmbeddingsMixin
from .kernels import KernelsMixin
from .runs import RunsMixin

__all__ = ["Archive", "BUSY_TIMEOUT_MS"]


class Archive(RunsMixin, KernelsMixin, EmbeddingsMixin, CallsMixin, BenchesMixin, Store):
    """An open archive file. Use `Archive.open(path)` or `Archive.open_readonly(path)`."""
