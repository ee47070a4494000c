"""The archive's schema as named migrations: data only, applied in order by archive/store/connection.py.

A migration, once released, never changes: a new need is a new (name, sql) pair appended at the
end, so an archive written by any earlier kernelevo upgrades in place. Each one runs inside a
single transaction together with the row that records it in `migrations`.
"""
from __future__ import annotations

_INITIAL = """
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY,
    source_hash TEXT UNIQUE NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    task_id INTEGER NOT NULL REFERENCES tasks(id),
    created_at REAL NOT NULL,
    config TEXT NOT NULL DEFAULT '{}',
    seed INTEGER,
    device TEXT NOT NULL DEFAULT '',
    gpu_name TEXT NOT NULL DEFAULT '',
    torch_version TEXT NOT NULL DEFAULT '',
    cuda_version TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'finished', 'stopped', 'budget', 'failed')),
    stop_reason TEXT,
    finished_at REAL
);
CREATE INDEX runs_by_task ON runs(task_id);

CREATE TABLE llm_calls (
    id INTEGER PRIMARY KEY,
    run_id TEXT REFERENCES runs(id),
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    operator TEXT NOT NULL DEFAULT '',
    outcome TEXT NOT NULL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL,  -- NULL: price unknown; never stored as 0
    latency_s REAL NOT NULL DEFAULT 0,
    request_id TEXT NOT NULL DEFAULT '',
    started_at REAL NOT NULL DEFAULT 0,
    prompt_hash TEXT NOT NULL DEFAULT '',
    reply TEXT NOT NULL DEFAULT '',
    stop_reason TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE INDEX llm_calls_by_run ON llm_calls(run_id);

CREATE TABLE kernels (
    id INTEGER PRIMARY KEY,
    task_id INTEGER NOT NULL REFERENCES tasks(id),
    run_id TEXT REFERENCES runs(id),  -- NULL for imported kernels
    source TEXT NOT NULL DEFAULT '',  -- '' when the operator produced no candidate (see problem)
    source_hash TEXT NOT NULL DEFAULT '',
    format TEXT NOT NULL DEFAULT '',
    operator TEXT NOT NULL DEFAULT '',
    llm_call_id INTEGER REFERENCES llm_calls(id),
    generation INTEGER NOT NULL DEFAULT 0,
    island INTEGER NOT NULL DEFAULT 0,
    origin TEXT NOT NULL DEFAULT 'run' CHECK (origin IN ('run', 'import', 'seed')),
    stepping_stone INTEGER NOT NULL DEFAULT 0 CHECK (stepping_stone IN (0, 1)),
    stone_reason TEXT NOT NULL DEFAULT '',
    niche TEXT NOT NULL DEFAULT '',
    descriptors TEXT,  -- JSON
    thinking TEXT NOT NULL DEFAULT '',
    problem TEXT NOT NULL DEFAULT '',
    claims TEXT,  -- JSON: numbers an imported source claimed, kept apart from our own measurements
    created_at REAL NOT NULL
);
CREATE INDEX kernels_by_run ON kernels(run_id);
CREATE INDEX kernels_by_task ON kernels(task_id);
CREATE INDEX kernels_by_hash ON kernels(source_hash);
CREATE INDEX kernels_stones ON kernels(task_id) WHERE stepping_stone = 1;

CREATE TABLE kernel_parents (
    kernel_id INTEGER NOT NULL REFERENCES kernels(id),
    parent_id INTEGER NOT NULL REFERENCES kernels(id),
    position INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kernel_id, parent_id)
);
CREATE INDEX kernel_parents_by_parent ON kernel_parents(parent_id);

CREATE TABLE evaluations (
    id INTEGER PRIMARY KEY,
    kernel_id INTEGER NOT NULL REFERENCES kernels(id),
    run_id TEXT REFERENCES runs(id),
    purpose TEXT NOT NULL DEFAULT 'search'
        CHECK (purpose IN ('search', 'final', 'rejudge', 'import')),
    verdict TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT '',
    speedup_eager REAL,
    speedup_eager_ci REAL,
    speedup_compile REAL,
    candidate_ms REAL,
    eager_ms REAL,
    compiled_ms REAL,
    device TEXT NOT NULL DEFAULT '',
    device_name TEXT NOT NULL DEFAULT '',
    torch_version TEXT NOT NULL DEFAULT '',
    build_s REAL,
    device_s REAL,
    wall_s REAL,
    data TEXT NOT NULL,  -- JSON: Evaluation.to_dict(), the whole verdict
    profile TEXT,  -- JSON
    created_at REAL NOT NULL
);
CREATE INDEX evaluations_by_kernel ON evaluations(kernel_id, purpose);
CREATE INDEX evaluations_by_run ON evaluations(run_id, purpose);

CREATE TABLE reflections (
    id INTEGER PRIMARY KEY,
    run_id TEXT REFERENCES runs(id),
    kernel_id INTEGER REFERENCES kernels(id),  -- the kernel written after the analysis
    llm_call_id INTEGER REFERENCES llm_calls(id),
    analysis TEXT NOT NULL DEFAULT '',
    variant_ids TEXT NOT NULL DEFAULT '[]',  -- JSON list of the kernel ids shown to the model
    created_at REAL NOT NULL
);
CREATE INDEX reflections_by_run ON reflections(run_id);

CREATE TABLE embeddings (
    id INTEGER PRIMARY KEY,
    owner TEXT NOT NULL CHECK (owner IN ('kernel', 'task')),
    owner_id INTEGER NOT NULL,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    source_hash TEXT NOT NULL DEFAULT '',  -- what was embedded: a changed hash means a stale vector
    vector BLOB NOT NULL,  -- float32, little-endian
    created_at REAL NOT NULL,
    UNIQUE (owner, owner_id, model)
);

CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT REFERENCES runs(id),
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_run ON events(run_id);

-- The event log is the run's history: it is only ever appended to.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
"""

