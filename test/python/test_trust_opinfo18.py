"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 1801-1807: a wrong result (the
shape of an unreduced multi_margin_loss) and ops that ran through torch. Each case compares
compiled calls with eager; strict=True also asserts that nothing ran through torch."""
import math

import pytest
import torch
import torch.nn.functional as F

import mlircap
from test_trust_opinfo17 import _check as _check17  # (test/python is on sys.path)


def _check(fn, *args, strict=True, calls=2):
    # test_trust_opinfo17's check (dtype, shape, values) at the dtype's default tolerance
    _check17(fn, *args, strict=strict, calls=calls, exact=False)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.uint8, torch.bool, torch.float32])
@pytest.mark.parametrize("form", ["xlogy_number_self", "xlogy_zero_self", "xlog1py_number_self"])
def test_number_operand_of_refs_decomposition_compiles(dtype, form):
    # OpInfo xlogy int64 (reference inputs #89: xlogy(1, t)): torch._refs wraps the number in
    # prims.scalar_tensor, which torch-mlir cannot lower: it ran through torch
    t = torch.tensor([[8, 7, 0, 1, 4], [3, 9, 2, 5, 6]]).to(dtype)
    fn = {"xlogy_number_self": lambda t: torch.xlogy(1, t),
          "xlogy_zero_self": lambda t: torch.xlogy(0, t) + t,
          "xlog1py_number_self": lambda t: torch.special.xlog1py(2.5, t)}[form]
    _check(fn, t)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("op", ["addmv", "addbmm", "addmm", "baddbmm"])
@pytest.mark.parametrize("scales", [{"beta": 0.6, "alpha": 0.2}, {"beta": 2.9, "alpha": 3.9},
                                    {"beta": -0.0, "alpha": 1.5}])
def test_float_scales_of_integer_products_compile(dtype, op, scales):
    # OpInfo addbmm int16 #3 (beta=0.6, alpha=0.2) ran through torch: eager truncates a float
    # beta / alpha to the integer dtype (0 * input + 0 * product), torch-mlir rejects it
    g = torch.Generator().manual_seed(0)
    lo = 0 if dtype == torch.uint8 else -9
    r = (lambda *s: torch.randint(lo, 9, s, generator=g).to(dtype))
    shapes = {"addmv": ((5,), (5, 10), (10,)), "addbmm": ((5, 10), (4, 5, 6), (4, 6, 10)),
              "addmm": ((5, 10), (5, 6), (6, 10)), "baddbmm": ((4, 5, 10), (4, 5, 6), (4, 6, 10))}[op]
    f = getattr(torch, op)
    _check(lambda c, a, b: f(c, a, b, **scales), *(r(*s) for s in shapes))


@pytest.mark.parametrize("dtype,scale", [(torch.uint8, -0.6), (torch.int8, 127.5), (torch.int16, float("nan"))])
@pytest.mark.parametrize("op", ["addmv", "addbmm"])
def test_float_scale_outside_integer_range_raises_like_eager(dtype, scale, op):
    # eager's conversion of the Scalar raises ("cannot be converted ... without overflow")
    c, a, b = {"addmv": (torch.ones(2, dtype=dtype), torch.ones(2, 3, dtype=dtype), torch.ones(3, dtype=dtype)),
               "addbmm": (torch.ones(2, 2, dtype=dtype), torch.ones(1, 2, 3, dtype=dtype),
                          torch.ones(1, 3, 2, dtype=dtype))}[op]
    f = getattr(torch, op)
    fn = (lambda c, a, b: f(c, a, b, alpha=scale))
    with pytest.raises(RuntimeError):
        fn(c, a, b)
    fast = mlircap.compile(fn)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            fast(c, a, b)


@pytest.mark.parametrize("form", ["linalg_cross", "cross", "broadcast", "transposed"])
def test_uint8_cross_compiles(form):
    # OpInfo linalg.cross uint8 (reference inputs #0) ran through torch ('dtype uint8'): its
    # differences of products are exact modulo 256 in int32 (widen.py), as eager's wrap
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randint(0, 256, (4, 3, 5), generator=g).to(torch.uint8) for _ in range(2))
    fn = {"linalg_cross": lambda a, b: torch.linalg.cross(a, b, dim=1),
          "cross": lambda a, b: torch.cross(a, b, dim=1),
          "broadcast": lambda a, b: torch.linalg.cross(a[:1, :, 0], b[:, :, 1]),
          "transposed": lambda a, b: torch.linalg.cross(a.transpose(1, 2), b.transpose(1, 2))}[form]
    _check(fn, a, b)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shapes", [((5,), ()), ((1, 5), ()), ((5,), (1,)), ((3, 5), (3,))])
def test_multi_margin_loss_unreduced_shape_as_eager(p, shapes):
    # OpInfo nn.functional.multi_margin_loss float32 (reference inputs #83) was WRONG: with
    # reduction='none' and a 0-dim target eager returns a 0-dim loss, torch's decomposition
    # (also its Python kernel at the Autograd key) returned shape (1,)
    xs, ts = shapes
    x = torch.linspace(-8.5, 3.0, math.prod(xs)).reshape(xs)
    t = torch.tensor(1) if ts == () else torch.arange(ts[0]) % 5
    _check(lambda x, t: F.multi_margin_loss(x, t, p=p, margin=0.5, reduction="none"), x, t)


def test_multi_margin_loss_unreduced_0d_target_gradient():
    x0, t = torch.tensor([-8.5, -1.7, 4.3, -2.4, 7.9]), torch.tensor(2)

    def step(x, t):
        loss = F.multi_margin_loss(x, t, reduction="none")
        loss.backward()
        return loss

    fast = mlircap.compile(step)
    xe = x0.clone().requires_grad_()
    want = step(xe, t)
    for _ in range(2):
        xc = x0.clone().requires_grad_()
        got = fast(xc, t)
        assert got.shape == want.shape == torch.Size([])
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xc.grad, xe.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0, 2.5), (0.5, -1.0)])
def test_float_addmv_compiles(dtype, beta, alpha):
    # OpInfo addmv float32 (seed 1807 #0) ran through torch: addmv is kept whole for the
    # low-precision rule (eager's one rounding of bf16 addmv) and torch-mlir has no lowering of
    # it ("Unsupported ops: torch.aten.addmv"); float32/64 now take torch's decomposition. beta 0
    # ignores a NaN bias as eager does.
    c = torch.randn(5, dtype=dtype)
    c[0] = float("nan")
    a, b = torch.randn(5, 10, dtype=dtype), torch.randn(10, dtype=dtype)

    def f(c, a, b):
        return torch.addmv(c, a, b, beta=beta, alpha=alpha)

    fast = mlircap.compile(f, strict=True)
    for _ in range(2):
        torch.testing.assert_close(fast(c, a, b), f(c, a, b), equal_nan=True)
