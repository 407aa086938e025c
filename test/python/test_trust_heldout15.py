"""Held-out programs, set 4 (bench/heldout4.py): hand-written programs with Python control flow and state
that changes between calls (optimizer steps, counters, generators, data-dependent branches), compiled and
compared with eager after every call: outputs and state."""
import warnings

import torch

import mlircap
from mlircap.capture import cache


def _augment_program():
    g = torch.Generator().manual_seed(0)

    def augment(img):
        if torch.rand(1, generator=g) < 0.5:
            img = img.flip(-1)
        top = int(torch.randint(0, 3, (1,), generator=g))
        left = int(torch.randint(0, 3, (1,), generator=g))
        return (img[..., top:top + 4, left:left + 4] * 1.1).clamp(0, 1)
    return augment, g


def test_past_cache_limit_a_replay_missing_after_generator_draws_runs_eagerly_from_then_on(monkeypatch):
    """A random flip and crop drawn from a torch.Generator (torchvision-style augmentation): each
    combination of draws is a data-dependent path, the variants fill cache_limit, and a later call
    whose draws take a path no variant holds misses in the middle of a replay, after the generator
    has drawn. That call continues under the tracer with the draws' results (a recording's cost);
    before the fix every later call of the same arguments' signature paid it again wherever its
    path was not recorded (bench/heldout4.py augment_generator: 0.03x eager). Now the signature runs
    eagerly from then on, as a signature that missed every variant's guards does."""
    recordings = []
    orig = cache._Captured._record

    def counting(self, func, args, catchup=None, store=True):
        recordings.append(store)
        return orig(self, func, args, catchup, store)
    monkeypatch.setattr(cache._Captured, "_record", counting)
    eager_fn, g_eager = _augment_program()
    fn, g = _augment_program()
    fast = mlircap.compile(fn, cache_limit=3)
    torch.manual_seed(0)
    x = torch.rand(3, 6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(40):
            if i == 20:
                past_limit = len(recordings)
            ref, got = eager_fn(x), fast(x)
            assert torch.equal(ref, got), i
            assert torch.equal(g_eager.get_state(), g.get_state()), i
    assert len(fast._call.variants) == 3
    # after call 20 the cache is long full and the signature has missed once: no more tracing
    assert len(recordings) == past_limit, recordings


def _compare_calls(make, inputs):
    """make() -> (fn, state()); each side its own state; outputs and state compared after every call.
    Returns the compiled function."""
    fe, state_e = make()
    fc, state_c = make()
    fast = mlircap.compile(fc)
    for i, args in enumerate(inputs):
        ref, got = fe(*[a.clone() for a in args]), fast(*[a.clone() for a in args])
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6, msg=f"call {i}")
        se, sc = state_e(), state_c()
        assert len(se) == len(sc)
        for a, b in zip(se, sc):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"call {i}")
            else:
                assert a == b, (i, a, b)
    return fast


class _Kalman:
    """a constant-velocity filter whose state (x, P, a count of updates, a list of innovations)
    lives on a plain object; its bound step method is what is compiled."""

    def __init__(self):
        self.F = torch.tensor([[1.0, 0.1], [0.0, 1.0]])
        self.x = torch.zeros(2)
        self.P = torch.eye(2)
        self.n = 0
        self.ptr = 0

    def step(self, z):
        x = self.F @ self.x
        P = self.F @ self.P @ self.F.T + 0.01 * torch.eye(2)
        k = P[:, 0] / (P[0, 0] + 0.5)
        x = x + k * (z - x[0])
        self.P = P - k[:, None] * P[0:1, :]
        self.x = x
        self.n += 1
        self.ptr = (self.ptr + 1) % 3
        return x * 2


def test_counters_of_the_object_of_a_compiled_bound_method_do_not_recompile():
    """mlircap.compile(kf.step): the instance is every call's first argument, and its whole
    instance dict was guarded by value as an argument object's is, so its update counter and
    ring pointer recompiled every call (bench/heldout4.py kalman, grad_scaler, replay_buffer,
    metrics: 4 recompiles in 5 calls, then cache_limit and eager). A module's counters did not:
    the instance is now read as a module's attributes are, lazily."""
    def make():
        k = _Kalman()
        return k.step, lambda: (k.x, k.P, k.n, k.ptr)
    torch.manual_seed(0)
    fast = _compare_calls(make, [(torch.randn(()),) for _ in range(7)])
    assert len(fast._call.variants) == 1, fast.explain().recompile_reasons


def test_a_bound_method_called_on_another_instance_of_the_class_still_reads_its_own_state():
    """The instance read as a constant is guarded by identity: the same function compiled for a
    second object reads that object's attributes."""
    a, b = _Kalman(), _Kalman()
    b.x = torch.ones(2)
    fa, fb = mlircap.compile(a.step), mlircap.compile(b.step)
    ea, eb = _Kalman(), _Kalman()
    eb.x = torch.ones(2)
    for i in range(3):
        z = torch.tensor(float(i))
        torch.testing.assert_close(fa(z), ea.step(z))
        torch.testing.assert_close(fb(z), eb.step(z))
    assert (a.n, b.n) == (3, 3)
    torch.testing.assert_close(b.x, eb.x)


def test_lazily_guarded_state_dict_tested_by_len_keeps_its_step_counter_followed():
    """A pre-2.0 torch.optim-style step: per-parameter state initialized under `if len(state) == 0`
    and an int step counter in it. len() of the dict guarded every item by value (as any call
    taking it), so the counter, read back into a tensor operand, recompiled every call; len()
    is decided by the dict's type and length alone."""
    def make():
        p = torch.linspace(-1.0, 1.0, 5)
        state = {}

        def step(g):
            st = state.setdefault("p", {})
            if len(st) == 0:
                st["step"] = 0
                st["exp_avg"] = torch.zeros_like(p)
            st["step"] += 1
            st["exp_avg"].mul_(0.9).add_(g, alpha=0.1)
            p.sub_(st["exp_avg"] * (0.01 * st["step"]))
            return p.clone()
        return step, lambda: (p, state["p"]["step"], state["p"]["exp_avg"])
    torch.manual_seed(0)
    fast = _compare_calls(make, [(torch.randn(5),) for _ in range(7)])
    # (the first call's dict was empty: one recompile when it is not)
    assert len(fast._call.variants) == 2, fast.explain().recompile_reasons


def test_bias_correction_with_a_power_of_the_step_counter_is_a_graph_input():
    """LAMB / Adam written by hand: `m / (1 - beta1 ** step)` with a Python step counter.
    flows.py followed + - * / // % but not **, so the bias correction was guarded by its value:
    a recompile every step (bench/heldout4.py lamb: 4 recompiles in 5 calls, then eager)."""
    def make():
        p = torch.linspace(-1.0, 1.0, 6)
        m = torch.zeros(6)
        counter = {"step": 0}

        def step(g, b1=0.9, b2=0.999):
            counter["step"] += 1
            m.mul_(b1).add_(g, alpha=1 - b1)
            m_hat = m / (1 - b1 ** counter["step"])
            p.sub_(0.1 * m_hat / (1 - b2 ** counter["step"]) ** 0.5)
            return m_hat
        return step, lambda: (p, m, counter["step"])
    torch.manual_seed(0)
    fast = _compare_calls(make, [(torch.randn(6),) for _ in range(7)])
    assert len(fast._call.variants) == 1, fast.explain().recompile_reasons