# A bench: one suite of tasks, each searched (a run) or scored from given candidate files. A task's
# figures are not copied here: they are read from the evaluation the row points to and the run's
# calls, so the table and the archive cannot disagree.
_BENCHES = """
CREATE TABLE benches (
    id TEXT PRIMARY KEY,
    suite TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('search', 'candidates')),
    config TEXT NOT NULL DEFAULT '{}',
    device_name TEXT NOT NULL DEFAULT '',
    torch_version TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'finished', 'stopped')),
    created_at REAL NOT NULL,
    finished_at REAL
);

CREATE TABLE bench_tasks (
    bench_id TEXT NOT NULL REFERENCES benches(id),
    position INTEGER NOT NULL,
    path TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'skipped')),
    task_id INTEGER REFERENCES tasks(id),
    run_id TEXT REFERENCES runs(id),  -- the search (NULL when candidates were scored)
    kernel_id INTEGER REFERENCES kernels(id),  -- the task's best kernel
    evaluation_id INTEGER REFERENCES evaluations(id),  -- its final verdict: the row's figures
    degenerate TEXT NOT NULL DEFAULT '',  -- why its speedups mean nothing ('' when they do)
    error TEXT NOT NULL DEFAULT '',  -- why it failed or was skipped
    wall_s REAL NOT NULL DEFAULT 0,  -- over every session that worked on it
    PRIMARY KEY (bench_id, position)
);
"""

_INTERVALS = """
ALTER TABLE evaluations ADD COLUMN speedup_eager_lo REAL;
ALTER TABLE evaluations ADD COLUMN speedup_eager_hi REAL;
ALTER TABLE evaluations ADD COLUMN speedup_compile_lo REAL;
ALTER TABLE evaluations ADD COLUMN speedup_compile_hi REAL;
UPDATE evaluations SET speedup_eager_lo = speedup_eager * (1 - speedup_eager_ci),
                       speedup_eager_hi = speedup_eager * (1 + speedup_eager_ci)
    WHERE speedup_eager IS NOT NULL AND speedup_eager_ci IS NOT NULL;
"""

# Append only; never edit or reorder a released entry.
MIGRATIONS: list[tuple[str, str]] = [
    ("0001_initial", _INITIAL),
    # 1: the kernel passed but refuses some input shapes the reference handles; 0: it handled every
    # shape it was checked on; NULL: not known (not passed, or judged before shapes were checked).
    ("0002_evaluation_specialized", "ALTER TABLE evaluations ADD COLUMN specialized INTEGER;"),
    ("0003_benches", _BENCHES),
    # The ensemble member that made the call (an alias of kernelevo.toml, else provider:model): two
    # aliases of one model (say, with and without extended thinking) are two members. '' before 0004.
    ("0004_call_labels", "ALTER TABLE llm_calls ADD COLUMN label TEXT NOT NULL DEFAULT '';"),
    # Each speedup's 95 % interval [lo, hi]. Rows judged before kept only speedup_eager_ci, a relative
    # half-width (still written, from the interval): theirs is rebuilt from it, symmetric.
    ("0005_speedup_intervals", _INTERVALS),
    # The model's own account of a kernel: the prose of its reply before the code (for reflect, after
    # the analysis), which later prompts quote. '' for kernels without one (imports, tune variants).
    ("0006_kernel_account", "ALTER TABLE kernels ADD COLUMN account TEXT NOT NULL DEFAULT '';"),
    # The candidate format a call asked for (a run may ask for CUDA and Triton: --format auto); what a
    # reply wrote is its kernel's format. '' before 0007 and for calls that ask for no kernel.
    ("0007_call_format", "ALTER TABLE llm_calls ADD COLUMN format TEXT NOT NULL DEFAULT '';"),
    # The prompt's form (agent.client.prompt_form: its hash with every number left out), so that a replay tells a
    # reply served to its own prompt with other figures from one served to another prompt. '' before 0008.
    ("0008_call_prompt_form", "ALTER TABLE llm_calls ADD COLUMN prompt_form TEXT NOT NULL DEFAULT '';"),
]
