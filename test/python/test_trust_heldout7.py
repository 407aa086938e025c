"""Held-out trust sweep, batch 7 (issue 10): regressions found by bench/modules6.py (detection,
audio, GNN, recommender, diffusion, point-cloud, NLP, metric, QAT, uint8 image, signal, numeric
and dtype / layout code). Each test runs mlircap.compile against eager over several calls and
compares results exactly where eager's are integers, and the aliasing of outputs.

PYTEST_DONT_REWRITE"""

import warnings

import pytest
import torch

import mlircap


def _storage(t):
    return t.untyped_storage().data_ptr()


def _no_eager_fallback(caught):
    msgs = [str(w.message) for w in caught if "mlircap" in str(w.message)]
    assert not any("gave up" in m or "eagerly" in m or "through torch" in m for m in msgs), msgs


def _run(fn, make_args, calls=3):
    """(eager results, compiled results) per call, the compiled function's graphs."""
    fast = mlircap.compile(fn)
    pairs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(calls):
            args = make_args(i)
            pairs.append((fn(*[a.clone() for a in args]), fast(*[a.clone() for a in args])))
    _no_eager_fallback(caught)
    assert fast.graphs, "nothing compiled"
    return pairs


# ------------------------------------------------------------------ uint8 outputs that are views
def _gray(img):
    r, g, b = img.unbind(dim=-3)
    gray = (0.2989 * r + 0.587 * g + 0.114 * b).to(img.dtype).unsqueeze(dim=-3)
    return gray, gray.expand(img.shape)


def _u8_views(x):
    y = (x.float() * 0.5).to(torch.uint8)
    return y, y.expand(2, *y.shape[1:]), y.t() if y.dim() == 2 else y.transpose(-1, -2), y.view(-1)


@pytest.mark.parametrize("fn,shape", [(_gray, (2, 3, 4, 5)), (_u8_views, (1, 6))])
def test_uint8_output_views_alias_their_base_as_in_eager(fn, shape):
    """torchvision's rgb_to_grayscale(num_output_channels=3) returns l_img.expand(...): in eager
    a view of the other output. The graph computing uint8 as int32 (widen.py) wraps every uint8
    op, the expand too, in `& 255`, and the view relations were read from that form, so from the
    second call on the compiled outputs were separate copies (a write through one did not show
    in the other)."""
    def make(i):
        torch.manual_seed(i)
        return (torch.randint(0, 256, shape, dtype=torch.uint8),)

    for e, c in _run(fn, make):
        for k in range(len(e)):
            assert c[k].dtype == e[k].dtype and c[k].shape == e[k].shape and c[k].stride() == e[k].stride()
            assert torch.equal(c[k], e[k])
            for j in range(k):
                assert (_storage(c[k]) == _storage(c[j])) == (_storage(e[k]) == _storage(e[j])), (j, k)
        c[0].fill_(7)
        assert all(bool((t == 7).all()) for t in c), "a write to the base shows in every view, as in eager"


def test_bfloat16_output_views_alias_their_base_as_in_eager():
    """The same for a graph computed in float32 (opmath.py): y and y.t() / y.view(-1) of a
    bfloat16 y share memory as in eager."""
    def fn(x):
        y = x * 2
        return y, y.t(), y.view(-1)

    for e, c in _run(fn, lambda i: (torch.randn(3, 4, dtype=torch.bfloat16),)):
        for k in range(3):
            assert torch.equal(c[k], e[k])
        assert _storage(c[1]) == _storage(c[0]) and _storage(c[2]) == _storage(c[0])


