"""Embeddings: one vector per kernel or task and embedding model, with the hash of what was
embedded, and the tasks most like a given vector."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..rows import OWNERS, check_choice, dumps, from_blob, rank_cosine, to_blob
from .connection import Store

if TYPE_CHECKING:
    import numpy


class Embeddings:
    """Vectors of kernels and tasks: one part of the Archive, over its connection `db`."""

    def __init__(self, db: Store) -> None:
        self._db = db

    # ---- embeddings ------------------------------------------------------------------------

    def put_embedding(self, owner: str, owner_id: int, model: str,
                      vector: numpy.ndarray | Sequence[float], source_hash: str) -> None:
        """Store (or replace) the vector of a kernel or task under one embedding model."""
        check_choice(owner, OWNERS, "embedding owner")
        blob, dim = to_blob(vector)
        self._db.write("INSERT INTO embeddings (owner, owner_id, model, dim, source_hash, vector, created_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(owner, owner_id, model) DO UPDATE SET "
                       "dim = excluded.dim, source_hash = excluded.source_hash, vector = excluded.vector, "
                       "created_at = excluded.created_at",
                       (owner, owner_id, model, dim, source_hash, blob, time.time()))

    def embeddings(self, owner: str, model: str,
                   owner_ids: Sequence[int] | None = None) -> list[tuple[int, numpy.ndarray]]:
        """(owner_id, float32 vector) pairs, by owner_id; all of the owner kind when owner_ids is None."""
        rows = self._db.read("SELECT owner_id, dim, vector FROM embeddings WHERE owner = :owner AND model = :model "
                             "AND (:all OR owner_id IN (SELECT value FROM json_each(:ids))) ORDER BY owner_id",
                             {"owner": owner, "model": model, "all": owner_ids is None,
                              "ids": dumps([int(i) for i in owner_ids or ()])})
        return [(r["owner_id"], from_blob(r["vector"], r["dim"])) for r in rows]

    def embedding_hashes(self, owner: str, model: str) -> dict[int, str]:
        """owner_id -> source_hash of what was embedded, to find vectors that are missing or stale."""
        rows = self._db.read("SELECT owner_id, source_hash FROM embeddings WHERE owner = ? AND model = ?",
                             (owner, model))
        return {r["owner_id"]: r["source_hash"] for r in rows}

    def similar_tasks(self, vector: numpy.ndarray | Sequence[float], model: str,
                      exclude_task_id: int | None = None, limit: int = 5) -> list[tuple[int, float]]:
        """(task_id, cosine similarity) of stored task embeddings, most similar first."""
        items = [(i, v) for i, v in self.embeddings("task", model) if i != exclude_task_id]
        return rank_cosine(vector, items, limit)
