"""bfloat16/float16 products with a bias on the CPU (linear's addmm, 1-D/2-D
convolutions): from partition.CPU_NARROW_LIBRARY_MACS multiply-adds they run eager's
own kernel through torch (a library island: eager's bits) where torch has a native
kernel for the dtype on this host (partition.cpu_native_narrow_kernels: oneDNN's
AVX512/AMX bf16, AVX512-FP16); smaller ones, and all on a host without (an AVX2 CPU,
where eager's bf16 linear took 9x the compiled form's time), compile as the float32
product of the converted operands plus the bias, rounded once."""
import pytest
import torch
import torch.nn as nn

import mlircap
from mlircap import partition


def _run(m, x):
    fast = mlircap.compile(m)
    with torch.no_grad():
        fast(x)
        return fast(x), m(x), fast.ir("fx")


def _compiled_products(fx_text):
    """aten product ops in the compiled graphs' text."""
    return [op for op in ("aten.mm.", "aten.addmm.", "aten.convolution.") if op in fx_text]


@pytest.fixture
def native(monkeypatch):
    """Islands taken as on a host with native bf16/f16 kernels (whatever this one has)."""
    monkeypatch.setattr(partition, "cpu_native_narrow_kernels", lambda dtype: True)


def _large(case):
    if case == "linear":
        return nn.Sequential(nn.Linear(256, 512), nn.ReLU()), torch.randn(2, 64, 256)
    if case == "conv2d":
        return nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU()), torch.randn(2, 32, 24, 24)
    if case == "conv1d":
        return nn.Sequential(nn.Conv1d(64, 128, 5), nn.ReLU()), torch.randn(4, 64, 300)
    # ConvNeXt's 7x7 depthwise convolution
    return nn.Sequential(nn.Conv2d(96, 96, 7, padding=3, groups=96), nn.ReLU()), torch.randn(4, 96, 28, 28)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", ["linear", "conv2d", "conv1d", "depthwise"])
def test_large_narrow_products_run_eagers_kernel(case, dtype, native):
    torch.manual_seed(0)
    m, x = _large(case)
    m = m.to(dtype).eval()
    x = x.to(dtype)
    got, want, fx_text = _run(m, x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)   # eager's kernel: eager's bits
    assert _compiled_products(fx_text) == [], fx_text   # the product is not in a compiled graph


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", ["linear", "conv2d", "depthwise"])
def test_large_narrow_products_compile_without_native_kernels(case, dtype, monkeypatch):
    monkeypatch.setattr(partition, "cpu_native_narrow_kernels", lambda dtype: False)
    torch.manual_seed(0)
    m, x = _large(case)
    m = m.to(dtype).eval()
    x = x.to(dtype)
    got, want, fx_text = _run(m, x)
    assert got.dtype == dtype
    assert _compiled_products(fx_text), fx_text   # the product is in a compiled graph
    # float32 sums rounded once, as eager's; the order of the sums may differ
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=2e-2)


def test_native_narrow_kernels_follow_mkldnn():
    for dtype, check in ((torch.bfloat16, "_is_mkldnn_bf16_supported"), (torch.float16, "_is_mkldnn_fp16_supported")):
        assert partition.cpu_native_narrow_kernels(dtype) == (
            torch.backends.mkldnn.is_available() and bool(getattr(torch.ops.mkldnn, check)()))
    assert not partition.cpu_native_narrow_kernels(torch.float32)


def test_small_narrow_linear_compiles():
    torch.manual_seed(0)
    m = nn.Linear(32, 16).to(torch.bfloat16).eval()
    x = torch.randn(8, 32, dtype=torch.bfloat16)
    assert 8 * 32 * 16 < partition.CPU_NARROW_LIBRARY_MACS
    got, want, fx_text = _run(m, x)
    assert _compiled_products(fx_text) == ["aten.mm."], fx_text   # float32 product of converted operands
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)


