"""`optimize MODEL.py --parts 2` with scripted C replies, on the CPU: splits, searches, assembles and
verifies; then `assemble --json` of the same bench. (In a file of its own, apart from test_assemble.py's
tests of the pieces: under --dist loadfile a file runs on one worker, and this run alone takes as long as
all of those.)"""
import json

import torch

from kernelevo.tasks import load_module, load_task
from llm_server import ScriptedServer, Step, request_text
from test_assemble import KERNELS, MODELS, model_and_assembled
from test_optimize import USAGE, cli, environment


def _replies(body: dict) -> Step:
    text = request_text(body)
    task = text.split("# The task: ", 1)[1].split("\n", 1)[0].strip()
    kernel = (KERNELS / f"{task}__c.py").read_text()
    analysis = "## Analysis\nIt fuses the norm.\n\n## Kernel\n" if "measured kernels" in text.rsplit("# Your job", 1)[-1] else ""
    return Step(text=f"{analysis}Here it is.\n\n```python\n{kernel}```\n", usage=USAGE)


def test_optimize_in_parts_splits_searches_assembles_and_verifies(tmp_path):
    server = ScriptedServer(responder=_replies)
    try:
        env = environment(server, tmp_path)
        done = cli(["optimize", str(MODELS / "mlp_stack.py"), "--parts", "2", "--min-speedup", "0", "--device", "cpu",
                    "--model", "scripted", "--config", str(tmp_path / "kernelevo.toml"),
                    "--archive", str(tmp_path / "archive.sqlite"), "--out", str(tmp_path / "out"),
                    "--children", "1", "--generations", "1", "--max-llm-calls", "2", "--concurrency", "2",
                    "--timing-seconds", "0.2", "--trials", "2", "--no-compile-baseline", "--seed", "1"], env)
    finally:
        server.close()
    result = json.loads((tmp_path / "out" / "mlp_stack_kernelevo.json").read_text())
    assert result["verdict"] == "ok", result
    # every part verified; whether it is placed is the A/B of the model with and without it, timed
    assert [(p["task"], p["sites"]) for p in result["parts"]] == [("mlp_block", 4), ("gated_head", 1)], \
        (result["left_as_they_were"], done.stdout[-3000:])  # a part left out says why
    for p in result["parts"]:
        # placed where its A/B gain is beyond noise, unless the model with every such part in place is not
        # (the parts' gains timed one by one on 2 busy cores can each pass while their sum does not)
        low, high = p["in_place_effect"][1:]
        together = (p["reverted"] or "").startswith("in place together")
        assert p["in_place"] == (low > 1.0 and not together), p
        assert p["in_place"] or p["reverted"].startswith(("no gain in place", "in place together")), p
    # the user's loop in each mode of the CPU, host included; the headline or, with nothing placed, what to run
    assert set(result["modes"]) == {"eager", "default"}
    assert result["compiled_from_cache"]["original@default"] is True  # what the warm job compiled first
    assert all(row["original_ms"][1] <= row["original_ms"][0] <= row["original_ms"][2] for row in result["modes"].values())
    placed = any(p["in_place"] for p in result["parts"])
    assert done.returncode == (0 if placed else 3), done.stderr[-3000:]
    if placed:
        assert result["speedup"][1] > 1.0 and result["chosen_mode"] in result["modes"], result
        # a compiled headline mode was judged again as kernelevo_compile runs it (eager's is the file's judgement)
        run = result["verified_as_run"]
        assert (run is None) == (result["chosen_mode"] == "eager"), result
        assert run is None or (run["mode"] == result["chosen_mode"] and run["verdict"] == "ok" and run["trials"] >= 2)
    else:
        assert result["verified_as_run"] is None
        assert result["nothing_placed"].startswith("nothing placed: ") and result["speedup"] is None, result
        assert result["chosen_mode"] == result["original_best_mode"]
        assert result["nothing_placed"] in " ".join(done.stdout.split())
    written = (tmp_path / "out" / "mlp_stack_kernelevo.py").read_text()
    assert f"KERNELEVO_MODE = {result['chosen_mode']!r}".replace("'", '"') in written
    # its header's figures say whose they are: the kernels in place, or the parts tried and all reverted
    assert ("the original -> with kernels: " if placed else "the original -> with the parts tried in place (none kept): ") \
        in written
    split = json.loads((tmp_path / "out" / "mlp_stack_parts" / "split.json").read_text())
    assert [t["task"] for t in split["tasks"]] == ["mlp_block.py", "gated_head.py"]
    # the parts in place may hold all of the model's time as measured (then there is no Amdahl bound)
    assert 0 < result["parts"][0]["share"] <= 1 and (result["amdahl_bound"] is None or result["amdahl_bound"] >= 1)
    assert "ms per forward, host included" in done.stdout
    # the model's page: its time as parts before and after, each part linked to its run's report
    page = (tmp_path / "out" / "mlp_stack_kernelevo.html").read_text()
    assert result["report"] == str(tmp_path / "out" / "mlp_stack_kernelevo.html")
    assert 'id="before-mlp_block"' in page and 'id="after-gated_head"' in page
    assert ("Verified as <code>kernelevo_compile(model)</code> runs it" in page) == bool(result["verified_as_run"])
    for part in ("mlp_block", "gated_head"):
        link = page.split(f'<a href="reports/{part}_', 1)[1].split('"', 1)[0]
        assert (tmp_path / "out" / "reports" / f"{part}_{link}").is_file()
    # the drop-in matches the model on the model's own inputs
    task = load_task(MODELS / "mlp_stack.py")
    module = load_module((tmp_path / "out" / "mlp_stack_kernelevo.py").read_text(), "assembled.py", "candidate")
    reference, new, x = model_and_assembled(module, task, seed=2)
    with torch.no_grad():
        assert torch.allclose(new(x), reference(x), atol=1e-5, rtol=1e-5)
    assert "by device time only" in " ".join(done.stdout.split())
    # the same bench assembled again by `assemble --json`, timed in eager alone: the user's loop, as data
    again = cli(["assemble", str(MODELS / "mlp_stack.py"), "--bench", result["bench"], "-o", str(tmp_path / "again.py"),
                 "--device", "cpu", "--modes", "eager", "--min-speedup", "0", "--no-compile-baseline", "--trials", "2",
                 "--timing-seconds", "0.2", "--archive", str(tmp_path / "archive.sqlite"),
                 "--config", str(tmp_path / "kernelevo.toml"), "--json"], env)
    data = json.loads(again.stdout)
    assert list(data["modes"]) == ["eager"] and data["chosen_mode"] == "eager" and data["verdict"] == "ok", data
    assert again.returncode == (3 if data["nothing_placed"] else 0), again.stderr[-2000:]
    assert (data["speedup"] is None) == bool(data["nothing_placed"])
    # each step said on stderr as it starts (minutes each on a GPU), and what each timing found
    said = " ".join(again.stderr.split())
    assert "judging mlp_stack.py with mlp_block, gated_head in place" in said, said[-2000:]
    assert "timing mlp_stack.py in eager, host included" in said and "ms per call: eager: assembled " in said
