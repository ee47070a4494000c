"""A would-be new best of the run is measured again in a fresh process before the search believes it.

The loop is driven by hand here: a stand-in judge whose futures the test completes, a real archive,
no LLM. Checked: the re-measurement is asked for, its figure replaces the first one, a kernel that
falls back is not the best, a tie is no improvement, and a resumed run rebuilds the same state.
"""
import concurrent.futures
import random
from types import SimpleNamespace

from kernelevo.agent.prompting import Context, Target, TaskView
from kernelevo.archive.store import Archive
from kernelevo.evolution import budget as budgets
from kernelevo.evolution.loop import Search
from kernelevo.evolution.novelty import HashingEmbedder, NoveltyGate
from kernelevo.evolution.options import SearchSettings
from kernelevo.evolution.state import RunState
from kernelevo.evaluation import Evaluation, TimingStats

from conftest import FIXTURES

SOURCE = (FIXTURES / "cpu" / "ok_c.py").read_text()


class StandInJudge:
    """Hands out futures and remembers what was asked; the test sets their results."""

    def __init__(self):
        self.options = SimpleNamespace(devices=("cpu",))
        self.jobs: list[tuple[str, concurrent.futures.Future]] = []  # (file name, future)
        self.profiles = 0

    def submit(self, task, path, device=None, profile=False, ncu=True, final=False, source=None, fmt=None):
        future = concurrent.futures.Future()
        self.jobs.append((path.name, future))
        return future

    def profile(self, task, path, evaluation, ncu=True):
        self.profiles += 1
        return concurrent.futures.Future()  # never done: the test does not wait for it


class StandInEnsemble:
    labels: list = []
    dropped: dict = {}
    instant = False  # a model that takes its time: calls overlap the judge

    def update(self, rows) -> None:
        pass


def measured(speedup: float, low: float, high: float) -> Evaluation:
    ms = 1.0 / speedup
    stats = TimingStats(median_ms=ms, p10_ms=0.9 * ms, p90_ms=1.1 * ms, min_ms=0.9 * ms, mean_ms=ms, n=20,
                        rel_ci=0.05)
    return Evaluation("ok", "", "passed", device="cpu", candidate=stats, speedup_eager=speedup,
                      speedup_eager_ci=(low, high), speedup_compile=speedup / 2)


def search_on(archive: Archive, run_id: str, task_id: int, tmp_path, judge: StandInJudge) -> Search:
    task = SimpleNamespace(name="task_scale")
    ctx = Context(TaskView("task_scale", "", "", "[]"), Target("c", "CPU"))
    state = RunState(archive, run_id, task, task_id, ctx, tmp_path / "runs" / run_id, "c")
    return Search(state, StandInEnsemble(), judge, SearchSettings(children_per_generation=100), budgets.Budget(),
                  NoveltyGate(HashingEmbedder()), random.Random(0))


def judged(search: Search, judge: StandInJudge, n: int, evaluation: Evaluation) -> concurrent.futures.Future:
    """Kernel variant `n` written and judged in the search with `evaluation`; returns the future of
    the next judge job asked for afterwards (a re-measurement), or None when none was asked for."""
    parents = (search.population.best().kernel_id,) if search.population.best() else ()
    search.children.submit("mutate" if parents else "translate", SOURCE + f"\nVARIANT = {n}\n", parents, 0, None)
    future = judge.jobs[-1][1]
    future.set_result(evaluation)
    asked = len(judge.jobs)
    search.children.judged(future)
    return judge.jobs[-1][1] if len(judge.jobs) > asked else None


