"""Task files load into records; broken ones give one line naming the problem."""
import pytest

from kernelevo.tasks import TaskError, load_task

from conftest import FIXTURES

GOOD = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs(): return [torch.randn(4, 4)]
def get_init_inputs(): return []
'''


def write(tmp_path, text, name="task.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_record():
    task = load_task(FIXTURES / "cpu" / "task_scale.py")
    assert task.name == "task_scale"
    assert len(task.source_hash) == 64
    assert task.init_args == (512,)
    assert task.get_test_inputs is not None
    assert task.input_summary() == "float32[256, 512]"
    assert task.make_model().weight.shape == (512,)


def test_same_source_same_hash(tmp_path):
    a, b = write(tmp_path, GOOD, "a.py"), write(tmp_path, GOOD, "b.py")
    assert load_task(a).source_hash == load_task(b).source_hash


@pytest.mark.parametrize("text, expected", [
    (GOOD.replace("class Model", "class Other"), "no `Model` class"),
    (GOOD.replace("return [torch.randn(4, 4)]", "return ['x']"), "get_inputs() returned no tensor"),
    (GOOD.replace("return [torch.randn(4, 4)]", "return torch.randn(4)"), "must return a list"),
    (GOOD.replace("return [torch.randn(4, 4)]", "return [torch.randn(4), 'x']"), "item 1 is a str"),
    (GOOD.replace("def get_init_inputs(): return []", ""), "no `get_init_inputs()`"),
    ("import torch\nimport not_a_module_anywhere\n", "task.py:2: ModuleNotFoundError"),
    (GOOD + "\ndef oops(:\n", "syntax error"),
    (GOOD.replace("def get_inputs(): return [torch.randn(4, 4)]", "def get_inputs(): return [1 / 0]"),
     "task.py:6: get_inputs() failed: ZeroDivisionError"),
    (GOOD + "\ndef get_test_inputs(): return []\n", "get_test_inputs() must return a non-empty list"),
])
def test_broken_task_one_line(tmp_path, text, expected):
    with pytest.raises(TaskError) as info:
        load_task(write(tmp_path, text))
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(TaskError, match="no such file"):
        load_task(tmp_path / "nope.py")
