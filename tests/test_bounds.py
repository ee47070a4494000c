"""The bounds trial (judge/run/bounds.py) on its own: what it runs, how it reads a checker's report, and
that a checked process that never ends cannot hold the worker. The verdicts it gives inside the judge
are in test_generality.py (fixtures/general/out_of_bounds__*) and, on a GPU, test_gpu_cheats.py."""
import pytest

from kernelevo.judge.run import bounds
from kernelevo.judge.job import Job

from conftest import FIXTURES

MEMCHECK = """KERNELEVO-BOUNDS-SHAPE: the task's own shape: float32[2048, 4096]
KERNELEVO-BOUNDS-SHAPE: test inputs 1: float32[7, 33]
========= Invalid __global__ read of size 4 bytes
=========     at relu_scale_tail+0x90
=========     by thread (231,0,0) in block (0,0,0)
=========     Address 0x7f3a4c0003a4 is out of bounds
=========     and is 4 bytes after the nearest allocation at 0x7f3a4c000200 of size 420 bytes
KERNELEVO-BOUNDS-SHAPE: derived shape (leading dimension 2048 -> 2039): float32[2039, 4096]
========= ERROR SUMMARY: 25 errors
"""


def test_a_memcheck_report_names_the_kernel_the_access_and_the_shape():
    found = bounds.parse_memcheck(MEMCHECK)
    assert found == bounds.Access("relu_scale_tail", "read", 4, "__global__", "test inputs 1: float32[7, 33]")
    outcome = bounds.Outcome("compute-sanitizer memcheck", found, "", 1.0, bounds.excerpt(MEMCHECK, found))
    assert bounds.message(outcome).startswith("bounds trial (compute-sanitizer memcheck): `relu_scale_tail` made "
                                              "an out-of-bounds read of 4 bytes (global memory) on test inputs 1")
    assert outcome.report.startswith("Invalid __global__ read") and "nearest allocation" in outcome.report
    assert bounds.parse_memcheck(MEMCHECK.replace("Invalid __global__ read", "Program hit an error")) is None


def test_a_checker_error_that_is_no_access_is_named_not_taken_for_in_bounds():
    """memcheck exits with its error code for errors that are not an invalid access (a misaligned address,
    an error in a library's kernel): the trial then says what it saw and that no index was checked."""
    report = MEMCHECK.replace("Invalid __global__ read of size 4 bytes", "Program hit cudaErrorLaunchFailure")
    assert bounds.parse_memcheck(report) is None
    assert bounds.first_error("========= COMPUTE-SANITIZER\n" + report) == "Program hit cudaErrorLaunchFailure"
    assert bounds.first_error("KERNELEVO-BOUNDS-DONE\n========= ERROR SUMMARY: 0 errors\n") == "no report"


def test_asan_reports_count_only_in_the_candidates_own_code():
    report = ("KERNELEVO-BOUNDS-SHAPE: derived shape (x): float32[3, 5]\n==1==ERROR: AddressSanitizer: "
              "heap-buffer-overflow on address 0x6 at pc 0x7 bp 0x8 sp 0x9\nWRITE of size 8 at 0x6 thread T0\n"
              "    #0 0x7f01 in scale {where}\n")
    mine = report.format(where="/cache/c/tmpab/candidate.c:12")
    assert bounds.parse_asan(mine, "/cache") == bounds.Access("scale", "write", 8, "heap-buffer-overflow",
                                                             "derived shape (x): float32[3, 5]")
    assert bounds.parse_asan(report.format(where="(/cache/c/ab12.so+0x11c5)"), "/cache").kernel == "scale"
    # an error in torch or the interpreter is not the candidate's to answer for
    assert bounds.parse_asan(report.format(where="(/usr/lib/libtorch_cpu.so+0x11c5)"), "/cache") is None


def test_what_it_applies_to():
    assert bounds.applies(Job(format="c"), "cpu") == ""
    assert "only C candidates" in bounds.applies(Job(format="triton"), "cpu")
    assert bounds.applies(Job(format="torch"), "cuda:0") == "no kernel of its own"


@pytest.mark.skipif(bounds.asan_runtime() is None, reason="the C compiler has no AddressSanitizer runtime")
def test_the_cpu_checker_preloads_asan_and_builds_with_it(tmp_path):
    argv, env, checker = bounds.command(tmp_path / "job.json", "cpu")
    assert checker == "AddressSanitizer" and env["LD_PRELOAD"].split()[0] == bounds.asan_runtime()
    assert "libstdc++" in env["LD_PRELOAD"] and env["KERNELEVO_C_SANITIZE"] == "address"
    assert argv[1:5] == ["-s", "-P", "-m", "kernelevo.judge.run.bounds_target"]  # its folder is not on its import path


@pytest.mark.skipif(bounds.asan_runtime() is None, reason="the C compiler has no AddressSanitizer runtime")
def test_a_checked_process_that_never_ends_is_killed_with_its_children(tmp_path):
    """The candidate sleeps only where it is checked: the trial gives up at its limit, says so, and
    returns (the checked process held the pipe a plain kill of the front process would wait on)."""
    task = FIXTURES / "cpu" / "task_scale.py"
    source = (FIXTURES / "cpu" / "ok_c.py").read_text().replace(
        "class ModelNew", "import os\nimport time\nif os.environ.get('KERNELEVO_C_SANITIZE'):\n    time.sleep(600)\n\n\nclass ModelNew", 1)
    candidate = tmp_path / "sleeps.py"
    candidate.write_text(source)
    job = Job(task_source=task.read_text(), task_path=str(task), candidate_source=source,
              candidate_path=str(candidate), seed=42, cache_dir=str(tmp_path / "cache"), format="c",
              shapes="general", candidate_hash="sleeps")
    outcome = bounds.run(job, "cpu", limit_s=5)  # returns at all: not stuck on the orphan's pipe
    assert outcome.access is None and "not finished within 5 s: indices not checked" in outcome.note


