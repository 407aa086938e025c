"""Random-program differential fuzzer, generator v2 (bench/fuzz_graphs.py --grad and the
module / dtype / tensor-op families, issue 10): the wrong results and errors it found,
minimized. Each case compares compiled calls (the recording call and the replayed compiled
variant) with eager, the exception type included where eager raises."""
import pytest
import torch
import torch.nn.functional as F

import mlircap


def _outcome(fn, *args, grad=False):
    """("ok", result) or ("raised", exception type) of one call on fresh copies of args."""
    ins = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    try:
        with torch.set_grad_enabled(grad):
            return "ok", fn(*ins)
    except Exception as e:  # noqa: BLE001 - compared with eager's
        return "raised", type(e)


def _same_outcomes(fn, good, bad, grad=False):
    """fn compiled: two calls on `good` (record, replay), then one on `bad`, each as eager's:
    the same exception type where eager raises, the same values where it returns."""
    fast = mlircap.compile(fn)
    for args in (good, good, bad):
        want, got = _outcome(fn, *args, grad=grad), _outcome(fast, *args, grad=grad)
        assert want[0] == got[0], f"eager {want}, compiled {got}"
        if want[0] == "raised":
            assert got[1] is want[1], f"eager raised {want[1].__name__}, compiled {got[1].__name__}"
        else:
            for w, g in zip(want[1], got[1]):
                assert torch.equal(w.detach(), g.detach())
    return fast


