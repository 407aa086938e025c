"""`import numpy as np` inside the captured function: the module it binds is guarded in
sys.modules, so calls reached through it (`np.random.beta`, a method of NumPy's hidden
global RandomState) are replayed like calls through a global module instead of making
the function run eagerly."""
import warnings

import pytest
import torch

from harness import EAGER, same
from mlircap.capture import capture

np = pytest.importorskip("numpy")


def _mixup(x):
    import numpy as np
    lam = np.random.beta(0.4, 0.4)
    return lam * x + (1 - lam) * x.flip(0), lam


def _from_import(x):
    from numpy import random as npr
    return x * npr.uniform(0.5, 1.5) + npr.randint(0, 3)


@pytest.mark.parametrize("fn", [_mixup, _from_import])
def test_calls_through_a_module_imported_in_the_function(fn):
    cf = capture(fn, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no "capture gave up"
        for i in range(5):
            x = torch.randn(4, 3)
            np.random.seed(i % 2)   # the same draws again: replayed
            ye = fn(x)
            se = np.random.get_state()[1].copy()
            np.random.seed(i % 2)   # the same draws again: replayed
            yc = cf(x)
            same(ye, yc)
            assert (np.random.get_state()[1] == se).all(), "NumPy's RNG state differs from eager"
    c = cf._mlircap_capture
    assert c.variants and not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert c.stats.replays >= 1
