"""The attempt notebook (evolution/attempts.py) and the model's account of a kernel, on rows as the
archive returns them; the latest analysis per island (RunState.context). Pure, CPU only."""
from kernelevo.agent.operators import first_prompt
from kernelevo.agent.prompting import Context, Target, TaskView
from kernelevo.agent.replies import account_of, idea_of
from kernelevo.archive.records import KernelRecord
from kernelevo.archive.store import Archive
from kernelevo.evolution import attempts
from kernelevo.evolution.state import RunState
from conftest import variant_of

SRC = "import torch\n\nSRC = r'''\nvoid f(float* y) {\n    y[0] = 1.0f;\n}\n'''\n"


def row(kid, operator="mutate", parents=(), verdict="ok", speed=1.0, problem="", account="", source=None,
        thinking=""):
    return KernelRecord(id=kid, task_id=1, run_id="r", source=SRC if source is None else source, source_hash="",
                        format="c", operator=operator, llm_call_id=None, generation=0, island=0, origin="run",
                        stepping_stone=False, stone_reason="", niche="", descriptors=None, thinking=thinking,
                        problem=problem, claims=None, created_at=0.0, account=account, parents=tuple(parents),
                        verdict=verdict if not problem else None, reason="" if verdict == "ok" else "value_mismatch",
                        message="", speedup_eager=speed if verdict == "ok" else None,
                        speedup_eager_ci=[speed * 0.9, speed * 1.1])


def test_attempts_on_a_kernel_cover_its_tune_family_newest_first_and_bounded():
    rows = [row(1, "translate", account="Idea: one pass."), row(2, parents=[1], speed=0.5, account="Idea: float4."),
            row(3, "tune", parents=[1], speed=1.1, thinking="BLOCK=128"), row(4, parents=[3], verdict="incorrect"),
            row(5, parents=[1], problem="copy: the same code as kernel 2, comments and layout aside"),
            row(6, "crossover", parents=[2, 9]), row(7, parents=[1], source=SRC.replace("1.0f", "2.0f"))]
    assert attempts.family(3, rows) == {1, 3} and attempts.family(1, rows) == {1, 3}
    lines = attempts.on_kernel(3, rows)
    assert [line.split(" (")[0] for line in lines] == ["- kernel 7", "- kernel 5", "- kernel 4", "- kernel 2"]
    assert "y[0] = 1.0f;` -> `y[0] = 2.0f;" in lines[0]  # no account: what changed, from the diff
    assert "your reply was the same code as kernel 2" in lines[1]
    assert "incorrect (value_mismatch)" in lines[2] and "float4. -> correct, 0.50x (0.45-0.55) eager" in lines[3]
    assert len(attempts.on_kernel(1, rows, limit=2)) == 2 and attempts.count_on(1, rows) == 4
    assert attempts.on_kernel(6, rows) == ()


def test_replies_elsewhere_that_copied_a_kernel_are_one_line_of_its_attempts():
    rows = [row(1, "translate"), row(2, parents=[1], speed=0.4)] + [
        row(k, "translate", problem="copy: the same code as kernel 1, comments and layout aside") for k in (3, 4, 5)]
    lines = attempts.on_kernel(1, rows)
    assert len(lines) == 2 and lines[1].startswith("- kernels 5, 4, 3 (translate): your replies were the same code as "
                                                   "kernel 1")
    first = attempts.translations(rows)
    assert [line.split(" (")[0] for line in first] == ["- kernel 5", "- kernel 4", "- kernel 3", "- kernel 1"]


def test_the_account_is_the_prose_before_the_code_and_its_idea_one_sentence():
    text = "The row is read twice.\n**Idea:** read each row once with an online max.\n\n```python\nx\n```\nafter"
    assert account_of(text) == "The row is read twice.\n**Idea:** read each row once with an online max."
    assert idea_of(account_of(text)) == "read each row once with an online max."
    assert idea_of("Fuse the two passes. Then vectorise.") == "Fuse the two passes."
    # a long analysis is cut, its Idea: line at the end kept (it named such a kernel by the analysis' first words)
    long = ("## Analysis\n\nBoth kernels are slow. " + "The tile spills. " * 300
            + "\n\nIdea: three lean kernels.\n```python\nx\n```")
    assert "[...]" in account_of(long) and idea_of(account_of(long)) == "three lean kernels."
    straddling = "x " * 1496 + "\nIdea: three lean kernels, each short.\n```python\nx\n```"  # the cut falls in it
    assert idea_of(account_of(straddling)) == "three lean kernels, each short."
    # the model's own words come back as written: only emphasis and code marks come off
    assert idea_of("**Idea:** writes x * rms * w * silu(g) from `silu_gate`.") == "writes x * rms * w * silu(g) from silu_gate."
    assert account_of("Fix the tail.\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n") == "Fix the tail."
    assert len(idea_of("x" * 500)) <= 220


def test_the_prompt_a_call_would_send_is_known_before_it_is_sent():
    ctx = Context(TaskView("t", "import torch\n", "float32[4]", "[]"), Target("c", "cpu"))
    kernel = variant_of("import torch\n", "c", kernel_id=4)
    assert first_prompt("mutate", ctx, (kernel,), "whole") != first_prompt("mutate", ctx, (kernel,), "diff")
    told = first_prompt("translate", ctx, (attempts.lines([row(1, "translate")], [], 6),), "whole")
    assert "kernel 1 (translate)" in told[-1].content and "kernel 1" not in first_prompt("translate", ctx, (), "whole")[-1].content


def test_an_island_shows_its_latest_analysis_and_reflect_leaves_out_its_own(tmp_path):
    archive = Archive.open(tmp_path / "a.sqlite")
    task_id = archive.add_task("t", "import torch\n", "h" * 64)
    run_id = archive.start_run(task_id, {}, 0, "cpu", "cpu", "2", "")
    ids = [archive.add_kernel(task_id, f"# {i}\n" + SRC, "c", "translate", run_id=run_id, island=i % 2) for i in range(4)]
    for text, variants in (("old of island 0", [ids[0], ids[1]]), ("island 1", [ids[1], ids[0]]),
                           ("new of island 0", [ids[2], ids[3]])):
        archive.add_reflection(run_id, None, text, variants)
    ctx = Context(TaskView("t", "import torch\n", "float32[4]", "[]"), Target("c", "cpu"))
    state = RunState(archive, run_id, None, task_id, ctx, tmp_path / "run", "c")
    for member in judged_members(archive, run_id):
        state.population.add(member)
    shown = state.context(0, "mutate").insights
    assert [s.rsplit("\n", 1)[1] for s in shown] == ["new of island 0", "island 1"]  # the old one is replaced
    assert shown[0].startswith(f"Written after comparing A = kernel {ids[2]} (1.00x), B = kernel {ids[3]} (1.00x)")
    assert [s.rsplit("\n", 1)[1] for s in state.context(0, "reflect").insights] == ["island 1"]
    assert [s.rsplit("\n", 1)[1] for s in state.context(1, "reflect").insights] == ["new of island 0"]
    archive.close()


def judged_members(archive, run_id):
    from dataclasses import replace

    from kernelevo.evolution.state import member_from_row

    return [member_from_row(replace(r, verdict="ok", speedup_eager=1.0)) for r in archive.kernels(run_id=run_id)]
