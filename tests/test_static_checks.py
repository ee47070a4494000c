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
# Honest candidates that static patterns used to reject; the task_*.py files beside them are tasks they name.
HONEST = sorted(p for p in (FIXTURES / "honest" / "static").glob("*.py") if not p.name.startswith("task_"))
REASONS = ["side_stream", "threads", "monkeypatch", "rng_control", "reference_fallback", "reference_model",
           "tensor_subclass", "precision_downgrade", "io_access", "introspection", "input_cache", "init_args"]
SCALE_TASK = (FIXTURES / "cpu" / "task_scale.py").read_text()


def _honest() -> list[tuple[Path, Path]]:
    pairs = [(c, ROOT / "benchmarks" / "tasks" / f"{c.stem.split('__')[0]}.py")
             for c in sorted((ROOT / "benchmarks" / "tasks" / "candidates").glob("*.py"))]
    cpu, cuda = FIXTURES / "cpu", FIXTURES / "cuda"
    return pairs + [(cpu / "ok_c.py", cpu / "task_scale.py"), (cpu / "offset_ok_c.py", cpu / "task_offset.py"),
                    (cuda / "ok_nvrtc.py", cuda / "task_relu.py"), (cuda / "ok_inline.py", cuda / "task_relu.py")]


def _check(source: str, task: str | None = SCALE_TASK) -> list[static.Finding]:
    return static.check(textwrap.dedent(source), task_source=task)


def test_registry_lists_exactly_the_reason_ids():
    assert list(static.CHECKS) == REASONS


def test_every_reason_has_a_cheat_fixture():
    assert {p.name.split("__")[0] for p in CHEATS} == set(REASONS)


@pytest.mark.parametrize("candidate,task", _honest(), ids=lambda p: p.name)
def test_honest_candidates_have_no_findings(candidate: Path, task: Path):
    assert static.check(candidate.read_text(), task_source=task.read_text()) == []


def _task_of(fixture: Path) -> str:
    task = re.search(r"^# task: (\S+)$", fixture.read_text(), re.MULTILINE)
    assert task, "a fixture names its task"
    return (FIXTURES / task.group(1)).read_text()


@pytest.mark.parametrize("fixture", HONEST, ids=lambda p: p.stem)
def test_honest_fixture_has_no_findings(fixture: Path):
    assert static.check(fixture.read_text(), task_source=_task_of(fixture)) == []


def test_honest_fixtures_cover_the_loosened_reasons():
    assert {p.name.split("__")[0] for p in HONEST} >= {"precision_downgrade", "reference_fallback", "input_cache",
                                                              "io_access"}


@pytest.mark.parametrize("fixture", CHEATS, ids=lambda p: p.stem)
def test_cheat_fixture_is_caught_on_its_line(fixture: Path):
    source = fixture.read_text()
    also = re.search(r"^# also: (.+)$", source, re.MULTILINE)
    expected = fixture.stem.split("__")[0]
    findings = static.check(source, task_source=_task_of(fixture))
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


def test_precision_flags_are_findings_whatever_the_task_dtype():
    source = ("import torch\ntorch.set_float32_matmul_precision('high')\n"
              "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True\n")
    assert [(f.reason, f.line) for f in static.check(source)] == [
        ("precision_downgrade", 2), ("precision_downgrade", 3)]


def test_restoring_precision_flags_is_not_a_downgrade():
    findings = _check("""
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    """)
    # (an assignment into torch stays a monkeypatch finding; only the downgrade is in question here)
    assert [(f.reason, f.line) for f in findings] == [("monkeypatch", 3), ("monkeypatch", 5)]


def test_dtypes_and_casts_are_left_to_the_tolerances():
    # Lower-precision compute shows in the outputs: float64's bound (1e-10) rejects float32, float32's
    # rejects TF32 and fp16, float16's rejects float8.
    source = ("import torch\ndef f(x):\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
              "        return x.float(), x.half(), x.to(torch.float8_e4m3fn), torch.cuda.amp.autocast()\n"
              "K = '#include <cuda_fp16.h>\\n__half2 h; __nv_bfloat16 b; wmma::precision::tf32 t;'\n"
              "D = '__double2float_rn(d); __float_to_tf32(f); mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32'\n")
    assert static.check(source) == []


def test_fallback_outside_the_per_call_path_is_not_flagged():
    findings = _check("""
        import torch
        import torch.nn as nn

        def build(features):  # called from __init__ only
            try:
                return torch.ops.load_library("ext.so")
            except OSError:
                return torch.nn.Identity()

        class ModelNew(nn.Module):
            def __init__(self, features):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(features))
                self.ext = build(features)

            def forward(self, x):
                return self.ext(x) * self.weight
    """)
    assert findings == []


def test_fallback_in_a_module_function_forward_calls_is_flagged():
    findings = _check("""
        import torch
        import torch.nn as nn

        def run(lib, x, w):
            try:
                return lib.scale(x, w)
            except RuntimeError:
                return torch.mul(x, w)

        class ModelNew(nn.Module):
            def __init__(self, features):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(features))

            def forward(self, x):
                return run(None, x, self.weight)
    """)
    assert [(f.reason, f.line) for f in findings] == [("reference_fallback", 9)]


