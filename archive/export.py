"""Export the archive as JSON lines or Parquet, one row per kernel: usable as fine-tuning data.

Pure row building here (no SQL: store.export_rows reads); Parquet through pandas and pyarrow,
imported only when asked for. Nested values (parents, the profile summary, an import's claims, the
speedups' 95 % intervals [low, high]) are JSON text in Parquet, so every column has one plain type.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIELDS = ("kernel_id", "run_id", "task", "task_hash", "task_source", "source", "format", "operator", "parents",
          "generation", "island", "origin", "stepping_stone", "verdict", "reason", "message", "speedup_eager",
          "speedup_eager_ci", "speedup_compile", "speedup_compile_ci", "candidate_ms", "eager_ms", "device_name",
          "profile", "model", "cost_usd", "claims", "problem", "created_at")
FORMATS = ("jsonl", "parquet")


def profile_summary(profile: dict | None) -> dict | None:
    """The few numbers of a stored profile a reader of the data needs (the whole one stays in the archive)."""
    if not profile:
        return None
    top = (profile.get("candidate") or [{}])[0]
    sol = profile.get("sol") or {}
    used = next((r for r in profile.get("resources") or () if r["name"] in top.get("name", "")), {})
    ncu = (profile.get("ncu") or [{}])[0]
    return {"dominant_kernel": top.get("name"), "dominant_share": top.get("share"),
            "launches": sum(k.get("launches", 0) for k in profile.get("candidate") or ()),
            "registers": used.get("registers"), "spill_stores": used.get("spill_stores"),
            "bound": sol.get("bound"), "sol_pct": sol.get("candidate_pct"), "eager_sol_pct": sol.get("reference_pct"),
            "dram_pct": ncu.get("dram"), "occupancy_pct": ncu.get("occupancy")}


def rows(stored: list[dict]) -> list[dict[str, Any]]:
    """Export rows, in FIELDS order, from Archive.export_rows()."""
    out = []
    for r in stored:
        model = f"{r['provider']}:{r['model']}" if r.get("provider") else None
        out.append({"kernel_id": r["id"], "run_id": r["run_id"], "task": r["task_name"], "task_hash": r["task_hash"],
                    "task_source": r["task_source"], "source": r["source"], "format": r["format"],
                    "operator": r["operator"], "parents": list(r.get("parents") or []), "generation": r["generation"],
                    "island": r["island"], "origin": r["origin"], "stepping_stone": bool(r["stepping_stone"]),
                    "verdict": r.get("verdict"), "reason": r.get("reason"), "message": r.get("message"),
                    "speedup_eager": r.get("speedup_eager"), "speedup_eager_ci": r.get("speedup_eager_ci"),
                    "speedup_compile": r.get("speedup_compile"), "speedup_compile_ci": r.get("speedup_compile_ci"),
                    "candidate_ms": r.get("candidate_ms"), "eager_ms": r.get("eager_ms"),
                    "device_name": r.get("device_name"), "profile": profile_summary(r.get("profile")),
                    "model": model, "cost_usd": r.get("cost_usd"), "claims": r.get("claims"),
                    "problem": r.get("problem") or "", "created_at": r["created_at"]})
    return out


def write(data: list[dict], path: Path, fmt: str) -> None:
    """Write `data` (rows()) to `path` as JSON lines or Parquet."""
    if fmt == "jsonl":
        with open(path, "w", encoding="utf-8") as f:
            for row in data:
                f.write(json.dumps(row, sort_keys=False) + "\n")
        return
    import pandas as pd

    nested = ("parents", "profile", "claims", "speedup_eager_ci", "speedup_compile_ci")
    frame = pd.DataFrame([{k: (json.dumps(v) if k in nested and v is not None else v) for k, v in row.items()}
                          for row in data], columns=list(FIELDS))
    frame.to_parquet(path, index=False)
