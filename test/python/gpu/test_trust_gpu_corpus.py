"""Wrong results that `bench/modules.py --device cuda` and `bench/modules5.py/modules6.py
--device cuda` found on the H200 (2026-12-04), each reduced to the pattern that caused it."""
import warnings

import pytest
import torch
from torch import nn

import mlircap

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


def _same(a, b):
    a, b = (a, b) if isinstance(a, (tuple, list)) else ((a,), (b,))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.device == y.device and x.dtype == y.dtype
        torch.testing.assert_close(x, y, equal_nan=True)


def _no_runtime_fallback(w):
    bad = [str(m.message) for m in w if "failed at run time" in str(m.message)]
    assert not bad, bad


@pytest.fixture
def no_tf32():
    # eager's cuDNN LSTM and cuBLAS products in TF32 differ from float32 by ~1e-4
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("batch", [1, 2])
def test_lstm_final_state_shape(batch, no_tf32):
    # torch 2.11's LSTM decomposition returned h_n/c_n as (layers, 1, batch, hidden)
    torch.manual_seed(0)
    lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True).cuda()
    x = torch.randn(batch, 5, 6, device="cuda")
    state = (torch.randn(2, batch, 8, device="cuda"), torch.randn(2, batch, 8, device="cuda"))

    def f(x, state):
        out, (h, c) = lstm(x, state)
        return out[:, -1] + h[-1], h, c

    fast = mlircap.compile(f)
    for _ in range(3):
        _same(fast(x, state), f(x, state))


