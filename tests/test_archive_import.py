"""`kernelevo archive import`: Sakana's archive rows (JSON lines and Parquet) and `--rejudge` on the
CPU backend, through the real command, the real judge and a real archive file."""
import ast
import json
import shutil

import pandas
from import_samples import LINEAR_CUDA, RELU_FUNCTIONAL, sakana_row, sakana_rows, write_jsonl
from kernelevo.archive.importing import sakana_candidate
from kernelevo.archive.store import Archive
from kernelevo.judge.static import check
from kernelevo.tasks import source_hash

from conftest import FIXTURES, run_cli


def imported(path, db, *extra):
    out = run_cli("archive", "import", str(path), "--archive", str(db), "--json", *extra, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def test_sakana_rows_from_json_lines_and_parquet_meet_on_one_task(tmp_path):
    rows = sakana_rows()
    broken = [sakana_row("bad", 1, 1, rows[0]["PyTorch_Code_Module"], RELU_FUNCTIONAL, "__global__ void k() {}", 1.0),
              sakana_row("bad", 1, 2, rows[0]["PyTorch_Code_Module"], "def module_fn(x):\n    return x\n",
                         rows[0]["CUDA_Code"], 1.0),
              {**rows[0], "CUDA_Code": None}]
    db = tmp_path / "archive.sqlite"
    report, err = imported(write_jsonl(rows + broken, tmp_path / "sakana.jsonl"), db)
    assert len(report["imported"]) == 2 and len(report["skipped"]) == 3
    assert "sakana.jsonl:3: ValueError: CUDA_Code defines no PYBIND11_MODULE" in err
    assert "sakana.jsonl:4: ValueError: PyTorch_Code_Functional defines no Model class" in err
    assert "sakana.jsonl:5: no CUDA_Code" in err

    # The same rows as Parquet (numpy values, a NaN): nothing new, since kernels are matched by source.
    frame = pandas.DataFrame(rows)
    frame.loc[1, "Max_Diff"] = float("nan")
    frame.to_parquet(tmp_path / "sakana.parquet")
    again, _ = imported(tmp_path / "sakana.parquet", db)
    assert again["imported"] == [] and again["already_there"] == 2

    with Archive.open_readonly(db) as store:
        kernels = [store.kernel(k) for k in report["imported"]]
        tasks = {t.source_hash: t for t in store.tasks()}
    relu, linear = kernels
    assert relu.format == "inline" and relu.origin == "import" and relu.operator == "import"
    assert relu.claims["CUDA_Speedup_Native"] == 1.2 and relu.claims["source"] == "AI CUDA Engineer Archive"
    assert relu.claims["op_name"] == "19_ReLU" and relu.claims["level_id"] == 1
    assert tasks[source_hash(rows[1]["PyTorch_Code_Module"])].id == linear.task_id  # the module is the task
    assert LINEAR_CUDA in linear.source  # the extension's code, verbatim


def test_generated_model_new_calls_the_extension_through_the_functional_model():
    (relu, linear) = sakana_rows()
    for row in (relu, linear):
        source = sakana_candidate(row)
        tree = ast.parse(source)
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        assert set(classes) == {"FunctionalModel", "ModelNew"}  # no class named Model: that is the reference
        assert [b.id for b in classes["ModelNew"].bases] == ["FunctionalModel"]
        assert "fn=_ext.forward" in source and ast.literal_eval(_assigned(tree, "CUDA_SRC")) == row["CUDA_Code"]
        # the judge's own static checks accept the generated file as it stands
        assert check(source, task_source=row["PyTorch_Code_Module"]) == []


def _assigned(tree, name):
    return next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == name)


def test_rejudge_on_the_cpu_keeps_claims_and_stores_the_judges_verdicts(tmp_path):
    folder = tmp_path / "kernels"
    folder.mkdir()
    shutil.copy(FIXTURES / "cpu" / "task_scale.py", tmp_path / "task_scale.py")
    shutil.copy(FIXTURES / "cpu" / "ok_c.py", folder / "task_scale__honest.py")
    shutil.copy(FIXTURES / "cheats" / "cpu" / "cached_result__values.py", folder / "task_scale__cheat.py")
    db = tmp_path / "archive.sqlite"
    args = ("--task", str(tmp_path), "--device", "cpu", "--cache-dir", str(tmp_path / "cache"))
    first, _ = imported(folder, db, *args)  # imported, not judged
    # judges what was imported and never judged; eager only (torch.compile's opponent: test_baseline)
    report, err = imported(folder, db, "--rejudge", "--no-compile-baseline", "--trials", "3", *args)
    assert report["imported"] == [] and report["already_there"] == 2
    verdicts = {r["kernel_id"]: r for r in report["rejudged"]}
    cheat, honest = sorted(first["imported"])  # files are read in name order
    assert verdicts[honest]["verdict"] == "ok" and verdicts[honest]["speedup_eager"] > 0
    assert verdicts[cheat]["verdict"] == "rejected" and verdicts[cheat]["reason"] == "cached_result"
    assert "judging 2 kernels on cpu" in err
    with Archive.open_readonly(db) as store:
        honest_row, cheat_row = store.kernel(honest), store.kernel(cheat)
        stones = store.stepping_stones(task_hash=source_hash((tmp_path / "task_scale.py").read_text()))
    assert [e.purpose for e in honest_row.evaluations] == ["rejudge"]
    assert honest_row.evaluations[0].speedup_compile is None  # as asked
    # --trials 3: three fresh draws, then the fixed checks (test_judge_cpu counts 5 + 8 under the default)
    assert honest_row.evaluations[0].data["correctness"]["trials"] == 3 + 8
    assert honest_row.stepping_stone and "rejudged ok" in honest_row.stone_reason
    assert not cheat_row.stepping_stone and [s.id for s in stones] == [honest]
    third, err = imported(folder, db, "--rejudge", *args)
    assert third["rejudged"] == [] and "nothing to rejudge" in err  # a verdict is never bought twice
