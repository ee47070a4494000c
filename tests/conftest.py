import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Judge workers on the CPU run OpenMP (torch's pool, a C candidate's own). By default a thread that
# finishes a parallel region spins before it sleeps, and on 2 cores with the other one busy (a
# second test, a build, another worker importing torch) a region then waits for a thread that is
# not running: one CPU judgement's correctness trials took 6.8 s against 0.27 s with threads that
# sleep at once. The tests assert verdicts and orderings, not absolute CPU times; a user on a busy
# machine can set the same variable (it reaches the worker: judge/run/sandbox.py passes OMP_*).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


# The files that take longest, longest first (about 90 s down to 15 s each on 2 busy cores). Under pytest -n
# --dist loadfile (the README's command) a file is one unit of work, given to whichever worker is free, in the
# order collected: xdist's own order (most tests first) left the one-test end-to-end files, a minute each, for
# last, where one of them kept a worker busy while the other had nothing left to take. Heaviest first, the small
# files fill in at the end. Only the order changes: every file runs, whole, on one worker.
HEAVY_FIRST = ("test_judge_cpu.py", "test_assemble_optimize.py", "test_ray.py", "test_optimize.py", "test_sandbox.py",
               "test_suite.py", "test_split.py", "test_baseline.py", "test_attempt_memory.py", "test_replay.py",
               "test_cheats.py", "test_bench.py", "test_generality.py", "test_inline.py", "test_ensemble_run.py",
               "test_recorded_replies.py", "test_triton.py", "test_profile.py", "test_cli.py", "test_assemble.py",
               "test_bound.py", "test_regions.py", "test_archive_import.py", "test_interrupt.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: hand out files in the collected order
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module", autouse=True)
def one_gpu_file_at_a_time(request, tmp_path_factory):
    """Under pytest -n 3 --dist loadfile (the README's command) each file runs on one worker, so its module
    fixtures are built once; two files with GPU tests would time kernels on the same GPU at once, each
    under a judge of its own, so a file with any holds a lock that the workers share while it runs."""
    if not _has_cuda() or not any("gpu" in item.keywords for item in request.session.items
                                   if item.module is request.module):
        yield
        return
    import fcntl

    with open(tmp_path_factory.getbasetemp().parent / "gpu.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One build cache for the session: candidates compiled once are reused, as in real use."""
    path = tmp_path_factory.mktemp("kernelevo-cache")
    os.environ["KERNELEVO_CACHE_DIR"] = str(path)
    return path


@pytest.fixture
def server():
    """A scripted LLM server on 127.0.0.1 speaking the OpenAI and Anthropic protocols (llm_server.py)."""
    from llm_server import ScriptedServer

    s = ScriptedServer()
    yield s
    s.close()


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    exe = shutil.which("kernelevo", path=str(Path(sys.executable).parent)) or shutil.which("kernelevo")
    assert exe, "kernelevo is not installed (pip install -e .)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)


def own_kernels_placed(parts_dir: Path, tasks: list[str]) -> list:
    """The chosen parts of a split in `parts_dir` for `tasks`, each with its own reference code as its
    kernel (its Model renamed ModelNew), as a bench holding a verified 2x kernel for each hands them over:
    an assembly of them must be the original model."""
    from kernelevo.evolution.drivers.parts.assemble import chosen_parts

    rows = [{"path": str(parts_dir / name), "correct": True, "speedup_eager": 2.0, "speedup_eager_ci": [1.9, 2.1],
             "kernel_id": i, "verdict": "ok", "status": "done"} for i, name in enumerate(tasks)]
    kernels = [(parts_dir / name).read_text().replace("class Model(", "class ModelNew(") for name in tasks]
    return chosen_parts(parts_dir, rows, kernels.__getitem__, min_speedup=1.0, baseline="eager")[0]


def variant_of(source: str, format: str, label: str = "A", kernel_id: int | None = None, baseline: str = "eager",
               **fields):
    """A search's Variant from flat keywords, each put in the record of its concern (the judge's figures, the
    lineage, how a prompt shows it): what tests write by hand."""
    import dataclasses

    from kernelevo.evaluation import Figures, Lineage, Shown, Variant

    def take(cls, **given):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**given, **{k: fields.pop(k) for k in list(fields) if k in names})

    figures, lineage, shown = take(Figures), take(Lineage), take(Shown, label=label)
    if fields:
        raise TypeError(f"no Variant field {sorted(fields)}")
    return Variant(source, format, kernel_id, figures, lineage, shown, baseline)
