"""Static anti-cheat checks (kernelevo.judge.static): every cheat fixture is caught on the line that
cheats, and no honest candidate is flagged. Static only: no GPU, no compiler."""
import re
import textwrap
from pathlib import Path

import pytest
from kernelevo.judge import static

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHEATS = sorted((FIXTURES / "cheats" / "static").glob("*.py"))
REASONS = ["side_stream", "threads", "monkeypatch", "rng_control", "reference_fallback", "reference_model",
           "tensor_subclass", "precision_downgrade", "io_access", "introspection", "input_cache", "init_args"]
FLOAT32 = frozenset({"float32"})
SCALE_TASK = (FIXTURES / "cpu" / "task_scale.py").read_text()


def _honest() -> list[tuple[Path, Path]]:
    pairs = [(c, ROOT / "benchmarks" / "tasks" / f"{c.stem.split('__')[0]}.py")
             for c in sorted((ROOT / "benchmarks" / "tasks" / "candidates").glob("*.py"))]
    cpu, cuda = FIXTURES / "cpu", FIXTURES / "cuda"
    return pairs + [(cpu / "ok_c.py", cpu / "task_scale.py"), (cpu / "offset_ok_c.py", cpu / "task_offset.py"),
                    (cuda / "ok_nvrtc.py", cuda / "task_relu.py"), (cuda / "ok_inline.py", cuda / "task_relu.py")]


def _check(source: str, task: str | None = SCALE_TASK) -> list[static.Finding]:
    return static.check(textwrap.dedent(source), task_source=task, input_dtypes=FLOAT32)


def test_registry_lists_exactly_the_reason_ids():
    assert list(static.CHECKS) == REASONS


def test_every_reason_has_a_cheat_fixture():
    assert {p.name.split("__")[0] for p in CHEATS} == set(REASONS)


@pytest.mark.parametrize("candidate,task", _honest(), ids=lambda p: p.name)
def test_honest_candidates_have_no_findings(candidate: Path, task: Path):
    assert static.check(candidate.read_text(), task_source=task.read_text(), input_dtypes=FLOAT32) == []


@pytest.mark.parametrize("fixture", CHEATS, ids=lambda p: p.stem)
def test_cheat_fixture_is_caught_on_its_line(fixture: Path):
    source = fixture.read_text()
    task = re.search(r"^# task: (\S+)$", source, re.MULTILINE)
    assert task, "a fixture names its task"
    also = re.search(r"^# also: (.+)$", source, re.MULTILINE)
    expected = fixture.stem.split("__")[0]
    findings = static.check(source, task_source=(FIXTURES / task.group(1)).read_text(), input_dtypes=FLOAT32)
    lines = source.splitlines()
    marked = {n for n, text in enumerate(lines, 1) if "<- cheat" in text}
    mine = [f for f in findings if f.reason == expected]
    assert mine, f"no {expected} finding: {findings}"
    # Every finding of the expected reason sits on a marked line, and every marked line is found.
    assert {f.line for f in mine} == marked, [f.message for f in mine]
    assert {f.reason for f in findings} == {expected, *(also.group(1).split(", ") if also else ())}, findings
    for f in findings:
        assert f.message.startswith(f"line {f.line}: ") and " — " in f.message


def test_unparsable_source_has_no_findings():
    assert static.check("def broken(:\n") == []


def test_shape_keyed_kernel_cache_is_not_flagged():
    findings = _check('''
        import torch
        import torch.nn as nn
        from kernelevo import runtime

        SRC = "extern \\"C\\" __global__ void k(const float* x, float* y, long long n) {}"
        _mod = runtime.load_cuda(SRC)

        class ModelNew(nn.Module):
            def __init__(self, features):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(features))
                self._kernels = {}

            def forward(self, x):
                n, cols = x.numel(), x.shape[-1]
                key = (cols, x.dtype)
                if key not in self._kernels:
                    self._kernels[key] = runtime.load_cuda(SRC.replace("COLS", str(cols)))
                self._last_shape = tuple(x.shape)
                self._scratch = torch.empty_like(x)  # a workspace, not a result
                y = torch.empty_like(x)
                self._kernels[key].k((n + 255) // 256, 256, x, y, n)
                _mod.add((n + 255) // 256, 256, x, y, n)  # a kernel named add, not a container
                return y
    ''')
    assert findings == []


