"""mlircap.compile(fn, device="cuda") end to end on a machine without a GPU: the GPU
partitioning rules, opmath's GPU rewrites, the core's GPU codegen and launch plan, run on CPU
tensors by simt.install_simt_gpu() (library steps through the runtime, kernels in the SIMT
interpreter). Each program's result is compared with eager on the CPU; the plan must be the
interpreted one (no fallback), so a codegen failure or a wrong kernel fails here, in CI."""
import pytest
import simt  # test/python/simt.py
import torch
import torch.nn.functional as F

import mlircap


@pytest.fixture(scope="module", autouse=True)
def simt_gpu():
    import mlircap.runtime.cuda as cuda

    real = cuda.GpuExecutable
    simt.install_simt_gpu()
    yield
    cuda.GpuExecutable = real


def _x(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


PROGRAMS = {
    "pointwise": (lambda x, y: torch.sigmoid(x) * y + 1, lambda: (_x(33, 17), _x(33, 17, seed=1))),
    "broadcast": (lambda x, b: F.relu(x + b), lambda: (_x(8, 64), _x(64, seed=1))),
    "row_sum": (lambda x: x.sum(-1), lambda: (_x(7, 300),)),
    "column_sum": (lambda x: x.sum(0), lambda: (_x(300, 7),)),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: (_x(5, 1000),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (96,), w, b), lambda: (_x(6, 96), _x(96, seed=1), _x(96, seed=2))),
    "rms_norm_bf16": (lambda x, w: w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype),
                      lambda: (_x(4, 128, dtype=torch.bfloat16), _x(128, dtype=torch.bfloat16, seed=1))),
    "linear_gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), lambda: (_x(4, 32), _x(16, 32, seed=1), _x(16, seed=2))),
    "transpose_add": (lambda x: x.t().contiguous() + x.t() * 2, lambda: (_x(13, 29),)),
    "gather": (lambda x, i: x.gather(1, i), lambda: (_x(6, 10), torch.randint(0, 10, (6, 4), generator=torch.Generator().manual_seed(3)))),
    "int_and_bool": (lambda a, b: ((a * 3) // 2 + b).masked_fill(a > 0, -1),
                     lambda: (torch.arange(-20, 20).reshape(4, 10), torch.arange(40).reshape(4, 10))),
    "argmax": (lambda x: x.argmax(-1), lambda: (_x(9, 77),)),
    "cumsum": (lambda x: x.cumsum(-1), lambda: (_x(3, 50),)),
    # kernels with affine.apply (pooling windows) and arith.remf / math.asin
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1), lambda: (_x(2, 3, 9, 9),)),
    # a generic yielding window sums by (batch, position) and counts by position only
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (None, 3, 2)), lambda: (_x(3, 8, 8, 6),)),
    "fmod_asin": (lambda x, y: torch.fmod(x, y) + torch.asin(x.clamp(-1, 1)), lambda: (_x(5, 7), _x(5, 7, seed=1) + 3)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gpu_path_matches_eager(name):
    fn, make = PROGRAMS[name]
    args = make()
    want = fn(*args)
    c = mlircap.compile(fn, device="cuda", strict=True)
    for _ in range(2):
        got = c(*args)
    assert c.graphs and all(type(g.executable).__name__ == "SimtExecutable" for g in c.graphs)
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = {"rtol": 1.6e-2, "atol": 1e-2} if want.dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(got, want, **tol)


def test_the_check_sees_a_wrong_result():
    """The check is not vacuous: the plan's kernel run on a wrong argument (its input rotated by
    one element) gives a result the comparison above would reject."""
    fn = lambda x: x * 2 + 1   # noqa: E731
    x = _x(64)
    c = mlircap.compile(fn, device="cuda", strict=True)
    c(x)
    exe = c.graphs[0].executable
    real = exe._prepare_inputs
    exe._prepare_inputs = lambda args: [torch.cat([a.reshape(-1)[1:], a.reshape(-1)[:1]]).reshape(a.shape) for a in real(args)]
    assert not torch.allclose(c(x), fn(x))