@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_rnn_dropout_between_layers_draws_as_eager(cls):
    # cuDNN drops out between layers from its own generator state: the call runs as eager's
    torch.manual_seed(0)
    m = cls(6, 8, num_layers=2, dropout=0.25, batch_first=True).cuda().train()
    proj = nn.Linear(8, 2).cuda()

    def f(x):
        y, _ = m(x)
        return proj(y.mean(1)).relu()

    fast = mlircap.compile(f)
    x = torch.randn(2, 5, 6, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in (1, 1, 2):
            torch.manual_seed(seed)
            want = f(x)
            torch.manual_seed(seed)
            _same(fast(x), want)


def test_cpu_index_tensor_beside_gpu_tensors(no_tf32):
    # mixup: x[torch.randperm(n)] with the permutation made on the CPU
    lin = nn.Linear(8, 4).cuda()

    def f(x, lam):
        return lin(lam * x + (1 - lam) * x[torch.randperm(x.shape[0])])

    fast = mlircap.compile(f)
    x = torch.randn(6, 8, device="cuda")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for seed in (1, 2, 3):
            torch.manual_seed(seed)
            want = f(x, 0.3)
            torch.manual_seed(seed)
            _same(fast(x, 0.3), want)
    _no_runtime_fallback(w)


def test_float_to_int8_round_trip_wraps_as_eager():
    # a QAT observer without clamp: (x / scale).round().to(int8).float() must keep the wrap
    def f(x, scale):
        q = (x / scale).round().to(torch.int8)
        return q, q.float() * scale, (x / scale).to(torch.int16)

    fast = mlircap.compile(f)
    x = torch.randn(4, 6, device="cuda") * 5
    x[0, :4] = torch.tensor([3.0, -3.0, 40.0, 1e9])
    scale = torch.tensor(0.01, device="cuda")
    for _ in range(3):
        _same(fast(x, scale), f(x, scale))


def test_half_times_a_number_past_its_range():
    # eager reads 70000.0 in float32 (h = 0.5 gives 35000); converted to float16 first it is inf
    def f(h):
        return h * 70000.0, h / 1e-6, h.float() * 2

    h = torch.linspace(-1, 1, 12, device="cuda").half().reshape(3, 4)
    check_same = mlircap.compile(f)
    for _ in range(3):
        _same(check_same(h), f(h))


@pytest.mark.parametrize("cin", [1, 3])
def test_single_channel_convolution_nhwc(cin, no_tf32):
    # a one-channel NHWC input and filter have NCHW strides: cuDNN's out= form wrote an
    # NCHW result into the plan's NHWC buffer (ESPCN's first convolution: 238/240 wrong)
    torch.manual_seed(0)
    body = nn.Sequential(nn.Conv2d(cin, 8, 5, padding=2), nn.Tanh(), nn.Conv2d(8, 9, 3, padding=1),
                         nn.PixelShuffle(3)).cuda()
    x = torch.rand(1, cin, 6, 5, device="cuda")
    fast = mlircap.compile(body)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            _same(fast(x), body(x))
    _no_runtime_fallback(w)


def test_bernoulli_after_manual_seed_draws_as_eager():
    # bernoulli(p) decomposed into rand_like(p) < p draws other numbers than CUDA's
    # bernoulli kernel: with torch.manual_seed inside the function, 6/15 elements differed
    def f(x):
        torch.manual_seed(42)
        return torch.bernoulli(torch.full_like(x, 0.5)) * x, torch.randn_like(x)

    x = torch.randn(3, 5, device="cuda")
    fast = mlircap.compile(f)
    for _ in range(3):
        _same(fast(x), f(x))


def test_cpu_random_island_in_cuda_graph():
    # randperm without a device (a CPU draw) beside CUDA work: a whole-graph CUDA capture
    # replays device work only and its failed capture drew from the CPU generator again
    lin = nn.Linear(8, 4).cuda()

    def f(x):
        torch.manual_seed(7)
        perm = torch.randperm(x.shape[0])
        return lin(0.3 * x + 0.7 * x[perm]), torch.rand(2), perm

    fast = mlircap.compile(f)
    for i in range(4):
        x = torch.randn(4, 8, device="cuda") + i
        torch.manual_seed(100 + i)
        want, state_e = f(x), torch.get_rng_state()
        torch.manual_seed(100 + i)
        got, state_c = fast(x), torch.get_rng_state()
        _same(got, want)
        assert torch.equal(state_e, state_c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stem_convolution_of_an_nchw_image_writes_the_nhwc_buffer(dtype, no_tf32, monkeypatch):
    # a first convolution reads the caller's NCHW image with an NCHW filter: cuDNN picks NCHW
    # output, so the plan took F.conv2d plus a transposing copy into its NHWC buffer (ResNet-18
    # stem); with the filter made channels-last, cuDNN writes the NHWC buffer itself
    from mlircap.runtime import plan as P

    copied = []
    for k, f in list(P.LIBRARY.items()):
        if k.startswith("conv2d"):
            monkeypatch.setitem(P.LIBRARY, k, lambda *a, _f=f, _k=k, **kw: copied.append(_k) or _f(*a, **kw))
    torch.manual_seed(0)
    stem = nn.Sequential(nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, padding=1)).cuda().eval().to(dtype)
    x = torch.randn(2, 3, 32, 32, device="cuda", dtype=dtype)
    fast = mlircap.compile(stem)
    with torch.no_grad(), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            _same(fast(x), stem(x))
    _no_runtime_fallback(w)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)
    assert not copied, copied


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_values_read_at_gathered_points(dtype, no_tf32):
    # log_softmax / softmax read only at gathered points are recomputed by the gathers'
    # kernels from each row's max and sum (93aec14, 5a1a64b); softmax's max is a keepdim
    # reduction over loops with a unit dim (ec3fda5): per-token log-probs as RL and DPO code
    # computes them, cross-entropy with ignored targets and label smoothing, a softmax's rows
    # picked by (repeated) ids
    import torch.nn.functional as F

    def f(logits, labels, ids):
        logp = torch.log_softmax(logits.float(), -1)
        tok = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        ce = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=0.1)
        rows = torch.softmax(logits[0], -1)[ids] * 2
        return tok, ce, rows

    torch.manual_seed(0)
    logits = (torch.randn(3, 40, 1000, device="cuda") * 3).to(dtype)
    labels = torch.randint(0, 1000, (3, 40), device="cuda")
    labels[1, ::7] = -100
    ids = torch.tensor([3, 3, 0, 39, 17], device="cuda")
    fast = mlircap.compile(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            _same(fast(logits, labels, ids), f(logits, labels, ids))
    _no_runtime_fallback(w)
