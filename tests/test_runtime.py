"""The launcher candidates import: signatures read from source, C built and called, CUDA compiled."""
import pytest
import torch

from kernelevo import runtime
from kernelevo.formats import detect_format

CUDA = r'''
// a comment mentioning __global__ void fake(int x)
extern "C" __global__ void __launch_bounds__(256) axpy(const float* __restrict__ x, float* y,
                                                      long long n, float a, unsigned int flags) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
__global__ void mangled(int* p) {}
extern "C" {
__global__ void in_block(double* p, int64_t n) {}
}
'''


def test_cuda_signatures():
    assert runtime.cuda_kernels(CUDA) == {"axpy": "PPqfI", "in_block": "Pq"}


def test_unsupported_parameter_type_is_named():
    with pytest.raises(runtime.LaunchError, match="float4"):
        runtime.cuda_kernels('extern "C" __global__ void k(float4 v) {}')


def test_slot_format_packs_each_value_in_8_bytes():
    import struct

    fmt = runtime.cuda._slot_format("PfiQd?")
    assert struct.calcsize(fmt) == 48


def test_c_module_called_with_tensors_and_scalars():
    lib = runtime.load_c(r"""
#include <stdint.h>
void axpy(const float* x, float* y, int64_t n, float a) { for (int64_t i = 0; i < n; i++) y[i] += a * x[i]; }
double total(const double* x, int n) { double s = 0; for (int i = 0; i < n; i++) s += x[i]; return s; }
static void hidden(void) {}
static inline __attribute__((always_inline))
void helper(float* y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] += 0.0f; }
""")
    assert set(lib.functions) == {"axpy", "total"}  # static on a line of its own above: not exported either
    x, y = torch.randn(100), torch.zeros(100)
    lib.axpy(x, y, 100, 2.0)
    assert torch.equal(y, 2.0 * x)
    assert lib.total(torch.ones(10, dtype=torch.float64), 10) == 10.0
    with pytest.raises(runtime.LaunchError, match="takes 4 arguments"):
        lib.axpy(x, y, 100)
    with pytest.raises(AttributeError, match="found"):
        lib.nope


def test_c_compile_error_carries_log():
    with pytest.raises(runtime.CompileError) as info:
        runtime.load_c("void f(int x) { return x }")
    assert "error" in info.value.log


def test_nvrtc_compiles_without_a_gpu():
    cubin, log = runtime.compile_cubin(CUDA, "sm_90")
    assert cubin[:4] == b"\x7fELF"
    assert "Used" in log and "registers" in log  # ptxas resource usage, for the profile


def test_nvrtc_error_has_line():
    with pytest.raises(runtime.CompileError) as info:
        runtime.compile_cubin('extern "C" __global__ void k(float* x) { x[0] = 1.f }', "sm_90")
    assert 'error: expected a ";"' in info.value.log


def test_nvrtc_finds_cuda_headers():
    runtime.compile_cubin('#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n'
                          'extern "C" __global__ void k(__half* x) { x[0] = __float2half(1.f); }', "sm_90")


CONSTANTS = r"""
extern "C" __global__ void constants(float* out) {
    out[0] = -INFINITY; out[1] = NAN; out[2] = FLT_MAX; out[3] = FLT_MIN; out[4] = FLT_EPSILON;
    out[5] = (float)M_PI; out[6] = (float)M_SQRT1_2; out[7] = (float)M_LOG2E;
}
"""


def test_nvrtc_sources_get_the_constants_models_reach_for():
    """NVRTC has no <math.h> or <float.h>: INFINITY, NAN, FLT_MAX, M_PI... are defined before the source
    (a real model's first kernel failed on -INFINITY), and a source that defines one itself still builds."""
    runtime.compile_cubin(CONSTANTS, "sm_90")
    runtime.compile_cubin("#define M_PI 3.14159265f\n" + CONSTANTS, "sm_90")


@pytest.mark.gpu
def test_the_constants_have_their_values_on_the_gpu():
    import math

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    out = torch.zeros(8, device="cuda")
    runtime.load_cuda(CONSTANTS).constants(1, 1, out)
    got = out.tolist()
    assert got[0] == -math.inf and math.isnan(got[1]) and got[2] == torch.finfo(torch.float32).max
    assert got[3] == torch.finfo(torch.float32).tiny and got[4] == torch.finfo(torch.float32).eps
    assert got[5:] == pytest.approx([math.pi, math.sqrt(0.5), math.log2(math.e)], rel=1e-7)