def test_reference_state_is_allowed_only_with_the_task():
    honest = FIXTURES / "honest" / "static" / "input_cache__rnn_hidden.py"
    assert [f.reason for f in _check(honest.read_text(), task=None)] == ["input_cache"]


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


RELU_TASK = (FIXTURES / "cuda" / "task_relu.py").read_text()
GRAPH_FORWARD = '''
    import torch
    import torch.nn as nn
    from kernelevo import runtime

    mod = runtime.load_cuda("extern \\"C\\" __global__ void k(const float* x, float* y, long long n, float s) {}")
    _GRAPHS = {}

    class ModelNew(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale
            self._graphs = {}

        def forward(self, x):
            key = (x.data_ptr(), tuple(x.shape), x.dtype)
            if key not in self._graphs:
                out = torch.empty_like(x)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    mod.k((x.numel() + 255) // 256, 256, x, out, x.numel(), self.scale)
                self._graphs[key] = (g, out)
                _GRAPHS.setdefault(key, {"graph": g, "out": out})
            g, out = self._graphs[key]
            g.replay()
            return out.clone()
'''


def _lines(findings: list[static.Finding]) -> list[tuple[str, int]]:
    return [(f.reason, f.line) for f in findings]


def test_placement_keyed_cuda_graphs_are_not_flagged():
    # Stored in forward itself (the kept-data rule) and through setdefault into a module-level dict.
    assert _check(GRAPH_FORWARD, task=RELU_TASK) == []
    kernels = GRAPH_FORWARD.replace("torch.cuda.CUDAGraph()", "runtime.load_cuda('...').k")
    assert _check(kernels, task=RELU_TASK) == []


def test_graph_exemption_needs_every_entry_to_hold_one():
    # The same container also keeps a plain output under another key: every identity lookup counts again.
    mixed = GRAPH_FORWARD.replace("            g.replay()\n",
                                  "            self._graphs[x.data_ptr()] = out\n            g.replay()\n")
    assert _lines(_check(mixed, task=RELU_TASK)) == [("input_cache", n) for n in (17, 22, 24, 25)]
    # A graph made but the output stored apart from it, or unpacked back out of an entry that held one.
    apart = GRAPH_FORWARD.replace("self._graphs[key] = (g, out)", "self._graphs[key] = out")
    assert ("input_cache", 22) in _lines(_check(apart, task=RELU_TASK))
    unpacked = GRAPH_FORWARD.replace("self._graphs[key] = (g, out)",
                                     "entry = (g, out)\n                _, y = entry\n"
                                     "                self._graphs[key] = y")
    assert ("input_cache", 24) in _lines(_check(unpacked, task=RELU_TASK))
    # The container handed elsewhere can be filled out of sight.
    aliased = GRAPH_FORWARD.replace("            g.replay()\n", "            keep(self._graphs, out)\n"
                                    "            g.replay()\n")
    assert ("input_cache", 17) in _lines(_check(aliased, task=RELU_TASK))


def test_identity_keyed_outputs_stay_flagged():
    findings = _check('''
        import torch
        import torch.nn as nn

        class ModelNew(nn.Module):
            def __init__(self, scale):
                super().__init__()
                self.scale = scale
                self._outs = {}

            def forward(self, x):
                key = (x.data_ptr(), x.shape)
                if key in self._outs:
                    return self._outs[key]
                y = torch.relu(x * self.scale)
                self._outs[key] = (y, torch.cuda.Event())
                return y
    ''', task=RELU_TASK)
    assert [line for reason, line in _lines(findings) if reason == "input_cache"] == [13, 14, 16]


def test_graph_static_buffer_cheat_is_left_to_the_dynamic_checks():
    # Returning the graph's static buffer is output_reused, seen only when the judge runs it (test_gpu_cheats).
    cheat = FIXTURES / "cheats" / "cuda" / "output_reused__graph_static_buffer.py"
    assert static.check(cheat.read_text(), task_source=RELU_TASK) == []


def test_suspicions_reject_nothing_and_go_to_the_trials():
    """A graph cache keyed by the input's address that keeps the input and its static output: found
    on its lines, as a suspicion, and the judge's static step rejects nothing for it."""
    from kernelevo.judge.run import jobs
    from kernelevo.judge.job import Job

    honest = FIXTURES / "honest" / "dynamic" / "input_cache__graph_static_input.py"
    task = (FIXTURES / "cuda" / "task_relu.py").read_text()
    findings = static.check(honest.read_text(), task_source=task)
    assert findings and {f.reason for f in findings} <= static.SUSPICIONS
    noted: list[str] = []
    job = Job(candidate_source=honest.read_text(), task_source=task)
    assert jobs.static_rejection(job, None, noted) is None
    assert len(noted) == len(findings) and noted[0].startswith("static suspicion (input_cache), left to the trials")
    # a finding of another reason still rejects
    cheat = (FIXTURES / "cheats" / "static" / "threads__python.py").read_text()
    assert jobs.static_rejection(Job(candidate_source=cheat, task_source=SCALE_TASK), None)["reason"] == "threads"