# ----------------------------------------------------------------- ops whose result nothing reads
_DEAD = {
    # seed 27 (--grad): v1 = torch.fmod(x1, x1), unused; eager raised ZeroDivisionError at
    # a call with a zero in x1, the compiled graph returned (aot_autograd's trace drops it)
    "fmod": (lambda x, i: torch.fmod(i, i), torch.tensor([1, 2, 3]), torch.tensor([1, 0, 3])),
    "floordiv": (lambda x, i: i // i, torch.tensor([1, 2, 3]), torch.tensor([1, 0, 3])),
    "remainder": (lambda x, i: torch.remainder(i, i.flip(0)), torch.tensor([1, 2, 3]), torch.tensor([0, 2, 3])),
    "index": (lambda x, i: x[i], torch.tensor([0, 2, 1]), torch.tensor([0, 5, 1])),
    "index_select": (lambda x, i: x.index_select(0, i), torch.tensor([0, 2]), torch.tensor([0, 3])),
    "gather": (lambda x, i: torch.gather(x, 0, i), torch.tensor([0, 2, 1]), torch.tensor([0, -7, 1])),
    # seeds 97 and 131 (modules): an unused F.nll_loss of a target holding -100 with
    # ignore_index=4: eager raised IndexError there (97: compiled raised RuntimeError at a
    # later EmbeddingBag instead; 131: compiled returned)
    "nll_loss": (lambda x, i: F.nll_loss(x.view(1, 3).log_softmax(1), i[:1], ignore_index=0),
                 torch.tensor([2, 1, 1]), torch.tensor([-100, 1, 1])),
    "embedding": (lambda x, i: F.embedding(i, x.view(3, 1)), torch.tensor([0, 2]), torch.tensor([0, 4])),
    # seed 410 (modules): an EmbeddingBag(mode='max') of indices holding -100 whose result is
    # read only by an unused view: eager raised, the compiled graph returned
    "embedding_bag_viewed": (lambda x, i: F.embedding_bag(i.view(1, -1), x.view(3, 1), mode="max").view(-1) + 1,
                             torch.tensor([0, 2, 1]), torch.tensor([0, -100, 1])),
    "index_then_sum": (lambda x, i: x[i].sum() * 2, torch.tensor([0, 2]), torch.tensor([0, 3])),
}


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("op", sorted(_DEAD))
def test_unused_op_raises_as_eager(op, grad):
    body, good, bad = _DEAD[op]

    def f(x, i):
        body(x, i)               # the result is dropped: eager still runs (and checks) it
        return (x * 2,)
    x = torch.randn(3, requires_grad=grad)
    _same_outcomes(f, (x, good), (x, bad), grad=grad)


def test_unused_op_kept_does_not_change_the_result_or_gradient():
    # the op kept for its check is an extra output of the graph, detached: the outputs and
    # the gradients are eager's, and a call that does not raise is compiled
    def f(x, i):
        _unused = x[i]           # nothing reads it
        return ((x.sin() * 3).sum(),)
    x = torch.randn(5, requires_grad=True)
    i = torch.tensor([4, 0, 2])
    fast = mlircap.compile(f)
    for _ in range(3):
        xe, xc = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
        f(xe, i)[0].backward()
        out = fast(xc, i)
        out[0].backward()
        assert len(out) == 1
        assert torch.allclose(out[0], f(x, i)[0]) and torch.allclose(xc.grad, xe.grad)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


# ----------------------------------------------------------------- adaptive max pool of NaN windows
_ADAPTIVE = {
    "1d": (lambda x: F.adaptive_max_pool1d(x, 2, return_indices=True), (2, 3, 6)),
    "2d": (lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True), (2, 3, 4, 6)),
    "2d_global": (lambda x: F.adaptive_max_pool2d(x, 1, return_indices=True), (2, 3, 4, 4)),
    "3d": (lambda x: F.adaptive_max_pool3d(x, (1, 2, 2), return_indices=True), (1, 2, 2, 4, 4)),
    "2d_unbatched": (lambda x: F.adaptive_max_pool2d(x, (2, 2), return_indices=True), (3, 4, 4)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(_ADAPTIVE))
def test_adaptive_max_pool_of_equal_windows_with_nan_as_eager(case, dtype):
    # seed 162 (--grad): F.adaptive_max_pool1d(silu(x0), 2) of a (4, 1, 6) float64 input
    # holding NaN: windows of one size went to torch-mlir's adaptive pool, whose index of a
    # window holding a NaN stayed -1 (eager: its last NaN), and the backward wrote through it
    # ('double free or corruption', the process died). Now the max pool of that kernel and
    # stride, whose indices follow eager's kernel. Values, indices and the gradient bit-exact.
    fn, shape = _ADAPTIVE[case]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(shape, generator=g, dtype=dtype)
    flat = x.view(-1)
    flat[1] = flat[7] = float("nan")
    flat[-1] = float("-inf")
    flat[-3] = float("nan")

    def f(x):
        v, i = fn(x)
        return v, i, (v.nan_to_num(0.0) * torch.arange(v.numel()).view(v.shape)).sum()
    fast = mlircap.compile(f)
    for _ in range(3):
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = f(xe), fast(xc)
        want[2].backward()
        got[2].backward()
        assert torch.equal(got[0].isnan(), want[0].isnan())
        assert torch.equal(got[0].nan_to_num(0.0), want[0].nan_to_num(0.0))
        assert torch.equal(got[1], want[1])
        assert torch.equal(xc.grad, xe.grad)
    assert fast.graphs and all(gr.fallback_reason is None for gr in fast.graphs)


# ----------------------------------------------------------------- binary_cross_entropy's input check
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("bad", ["nan", "above_one", "negative"])
def test_binary_cross_entropy_of_input_outside_0_1_raises_as_eager(bad, grad):
    # seed 295 (modules): F.binary_cross_entropy(torch.sigmoid(cos(x0)), x1) with an inf in
    # x0 (a NaN probability): eager's CPU kernel raised 'all elements of input should be
    # between 0 and 1', the compiled graph returned NaN. Inputs inside [0, 1] stay compiled.
    def f(p, t):
        return (F.binary_cross_entropy(p.sigmoid() * 1.5 - 0.25, t, reduction="sum"),
                F.binary_cross_entropy(p.sigmoid(), t, reduction="none"))
    t = torch.tensor([1.0, 0.0, 1.0, 0.0])
    good = torch.tensor([-1.0, 0.0, 1.0, 0.5], requires_grad=grad)   # p * 1.5 - 0.25 in [0, 1]
    worse = {"nan": [float("nan"), 0.0, 1.0, 2.0], "above_one": [0.0, 3.0, 0.0, 0.0],
             "negative": [0.0, -3.0, 0.0, 0.0]}[bad]
    fast = _same_outcomes(f, (good, t), (torch.tensor(worse, requires_grad=grad), t), grad=grad)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_unused_op_after_a_training_batch_norm_updates_its_statistics_once(grad):
    # seed 204 (modules): BatchNorm2d(2, momentum=0.5).train() then an unused
    # torch.div(v0, v0.mean(-1, keepdim=True), rounding_mode='floor') of its output; with
    # parameters that require grad, the kept division first ran (with its batch norm) as an
    # eager graph of its own before the compiled one: running_mean 0.40 off eager's (updated
    # twice). Now that graph only computes again what writes no state; the statistics and
    # outputs are eager's.
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(2, momentum=0.5, affine=False).train()
    lin = torch.nn.Linear(3, 2)
    lin.requires_grad_(grad)

    def f(x, i):
        v0 = bn(x)
        torch.div(v0, v0.mean(-1, keepdim=True), rounding_mode="floor")   # unused
        v0[:, :, i]                                                         # unused, an index
        return (lin(v0),)
    x = torch.randn(2, 2, 4, 3).contiguous(memory_format=torch.channels_last)
    i = torch.tensor([0, 3])
    fast = mlircap.compile(f)
    for _ in range(3):
        state = {k: v.clone() for k, v in bn.state_dict().items()}
        want = f(x, i)[0]
        want_state = {k: v.clone() for k, v in bn.state_dict().items()}
        bn.load_state_dict(state)
        got = fast(x, i)[0]
        assert torch.allclose(got, want, atol=1e-6)
        for k, v in bn.state_dict().items():
            assert torch.allclose(v.float(), want_state[k].float(), atol=1e-6), k
    with pytest.raises(IndexError):   # (differentiated: the graph runs eagerly, the batch norm before it)
        fast(x, torch.tensor([0, 7]))


# ----------------------------------------------------------------- bool addition
_BOOL_ADDS = {
    "plus_true": lambda a, b: a + True,
    "add_true_alpha3": lambda a, b: torch.add(a, True, alpha=3),
    "true_plus": lambda a, b: True + a,
    "plus_tensor": lambda a, b: a + b,
    "add_tensor_alpha2": lambda a, b: torch.add(a, b, alpha=2),
    "add_false_alpha": lambda a, b: torch.add(a, b[:1], alpha=False),
    "then_int": lambda a, b: (a + True).int() + (a + b).int(),
}


@pytest.mark.parametrize("op", sorted(_BOOL_ADDS))
def test_bool_addition_is_a_logical_or_as_eager(op):
    # seed 217 (dtypes): v5 = torch.add(v4, True, alpha=3) of a bool v4: eager's kernel adds
    # C++ bools, nonzero converting back to True; the compiled graph added in i1, which wraps
    # (True + True gave False), then divided by that False: 56 of 56 values off (INT_MIN).
    fn = _BOOL_ADDS[op]
    a = torch.tensor([[True, False, True, False], [False, True, True, False]])
    b = torch.tensor([True, True, False, False])

    def f(a, b):
        return (fn(a, b),)
    want = f(a, b)[0]
    fast = mlircap.compile(f)
    for _ in range(3):
        got = fast(a, b)[0]
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


# ----------------------------------------------------------------- a divisor of a wider dtype
@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod", "div_trunc"])
@pytest.mark.parametrize("dtypes", [(torch.uint8, torch.int64), (torch.int8, torch.int64), (torch.int16, torch.int32)],
                         ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
def test_division_by_a_divisor_that_converts_to_zero_raises_as_eager(op, dtypes):
    # seed 271 (dtypes): torch.floor_divide(v7, v8) of a uint8 v7 by v8 = x3.prod(), a 0-dim
    # int64 holding a multiple of 256: the division runs in uint8, the divisor converted to 0;
    # eager raised ZeroDivisionError, the compiled graph checked the int64 value (nonzero)
    # and its division by 0 trapped (SIGFPE, the process died).
    fns = {"floor_divide": torch.floor_divide, "remainder": torch.remainder, "fmod": torch.fmod,
           "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc")}
    fn = fns[op]

    def f(x, d):
        return (fn(x, d) + 1,)
    x = torch.tensor([[3, 0, 7], [5, 7, 100]], dtype=dtypes[0])
    wide = 1 << torch.iinfo(dtypes[0]).bits
    _same_outcomes(f, (x, torch.tensor(3, dtype=dtypes[1])), (x, torch.tensor(wide, dtype=dtypes[1])))
    _same_outcomes(f, (x, torch.tensor(-3, dtype=dtypes[1])), (x, torch.tensor(2 * wide, dtype=dtypes[1])))


@pytest.mark.parametrize("op", ["div_floor", "remainder", "floor_divide"])
def test_integer_division_by_a_false_bool_raises_as_eager(op):
    # seed 473 (dtypes): torch.div(v0, x0, rounding_mode='floor') of a uint8 v0 by a 0-dim
    # bool x0: False divides as 0, eager raised ZeroDivisionError; the divisor check skipped
    # bool divisors and the compiled graph returned.
    fns = {"div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"), "remainder": torch.remainder,
           "floor_divide": torch.floor_divide}
    fn = fns[op]

    def f(x, d):
        return (fn(x | 1, d) + 1,)
    x = torch.tensor([[3, 0, 7], [5, 7, 100]], dtype=torch.uint8)
    _same_outcomes(f, (x, torch.tensor(True)), (x, torch.tensor(False)))
    _same_outcomes(f, (x.int(), torch.tensor([True, True, True])), (x.int(), torch.tensor([True, False, True])))