def test_library_ops_off_compiles_large_linear(monkeypatch):
    monkeypatch.setenv("MLIRCAP_CPU_LIBRARY_OPS", "0")
    torch.manual_seed(0)
    m = nn.Linear(256, 512).to(torch.bfloat16).eval()
    x = torch.randn(128, 256, dtype=torch.bfloat16)
    got, want, fx_text = _run(m, x)
    assert _compiled_products(fx_text) == ["aten.mm."], fx_text
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)


def test_float32_transposed_and_no_bias_stay_compiled(native):
    x = torch.randn(2, 32, 24, 24)
    conv = torch.randn(64, 32, 3, 3)
    for args in ((torch.randn(64), torch.randn(128, 256), torch.randn(256, 64)),):   # float32 addmm
        assert not partition.cpu_narrow_library("aten::addmm", args)
    bf = torch.bfloat16
    assert partition.cpu_narrow_library("aten::convolution", (
        x.to(bf), conv.to(bf), torch.randn(64, dtype=bf), [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
    assert partition.cpu_narrow_library("aten::convolution", (   # grouped
        x.to(bf), torch.randn(64, 16, 3, 3, dtype=bf), torch.randn(64, dtype=bf), [1, 1], [1, 1], [1, 1],
        False, [0, 0], 2))
    assert not partition.cpu_narrow_library("aten::convolution", (   # transposed
        x.to(bf), torch.randn(32, 64, 3, 3, dtype=bf), torch.randn(64, dtype=bf), [1, 1], [1, 1], [1, 1],
        True, [0, 0], 1))
    assert not partition.cpu_narrow_library("aten::convolution", (   # no bias
        x.to(bf), conv.to(bf), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))


@pytest.mark.parametrize("native_kernels", [False, True])
@pytest.mark.parametrize("case", ["mm", "conv"])
def test_narrow_library_steps_without_native_kernels_run_in_f32(case, native_kernels, monkeypatch):
    """A bf16 product without a bias is a plan library step in bf16 (matmul: out= into its
    buffer; convolution: its result rebound as the value). Without native bf16 kernels it
    runs as the float32 product of the converted operands, rounded once (eager's own kernel
    converts in scalar loops, 9x slower on an AVX2 host); with them, torch's bf16 kernel."""
    asked = []

    def native(dtype):
        asked.append(dtype)
        return native_kernels
    monkeypatch.setattr(partition, "cpu_native_narrow_kernels", native)
    g = torch.Generator().manual_seed(0)
    bf = torch.bfloat16
    if case == "mm":
        w = torch.randn(96, 64, generator=g).to(bf)
        fn, x = (lambda x: torch.relu(x @ w) * 2), torch.randn(48, 96, generator=g).to(bf)
        wide = torch.relu((x.float() @ w.float()).to(bf)) * 2
    else:
        w = torch.randn(16, 8, 3, 3, generator=g).to(bf)
        fn, x = (lambda x: torch.relu(torch.nn.functional.conv2d(x, w, padding=1)) * 2), \
            torch.randn(2, 8, 12, 12, generator=g).to(bf)
        wide = torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), padding=1).to(bf)) * 2
    fast = mlircap.compile(fn, strict=True)
    with torch.no_grad():
        fast(x)
        (graph,) = fast.graphs
        exe, seen = graph.executable, []
        call = exe._call
        exe._call = lambda *a: seen.append(a) or call(*a)
        got = fast(x)
    assert graph.executable.n_library == 1 and bf in asked
    want = fn(x)
    if native_kernels:
        torch.testing.assert_close(got, want, rtol=0, atol=0)   # torch's kernel
    else:
        torch.testing.assert_close(got, wide, rtol=0, atol=0)   # f32 sums rounded once
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=2e-2)
    # the reference path (plan._run_library) computes the same
    with torch.no_grad():
        torch.testing.assert_close(exe._call_generic(*seen[0])[0], got, rtol=0, atol=0)
