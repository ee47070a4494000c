"""The lean load_inline build: what it writes, and that it falls back only when a name is missing.

The end-to-end tests compile real C++ extensions on the CPU (torch's load_inline, g++), so the
fallback and no-fallback paths are exercised as the judge's worker uses them.
"""
import inspect
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from kernelevo.judge.run import inline

KERNEL = """#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(float* y) { y[0] = 1.f; }
torch::Tensor f(torch::Tensor x) {
  auto y = torch::empty_like(x);
  k<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>());
  return y;
}
"""


@pytest.fixture
def torch_include():
    return inline.torch_include()


@pytest.fixture
def root(cache_dir, torch_include):
    """The derived headers, as the judging process prepares them before an inline job (executor.drive)."""
    return inline.prepare(cache_dir, torch_include, torch.__version__)


def lean(torch_include, **arguments):
    arguments.setdefault("name", "t")
    return inline.lean_arguments(arguments, torch_include, torch.__version__)


def included(args: dict, line: str) -> str:
    """The text of the header an `#include <...>` line of the lean arguments names."""
    relative = line.split("<")[1].rstrip(">")
    return next(Path(d, relative).read_text() for d in args["extra_include_paths"] if Path(d, relative).exists())


def test_lean_arguments_keep_line_numbers(root, torch_include):
    args = lean(torch_include, cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=KERNEL,
                functions=["f"], extra_include_paths=["/opt/x"])
    assert args["no_implicit_headers"] is True
    assert args["extra_include_paths"][0] == "/opt/x" and args["extra_include_paths"][2] == str(root)
    cuda = "\n".join(args["cuda_sources"])
    # torch prepends three lines to the .cu and one to main.cpp; the lean build does the same.
    assert cuda.count("\n") == KERNEL.count("\n") + 3
    assert "torch/extension.h" not in cuda and "ATen/cuda/CUDAContext.h" in cuda
    assert len(args["cpp_sources"]) == 2
    prelude = included(args, args["cuda_sources"][0])
    assert "kernelevo_lean/ops/empty_like.h" in prelude and "pybind" not in prelude
    main = included(args, args["cpp_sources"][0])
    assert "torch/csrc/utils/pybind.h" in main
    assert not list(root.rglob("prelude_*")), "a source's prelude is its own build's, not the shared headers'"


def test_lean_op_header_drops_only_the_preamble(root):
    path = inline._op_header(root, "zeros_like")
    text = (root / path).read_text()
    assert "ATen/Context.h" not in text and "ATen/ops/zeros_like_ops.h" in text
    assert "inline at::Tensor zeros_like(" in text
    assert inline._op_header(root, "not_an_aten_function") is None
    assert inline._op_header(root, "zeros_like_ops") is None  # only the functions' own headers
    names = (root / "kernelevo_lean" / "torch_names.h").read_text()
    assert "namespace torch" in names and "using namespace at" in names


def test_without_the_prepared_headers_the_build_is_torchs_own(tmp_path, monkeypatch, torch_include):
    """A worker writes no shared header: where the judging process prepared none, the source is built as written."""
    monkeypatch.setenv("KERNELEVO_CACHE_DIR", str(tmp_path))
    assert lean(torch_include, cpp_sources="torch::Tensor f(torch::Tensor x);") is None
    assert not (tmp_path / inline.LEAN).exists()


@pytest.mark.parametrize("arguments", [
    {"cpp_sources": "torch::nn::Linear l(1, 2);"},
    {"cpp_sources": "int f();", "no_implicit_headers": True},
    {"cpp_sources": "int f();", "use_pch": True},
])
def test_lean_not_used_where_it_cannot_hold(root, torch_include, arguments):
    assert lean(torch_include, **arguments) is None


def test_using_namespace_torch_finds_bare_calls(root, torch_include):
    args = lean(torch_include, cpp_sources="using namespace torch;\nTensor f(Tensor x) { return zeros_like(x); }")
    assert "kernelevo_lean/ops/zeros_like.h" in included(args, args["cpp_sources"][0])


@pytest.fixture
def counted_builds(monkeypatch, tmp_path, root):
    """load_inline with the lean wrapper installed over a counter of real torch builds."""
    real = cpp_extension.load_inline
    real = getattr(real, "__wrapped__", real)
    calls = []

    def counting(*args, **kwargs):
        calls.append(kwargs.get("no_implicit_headers", False))
        return real(*args, **kwargs)

    counting.__signature__ = inspect.signature(real)
    monkeypatch.setattr(cpp_extension, "load_inline", counting)
    inline.install()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    return calls


def build(name, source):
    return cpp_extension.load_inline(name=name, cpp_sources=source, functions=["f"])


def test_lean_build_runs(cache_dir, counted_builds):
    module = build("kernelevo_lean_ok", "torch::Tensor f(torch::Tensor x) {\n"
                   "  auto y = torch::empty_like(x); y.copy_(x); y.mul_(2); return y; }")
    assert torch.equal(module.f(torch.ones(3)), torch.full((3,), 2.0))
    assert counted_builds == [True]


def test_missing_name_falls_back_to_the_source_as_written(cache_dir, counted_builds):
    # Tensor operators live in ATen/Functions.h, which the lean prelude leaves out.
    module = build("kernelevo_lean_fallback", "torch::Tensor f(torch::Tensor x) { return x + x; }")
    assert torch.equal(module.f(torch.ones(2)), torch.full((2,), 2.0))
    assert counted_builds == [True, False]


def test_other_compile_errors_are_reported_from_the_lean_build(cache_dir, counted_builds):
    with pytest.raises(RuntimeError, match="expected"):
        build("kernelevo_lean_syntax", "torch::Tensor f(torch::Tensor x) { return x }")
    assert counted_builds == [True]
