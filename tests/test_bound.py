"""The speed of light ends a search: a task whose torch.compile is already near it gets no call unless
asked (--force), and a best kernel near it, ahead of the baseline, stops the run ("at the bound")."""
from kernelevo.agent.prompting import Opponent
from kernelevo.evolution import bound
from kernelevo.evolution.population import Variant

from test_optimize import TASK, environment, scripted_model


def _member(ms: float, ci: tuple[float, float]) -> Variant:
    return Variant(kernel_id=7, source="", format="c", operator="mutate", parents=(), island=0, generation=1,
                   verdict="ok", speedup_eager=3.0, speedup_compile=sum(ci) / 2, speedup_compile_ci=ci, ms=ms,
                   baseline="compile")


def test_a_compiler_near_the_bound_leaves_nothing_to_win():
    near = Opponent("compile", eager_ms=0.2, compiled_ms=0.105, bound_ms=0.1)
    assert bound.left_to_compiler(near).startswith("left to the compiler: torch.compile takes 0.1050 ms")
    assert "--force" in bound.left_to_compiler(near)
    assert bound.left_to_compiler(Opponent("compile", 0.2, 0.13, bound_ms=0.1)) == ""  # 1.3x: room left
    assert bound.left_to_compiler(Opponent("eager", 0.2, 0.105, bound_ms=0.1)) == ""  # ranked by eager
    assert bound.left_to_compiler(Opponent("compile", 0.2, 0.105)) == ""  # no bound measured
    assert bound.left_to_compiler(None) == ""


def test_a_best_kernel_at_the_bound_and_ahead_of_the_baseline_ends_the_search():
    assert bound.at_bound(_member(0.105, (1.2, 1.3)), 0.1).startswith("at the bound: kernel 7 takes 0.1050 ms")
    assert bound.at_bound(_member(0.105, (0.97, 1.05)), 0.1) == ""  # not ahead of torch.compile beyond noise
    assert bound.at_bound(_member(0.12, (1.2, 1.3)), 0.1) == ""  # 1.2x from the bound: room left
    assert bound.at_bound(None, 0.1) == "" and bound.at_bound(_member(0.105, (1.2, 1.3)), None) == ""


def test_a_run_on_a_task_left_to_the_compiler_spends_nothing(tmp_path, monkeypatch):
    """Any bound counts as near here (COMPILER_NEAR raised), so the real torch.compile baseline on the CPU
    (inductor's C++) decides the run before its first call."""
    from kernelevo.archive.store import Archive
    from kernelevo.evolution.budget import BudgetLimits
    from kernelevo.evolution.loop import optimize
    from kernelevo.evolution.options import OptimizeOptions
    from kernelevo.evolution.outcome import EXIT_LEFT
    from kernelevo.judge.measure.timing import TimingConfig
    from llm_server import ScriptedServer

    monkeypatch.setattr(bound, "COMPILER_NEAR", 1e9)
    server = ScriptedServer(responder=scripted_model())
    try:
        for key, value in environment(server, tmp_path).items():
            monkeypatch.setenv(key, value)
        options = OptimizeOptions(task_path=TASK, models=("scripted",), devices=("cpu",),
                                  archive_path=tmp_path / "archive.sqlite", out_dir=tmp_path / "out",
                                  cache_dir=tmp_path / "cache", config_path=tmp_path / "kernelevo.toml", trials=2,
                                  timing=TimingConfig(max_seconds=0.2), limits=BudgetLimits(max_llm_calls=3), force=False)
        said: list[str] = []
        outcome = optimize(options, on_status=said.append)
    finally:
        server.close()
    assert outcome.exit_code == EXIT_LEFT and outcome.reason.startswith("left to the compiler"), outcome.reason
    assert not server.requests  # not one call
    assert any(s.startswith("left to the compiler") for s in said)
    with Archive.open_readonly(tmp_path / "archive.sqlite") as archive:
        (run,) = archive.runs()
    assert run["status"] == "stopped" and run["stop_reason"] == outcome.reason