def test_backward_of_a_graph_with_fewer_node_outputs_than_graph_outputs():
    # seed 437 (--grad): outputs (loss, v2.detach(), x2[x2]) of an expanded bool x2: the
    # compiled graph's autograd node has fewer outputs than the graph (aot regenerates one),
    # and loss.backward() from the second call raised aot_autograd's 'expected 2 grad_outs,
    # got 3' (eager runs); now the gradient is eager's.
    def f(x0, x1, x2):
        v0 = x2 | True
        v1 = x2[x2]
        v2 = torch.fmax(v0, x1)
        loss = (v2.double() * torch.arange(v2.numel()).reshape(v2.shape).double()).sum()
        return loss, v2.detach(), v1

    fast = mlircap.compile(f)
    for i in range(3):
        x2 = (torch.rand(1, 7, 1, generator=torch.Generator().manual_seed(i)) > 0.5).expand(8, 7, 1)
        grads = []
        for fn in (f, fast):
            x1 = torch.tensor(1.5 + i, dtype=torch.float16, requires_grad=True)
            out = fn(torch.tensor(0.3), x1, x2)
            out[0].backward()
            grads.append((x1.grad, out[0].detach(), out[2]))
        torch.testing.assert_close(grads[1][0], grads[0][0])
        torch.testing.assert_close(grads[1][1], grads[0][1])
        assert torch.equal(grads[1][2], grads[0][2])


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("mode,shape", [("linear", (1, 2, 5)), ("bilinear", (1, 1, 3, 4)), ("trilinear", (1, 1, 2, 3, 3))])
def test_linear_upsampling_of_infinities_as_eager(mode, shape, align_corners):
    # seed 389 (--grad): F.interpolate(mode='bilinear') of an input holding +-inf: torch's
    # decomposition combined neighbours as a + (b - a) * w (inf - inf: NaN), eager as
    # a * (1 - w) + b * w: 64 NaN against eager's 15.
    def f(x):
        return F.interpolate(x, scale_factor=3, mode=mode, align_corners=align_corners)

    fast = mlircap.compile(f)
    for i in range(3):
        x = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
        flat = x.view(-1)
        flat[1], flat[-2] = float("inf"), -float("inf")
        want, got = f(x), fast(x)
        assert torch.equal(got.isnan(), want.isnan()), (int(got.isnan().sum()), int(want.isnan().sum()))
        torch.testing.assert_close(got, want, equal_nan=True)
