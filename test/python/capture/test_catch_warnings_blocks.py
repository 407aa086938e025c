"""`with warnings.catch_warnings(): warnings.simplefilter("ignore"); ...` inside the captured
function (library code silencing a warning around a call, bench/capture6.py
c6_warnings_catch_block): the catch_warnings object was made during the recording and could
not be made again from its contents (the warning filters it saves on entry hold compiled
patterns), so capture gave up on the function (Dynamo gives up there too).  The class call is
now a replayed call like its __enter__ / __exit__, whose object is a handle the replay makes
anew.  Outputs and the warnings the user sees are compared with eager's."""
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness import EAGER, same
from mlircap.capture import capture


class Silenced(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.legacy = True

    def forward(self, x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h = self.fc(x)
            if self.legacy:
                warnings.warn("legacy path (silenced)", UserWarning)
        warnings.warn("after the block (shown)", UserWarning)
        return F.gelu(h)


def _run(f, xs):
    with warnings.catch_warnings(record=True) as wl:
        warnings.simplefilter("always")
        # a filter with a message pattern, as libraries install (torch does at import; pytest's
        # own filters have none): the filters a catch_warnings block saves then hold a
        # compiled pattern
        warnings.filterwarnings("ignore", message=r"an unrelated .* warning")
        outs = [f(x) for x in xs]
    return outs, sorted(str(w.message) for w in wl if "mlircap" not in str(w.message)), \
        [str(w.message) for w in wl if "mlircap" in str(w.message)]


def test_catch_warnings_block_is_captured_and_silences_as_eager():
    torch.manual_seed(0)
    m = Silenced()
    fast = capture(m, EAGER)
    xs = [torch.randn(3, 6) for _ in range(4)]
    ref, ref_w, _ = _run(m, xs)
    got, got_w, ours = _run(fast, xs)
    same(got, ref)
    assert got_w == ref_w == ["after the block (shown)"] * 4, got_w
    assert not ours, ours   # (no 'capture gave up')
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants) and c.stats.replays == 3
    # the filters the block changed are restored after each call, as eager leaves them
    with warnings.catch_warnings(record=True) as wl:
        warnings.simplefilter("always")
        warnings.warn("outside", UserWarning)
    assert len(wl) == 1
