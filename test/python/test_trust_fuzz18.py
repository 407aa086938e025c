"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), seeds 1200:1500 of each
mode and userops seeds 150:400: the wrong results and errors it found, minimized, and the
fuzzer's own fixes (false positives)."""
import pytest
import torch

import mlircap
from test_trust_fuzz17 import _load_fuzz  # bench/fuzz_graphs.py as a module (test/python is on sys.path)


def _program(source, families, grad=False):
    return {"seed": 1, "source": source, "families": families, "tol": 1e-4, "sizes": {"s0": 8}, "alt_sizes": {"s0": 8},
            "grad": grad, "inputs": [{"dims": ["s0"], "dtype": "float32", "layout": "contig", "fill": "normal"}]}


# ------------------------------- the float64 reference of a program that casts to float32
# --grad seed 1221: log_softmax(conv2d(...).float()) then reciprocal: values of log_softmax near
# 0 make the gradient ill-conditioned (1e6, float32 rounding moves it by 2.6e5). The float64
# reference ran `.float()` too, so from there on it computed eager's float32 steps and matched
# eager's gradient to 7 digits; a compiled gradient of the same float32 error counted wrong.
# The reference now keeps float64 through a cast to float32.
def test_fp64_reference_keeps_float64_through_float32_casts():
    fuzz = _load_fuzz()
    src = ("def f(x0):\n    v0 = torch.log_softmax((x0 * 30).float(), 0)\n"
           "    v1 = torch.softmax(x0, 0, dtype=torch.float32)\n    return (v0, v1, x0.sum(dtype=torch.float32))\n")
    prog = _program(src, ["softmax"])
    ins = fuzz.make_inputs(prog)
    ref = fuzz.fp64_reference(prog, ins)[0]
    x = ins[0].double()
    assert [r.dtype for r in ref] == [torch.float64] * 3
    assert torch.equal(ref[0], torch.log_softmax(x * 30, 0))
    assert torch.equal(ref[1], torch.softmax(x, 0))
    assert torch.equal(ref[2], x.sum())


def test_fp64_reference_of_a_gradient_through_a_float32_cast():
    fuzz = _load_fuzz()
    src = "def f(x0):\n    v0 = torch.reciprocal(torch.log_softmax((x0 * 30).float(), 0))\n    return (v0.double().sum(), v0.detach())\n"
    prog = _program(src, ["softmax"], grad=True)
    ins = fuzz.make_inputs(prog)
    (_, grads, _), _ = fuzz.fp64_reference(prog, [t.requires_grad_() for t in ins])
    x = ins[0].detach().double().requires_grad_()
    torch.reciprocal(torch.log_softmax(x * 30, 0)).sum().backward()
    assert grads[0].dtype == torch.float64 and torch.equal(grads[0], x.grad)


def test_fp64_reference_of_a_bit_view_stays_float32():
    # a view of a float32's bits as int32 depends on the format: the reference casts there
    fuzz = _load_fuzz()
    prog = _program("def f(x0):\n    return (x0.float().view(torch.int32) & 255,)\n", ["view"])
    ins = fuzz.make_inputs(prog)
    ref = fuzz.fp64_reference(prog, ins)[0]
    assert torch.equal(ref[0], ins[0].view(torch.int32) & 255)


def test_fuzz_seed_1221_grad_not_counted_wrong():
    fuzz = _load_fuzz()
    prog = fuzz.generate(1221, grad=True)
    res = fuzz.run_program(prog)
    assert res["category"] in ("compiled", "fallback"), res


