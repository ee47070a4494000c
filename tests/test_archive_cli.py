"""`kernelevo archive`: the read side of the archive, through the real command on a real archive file."""
import csv
import dataclasses
import io
import json

import pytest
from kernelevo.archive.store import Archive

from kernelevo.evaluation import Correctness, Evaluation, Profile
from kernelevo.llm_call import LLMCall
from kernelevo.tasks import source_hash

from conftest import FIXTURES, run_cli

SOFTMAX = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.softmax(-1)\n"
SCALE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
KERNEL_A = "import torch\n\nBLOCK = 256\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
           "        return launch(x, BLOCK)\n"
KERNEL_B = KERNEL_A.replace("BLOCK = 256", "BLOCK = 1024  # one block per row")


def recorded() -> dict:
    return json.loads((FIXTURES / "profile" / "evaluation_row_softmax.json").read_text())


def ok(speedup: float, profile: Profile | None = None, spread: float = 0.005) -> Evaluation:
    """A passing evaluation at `speedup`, its 95 % intervals `spread` either side (relative)."""
    base = Evaluation.from_dict({**recorded(), "profile": None})
    return dataclasses.replace(base, speedup_eager=speedup, speedup_compile=speedup / 2, profile=profile,
                               speedup_eager_ci=(speedup * (1 - spread), speedup * (1 + spread)),
                               speedup_compile_ci=(speedup / 2 * (1 - spread), speedup / 2 * (1 + spread)))