def test_a_new_best_is_remeasured_before_it_counts_and_its_figure_replaces_the_first(tmp_path):
    archive = Archive.open(tmp_path / "archive.sqlite")
    task_id = archive.add_task("task_scale", "src", "hash")
    run_id = archive.start_run(task_id, {}, 0, "cpu", "CPU", "2", "")
    judge = StandInJudge()
    search = search_on(archive, run_id, task_id, tmp_path, judge)

    again = judged(search, judge, 1, measured(1.00, 0.95, 1.05))  # the first correct kernel: a new best too
    assert again is not None and judge.jobs[-1][0] == "k1.py" and search.population.best() is None
    again.set_result(measured(1.02, 0.97, 1.07))
    search.children.judged(again)
    assert search.population.best().kernel_id == 1 and search.population.best().figures.speedup_eager == 1.02

    # 1.78x in the search, 0.66x timed alone: never offered as the one to beat
    again = judged(search, judge, 2, measured(1.78, 1.52, 2.05))
    assert again is not None and search.population.best().kernel_id == 1 and 2 not in search.population
    search._refresh(reread=False)
    assert search.progress.remeasuring == 1 and search.progress.best_eager == 1.02
    again.set_result(measured(0.66, 0.60, 0.70))
    search.children.judged(again)
    assert search.population.best().kernel_id == 1 and search.population.get(2).figures.speedup_eager == 0.66
    assert search.stats["mutate"].improvements == 0

    # inside the incumbent's noise: a tie, no re-measurement, no improvement, the plateau goes on
    search.stopping.improved_at = -5
    assert judged(search, judge, 3, measured(1.06, 1.01, 1.11)) is None
    assert search.population.best().kernel_id == 1 and search.stopping.improved_at == -5
    assert search.stats["mutate"].improvements == 0

    # beyond the noise, and it holds when re-measured: the new best, on its second figure
    again = judged(search, judge, 4, measured(1.50, 1.45, 1.55))
    again.set_result(measured(1.45, 1.40, 1.50))
    search.children.judged(again)
    best = search.population.best()
    assert (best.kernel_id, best.figures.speedup_eager, best.figures.speedup_eager_ci) == (4, 1.45, (1.40, 1.50))
    assert search.stopping.improved_at == search.progress.generation and search.stats["mutate"].improvements == 1
    assert judge.profiles >= 1  # a new best is profiled, once confirmed

    stored = archive.kernel(4)
    assert [e.purpose for e in stored.evaluations] == ["search", "rejudge"]
    assert stored.evaluations[-1].speedup_eager_ci == [1.40, 1.50] and stored.stepping_stone
    assert not archive.kernel(2).stepping_stone
    events = [e.data for e in archive.events(run_id, "remeasure")]
    assert [(e["kernel"], e["best"]) for e in events] == [(1, True), (2, False), (4, True)]
    assert archive.counts(run_id).evaluations == 4  # re-measurements are not judged children

    # a kill while a new best waited for its re-measurement: the resumed run measures it again first
    assert judged(search, judge, 5, measured(3.0, 2.9, 3.1)) is not None
    resumed = search_on(archive, run_id, task_id, tmp_path, StandInJudge())
    assert resumed.state.unconfirmed.kernel_id == 5 and 5 not in resumed.population
    best = resumed.population.best()
    assert (best.kernel_id, best.figures.speedup_eager) == (4, 1.45) and resumed.population.get(2).figures.speedup_eager == 0.66
    archive.close()


def test_a_run_with_nothing_in_flight_draws_again_before_it_ends(tmp_path):
    """A plan whose drawn operators found no job (every pair crossed, one timed kernel for a reflection) does not end
    a run with nothing in flight at once: a replay plans only then, and ended with replies left."""
    from kernelevo.evolution.loop.search import LAST_DRAWS

    archive = Archive.open(tmp_path / "archive.sqlite")
    task_id = archive.add_task("task_scale", "src", "hash")
    run_id = archive.start_run(task_id, {}, 0, "cpu", "CPU", "2", "")
    search = search_on(archive, run_id, task_id, tmp_path, StandInJudge())
    answers = iter([False, False, True])  # no job twice, then a call that comes to nothing; no job after that
    planned = []
    search.planning.plan = lambda: planned.append(1) or next(answers, False)
    reason = search.run()
    assert reason.kind == budgets.StopKind.NOTHING_LEFT
    assert len(planned) == 1 + 2 + 1 + LAST_DRAWS  # the first plan, two more draws, the next turn's, then it ends
    archive.close()