# ------------------------------------------ conv1d of a transposed input with inf weights
# --grad seed 1342: conv1d(x.transpose(1, 2), w, padding=1) with an inf weight: frontend's 1-D
# convolution as the 2-D one of unit height viewed the transposed input as channels-last,
# where oneDNN skips the zero padding (0 * inf: no NaN, 96 NaN where eager has 108). ATen
# makes a 1-D convolution's input contiguous first.
@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("grad", [False, True])
def test_conv1d_of_a_transposed_input_keeps_the_padding_nans(groups, grad):
    g = torch.Generator().manual_seed(1342)
    x = torch.rand(4, 16, 12, generator=g).transpose(1, 2)
    w = torch.randn(6, 12 // groups, 2, generator=g)
    w[0, 0, 0] = float("inf")
    w[4, 1, 1] = float("-inf")

    def f(x, w):
        return (x.sum() * 2, torch.nn.functional.conv1d(x, w, None, stride=2, padding=1, groups=groups))
    if grad:
        def f2(x, w):
            s, y = f(x, w)
            return (y.nan_to_num(0, 0, 0).double().sum() + s, y.detach())
        want = f2(x, w)
        fast = mlircap.compile(f2)
        for _ in range(3):
            got = fast(x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_())
            torch.testing.assert_close(got[1], want[1], equal_nan=True)
        return
    want = f(x, w)[1]
    assert want.isnan().any() or groups == 1   # eager pads with zeros there (oneDNN: none)
    fast = mlircap.compile(f)
    for _ in range(3):
        torch.testing.assert_close(fast(x, w)[1], want, equal_nan=True)


# --------------------------------------- logit's gradient of NaN: eager's depends on position
# --grad seed 1435: logit(einsum(...), eps=1e-3) of NaN values. Eager's CPU logit_backward
# gives 0 for a NaN x in its vectorized body and NaN in its scalar remainder (and for a
# strided input everywhere); compiled gives NaN everywhere (since b86dd7c, as the scalar loop
# and CUDA). The fuzzer takes the kernel's scalar rule as the reference there.
def _logit_call(fn, tensors):
    x = tensors[0].detach().clone().requires_grad_()
    try:
        out = fn(x)
        out[0].backward()
        return (out, [x.grad]), [x.detach()], None
    except Exception as e:  # noqa: BLE001
        return None, [x.detach()], e


def _logit_f(x):
    return ((torch.logit(x * 1.0, eps=1e-3) * torch.arange(x.numel())).sum(),)


def test_fuzz_logit_gradient_of_nan_scalar_rule():
    fuzz = _load_fuzz()
    x = torch.rand(100)
    x[::3] = float("nan")
    scalar = x.detach().clone().requires_grad_()
    want = fuzz._scalar_logit_backward(torch.arange(100.0), x, 1e-3)
    assert int(want.isnan().sum()) == 34               # every NaN x, as the scalar loop
    got = (_logit_f(scalar), [want]), [x]
    assert fuzz._eager_depends_on_position(_logit_call, _logit_f, [x], got, 0.0)
    bad = want.clone()
    bad[0] = 0.0       # eager vector body's value at a NaN x: not the scalar rule
    assert not fuzz._eager_depends_on_position(_logit_call, _logit_f, [x], ((_logit_f(scalar), [bad]), [x]), 0.0)
    # a program without such a kernel: eager's result is the reference
    assert not fuzz._eager_depends_on_position(_logit_call, lambda x: ((x * 2).sum(),), [x], got, 0.0)


def test_fuzz_seed_1435_grad_not_counted_wrong():
    fuzz = _load_fuzz()
    res = fuzz.run_program(fuzz.generate(1435, grad=True))
    assert res["category"] in ("compiled", "fallback"), res


# ---------------------------------------- attention's gradient with a row masked out entirely
# userops --grad seeds 183, 264, 398: F.scaled_dot_product_attention with a bool or -inf mask
# hiding every key from a query row. The CPU flash op's log-sum-exp there is 0 (its output
# row 0), its backward's probabilities exp(s - lse) 0; the compiled form's logsumexp gave
# -inf, and every q / k / v gradient was NaN.
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask", ["bool", "additive"])
def test_attention_gradient_of_a_fully_masked_row(dtype, mask):
    g = torch.Generator().manual_seed(183)
    q, k, v = (torch.randn(3, 2, n, 4, generator=g).to(dtype) for n in (3, 5, 5))
    keep = torch.rand(3, 5, generator=g) > 0.3
    keep[1] = False
    m = keep if mask == "bool" else torch.zeros(3, 5, dtype=dtype).masked_fill(~keep, float("-inf"))

    def f(q, k, v):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=2.0)
        return ((o.double() * torch.arange(o.numel()).reshape(o.shape)).sum(), o.detach())
    want = _grads(f, q, k, v)
    assert not any(w.isnan().any() for w in want)
    tol = {torch.float64: 1e-7, torch.float32: 1e-4, torch.bfloat16: 2e-2}[dtype]
    fast = mlircap.compile(f)
    for _ in range(3):
        for got, w in zip(_grads(fast, q, k, v), want):
            torch.testing.assert_close(got, w, rtol=tol, atol=tol)


def _grads(fn, *xs):
    xs = [x.detach().clone().requires_grad_() for x in xs]
    out = fn(*xs)
    out[0].backward()
    return [out[1]] + [x.grad for x in xs]


# ------------------------------------- the gradient of a full min / max with an inf upstream
# --grad seed 1487: x4.min() feeding addcmul with an inf: eager's CPU gradient is 0 except
# where x equals its min (zeros, masked_fill of grad / count); aot_autograd traced the
# CUDA / subclass form mask * (grad / count), NaN everywhere (0 * inf).
@pytest.mark.parametrize("op", ["min", "max", "median", "nanmedian"])
@pytest.mark.parametrize("up", [float("inf"), float("nan"), 2.0])
def test_full_reduction_gradient_with_a_nonfinite_upstream(op, up):
    x = torch.tensor([1.0, 0.0, -3.0, -2.0, 4.0, -3.0, 4.0, 0.5], dtype=torch.float64)
    y = torch.tensor([up, 1.0], dtype=torch.float64)

    def f(x, y):
        m = getattr(x, op)()
        return ((m * y).sum(), m.detach())
    want = _grads(f, x, y)
    if up != 2.0:
        assert want[1].isfinite().sum() >= 5
    fast = mlircap.compile(f)
    for _ in range(3):
        for got, w in zip(_grads(fast, x, y), want):
            torch.testing.assert_close(got, w, equal_nan=True)