def test_import_error_pass_is_not_a_fallback():
    findings = _check('''
        import torch
        import torch.nn as nn
        try:
            from kernelevo import runtime
        except ImportError:
            pass

        class ModelNew(nn.Module):
            def __init__(self, features):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(features))

            def forward(self, x):
                try:
                    return x * self.weight
                except RuntimeError as err:
                    raise RuntimeError(f"kernel failed: {err}") from err
    ''')
    assert findings == []


def test_unused_pasted_model_is_not_flagged():
    source = (FIXTURES / "cpu" / "ok_c.py").read_text()
    pasted = SCALE_TASK[SCALE_TASK.index("class Model"):SCALE_TASK.index("def get_inputs")]
    pasted = pasted.replace("super().__init__()", "super(Model, self).__init__()")  # old KernelBench style
    assert "super(Model, self)" in pasted
    assert _check(source.replace("class ModelNew", pasted + "\nclass ModelNew")) == []


def test_joined_side_stream_is_not_flagged():
    findings = _check('''
        import torch
        import torch.nn as nn

        class ModelNew(nn.Module):
            def __init__(self, scale):
                super().__init__()
                self.scale = scale
                self.side = torch.cuda.Stream()

            def forward(self, x):
                self.side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(self.side):
                    y = torch.relu(x * self.scale)
                torch.cuda.current_stream().wait_stream(self.side)
                return y
    ''', task=(FIXTURES / "cuda" / "task_relu.py").read_text())
    assert findings == []


def test_joined_stream_in_cuda_source_is_not_flagged():
    source = (FIXTURES / "cheats" / "static" / "side_stream__cuda.py").read_text()
    joined = source.replace("  return y;\n}", "  cudaStreamSynchronize(side);\n  return y;\n}")
    assert joined != source
    assert _check(joined, task=(FIXTURES / "cuda" / "task_relu.py").read_text()) == []


def test_tf32_flag_is_one_precision_finding_not_a_monkeypatch():
    findings = _check("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n")
    assert [(f.reason, f.line) for f in findings] == [("precision_downgrade", 2)]


@pytest.mark.parametrize("dtypes,flagged", [
    (frozenset({"float64"}), True), (frozenset({"float32"}), False), (frozenset({"float16"}), False)])
def test_float_cast_is_a_downgrade_only_for_float64_tasks(dtypes, flagged):
    findings = static.check("def f(x):\n    return x.float() * 2\n", input_dtypes=dtypes)
    assert [f.reason for f in findings] == (["precision_downgrade"] if flagged else [])


def test_half_task_allows_half_but_not_float8():
    source = "import torch\ndef f(x):\n    return x.half(), x.to(torch.float8_e4m3fn)\n"
    findings = static.check(source, input_dtypes=frozenset({"float16"}))
    assert [(f.reason, f.line, "float8" in f.message) for f in findings] == [("precision_downgrade", 3, True)]


def test_dtype_comparison_is_not_a_downgrade():
    assert _check("import torch\ndef f(x):\n    assert x.dtype not in (torch.float16, torch.bfloat16)\n") == []


def test_task_dtype_is_read_from_get_inputs_when_unknown():
    task = "import torch\ndef get_inputs():\n    return [torch.randn(4, 4, dtype=torch.float16)]\n"
    source = "def f(x):\n    return x.half()\n"
    assert static.check(source, task_source=task) == []
    assert [f.reason for f in static.check(source)] == ["precision_downgrade"]


def test_init_args_renamed_parameters_are_accepted():
    source = (FIXTURES / "cpu" / "ok_c.py").read_text().replace("features", "n_features")
    assert _check(source) == []


def test_init_args_without_task_checks_reads_only():
    source = (FIXTURES / "cheats" / "static" / "init_args__signature.py").read_text()
    assert _check(source, task=None) == []
    rebound = (FIXTURES / "cheats" / "static" / "init_args__rebound.py").read_text()
    assert [f.reason for f in _check(rebound, task=None)] == ["init_args"]


def test_local_names_shadowing_modules_are_not_flagged():
    findings = _check('''
        def f(x, gc, time):
            gc.collect = 1
            time.perf_counter = 2
            vars = {"open": 1}
            return vars["open"]
    ''')
    assert findings == []


def test_findings_are_in_registry_then_line_order():
    findings = _check('''
        import threading
        import torch
        torch.manual_seed(0)
        t = threading.Thread(target=print)
    ''')
    assert [(f.reason, f.line) for f in findings] == [("threads", 2), ("threads", 5), ("rng_control", 4)]
