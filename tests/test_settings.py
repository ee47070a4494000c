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
    assert "judge.devices" not in rows and "run.seed" not in rows  # the run's one seed is the judge's branch's
    assert rows["judge.seed"] == ("42", "default")
    assert not archive.exists()  # nothing was opened, called or judged


def test_the_judge_is_handed_the_search_branch_whole():
    import dataclasses

    from kernelevo.evolution.options import OptimizeOptions, judge_options
    from kernelevo.judge.api import JudgeOptions, TimingConfig

    branch = JudgeOptions(trials=2, shapes="exact", policy="strict", compile_baseline=False,
                          timing=TimingConfig(max_seconds=0.4), executor="local", seed=7)
    options = OptimizeOptions(TASK, ("m",), ("cpu",), Path("a"), Path("o"), Path("c"), judge=branch)
    judged = judge_options(options, ("cpu",))
    assert judged == dataclasses.replace(branch, devices=("cpu",), sol=True) and options.seed == 7
    assert run_cli("optimize", "--help").returncode == 0


def _flag_defaults(command) -> dict[str, object]:
    import typer.main

    return {p.name: p.default for p in typer.main.get_command(command).params}


def test_one_place_decides_each_default_and_help_names_it(monkeypatch):
    """A flag left out sets nothing, so the tree's default stands; the default --help shows must be that one."""
    from kernelevo.cli.bench import BENCH_FLAGS, bench_app
    from kernelevo.cli.optimize import OPTIMIZE_FLAGS, optimize
    from kernelevo.cli.whole import ASSEMBLE_FLAGS, assemble
    from kernelevo.evolution.settings import resolve, tree

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    leaves = dict(tree(resolve(TASK, {"run.device": "cpu"}, config=None).options))
    import typer

    bench_run = typer.Typer()
    bench_run.command()(next(c.callback for c in bench_app.registered_commands if c.callback.__name__ == "run"))
    checked = 0
    for command, flags in ((optimize, OPTIMIZE_FLAGS), (bench_run, BENCH_FLAGS), (assemble, ASSEMBLE_FLAGS)):
        if not isinstance(command, typer.Typer):
            app = typer.Typer()
            app.command()(command)
            command = app
        for name, default in _flag_defaults(command).items():
            path = flags.get(name)
            if path in leaves and default is not None and default != []:
                assert type(leaves[path])(default) == leaves[path], (name, default, path, leaves[path])
                checked += 1
    assert checked >= 30


def test_overrides_reach_their_leaf_and_an_unknown_one_is_refused(monkeypatch):
    import pytest

    from kernelevo.evolution.settings import SettingsError, resolve

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the first key set picks the model
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    found = resolve(TASK, {"run.device": "cpu", "judge.timing.max_seconds": 0.3, "budget.generations": 2,
                           "search.islands": 3, "judge.seed": 5}, config=None)
    options, origins = found.options, dict(found.origins)
    assert (options.judge.timing.max_seconds, options.budget.generations, options.settings.islands) == (0.3, 2, 3)
    assert options.seed == 5 and options.devices == ("cpu",) and origins["run.devices"] == "flag"
    assert options.models == ("openai:gpt-6.2-sol",) and origins["run.models"] == "$OPENAI_API_KEY"  # by the key set
    with pytest.raises(SettingsError, match="no setting judge.trails"):
        resolve(TASK, {"run.device": "cpu", "judge.trails": 3}, config=None)
    with pytest.raises(SettingsError, match="--format nvrtc needs a GPU"):
        resolve(TASK, {"run.device": "cpu", "run.fmt": "nvrtc"}, config=None)


def test_the_judge_alone_takes_no_model_and_no_candidate_format(tmp_path, monkeypatch):
    """An assembly or a rejudge resolves the same tree, but asks for no candidates: kernelevo.toml's format and a
    missing API key are not its errors."""
    import pytest

    from kernelevo.evolution.settings import SettingsError, resolve

    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    config = tmp_path / "kernelevo.toml"
    config.write_text('format = "nvrtc"\nexecutor = "ray"\n')
    judged = resolve(TASK, {"run.devices": ("cpu",), "judge.executor": "local"}, config, search=False).options
    assert judged.models == () and judged.fmt == "nvrtc" and judged.judge.executor == "local"
    with pytest.raises(SettingsError, match="--format nvrtc needs a GPU"):
        resolve(TASK, {"run.devices": ("cpu",), "judge.executor": "local", "run.models": ("m",)}, config)


def test_a_resumed_bench_keeps_its_seed():
    """Its tasks not yet searched draw from the seed the bench started with, whatever --seed defaults to now."""
    from kernelevo.archive.records import BenchRecord
    from kernelevo.evolution.drivers.bench import BenchOptions, _as_stored
    from kernelevo.evolution.options import OptimizeOptions

    search = OptimizeOptions(TASK, ("m",), ("cpu",), Path("a"), Path("o"), Path("c"))
    bench = BenchRecord("b1", "suite", "search", {"seed": 0, "models": ["m"]}, "cpu", "", "running", 0.0, None)
    resumed = _as_stored(bench, BenchOptions(suite=Path("suite"), search=search, resume="b1"))
    assert search.seed == 42 and resumed.search.seed == 0 and resumed.search.models == ("m",)
