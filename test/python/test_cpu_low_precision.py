"""bfloat16/float16 CPU kernels on any x86 host, also one without AVX512-BF16.

* bf16/f16 max/min reductions accumulate in f32 (mlircap-widen-sums' WidenMinMax):
  they compile (no torch island), equal eager bit for bit, NaN included. With a
  bf16 accumulator LLVM formed a bf16 select that a host without AVX512-BF16
  promotes through __truncsfbf2: the kernel did not link and amax ran through
  torch ("no CPU kernel"), then, linked, ran one call per element (0.18x eager).
* bf16 selects become integer selects (Core.cpp's IntegerBf16Selects) and an
  f32 -> bf16 rounding LLVM still makes a call resolves to the core's
  __truncsfbf2 (round to nearest even, NaN kept quiet), equal to torch's.
"""
import re
import warnings

import pytest
import torch

import mlircap
from mlircap.runtime.cpu import CpuExecutable

LOW = [torch.bfloat16, torch.float16]


def _data(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g).to(dtype)
    flat = x.view(-1)
    flat[3] = float("nan")
    flat[10] = float("inf")
    flat[11] = -float("inf")
    return x


def _same(a, b):
    bits = torch.int16
    return torch.equal(a.view(bits), b.view(bits)) or (
        torch.equal(a.isnan(), b.isnan()) and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))


CASES = {
    "amax_last": (lambda x: torch.relu(x).amax(-1), (8, 20, 62)),
    "amin_mid": (lambda x: x.amin(1), (4, 33, 17)),
    "amax_keepdim": (lambda x: x - x.amax(-1, keepdim=True), (6, 130)),
    "max_all": (lambda x: x.amax((0, 1)) * 2, (12, 40)),
}


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", CASES)
def test_narrow_minmax_compiles_and_matches(name, dtype):
    fn, shape = CASES[name]
    x = _data(shape, dtype)
    fast = mlircap.compile(fn, strict=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")   # no op left to torch ("no CPU kernel")
        fast(x)
        got = fast(x)
    want = fn(x)
    assert got.dtype == want.dtype and _same(got, want), (got, want)
    (graph,) = fast.graphs
    assert graph.fallback_reason is None
    assert graph.executable.n_library == 0 and graph.executable.n_kernels >= 1


def test_narrow_max_accumulates_in_f32():
    from mlircap._core import core

    fast = mlircap.compile(lambda x: x.amax(-1), strict=True)
    x = _data((4, 62), torch.bfloat16)
    with torch.no_grad():
        fast(x)
        fast(x)
    fused = fast.ir("fused")   # the kernels mlircap-cpu-pipeline starts from (widen-sums first)
    assert re.search(r"arith.maximumf %\S+, %\S+ : bf16", fused)
    widened = core().run_pipeline(fused, "builtin.module(func.func(mlircap-widen-sums))")
    # the reduction's accumulator is f32 (a bf16 input, an f32 output), its max on f32
    assert re.search(r"\^bb0\(%\S+: bf16, %\S+: f32\)", widened), widened
    assert re.search(r"arith.maximumf %\S+, %\S+ : f32", widened), widened
    assert not re.search(r"arith.maximumf %\S+, %\S+ : bf16", widened), widened


# linalg with LLVM ops the emulation pass does not touch: an f32 -> bf16 rounding
# (llvm.fptrunc: __truncsfbf2 on a host without AVX512-BF16) and a bf16 select.
_FPTRUNC = """
#map = affine_map<(d0) -> (d0)>
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xbf16> {
  %e = tensor.empty() : tensor<1024xbf16>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%x : tensor<1024xf32>) outs(%e : tensor<1024xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = llvm.fptrunc %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<1024xbf16>
  return %r : tensor<1024xbf16>
}
"""

_SELECT = """
#map = affine_map<(d0) -> (d0)>
func.func @main(%a: tensor<1024xbf16>, %b: tensor<1024xbf16>) -> tensor<1024xbf16> {
  %e = tensor.empty() : tensor<1024xbf16>
  %r = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<1024xbf16>, tensor<1024xbf16>) outs(%e : tensor<1024xbf16>) {
  ^bb0(%x: bf16, %y: bf16, %out: bf16):
    %xi = arith.bitcast %x : bf16 to i16
    %yi = arith.bitcast %y : bf16 to i16
    %c = arith.cmpi sgt, %xi, %yi : i16
    %s = arith.select %c, %x, %y : bf16
    linalg.yield %s : bf16
  } -> tensor<1024xbf16>
  return %r : tensor<1024xbf16>
}
"""


def test_f32_to_bf16_rounding_call_links_and_rounds_like_torch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1024, generator=g) * 100
    bits = x.view(torch.int32)
    special = [0x3F808000, 0x3F818000, 0x3F80C000,   # ties to even (down, up), above a tie
               0x7F7FFFFF, 0x7FA00001,               # rounds to inf, a signaling NaN
               0x00008000, 0x80018000, 0x80807FFF]   # subnormal ties, a negative normal
    bits[:8] = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in special], dtype=torch.int32)
    x[8], x[9], x[10] = float("nan"), float("inf"), -0.0
    exe = CpuExecutable(_FPTRUNC, "main", [((1024,), torch.bfloat16)])
    (got,) = exe(x)
    want = x.bfloat16()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan])


def test_bf16_select_is_exact():
    g = torch.Generator().manual_seed(2)
    a, b = (torch.randn(1024, generator=g).bfloat16() for _ in range(2))
    a[0] = float("nan")
    exe = CpuExecutable(_SELECT, "main", [((1024,), torch.bfloat16)])
    (got,) = exe(a, b)
    ai, bi = a.view(torch.int16), b.view(torch.int16)
    assert torch.equal(got.view(torch.int16), torch.where(ai > bi, ai, bi))
