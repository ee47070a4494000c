"""The command line as a user meets it."""
import json

from kernelevo.records import VERDICTS, Evaluation

from conftest import FIXTURES, ROOT, run_cli

CPU = FIXTURES / "cpu"


def test_help_lists_commands():
    out = run_cli("--help")
    assert out.returncode == 0 and "evaluate" in out.stdout and "doctor" in out.stdout


def test_evaluate_json(cache_dir):
    out = run_cli("evaluate", str(CPU / "task_scale.py"), str(CPU / "ok_c.py"), "--device", "cpu",
                  "--json", "--trials", "2", "--no-compile-baseline", "--cache-dir", str(cache_dir))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["verdict"] == "ok" and data["format"] == "c"
    # 2 trials, 2 test-input sets, 1 derived leading size (251), redrawn weights, large values
    assert data["correctness"]["trials"] == 7
    assert "float32[251, 512]" in data["shapes"]["supported"] and not data["shapes"]["refused"]
    assert data["speedup_eager"] > 0 and data["candidate"]["median_ms"] > 0
    assert data["verdict"] in VERDICTS
    assert json.loads(json.dumps(Evaluation.from_dict(data).to_dict())) == data  # lossless round trip


def test_evaluate_incorrect_is_still_exit_0(cache_dir):
    out = run_cli("evaluate", str(CPU / "task_scale.py"), str(CPU / "wrong_math_c.py"), "--device", "cpu",
                  "--trials", "1", "--no-compile-baseline", "--cache-dir", str(cache_dir))
    assert out.returncode == 0
    assert "incorrect" in out.stdout and "value_mismatch" in out.stdout


def test_broken_task_is_one_line_exit_2(tmp_path):
    task = tmp_path / "task.py"
    task.write_text("import torch\nimport nowhere_to_be_found\n")
    out = run_cli("evaluate", str(task), str(CPU / "ok_c.py"), "--device", "cpu")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "task.py:2: ModuleNotFoundError" in out.stderr


def test_missing_candidate_and_bad_device():
    out = run_cli("evaluate", str(CPU / "task_scale.py"), "nope.py", "--device", "cpu")
    assert out.returncode == 2 and "no such file" in out.stderr
    out = run_cli("evaluate", str(CPU / "task_scale.py"), str(CPU / "ok_c.py"), "--device", "tpu")
    assert out.returncode == 2 and "use cuda, cuda:N or cpu" in out.stderr


def test_doctor_json_masks_keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abcdefghijklmnop1234")
    out = run_cli("doctor", "--json")
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data["api_keys"]["detail"]["OPENAI_API_KEY"] == "sk-…1234"
    assert "abcdefghijklmnop" not in out.stdout
    assert set(data) >= {"gpu", "nvrtc", "nvcc", "ncu", "c_compiler", "ninja"}


def test_nvrtc_candidate_on_the_cpu_is_a_usage_error():
    suite = ROOT / "benchmarks" / "tasks"
    out = run_cli("evaluate", str(suite / "row_softmax.py"), str(suite / "candidates" / "row_softmax__nvrtc.py"),
                  "--device", "cpu")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "nvrtc (CUDA) candidate" in out.stderr and "--device cpu" in out.stderr


def test_models_lists_the_table_and_config_aliases(tmp_path):
    import json

    config = tmp_path / "kernelevo.toml"
    config.write_text('[models.mine]\nmodel = "local:qwen3-coder@http://127.0.0.1:8000/v1"\nedit_format = "diff"\n')
    done = run_cli("models", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert any(r["spec"].startswith("anthropic:") and r["input"] for r in rows)
    mine = next(r for r in rows if r["alias"] == "mine")
    assert (mine["provider"], mine["input"], mine["edit_format"]) == ("local", 0.0, "diff")
    config.write_text('[models.mine]\nmodel = "openai:x"\nkey = "sk-1"\n')
    done = run_cli("models", "--config", str(config))
    assert done.returncode == 2 and "keys are read only from environment variables" in done.stderr
