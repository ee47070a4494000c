"""`optimize MODEL.py --parts 1 --model replay:FOLDER` on the CPU, as the rounds of a search on a machine that
cannot reach a model run it: the first session writes the part's prompt and stops without assembling (a
part still searching is not a part without a kernel), the answered prompt is served on --resume, and only
then is the model assembled."""
import json
import os

from test_assemble import KERNELS, MODELS
from test_optimize import cli


def _optimize(tmp_path, *more: str):
    out = tmp_path / "out"
    return cli(["optimize", str(MODELS / "mlp_stack.py"), "--parts", "1", "--min-speedup", "0", "--device", "cpu",
                "--model", f"replay:{out / 'prompts'}", "--archive", str(tmp_path / "archive.sqlite"),
                "--out", str(out), "--children", "1", "--generations", "1", "--max-llm-calls", "1",
                "--modes", "eager", "--timing-seconds", "0.2", "--trials", "2", "--no-compile-baseline",
                "--seed", "1", *more], _offline(tmp_path))


def _offline(tmp_path) -> dict:
    """No key and no server: a call that went past the replay would fail."""
    env = dict(os.environ, KERNELEVO_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="100")
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"):
        env.pop(key, None)
    return env


def test_a_model_whose_part_waits_for_a_reply_is_assembled_only_once_it_is_answered(tmp_path):
    first = _optimize(tmp_path)
    said = " ".join((first.stdout + first.stderr).split())
    assert first.returncode == 0, first.stderr[-3000:]
    assert "1 part(s) wait for a reply, so the model is not assembled yet" in said, said[-2000:]
    assert not (tmp_path / "out" / "mlp_stack_kernelevo.json").exists()  # no "nothing placed" for an unsearched part
    (prompt,) = (tmp_path / "out" / "prompts" / "mlp_block").glob("0001.prompt.md")
    resume = said.split("--resume ", 1)[1].split("`", 1)[0]
    kernel = (KERNELS / "mlp_block__c.py").read_text()
    prompt.with_name("0001.reply.md").write_text(f"Here it is.\n\n```python\n{kernel}```\n")

    again = _optimize(tmp_path, "--parts-dir", str(tmp_path / "out" / "mlp_stack_parts"), "--resume", resume)
    result = json.loads((tmp_path / "out" / "mlp_stack_kernelevo.json").read_text())
    assert result["bench"] == resume and result["verdict"] == "ok", (result, again.stderr[-3000:])
    assert [p["task"] for p in result["parts"]] == ["mlp_block"], result["left_as_they_were"]
    assert again.returncode == (3 if result["nothing_placed"] else 0), again.stderr[-3000:]
    assert "wait for a reply" not in " ".join((again.stdout + again.stderr).split())
