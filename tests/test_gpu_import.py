"""The import bar on a GPU: a KernelBench-format folder (the starter suite's nvrtc and inline
candidates), a CUDA-L1-format file and Sakana-format rows, imported and judged here with
`--rejudge`; every honest kernel passes, the wrong one is named incorrect, claims stay apart."""
import json
import os
import shutil
from pathlib import Path

import pytest
from import_samples import sakana_rows, write_jsonl
from kernelevo.archive.store import Archive

from conftest import ROOT, run_cli
from test_gpu_optimize import gpu_count

pytestmark = pytest.mark.gpu
TASKS = ROOT / "benchmarks" / "tasks"


def rejudged(source: Path, db: Path, *extra: str) -> dict:
    out = run_cli("archive", "import", str(source), "--archive", str(db), "--rejudge", "--json", *extra, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def cuda_l1_lines(path: Path) -> Path:
    """Two rows in CUDA-L1's shape on the row_softmax task: an honest variant and one with wrong math."""
    task = (TASKS / "row_softmax.py").read_text()
    honest = (TASKS / "candidates" / "row_softmax__nvrtc.py").read_text().replace("expf(", "__expf(")
    wrong = honest.replace("* inv", "* inv * 0.5f")
    rows = [{"level_id": 1, "task_id": 23, "ref_code": task, "custom_code": honest, "score_default": 1.4},
            {"level_id": 1, "task_id": 23, "ref_code": task, "custom_code": wrong, "score_default": 9.9}]
    return write_jsonl(rows, path)


def test_import_and_rejudge_three_formats_on_the_gpu(tmp_path):
    folder = tmp_path / "kernelbench"
    folder.mkdir()
    for path in sorted((TASKS / "candidates").glob("*.py")):
        if path.stem.endswith(("__nvrtc", "__inline")):
            shutil.copy(path, folder / path.name)
    db = tmp_path / "archive.sqlite"
    results = {}
    for name, source, extra in (("kernelbench", folder, ("--task", str(TASKS))),
                                ("cuda_l1", cuda_l1_lines(tmp_path / "cuda_l1.jsonl"), ()),
                                ("sakana", write_jsonl(sakana_rows(), tmp_path / "sakana.jsonl"), ())):
        report = rejudged(source, db, *extra)
        assert report["skipped"] == [] and len(report["rejudged"]) == len(report["imported"]) > 0, report
        results[name] = report["rejudged"]
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "rejudge.json").write_text(json.dumps(results, indent=1))
    for name, rows in results.items():
        for r in rows:
            print(f"{name}: kernel {r['kernel_id']} {r['task']}: {r['verdict']} {r['reason']} "
                  f"{r['speedup_eager'] or 0:.2f}x (claimed {r['claimed']}) on {r['device_name']}")

    folder_rows = results["kernelbench"]
    assert len(folder_rows) == len(list(folder.glob("*.py")))
    assert all(r["verdict"] == "ok" for r in folder_rows), [r for r in folder_rows if r["verdict"] != "ok"]
    assert all(r["device"].startswith("cuda:") for r in folder_rows)  # each verdict names its GPU
    if gpu_count() >= 2:  # spread over every GPU (the least busy first)
        assert len({r["device"] for r in folder_rows}) == gpu_count(), [r["device"] for r in folder_rows]
    honest, wrong = sorted(results["cuda_l1"], key=lambda r: r["kernel_id"])
    assert honest["verdict"] == "ok" and honest["claimed"] == 1.4
    assert wrong["verdict"] == "incorrect" and wrong["claimed"] == 9.9  # a claim is not a measurement
    assert all(r["verdict"] == "ok" for r in results["sakana"]), results["sakana"]
    with Archive.open_readonly(db) as store:
        stones = store.stepping_stones(limit=100)
        softmax = [t for t in store.tasks() if t.name == "row_softmax"]
        wrong_row = store.kernel(wrong["kernel_id"])
    ok_count = sum(r["verdict"] == "ok" for rows in results.values() for r in rows)
    assert len(stones) == ok_count and all(s.purpose == "rejudge" for s in stones)
    assert len(softmax) == 1  # the folder's task file and CUDA-L1's ref_code met by source hash
    assert wrong_row.claims["score_default"] == 9.9 and wrong_row.evaluations[0].speedup_eager is None
