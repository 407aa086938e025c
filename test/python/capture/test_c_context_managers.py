"""`with lock:` on a C-implemented context manager the program reads (a module-level
threading.Lock, as transformers' hook installation takes): its `__exit__` is a replayed
uncapturable call, so its `__enter__` is one too (special_calls.op_before_with).  The
replay ran the `__exit__` alone: "release unlocked lock" from the second call on."""
import threading

import torch

from harness import run_program


def test_global_lock_in_forward():
    c = run_program("""
import threading
LOCK = threading.Lock()
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.installed = False
    def forward(self, x):
        if not self.installed:
            with LOCK:
                if not self.installed:
                    self.installed = True
        with LOCK:
            y = self.fc(x)
        return y * 2
def make():
    return M()
def state(m):
    return LOCK.locked()
""", [(torch.randn(2, 3),) for _ in range(4)])
    assert c.stats.replays >= 2
    assert not any(v.eager for v in c.variants)


def test_lock_argument_released():
    lock = threading.Lock()

    def f(x, lk):
        with lk:
            return x + 1
    from harness import EAGER
    from mlircap.capture import capture
    cf = capture(f, EAGER)
    for _ in range(3):
        assert torch.equal(cf(torch.ones(2), lock), torch.ones(2) + 1)
        assert not lock.locked()
