"""benchmarks/kernelbench_sample.py: a task whose call does not fit the cap has its batch halved until it does,
and says so in a header line; the file stays a task kernelevo loads; bytes are counted on the meta device."""
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from kernelbench_sample import call_bytes, scaled  # noqa: E402

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


batch_size = 64
dim = 1024


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''


def test_a_task_over_the_cap_is_scaled_by_its_batch_and_says_so(tmp_path):
    from kernelevo.tasks import load_task

    assert call_bytes(TASK, "relu") == 2 * 64 * 1024 * 4  # its input and its output, float32
    source, record = scaled(TASK, "relu", cap=200 * 1024)
    assert record == {"bytes": 512 * 1024, "bytes_judged": 128 * 1024, "scaled_by": 4, "batch_size": [64, 16]}
    assert source.startswith("# kernelevo: batch_size 64 -> 16") and "\nbatch_size = 16\n" in source
    path = tmp_path / "relu.py"
    path.write_text(source)
    assert load_task(path).get_inputs()[0].shape == (16, 1024)
    same, kept = scaled(TASK, "relu", cap=2**30)
    assert same == TASK and kept["scaled_by"] == 1


def test_a_task_that_cannot_be_scaled_under_the_cap_is_refused():
    with pytest.raises(SystemExit, match="raise --max-gib"):
        scaled(TASK.replace("batch_size = 64", "batch_size = 1"), "relu", cap=1024)


def test_the_record_counts_each_task_against_the_faster_of_eager_and_torch_compile():
    """47_Sum (H200): 1.13x torch.compile but 0.9995x eager, whose own sum is at the bound; against the faster of
    the two it is not fast. A task not done, or not correct, counts as not fast and stays out of the geomean."""
    from kernelbench_record import against_faster

    def task(status, compile_, eager):
        return {"status": status, "speedup_compile": compile_, "speedup_eager": eager}

    tasks = [task("done", 1.13, 0.9995), task("done", 2.0, 3.0), task("pending", None, None), task("done", None, None)]
    both = against_faster(tasks, of=4)
    assert both["fast_1"] == 0.25 and both["geomean"] == pytest.approx((0.9995 * 2.0) ** 0.5)
    assert against_faster([], of=0) == {"fast_1": None, "geomean": None}


def test_the_record_tells_replies_served_with_other_figures_from_replies_served_to_another_prompt(tmp_path):
    from kernelbench_record import served_to
    from kernelevo.agent.client import prompt_form, prompt_hash
    from kernelevo.agent.providers import Message
    from kernelevo.agent.replay import write_prompt
    from kernelevo.archive.records import AnsweredCall

    def asked(text):
        return [Message("user", text)]

    for n, text in ((1, "kernel 3 runs 0.20 ms"), (2, "kernel 3 runs 0.20 ms"), (3, "repair kernel 4")):
        write_prompt(tmp_path, n, "mutate", "nvrtc", asked(text)).with_name(f"{n:04d}.reply.md").write_text(f"R{n}")

    def call(reply, text, form=True):
        return AnsweredCall("mutate", reply, prompt_hash(asked(text)), "replay", "p", prompt_form(asked(text)) if form else "")

    calls = [call("R1", "kernel 3 runs 0.20 ms"), call("R2", "kernel 5 runs 0.31 ms"), call("R3", "tune kernel 4"),
             call("a reply of its own", "x")]
    assert served_to(calls, tmp_path) == {"served": 3, "changed": 2, "formed": 3, "reshaped": 1}
    unformed = [call("R1", "kernel 3 runs 0.25 ms", form=False)]  # an archive from before 0008
    assert served_to(unformed, tmp_path) == {"served": 1, "changed": 1, "formed": 0, "reshaped": 0}