# -------------------------------------------------- float to int8 / int16 out of the narrow range
@pytest.mark.parametrize("dtype,lo,hi", [(torch.int8, -128, 128), (torch.int16, -32768, 32768)])
def test_float_to_narrow_int_wraps_like_eager(dtype, lo, hi):
    """`(x / scale).round().to(torch.int8)` without a clamp (quantisation code): eager converts
    through int32 on the CPU, so -153.0 becomes 103; the compiled conversion was an fptosi to i8,
    poison in LLVM for values out of range (it gave -128). Also from float64 and float16, and
    values past int32's range (eager: INT_MIN truncated)."""
    def fn(x, f):
        return ((x.float() * 1.5).to(dtype), (f * 300).round().to(dtype), f.double().mul(1e5).to(dtype),
                f.half().mul(400).to(dtype), (f * 3e9).to(dtype), x.to(torch.float32).to(dtype))

    def make(i):
        torch.manual_seed(i)
        return torch.randint(lo, hi, (4, 8), dtype=dtype), torch.randn(4, 8) * (1 + i)

    for e, c in _run(fn, make):
        for k, (a, b) in enumerate(zip(e, c)):
            assert b.dtype == a.dtype and torch.equal(b, a), (k, b, a)


# ------------------------------------------------ two index writes rewritten in one graph
def test_index_copy_then_advanced_index_inplace_compiles_and_matches():
    """A memory bank: `mem.index_copy_(0, idx, x)` then `mem[idx] *= 0.5`. Both writes are
    unrolled by scatter.rewrite (make_fx of the unrolled form in real mode, copied into the
    graph); the copied nodes kept fake tensors of make_fx's own FakeTensorMode, so the second
    rewrite failed in detect_fake_mode ("fake mode ... doesn't match mode ...") and the whole
    graph ran eagerly. Now compiled, and the written input and the result match eager's."""
    def fn(mem, x, idx):
        mem.index_copy_(0, idx, x)
        mem[idx] *= 0.5
        return mem.sum(0) * 2

    fast = mlircap.compile(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            torch.manual_seed(i)
            mem, x, idx = torch.randn(6, 3), torch.randn(2, 3), torch.tensor([i % 6, (i + 3) % 6])
            m_e, m_c = mem.clone(), mem.clone()
            out_e, out_c = fn(m_e, x, idx), fast(m_c, x, idx)
            torch.testing.assert_close(out_c, out_e, rtol=1e-6, atol=1e-6)
            assert torch.equal(m_c, m_e)
    msgs = [str(w.message) for w in caught if "mlircap" in str(w.message)]
    assert not any("failed to compile" in m or "eagerly" in m for m in msgs), msgs
    assert fast.graphs and all(g.executable is not g.gm for g in fast.graphs)


# -------------------------------------------------------------- exp into the subnormal range
def test_exp_with_subnormal_results_matches_eager():
    """exp(x) for x in (-103.97, -87.34) is a subnormal float in eager; the CPU code's
    polynomial (upstream's approximation, 2^k built in the exponent field) returned 0, so
    `torch.exp(x).log()` of -100 was -inf (eager -99.98) and a softmax over logits 100 apart
    gave 0 where eager gives 3.8e-44. Now exp(x / 2)^2 below -87."""
    def fn(x, logits):
        e = torch.exp(x)
        p = torch.softmax(logits, -1)
        return e, e.log(), p, p.log(), torch.exp(x.double()).float()

    def make(i):
        x = torch.linspace(-110.0, -80.0, 301 + i) if i < 2 else torch.tensor([-87.0, -87.3, -87.4, -103.9, -104.0])
        logits = torch.tensor([[0.0, -90.0, -100.0, -103.0, -1.0, -120.0, 2.0, -95.5]]) * (1 + 0.001 * i)
        return x, logits

    unit = 2.0 ** -149   # the smallest subnormal: results there have few bits, allow 2 units
    for e, c in _run(fn, make):
        for k, (a, b) in enumerate(zip(e, c)):
            assert torch.equal(a == 0, b == 0), (k, a, b)          # the same elements underflow
            assert torch.equal(a.isinf(), b.isinf()), (k, a, b)    # log(0) = -inf on both sides
            fin = a.isfinite() & (a != 0)
            if k in (1, 3):   # logs: within log((n + 2) / n) of eager's for a subnormal of n units
                assert bool(((b[fin] - a[fin]).abs() <= 2 / (a[fin].exp().double() / unit).clamp(min=2) + 1e-5).all()), k
            else:
                torch.testing.assert_close(b[fin], a[fin], rtol=1e-5, atol=2 * unit)
