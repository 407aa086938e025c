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
