"""bfloat16/float16 products with a bias on the CPU (linear's addmm, ungrouped 1-D/2-D
convolutions): from partition.CPU_NARROW_LIBRARY_MACS multiply-adds they run eager's
own kernel through torch (a library island: eager's bits); smaller ones compile as the
float32 product of the converted operands plus the bias, rounded once."""
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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", ["linear", "conv2d", "conv1d", "depthwise"])
def test_large_narrow_products_run_eagers_kernel(case, dtype):
    torch.manual_seed(0)
    if case == "linear":
        m, x = nn.Sequential(nn.Linear(256, 512), nn.ReLU()), torch.randn(2, 64, 256)
    elif case == "conv2d":
        m, x = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU()), torch.randn(2, 32, 24, 24)
    elif case == "conv1d":
        m, x = nn.Sequential(nn.Conv1d(64, 128, 5), nn.ReLU()), torch.randn(4, 64, 300)
    else:   # ConvNeXt's 7x7 depthwise convolution
        m, x = nn.Sequential(nn.Conv2d(96, 96, 7, padding=3, groups=96), nn.ReLU()), torch.randn(4, 96, 28, 28)
    m = m.to(dtype).eval()
    x = x.to(dtype)
    got, want, fx_text = _run(m, x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)   # eager's kernel: eager's bits
    assert _compiled_products(fx_text) == [], fx_text   # the product is not in a compiled graph


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


def test_float32_transposed_and_no_bias_stay_compiled():
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
