"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10): the wrong results and
errors it found, minimized. Each case compares compiled calls (the recording call and the
replayed compiled variant) with eager, values and dtype included."""
import pytest
import torch

import mlircap


def _calls(fn, *args, seed=None, n=3):
    """Eager's result and the compiled calls' results, each on fresh copies of the args
    (their layouts kept), after torch.manual_seed(seed) when seed is not None."""
    def run(f):
        if seed is not None:
            torch.manual_seed(seed)
        return f(*[a.clone(memory_format=torch.preserve_format) for a in args])
    want = run(fn)
    fast = mlircap.compile(fn)
    return want, [run(fast) for _ in range(n)], fast


# ----------------------------------------------------------------- random ops on strided inputs
_LAYOUTS = {
    "transposed": lambda: torch.randn(5, 4).t(),
    "channels_last": lambda: torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    "permuted3d": lambda: torch.randn(2, 3, 4).permute(2, 0, 1),
}
_RANDOM_LIKES = {
    "rand_like": lambda x: torch.rand_like(x) * 2,
    "randn_like": lambda x: torch.randn_like(x) + x,
    "randn_like_bf16": lambda x: torch.randn_like(x.bfloat16()) * 3,
    "rand_like_double": lambda x: torch.rand_like(x.double()) - 0.5,
}


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
@pytest.mark.parametrize("op", sorted(_RANDOM_LIKES))
def test_random_like_of_strided_tensor_draws_as_eager(layout, op):
    # seeds 171, 175, 372: rand_like / randn_like of a transposed or channels_last tensor gave
    # other numbers than eager's under the same torch.manual_seed. Eager draws into a tensor
    # laid out as its argument (memory order; randn one number at a time where a contiguous
    # result takes the vectorized path); the compiled graph drew a contiguous rand(shape).
    fn = _RANDOM_LIKES[op]
    x = _LAYOUTS[layout]()
    want, got, fast = _calls(fn, x, seed=7)
    for g in got:
        assert g.dtype == want.dtype and g.shape == want.shape
        assert torch.equal(g, want)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


# ----------------------------------------------------------------- fmin / fmax promotion
_PROMOTION_OPERANDS = [
    (torch.float16, torch.float32),    # a dimensioned float16 and a 0-dim float32: float16
    (torch.bfloat16, torch.float64),
    (torch.float32, torch.float64),
    (torch.int32, torch.int64),        # int32
    (torch.int64, torch.float64),      # a 0-dim float decides the category: float32
    (torch.uint8, torch.int64),
]


@pytest.mark.parametrize("op", ["fmin", "fmax"])
@pytest.mark.parametrize("dtypes", _PROMOTION_OPERANDS, ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
@pytest.mark.parametrize("zero_dim_first", [False, True])
def test_fmin_fmax_with_zero_dim_operand_promote_as_eager(op, dtypes, zero_dim_first):
    # seed 303: torch.fmin(x0, v6) of a float16 [4] x0 and a float32 0-dim v6 (a norm) came
    # back float32 from the compiled graph, float16 from eager: the decomposition expanded
    # both operands to the broadcast shape first, and the expanded 0-dim operand took part
    # in the type promotion as a dimensioned tensor.
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(3, 4, generator=g) * 50).to(dtypes[0])
    a.view(-1)[0] = 0
    b = torch.tensor(float("nan") if dtypes[1].is_floating_point else 7, dtype=dtypes[1])
    fn = getattr(torch, op)

    def f(a, b):
        return fn(b, a) if zero_dim_first else fn(a, b.abs() + 1)
    want, got, _ = _calls(f, a, b)
    for r in got:
        assert r.dtype == want.dtype and r.shape == want.shape
        assert torch.equal(r.isnan(), want.isnan()) if r.is_floating_point() else True
        assert torch.equal(torch.nan_to_num(r), torch.nan_to_num(want))