def test_the_judging_process_takes_the_launchers_report_not_the_workers_word():
    """The bounds trial as the launcher reported it to the judging process decides (run/launcher.py); a
    worker that said every index was in bounds without a report has its note replaced by 'not checked'."""
    from kernelevo.judge.run import launcher

    job = Job(format="c", bounds=True)
    said = {"verdict": "ok", "notes": ["bounds trial: AddressSanitizer saw every index in bounds on 5 shapes (1.0 s)",
                                       "shapes: 5 checked"], "evidence": {"bounds": {"checker": "AddressSanitizer"}}}
    assert launcher.verdict(said, job, "cpu", None) is said  # no launcher: the worker's word is all there is
    unheard = launcher.verdict(said, job, "cpu", [])
    assert unheard["verdict"] == "ok" and "bounds" not in unheard["evidence"]
    assert unheard["notes"] == ["shapes: 5 checked", "bounds trial: its launcher reported no outcome: indices not checked"]
    access = bounds.Access("peek", "read", 4, "heap-buffer-overflow", "the task's own shape: float32[4, 8]")
    report = {"checker": "AddressSanitizer", "access": access.__dict__, "note": "", "seconds": 2.0, "report": "READ of size 4",
              "job": launcher.digest(job, "cpu")}
    seen = launcher.verdict(said, job, "cpu", [report])
    assert (seen["verdict"], seen["reason"]) == ("rejected", "out_of_bounds") and "`peek`" in seen["message"]
    assert seen["evidence"]["bounds"]["kernel"] == "peek" and seen["evidence"]["verdict_before"] == "ok"
    assert launcher.verdict(said, Job(format="c", bounds=False), "cpu", [report]) is said  # not asked for


def test_a_report_on_another_job_than_the_workers_is_a_forged_report():
    """Each report names the job the launcher checked (launcher.digest): one the worker's process had it check
    in place of its own (another candidate source, the same task) is no evidence for this one, and the asking
    itself is tampering: only code in the worker's process talks to its launcher."""
    from kernelevo.judge.run import launcher

    job = Job(format="c", bounds=True, task_source="task", candidate_source="peeks past each row")
    other = Job(format="c", bounds=True, task_source="task", candidate_source="stays in bounds")
    said = {"verdict": "ok", "notes": [], "evidence": {}}
    clean = {"checker": "AddressSanitizer", "access": None, "seconds": 1.0,
             "note": "bounds trial: AddressSanitizer saw every index in bounds on 5 shapes (1.0 s)"}
    assert launcher.verdict(said, job, "cpu", [{**clean, "job": launcher.digest(job, "cpu")}])["verdict"] == "ok"
    for asked in (launcher.digest(other, "cpu"), launcher.digest(job, "cuda:0")):  # another candidate; another device
        forged = launcher.verdict(said, job, "cpu", [{**clean, "job": asked}])
        assert (forged["verdict"], forged["reason"]) == ("rejected", "forged_report"), forged
    moved = Job(format="c", bounds=True, task_source="task", candidate_source="peeks past each row", task_path="/elsewhere")
    assert launcher.digest(job, "cpu") == launcher.digest(moved, "cpu")
    assert launcher.digest(job, "cuda:3") == launcher.digest(job, "cuda:0")  # the judging process's cuda:3 is its worker's cuda:0


@pytest.mark.skipif(bounds.asan_runtime() is None, reason="the C compiler has no AddressSanitizer runtime")
def test_the_bounds_trials_time_is_not_the_runs(tmp_path, cache_dir):
    """The checker has a limit of its own; its time is added to the run's, once (drive.BOUNDS_SLACK_S). Charged
    to the run, a Triton conv whose autotuner ran under memcheck used the whole run limit, and two kernels
    that had passed every trial were refused `run_timeout` in a run's final judgement. Here the candidate
    is slow only where it is checked (built with AddressSanitizer): longer than the run limit, well within the checker's."""
    from kernelevo.judge.api import Judge, JudgeOptions
    from kernelevo.judge.measure.timing import TimingConfig
    from kernelevo.judge.run.executor import WorkerLimits
    from kernelevo.tasks import load_task

    slow = ("#include <time.h>\n#ifdef __SANITIZE_ADDRESS__\nstatic int slept;\n#endif\n"
            "void scale_relu(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t cols) {\n"
            "#ifdef __SANITIZE_ADDRESS__\n    if (!slept) { struct timespec t = {30, 0}; nanosleep(&t, 0); slept = 1; }\n#endif\n")
    source = (FIXTURES / "cpu" / "ok_c.py").read_text().replace(
        "void scale_relu(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t cols) {\n", slow, 1)
    assert "nanosleep" in source
    candidate = tmp_path / "slow_when_checked.py"
    candidate.write_text(source)
    options = JudgeOptions(devices=("cpu",), compile_baseline=False, concurrency=1,
                           timing=TimingConfig(min_reps=5, max_seconds=0.1, target_rel_ci=0.05),
                           limits=WorkerLimits(build=120, run=25))  # the trials take seconds; loaded, up to ~8
    with Judge(cache_dir, options) as judge:
        e = judge.evaluate(load_task(FIXTURES / "cpu" / "task_scale.py"), candidate, final=True)
    assert (e.verdict, e.reason) == ("ok", ""), (e.message, e.excerpt)
    assert any(n.startswith("bounds trial: AddressSanitizer saw every index in bounds") for n in e.notes), e.notes