def failed(verdict: str, reason: str, message: str) -> Evaluation:
    return Evaluation(verdict=verdict, reason=reason, message=message, excerpt="kernel.cu(3): error",
                      correctness=Correctness(trials=5, passed=0) if verdict == "incorrect" else None)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Two tasks, two runs; on row_softmax: two translations (one fails to compile), a mutation of the
    first (profiled), a crossover of both lines (incorrect) and a repair that produced no code."""
    path = tmp_path_factory.mktemp("archive-cli") / "archive.sqlite"
    profile = Profile.from_dict(recorded()["profile"])
    with Archive.open(path) as a:
        softmax = a.add_task("row_softmax", SOFTMAX, source_hash(SOFTMAX))
        scale = a.add_task("scale", SCALE, source_hash(SCALE))
        run = a.start_run(softmax, {"model": "anthropic:claude-sonnet-4-5"}, 0, "cuda:0", "NVIDIA H100",
                          "2.11", "13.0")
        other = a.start_run(scale, {"model": "openai:gpt-5"}, 1, "cuda:0", "NVIDIA H100", "2.11", "13.0")
        for cost in (0.25, 0.5):
            call = a.add_llm_call(run, LLMCall(provider="anthropic", model="claude-sonnet-4-5", operator="mutate",
                                               outcome="ok", cost_usd=cost))
        k = {}
        k["a"] = a.add_kernel(softmax, KERNEL_A, "nvrtc", "translate", run_id=run)
        k["broken"] = a.add_kernel(softmax, KERNEL_A.replace("launch", "lanch"), "nvrtc", "translate", run_id=run)
        k["b"] = a.add_kernel(softmax, KERNEL_B, "nvrtc", "mutate", run_id=run, parents=[k["a"]], generation=1,
                              llm_call_id=call)
        k["cross"] = a.add_kernel(softmax, KERNEL_B + "# crossed\n", "nvrtc", "crossover", run_id=run,
                                  parents=[k["b"], k["broken"]], generation=2, island=1)
        k["none"] = a.add_kernel(softmax, "", "nvrtc", "repair", run_id=run, parents=[k["broken"]], problem="no_code")
        k["scale"] = a.add_kernel(scale, KERNEL_A, "nvrtc", "translate", run_id=other)
        a.add_evaluation(k["a"], ok(1.15))
        a.add_evaluation(k["broken"], failed("compile_error", "nvrtc_error", "error: identifier 'lanch' is undefined"))
        a.add_evaluation(k["b"], ok(1.6, profile))
        a.add_evaluation(k["cross"], failed("incorrect", "value_mismatch", "output 0 differs at (3, 7)"))
        a.add_evaluation(k["scale"], ok(2.0))
        a.add_evaluation(k["b"], ok(1.45, spread=0.12), purpose="final")  # the re-judgement at the end of the run
        a.finish_run(other, "finished", "generations")
    return {"path": str(path), "run": run, "other": other, **k}


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    # rich draws 80 columns when stdout is a pipe; wider keeps table cells on one line for the asserts
    monkeypatch.setenv("COLUMNS", "200")


def cli(archive: dict, *args: str):
    out = run_cli("archive", *args, "--archive", archive["path"], timeout=60)
    assert out.returncode == 0, out.stderr
    return out


def test_ls_runs_found_through_the_config(archive, tmp_path):
    config = tmp_path / "kernelevo.toml"
    config.write_text(f"archive = {json.dumps(archive['path'])}\n")
    out = run_cli("archive", "ls", "--config", str(config), timeout=60)
    assert out.returncode == 0, out.stderr
    assert archive["run"] in out.stdout and archive["other"] in out.stdout
    # a run's best is the kernel its final re-judgement announced, with that figure (as its summary and report)
    assert "anthropic:claude-sonnet-4-5" in out.stdout and "1.45x" in out.stdout and "finished" in out.stdout


def test_ls_runs_json(archive):
    rows = {r["id"]: r for r in json.loads(cli(archive, "ls", "runs", "--json").stdout)}
    run = rows[archive["run"]]
    assert run["task"] == "row_softmax" and run["status"] == "running" and run["finished"] is None
    assert (run["kernels"], run["evaluations"], run["ok"]) == (5, 4, 2)
    assert run["best_speedup"] == pytest.approx(1.45) and run["best_kernel"] == archive["b"]
    assert run["best_speedup_ci"] == pytest.approx([1.276, 1.624])
    assert run["cost_usd"] == pytest.approx(0.75) and run["model"] == "anthropic:claude-sonnet-4-5"
    assert rows[archive["other"]]["status"] == "finished" and rows[archive["other"]]["finished"]


def test_ls_tasks_table_and_csv(archive):
    table = cli(archive, "ls", "tasks").stdout
    assert "row_softmax" in table and "scale" in table and "2.00x" in table
    rows = list(csv.DictReader(io.StringIO(cli(archive, "ls", "tasks", "--csv").stdout)))
    assert [r["name"] for r in rows] == ["row_softmax", "scale"]
    assert (rows[0]["runs"], rows[0]["kernels"], float(rows[0]["best_speedup"])) == ("1", "5", 1.6)
    assert len(rows[1]["source_hash"]) == 12 and rows[1]["best_speedup"] == "2.0"


def test_ls_kernels_table(archive):
    out = cli(archive, "ls", "kernels")
    for verdict in ("ok", "compile_error", "incorrect", "no_code", "crossover"):
        assert verdict in out.stdout
    assert "1.60x" in out.stdout and "source" not in out.stdout
    assert out.stderr.strip() == "6 kernels"


def test_ls_kernels_csv_filtered_by_task_name_and_verdict(archive):
    out = cli(archive, "ls", "kernels", "--csv", "--task", "row_softmax", "--verdict", "ok")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [int(r["id"]) for r in rows] == [archive["a"], archive["b"]]
    assert rows[1]["parents"] == str(archive["a"]) and rows[1]["operator"] == "mutate"
    assert rows[1]["run"] == archive["run"] and "source" not in rows[0]


def test_ls_kernels_json_min_speedup_and_limit(archive):
    rows = json.loads(cli(archive, "ls", "kernels", "--json", "--min-speedup", "1.5").stdout)
    assert [r["id"] for r in rows] == [archive["b"], archive["scale"]]
    assert rows[0]["speedup_eager"] == pytest.approx(1.6) and rows[0]["task"] == "row_softmax"
    assert "source" not in rows[0] and rows[0]["stepping_stone"] is False
    rows = json.loads(cli(archive, "ls", "kernels", "--json", "--operator", "translate", "--limit", "1").stdout)
    assert [r["id"] for r in rows] == [archive["scale"]]  # the newest


def test_show_source_evaluation_profile_lineage(archive):
    out = cli(archive, "show", str(archive["b"])).stdout
    assert "BLOCK = 1024  # one block per row" in out  # the source
    assert "mutate" in out and "row_softmax" in out
    # the final re-judgement's figure (its interval: wider than 2 %), the search's labelled beside it
    assert "1.45x (1.28-1.62) vs eager, 0.72x (0.64-0.81) vs torch.compile (final re-judgement); search: 1.60x vs " \
           "eager" in " ".join(out.split())
    assert "speed of light" in out and "as the search's prompts show it" in out  # the profile
    assert f"lineage: {archive['b']} <- {archive['a']} translate" in out


def test_show_json_has_the_evaluations(archive):
    data = json.loads(cli(archive, "show", str(archive["b"]), "--json").stdout)
    assert data["id"] == archive["b"] and data["source"] == KERNEL_B and data["parents"] == [archive["a"]]
    evaluation, final = data["evaluations"]
    assert evaluation["data"]["speedup_eager"] == pytest.approx(1.6) and final["purpose"] == "final"
    assert final["speedup_eager_ci"] == pytest.approx([1.276, 1.624])  # [low, high], as in the record's data
    assert final["data"]["speedup_eager_ci"] == pytest.approx([1.276, 1.624]) and data["speedup_eager_ci"][0] < 1.6
    assert evaluation["profile"] == recorded()["profile"]


def test_diff(archive):
    out = cli(archive, "diff", str(archive["a"]), str(archive["b"])).stdout
    assert "-BLOCK = 256" in out and "+BLOCK = 1024  # one block per row" in out
    data = json.loads(cli(archive, "diff", str(archive["a"]), str(archive["b"]), "--json").stdout)
    assert (data["a"]["id"], data["b"]["id"]) == (archive["a"], archive["b"])
    assert f"--- kernel {archive['a']}" in data["diff"] and "+BLOCK = 1024  # one block per row\n" in data["diff"]


def test_lineage_json_and_tree(archive):
    rows = json.loads(cli(archive, "lineage", str(archive["cross"]), "--json").stdout)
    # the kernel, then its parents, then theirs: breadth-first, by id within a generation
    assert [(r["id"], r["depth"]) for r in rows] == [(archive["cross"], 0), (archive["broken"], 1),
                                                     (archive["b"], 1), (archive["a"], 2)]
    tree = cli(archive, "lineage", str(archive["cross"])).stdout
    lines = [line for line in tree.splitlines() if line.strip()]
    assert f"{archive['cross']} crossover incorrect" in lines[0]
    assert f"{archive['b']} mutate ok 1.60x" in lines[1] and f"{archive['a']} translate ok 1.15x" in lines[2]
    assert f"{archive['broken']} translate compile_error" in lines[3]


def test_missing_archive_is_one_line_exit_2(tmp_path):
    out = run_cli("archive", "ls", "--archive", str(tmp_path / "nowhere.sqlite"), timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "kernelevo optimize" in out.stderr


def test_unknown_kernel_is_one_line_exit_2(archive):
    out = run_cli("archive", "show", "999", "--archive", archive["path"], timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "no kernel 999" in out.stderr


def test_export_jsonl_and_parquet(archive, tmp_path):
    import pandas as pd

    out = cli(archive, "export", "-o", str(tmp_path / "all.jsonl"))
    assert "wrote 6 kernels" in out.stderr and not out.stdout
    rows = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    by_id = {r["kernel_id"]: r for r in rows}
    b = by_id[archive["b"]]
    assert b["task"] == "row_softmax" and b["task_source"] == SOFTMAX and b["source"] == KERNEL_B
    # the latest evaluation: the final re-judgement
    assert (b["operator"], b["parents"], b["verdict"], b["speedup_eager"]) == ("mutate", [archive["a"]], "ok", 1.45)
    assert b["profile"]["dominant_kernel"] == "softmax_rows" and b["profile"]["registers"] == 31
    assert b["profile"]["bound"] == "memory" and 80 < b["profile"]["sol_pct"] < 100
    assert (b["model"], b["cost_usd"]) == ("anthropic:claude-sonnet-4-5", 0.5)
    assert by_id[archive["none"]]["verdict"] is None and by_id[archive["none"]]["problem"] == "no_code"
    assert by_id[archive["cross"]]["parents"] == [archive["b"], archive["broken"]]

    cli(archive, "export", "-o", str(tmp_path / "ok.parquet"), "--task", "row_softmax", "--verdict", "ok")
    frame = pd.read_parquet(tmp_path / "ok.parquet")
    assert sorted(frame["kernel_id"]) == sorted([archive["a"], archive["b"]])
    row = frame.set_index("kernel_id").loc[archive["b"]]
    assert json.loads(row["parents"]) == [archive["a"]] and json.loads(row["profile"])["registers"] == 31
    assert row["speedup_eager"] == 1.45 and row["task_source"] == SOFTMAX


def test_import_kernelbench_folder_then_cuda_l1_lines(tmp_path):
    db = str(tmp_path / "imported.sqlite")
    folder = FIXTURES.parent.parent / "benchmarks" / "tasks" / "candidates"
    first = run_cli("archive", "import", str(folder), "--archive", db, "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert len(report["imported"]) == len(list(folder.glob("*.py"))) and report["skipped"] == []
    kernels = json.loads(run_cli("archive", "ls", "kernels", "--archive", db, "--json").stdout)
    triton = [k for k in kernels if k["format"] == "triton"]  # Triton candidates keep their format
    assert len(triton) == len(list(folder.glob("*__triton.py"))) > 0
    again = json.loads(run_cli("archive", "import", str(folder), "--archive", db, "--json").stdout)
    assert again["imported"] == [] and again["already_there"] == len(report["imported"])  # one row per kernel

    softmax_task = (folder.parent / "row_softmax.py").read_text()
    kernel = (folder / "row_softmax__nvrtc.py").read_text().replace("BLOCK 256", "BLOCK 512")
    lines = [json.dumps({"level_id": 1, "task_id": 23, "ref_code": softmax_task, "custom_code": kernel,
                         "score_default": 1.31, "score_torch_compile_default": 0.9}),
             "{not json",
             json.dumps({"level_id": 1, "task_id": 24, "ref_code": SCALE, "custom_code": ""}),
             json.dumps({"level_id": 2, "task_id": 7, "ref_code": SCALE, "custom_code": KERNEL_A.replace("BLOCK", "B")})]
    (tmp_path / "cuda_l1.jsonl").write_text("\n".join(lines) + "\n")
    out = run_cli("archive", "import", str(tmp_path / "cuda_l1.jsonl"), "--archive", db, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert len(report["imported"]) == 2
    assert [line.split(":")[1] for line in report["skipped"]] == ["2", "3"]  # the broken line, the empty kernel
    assert "skipped cuda_l1.jsonl:2: not JSON" in out.stderr
    shown = json.loads(run_cli("archive", "show", str(report["imported"][0]), "--archive", db, "--json").stdout)
    assert shown["origin"] == "import" and shown["operator"] == "import" and shown["format"] == "nvrtc"
    assert shown["claims"] == {"score_default": 1.31, "score_torch_compile_default": 0.9, "source": "CUDA-L1",
                               "level_id": 1, "task_id": 23}
    tasks = json.loads(run_cli("archive", "ls", "tasks", "--archive", db, "--json").stdout)
    softmax = [t for t in tasks if t["source_hash"] == source_hash(softmax_task)[:12] or t["name"] == "row_softmax"]
    # matched by source hash: the folder's 4 (nvrtc, inline, c and triton), and this one
    assert len(softmax) == 1 and softmax[0]["kernels"] == 5
    assert len(tasks) == len(list(folder.parent.glob("*.py"))) + 1  # plus the CUDA-L1 row's own task


def test_import_refuses_what_it_cannot_read(tmp_path):
    out = run_cli("archive", "import", str(tmp_path / "nothing.txt"), "--archive", str(tmp_path / "a.sqlite"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "CUDA-L1" in out.stderr


def test_report_numbers_come_from_the_rows(archive, tmp_path):
    out = cli(archive, "report", archive["run"], "-o", str(tmp_path / "r.html"), "--json")
    data = json.loads(out.stdout)
    progress = data["progress"]
    assert [p["kernel"] for p in progress] == [archive[k] for k in ("a", "broken", "b", "cross")]
    assert [p["best"] for p in progress] == [1.15, 1.15, 1.6, 1.6]
    assert [p["improved"] for p in progress] == [True, False, True, False]
    assert all(p["spent_usd"] == pytest.approx(0.75) for p in progress)  # both calls came before any verdict
    assert data["best_path"] == [archive["a"], archive["b"]] and data["run"]["best_kernel"] == archive["b"]
    assert [t["id"] for t in data["top"]] == [archive["b"], archive["a"]]
    assert "+BLOCK = 1024  # one block per row" in data["top"][0]["diff"] and data["top"][0]["profile"]["bound"]
    assert data["verdicts"] == {"ok": 2, "compile_error": 1, "incorrect": 1} and data["problems"] == {"no_code": 1}
    ops = {o["operator"]: o for o in data["operators"]}
    assert (ops["mutate"]["ok"], ops["mutate"]["new_bests"], ops["mutate"]["calls"]) == (1, 1, 2)
    assert ops["mutate"]["cost_usd"] == pytest.approx(0.75) and ops["mutate"]["usd_per_ok"] == pytest.approx(0.75)
    assert (ops["translate"]["judged"], ops["translate"]["ok"], ops["translate"]["ok_rate"]) == (2, 1, 0.5)
    # yield: replies judged / replies received (the translations here came from no recorded call)
    assert (ops["mutate"]["replies"], ops["mutate"]["yield"], ops["translate"]["yield"]) == (1, 1.0, None)
    # one truth: the final re-judgement's figures for the best kernel, the search's kept beside them
    run = data["run"]
    assert (run["best_speedup"], run["best_figures"], run["best_search_speedup"]) == (1.45, "final", 1.6)
    assert (data["top"][0]["speedup"], data["top"][0]["figures"]) == (1.45, "final")
    assert (data["top"][1]["speedup"], data["top"][1]["figures"]) == (1.15, "search")
    assert {m["model"] for m in data["models"]} == {"anthropic:claude-sonnet-4-5", "(none)"}  # calls stored without a label
    page = (tmp_path / "r.html").read_text()
    assert f"kernelevo report: {archive['run']} (row_softmax)" in page and "wrote" in out.stderr


def test_report_of_an_unknown_run_is_a_one_line_error(archive, tmp_path):
    out = run_cli("archive", "report", "r-nope", "-o", str(tmp_path / "r.html"), "--archive", archive["path"])
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "archive ls runs" in out.stderr
    assert not (tmp_path / "r.html").exists()


def cuda_l1_line(task_id: int, ref_code: str | None, custom_code: str | None, *scores: float | None) -> str:
    """One line shaped like CUDA-L1's published collection, nulls included where theirs has them."""
    names = ("score_default", "score_torch_compile_default", "score_torch_compile_reduce_overhead",
             "score_cuda_graph", "score_cudnn")
    return json.dumps({"level_id": 1, "task_id": task_id, "ref_code": ref_code, "custom_code": custom_code,
                       "cuda_graph_code": None, "cudnn_code": custom_code, **dict(zip(names, scores))})


