"""Ctrl-C in a run, in this process on the CPU: pressed while the search waits on a judgement, or while the best
is re-judged, it leaves the run 'stopped' with its reason, and a resume finishes it without asking again for
a reply it already holds. The key is simulated where the main thread is at that moment (a callback it runs
raises KeyboardInterrupt, as the signal handler would), so the run's one Ctrl-C path is what is tested."""
import dataclasses
import itertools

import pytest
from kernelevo.archive.store import Archive
from llm_server import ScriptedServer, kernel_replies
from test_optimize import KERNELS, TASK, USAGE, environment


def _options(tmp_path):
    from kernelevo.evolution.budget import BudgetLimits
    from kernelevo.config import load_config
    from kernelevo.evolution.options import OptimizeOptions, SearchSettings
    from kernelevo.judge.api import JudgeOptions, TimingConfig

    return OptimizeOptions(task_path=TASK, models=("scripted",), devices=("cpu",), archive_path=tmp_path / "archive.sqlite",
                           out_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
                           config=load_config(tmp_path / "kernelevo.toml"),
                           judge=JudgeOptions(seed=1, trials=2, timing=TimingConfig(max_seconds=0.2), compile_baseline=False,
                                              bounds="off"),
                           settings=SearchSettings(children_per_generation=4, llm_concurrency=1),
                           budget=BudgetLimits(max_llm_calls=2, generations=1, plateau_generations=9))


def _served(tmp_path, monkeypatch):
    """The scripted model (good kernels, then chunked ones) and the run's options, its environment set."""
    server = ScriptedServer(responder=kernel_replies(itertools.repeat(KERNELS["good"]), itertools.repeat(KERNELS["chunked"]),
                                                     KERNELS["good"], USAGE))
    for key, value in environment(server, tmp_path).items():
        monkeypatch.setenv(key, value)
    return server, _options(tmp_path)


def _key_pressed(when):
    def callback(event) -> None:
        if when(event):
            raise KeyboardInterrupt
    return callback


def _stopped(archive_path, run_id: str) -> None:
    with Archive.open_readonly(archive_path) as archive:
        run = archive.run(run_id)
        events = [e.kind for e in archive.events(run_id)]
    assert (run.status, run.stop_reason) == ("stopped", "interrupted (Ctrl-C)")
    assert events[-1] == "stopped" and "finished" not in events


def test_ctrl_c_leaves_the_run_stopped_and_a_resume_finishes_it(tmp_path, monkeypatch):
    """Pressed while the run is prepared (its embedder loading), then in the resumed run's search (the
    display's first refresh after a reply came in), then in the next one's final judgement; the third resume
    finishes with the two calls the budget allows, none asked twice."""
    from kernelevo.evolution.loop import optimize
    from kernelevo.evolution.outcome import EXIT_BUDGET, Interrupted

    server, options = _served(tmp_path, monkeypatch)
    try:
        with pytest.raises(Interrupted) as stopped:
            optimize(options, on_status=_key_pressed(lambda text: text.startswith("embedder:")))
        run_id = stopped.value.run_id
        _stopped(options.archive_path, run_id)
        resume = dataclasses.replace(options, resume=run_id, models=())
        with pytest.raises(Interrupted):
            optimize(resume, on_progress=_key_pressed(lambda progress: progress.calls >= 1))
        _stopped(options.archive_path, run_id)
        with pytest.raises(Interrupted):
            optimize(resume, on_status=_key_pressed(lambda text: text.startswith("re-judging kernel")))
        _stopped(options.archive_path, run_id)

        resumed = optimize(resume)
        with Archive.open_readonly(options.archive_path) as archive:
            run = archive.run(run_id)
            calls = archive.spend(run_id).calls
        assert resumed.run_id == run_id and resumed.exit_code == EXIT_BUDGET and resumed.written
        assert run.status == "budget" and calls == 2 == len(server.requests)  # no reply was asked for twice
    finally:
        server.close()


def test_a_bench_stop_reaches_a_final_judgement_under_way(tmp_path, monkeypatch):
    """A bench's stop is raised from the display's callback; the final judgement (minutes for a large task under
    memcheck) now calls it every half second while it waits, so a task there stops like a searching one, its run
    'stopped', and a resume judges the best again and finishes without asking for a reply twice. Before, such a
    task outlived the bench's grace and was left as after a kill."""
    from kernelevo.evolution.loop import optimize
    from kernelevo.evolution.outcome import EXIT_BUDGET, Interrupted

    server, options = _served(tmp_path, monkeypatch)
    try:
        with pytest.raises(Interrupted) as stopped:
            optimize(options, on_progress=_key_pressed(lambda progress: progress.status == "final judgement"))
        run_id = stopped.value.run_id
        _stopped(options.archive_path, run_id)
        with Archive.open_readonly(options.archive_path) as archive:
            assert [e.kind for e in archive.events(run_id)].count("final") <= 1  # stopped while judging
        resumed = optimize(dataclasses.replace(options, resume=run_id, models=()))
        assert resumed.exit_code == EXIT_BUDGET and resumed.written and len(server.requests) == 2
    finally:
        server.close()


def test_ctrl_c_ends_a_bench_whose_task_never_stops(tmp_path):
    """A task's search stuck where it never looks at the key (once seen on two H200s: a resumed search silent for
    460 s): Ctrl-C waits the grace for it, says so, and the bench exits 130, not held open by that thread; the task
    is left 'running', which a resume takes up as after a kill."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "scale.py").write_text(TASK.read_text())
    code = ("import signal, threading, sys\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest-xdist's workers ignore it, and so would we\n"
            "from kernelevo.evolution.drivers import bench\n"
            "bench.STOP_GRACE_S = 1.0\n"
            "def stuck(*args):\n"
            f"    open({str(tmp_path / 'entered')!r}, 'w').close()\n"
            "    threading.Event().wait()  # never ticks\n"
            "bench._search_task = stuck\n"
            "from kernelevo.cli import main\n"
            f"sys.argv = ['kernelevo', 'bench', {str(tmp_path / 'suite')!r}, '--device', 'cpu', '--model',\n"
            f"            'replay:{tmp_path / 'replies'}', '--archive', {str(tmp_path / 'a.sqlite')!r},\n"
            f"            '--out', {str(tmp_path / 'out')!r}, '--no-compile-baseline']\n"
            "main()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None and not (tmp_path / "entered").exists():
        time.sleep(0.2)
    time.sleep(1.0)  # the main thread past starting the task's thread, waiting on it
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "did not stop within 1 s" in err and "--resume" in err, err
    with Archive.open_readonly(tmp_path / "a.sqlite") as store:
        (bench,) = store.benches()
        assert bench.status == "stopped" and store.bench_tasks(bench.id)[0].status == "running"