PREPROCESSED = r"""
#define WIDE 0
extern "C" __global__ void narrow(float* out) { out[0] = 1.f; }
#if WIDE
extern "C" __global__ void wide(float* out) { out[0] = 2.f; }
#endif
"""


@pytest.mark.gpu
def test_a_kernel_the_preprocessor_left_out_fails_only_when_launched_and_says_why():
    """A source whose #if leaves out a kernel builds; launching the kernel kept works, launching the one left out
    says so (an honest RMSNorm reply of the KernelBench sample failed at import with CUDA_ERROR_NOT_FOUND)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    out = torch.zeros(1, device="cuda")
    module = runtime.load_cuda(PREPROCESSED)
    module.narrow(1, 1, out)
    assert out.item() == 1.0
    with pytest.raises(runtime.LaunchError, match=r"kernel wide was not compiled: .*preprocessor left it out.*"
                                                  r"compiled: narrow"):
        module.wide(1, 1, out)


MACRO_KERNELS = r"""
template <int SCALE>
__device__ void scale_body(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = SCALE * x[i];
}
#define SCALE_INST(NAME, SCALE)                                                 \
extern "C" __global__ void __launch_bounds__(128) NAME(                          \
    const float* __restrict__ x, float* __restrict__ y,                         \
    long long n) {                                                              \
    scale_body<SCALE>(x, y, n);                                                 \
}
SCALE_INST(twice, 2)
SCALE_INST(thrice, 3)
#define ADD_INST(K) extern "C" __global__ void add_##K(float* y, float v) { y[0] = K + v; }
ADD_INST(7)
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
"""


def test_kernels_a_macro_defines_are_found_at_each_of_its_uses():
    """Variants of a template under C linkage are instantiated by a macro; its continued lines once failed
    (a parameter's type read with the line's backslash in it), and an honest attention kernel of a real
    model's first reply was judged a runtime error. The macro's own parameter name is no kernel."""
    assert runtime.cuda_kernels(MACRO_KERNELS) == {"twice": "PPq", "thrice": "PPq", "add_7": "Pf"}
    assert runtime.cuda_kernels(MACRO_KERNELS.replace("SCALE_INST(thrice, 3)", "")) == {"twice": "PPq", "add_7": "Pf"}
    from kernelevo.judge.trials.policy import own_kernel_names  # the judge's policy counts them as the candidate's

    assert own_kernel_names(f'SRC = r"""{MACRO_KERNELS}"""\nmod = runtime.load_cuda(SRC)') == {"twice", "thrice", "add_7"}


@pytest.mark.gpu
def test_kernels_a_macro_defines_launch_with_their_arguments():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    module = runtime.load_cuda(MACRO_KERNELS)
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = torch.zeros_like(x)
    module.thrice(8, 128, x, y, x.numel())
    assert torch.equal(y, 3 * x)
    module.add_7(1, 1, y, 0.5)
    assert y[0].item() == 7.5


@pytest.mark.parametrize("source, fmt", [
    ("from kernelevo import runtime\nm = runtime.load_cuda(SRC)", "nvrtc"),
    ("from kernelevo.runtime import load_c\nm = load_c(SRC)", "c"),
    ("from torch.utils.cpp_extension import load_inline\nm = load_inline('x', '')", "inline"),
    ("import torch.utils.cpp_extension as ce\nm = ce.load(name='x', sources=[])", "inline"),
    ("import torch\nclass ModelNew(torch.nn.Module): pass", "torch"),
    ("# load_inline( only in a comment\nx = 1", "torch"),
    ("import triton\n@triton.jit\ndef k(x): pass", "triton"),
    ("from triton import jit as J\n@J\ndef k(x): pass", "triton"),
    ("import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x): pass", "triton"),
    ("import triton  # imported, no kernel of its own\nclass ModelNew: pass", "torch"),
])
def test_detect_format(source, fmt):
    assert detect_format(source) == fmt
