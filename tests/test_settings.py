"""`kernelevo optimize --show-settings`: the settings a search is given, resolved once (defaults, then
kernelevo.toml, then flags), each with where it came from; nothing is run, called or written. And the
branches themselves: the judge gets the search's judge branch whole, with the run's devices and seed."""
import re
from pathlib import Path

from conftest import ROOT, run_cli

TASK = ROOT / "tests" / "fixtures" / "cpu" / "task_scale.py"


def _rows(stdout: str) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if len(cells) == 3 and cells[0] and not cells[0].startswith("setting"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_show_settings_says_where_each_value_came_from_and_runs_nothing(tmp_path, monkeypatch):
    config = tmp_path / "kernelevo.toml"
    config.write_text('ensemble = ["fast"]\nbaseline = "eager"\n[models.fast]\nmodel = "openai:gpt-5"\n')
    archive = tmp_path / "archive.sqlite"
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = run_cli("optimize", str(TASK), "--device", "cpu", "--trials", "3", "--max-llm-calls", "5", "--children", "2",
                  "--no-compile-baseline", "--timing-seconds", "0.3", "--config", str(config), "--archive", str(archive),
                  "--show-settings", timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = _rows(out.stdout)
    assert rows["run.task_path"][1] == "argument"
    for setting, value in (("judge.trials", "3"), ("budget.max_llm_calls", "5"), ("search.children_per_generation", "2"),
                           ("judge.compile_baseline", "False"), ("judge.timing.max_seconds", "0.3"), ("run.devices", "cpu")):
        assert rows[setting] == (value, "flag"), (setting, rows[setting])
    assert rows["run.models"] == ("fast", "kernelevo.toml: ensemble =")
    assert rows["run.baseline"] == ("eager", "kernelevo.toml: baseline =")
    assert f"kernelevo.toml read from {config}" in " ".join(out.stdout.split())
    assert rows["judge.policy"] == ("mixed", "default") and rows["budget.generations"] == ("10", "default")
    assert "judge.devices" not in rows and "judge.seed" not in rows  # the run's, set when the judge starts
    assert not archive.exists()  # nothing was opened, called or judged


def test_the_judge_is_handed_the_search_branch_whole():
    import dataclasses

    from kernelevo.evolution.options import OptimizeOptions, judge_options
    from kernelevo.judge.api import JudgeOptions, TimingConfig

    branch = JudgeOptions(trials=2, shapes="exact", policy="strict", compile_baseline=False,
                          timing=TimingConfig(max_seconds=0.4), executor="local")
    options = OptimizeOptions(TASK, ("m",), ("cpu",), Path("a"), Path("o"), Path("c"), judge=branch, seed=7)
    judged = judge_options(options, ("cpu",))
    assert judged == dataclasses.replace(branch, devices=("cpu",), seed=7, sol=True)
    assert run_cli("optimize", "--help").returncode == 0
