"""Past cache_limit a call that matches no variant runs eagerly.  Each such call still worked
out why the last variant missed (first_failure: the failing guard described as text) and
counted it, although that reason is only used by the one warning: ~25 us of CPU per call, 7%
of a small transformer block's forward, so a loop over 20 sequence lengths (8 compiled, 12
past the limit) ran those 12 slower than eager.  Once the warning is given the reason is not
computed again; the compiled variants still serve the shapes they were recorded for."""
import warnings

import torch
import torch.nn as nn

from harness import EAGER, same
from mlircap.capture import capture


def test_calls_past_cache_limit_skip_the_miss_reason():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    fast = capture(m, EAGER, cache_limit=3)
    xs = [torch.randn(n, 8) for n in range(1, 8)]
    with warnings.catch_warnings(record=True) as wl:
        warnings.simplefilter("always")
        for x in xs:
            same(fast(x), m(x))
    assert sum("cache_limit (3) reached" in str(w.message) for w in wl) == 1
    c = fast._mlircap_capture
    assert len(c.variants) == 3
    calls = []
    for v in c.variants:
        orig = v.first_failure
        v.first_failure = lambda *a, _o=orig: calls.append(1) or _o(*a)
    replays = c.stats.replays
    for x in xs:   # the first three replay their variants, the others run eagerly
        same(fast(x), m(x))
    assert c.stats.replays == replays + 3
    assert calls == [], "the reason of a miss was computed past cache_limit after the warning"


def test_a_signature_that_missed_every_variant_runs_eagerly_without_their_guards():
    # The guards of all cache_limit variants were still checked, all failing, on every call of
    # a length past the limit (~35 us on this host: bench/varying_lengths.py's 12 such lengths
    # 5-10% slower than eager). A call whose argument signature (shapes, strides, dtypes,
    # numbers) missed every variant before now runs eagerly at once; the compiled lengths
    # still replay, and a new signature still checks the guards first.
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    fast = capture(m, EAGER, cache_limit=3)
    xs = [torch.randn(n, 8) for n in range(1, 8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in xs:
            same(fast(x), m(x))
    c = fast._mlircap_capture
    checked = []
    for i, v in enumerate(c.variants):
        orig = v.guard
        v.guard = lambda *a, _o=orig, _i=i: checked.append(_i) or _o(*a)
    replays, eager = c.stats.replays, c.stats.eager_calls
    for x in xs:
        same(fast(x), m(x))
    assert c.stats.replays == replays + 3 and c.stats.eager_calls == eager + 4
    # the three compiled lengths find their variants (guards 0; 0, 1; 0, 1, 2); the four
    # lengths that missed before check none
    assert checked == [0, 0, 1, 0, 1, 2], checked
    checked.clear()
    x = torch.randn(9, 8)   # a signature not seen: the guards first, then eagerly, remembered
    same(fast(x), m(x))
    same(fast(x), m(x))
    assert checked == [0, 1, 2], checked
    with torch.no_grad():   # (the same signature under no_grad: guards decide, as before)
        same(fast(xs[0]), m(xs[0]))