def test_cuda_l1_import_with_nulls_reads_back_everywhere(tmp_path):
    """Imported kernels carry claims (some null), some judged, most not: every read command and the
    export take them (export once decoded the claims twice and died with a TypeError)."""
    import pandas as pd

    lines = [cuda_l1_line(1, SOFTMAX, KERNEL_A, 1.5, None, None, None, 1.4),
             cuda_l1_line(2, SCALE, None, None, None, None, None, None),  # no kernel: skipped
             cuda_l1_line(3, SCALE, KERNEL_B, None, None, None, None, None),
             cuda_l1_line(4, SCALE, KERNEL_A + "# other\n", 0.9, 1.1, 1.2, None, 0.8)]
    (tmp_path / "l1.jsonl").write_text("\n".join(lines) + "\n")
    db = tmp_path / "l1.sqlite"
    out = run_cli("archive", "import", str(tmp_path / "l1.jsonl"), "--archive", str(db), "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    first, unjudged, scored = json.loads(out.stdout)["imported"]
    with Archive.open(db) as a:
        a.add_evaluation(first, failed("compile_error", "nvrtc_error", "error: identifier 'launch' is undefined"),
                         purpose="rejudge")
    archive = {"path": str(db)}
    for command in (("ls", "kernels"), ("ls", "kernels", "--json"), ("ls", "kernels", "--csv"), ("ls", "tasks"),
                    ("ls", "tasks", "--json"), ("ls", "tasks", "--csv"), ("show", str(first)),
                    ("show", str(unjudged)), ("show", str(unjudged), "--json"), ("lineage", str(first))):
        assert "Traceback" not in cli(archive, *command).stderr
    shown = json.loads(cli(archive, "show", str(unjudged), "--json").stdout)
    assert shown["claims"]["score_default"] is None and shown["evaluations"] == []

    cli(archive, "export", "-o", str(tmp_path / "l1.jsonl.out"), "--format", "jsonl")
    rows = {r["kernel_id"]: r for r in map(json.loads, (tmp_path / "l1.jsonl.out").read_text().splitlines())}
    assert len(rows) == 3 and rows[first]["verdict"] == "compile_error" and rows[first]["speedup_eager"] is None
    assert rows[first]["claims"]["score_default"] == 1.5 and rows[first]["claims"]["score_cuda_graph"] is None
    assert rows[unjudged]["verdict"] is None and rows[unjudged]["claims"]["source"] == "CUDA-L1"
    cli(archive, "export", "-o", str(tmp_path / "l1.parquet"))
    frame = pd.read_parquet(tmp_path / "l1.parquet").set_index("kernel_id")
    assert json.loads(frame.loc[scored, "claims"])["score_torch_compile_default"] == 1.1
    assert frame.loc[first, "verdict"] == "compile_error" and pd.isna(frame.loc[unjudged, "verdict"])


TASK_RELU = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n\n" \
            "def get_inputs():\n    return [torch.randn(8)]\n\ndef get_init_inputs():\n    return []\n"


def test_import_flat_folder_finds_tasks_beside_their_candidates(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "relu.py").write_text(TASK_RELU)
    (flat / "relu__mine.py").write_text(KERNEL_A)
    (flat / "relu__theirs.py").write_text(KERNEL_B)
    (flat / "gelu__lost.py").write_text(KERNEL_A.replace("256", "128"))  # its task is nowhere
    (flat / "notes.py").write_text("LIMIT = 3\n")
    out = run_cli("archive", "import", str(flat), "--archive", str(tmp_path / "a.sqlite"), "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert len(report["imported"]) == 2
    assert [line.split(":")[0] for line in report["skipped"]] == ["gelu__lost.py", "notes.py"]
    assert "beside <task>.py" in report["skipped"][0] and "relu.py" not in out.stderr  # the task is no candidate
    tasks = json.loads(run_cli("archive", "ls", "tasks", "--archive", str(tmp_path / "a.sqlite"), "--json").stdout)
    assert [(t["name"], t["kernels"]) for t in tasks] == [("relu", 2)]


def test_import_tasks_one_folder_up_and_an_explicit_task(tmp_path):
    candidates = tmp_path / "tasks" / "candidates"
    candidates.mkdir(parents=True)
    (tmp_path / "tasks" / "relu.py").write_text(TASK_RELU)
    (candidates / "relu__mine.py").write_text(KERNEL_A)
    (candidates / "relu.py").write_text(KERNEL_B)  # a candidate named as its task: the task is one folder up
    db = str(tmp_path / "a.sqlite")
    report = json.loads(run_cli("archive", "import", str(candidates), "--archive", db, "--json").stdout)
    assert len(report["imported"]) == 2 and report["skipped"] == []
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "any__name.py").write_text(KERNEL_A + "# third\n")
    out = run_cli("archive", "import", str(tmp_path / "other"), "--task", str(tmp_path / "tasks" / "relu.py"),
                  "--archive", db, "--json")
    assert len(json.loads(out.stdout)["imported"]) == 1
    missing = run_cli("archive", "import", str(tmp_path / "other"), "--task", str(tmp_path / "nowhere"),
                      "--archive", db)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "--task" in missing.stderr