def test_fuzz_seed_1487_grad_not_counted_wrong():
    fuzz = _load_fuzz()
    res = fuzz.run_program(fuzz.generate(1487, grad=True))
    assert res["category"] in ("compiled", "fallback"), res


# --------------------------------- an unused float division / pow in a differentiated graph
# userops --grad seeds 8, 13, 34: a KL divergence of two Normals nothing reads (p.scale /
# q.scale, .pow(2)) after a random draw / a training-mode op: kept as a check of its data
# (an integer division by zero raises in eager), and the whole graph ran eagerly. A division,
# remainder or pow with a floating result never raises: it is no longer kept.
def _kl_unused(x, y):
    s = torch.nn.functional.softplus(x) + 0.1
    kl = torch.distributions.kl_divergence(torch.distributions.Normal(x, s), torch.distributions.Normal(x, 1.5))  # noqa: F841
    unused = (y * 2) % (x.sum() + 1) + torch.rand(3)  # noqa: F841
    loss = (x * s).sum() + torch.dropout(y, 0.0, True).sum()
    return (loss, loss.detach())


def test_unused_float_division_in_a_differentiated_graph_compiles():
    g = torch.Generator().manual_seed(8)
    x, y = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    want = _grads(_kl_unused, x, y)[1:]
    fast = mlircap.compile(_kl_unused)
    for _ in range(3):
        for got, w in zip(_grads(fast, x, y)[1:], want):
            torch.testing.assert_close(got, w)
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


def test_unused_integer_remainder_by_zero_still_raises():
    def f(x, n):
        unused = (n * 3) % (n * 0) + torch.rand(2)  # noqa: F841
        return ((x * 2).sum(),)
    x, n = torch.randn(3), torch.arange(3)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(x.requires_grad_(), n)
    fast = mlircap.compile(f)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fast(x.detach().clone().requires_grad_(), n)


# ------------------------------- a data-dependent result's storage: as eager's, no padding
# tensorops seed 1373: unique(...).contiguous().as_strided((3, 2), (1, 1)) at values with one
# distinct element: eager raises (the storage holds 1 element), compiled returned the bounded
# form's padding (-inf): its result was a narrow of the padded buffer.
@pytest.mark.parametrize("op", ["unique", "unique_counts", "unique_consecutive", "nonzero", "nonzero_tuple"])
def test_data_dependent_results_have_eager_storage(op):
    def f(x):
        y = x * 2
        if op == "unique":
            r = torch.unique(y, sorted=True)
        elif op == "unique_counts":
            r = torch.unique(y, return_counts=True)[1]
        elif op == "unique_consecutive":
            r = torch.unique_consecutive(y)
        elif op == "nonzero":
            r = torch.nonzero(y).flatten()
        else:
            r = torch.nonzero(y, as_tuple=True)[0]
        return (r.contiguous().as_strided((3, 2), (1, 1)) + 1,)
    many, one = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0.0, 0.0, 5.0, 0.0])
    fast = mlircap.compile(f)
    for _ in range(2):
        torch.testing.assert_close(fast(many), f(many))
    for _ in range(2):
        try:
            want = f(one)
        except RuntimeError as e:
            assert "out of bounds for storage" in str(e)
            with pytest.raises(RuntimeError, match="out of bounds for storage"):
                fast(one)
        else:   # unique_consecutive: eager's storage keeps the input's size (past the
            # valid rows: memory eager left uninitialized)
            assert op == "unique_consecutive"
            assert fast(one)[0].shape == want[0].shape


# eager's storage sizes and strides of data-dependent results (as_strided and views see them)
@pytest.mark.parametrize("case", ["unique", "unique_dim", "consecutive", "consecutive_dim", "nonzero", "nonzero_2d",
                                  "nonzero_none", "argwhere"])
def test_data_dependent_results_storage_and_strides_as_eager(case):
    def f(x):
        y = x * 1
        if case == "unique":
            r = torch.unique(y, return_counts=True, return_inverse=True)
        elif case == "unique_dim":
            r = torch.unique(y.view(-1, 2), dim=0, return_counts=True)
        elif case == "consecutive":
            r = torch.unique_consecutive(y, return_counts=True)
        elif case == "consecutive_dim":
            r = torch.unique_consecutive(y.view(-1, 2), dim=0, return_counts=True)
        elif case == "nonzero":
            r = (torch.nonzero(y),)
        elif case == "nonzero_2d":
            r = (torch.nonzero(y.view(-1, 2)), torch.nonzero(y.view(-1, 2), as_tuple=True)[1])
        elif case == "nonzero_none":
            r = (torch.nonzero(y * 0),)
        else:
            r = (torch.argwhere(y.view(-1, 2)),)
        return tuple((t + 0, t.untyped_storage().nbytes(), t.stride(), t.storage_offset()) for t in r)
    x = torch.tensor([0.0, 0.0, 5.0, 0.0, 5.0, 5.0, 1.0, 1.0])
    want = f(x)
    fast = mlircap.compile(f)
    for _ in range(3):
        got = fast(x)
        assert [g[1:] for g in got] == [w[1:] for w in want]
        for g, w in zip(got, want):
            torch.testing.assert_close(g[0], w[0])
