"""Numbers from graph breaks followed to where the program uses them (flows.py): printed or
logged through an f-string / %-format / argument, the replayed call gets the replay's own
number (no guard on it, no variant per value); compared and branched on, the branch is the
guard; used in any other way, the value is guarded.  Outputs and printed text against eager."""
import contextlib
import io
import logging

import torch

from mlircap.capture import capture

EAGER = lambda gm, ex: gm.forward  # noqa: E731
log = logging.getLogger("mlircap.test.flows")


def _check(fn, calls, cache_limit=20):
    c = capture(fn, EAGER, cache_limit=cache_limit)
    for args in calls:
        oe, oc = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(oe):
            e = fn(*args)
        with contextlib.redirect_stdout(oc):
            r = c(*args)
        assert oe.getvalue() == oc.getvalue(), (oe.getvalue(), oc.getvalue())
        for a, b in zip(e if isinstance(e, tuple) else (e,), r if isinstance(r, tuple) else (r,)):
            assert type(a) is type(b) and (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b), (a, b)
    return c._mlircap_capture


def test_printed_numbers_are_not_guarded():
    def f(x):
        y = x.sin()
        print(f"mean {y.mean().item():.4f} / {float(y.max())!r}|{y.min().item():>9.2e}")
        print("sum", y.sum().item(), "n", 3)
        print("scaled %.3f" % (y.std().item() * 2))
        log.debug("max %f", y.max().item())   # not enabled: a no-op
        return y * 2
    c = _check(f, [(torch.randn(5),) for _ in range(6)])
    assert len(c.variants) == 1 and c.stats.replays == 5


def test_number_printed_and_branched_on():
    def f(x):
        y = x.cos()
        if y.argmax().item() == 2:
            y = y + 1
        print(f"{y.sum().item() - 1.5:.3f}", "big" if y.max().item() > 0.9 else "small")
        return y
    calls = [(torch.randn(4),) for _ in range(10)]
    c = _check(f, calls)
    assert len(c.variants) <= 4 and c.stats.replays >= 6, (len(c.variants), c.stats.replays)


def test_number_used_otherwise_is_guarded():
    def f(x):
        v = x.sum().item()            # stored in a variable: guarded by value
        print(f"total {v:.2f}")
        n = int(x.abs().max().item() * 10)
        return x * v, n               # and returned
    c = _check(f, [(torch.ones(3),), (torch.ones(3),), (torch.full((3,), 2.0),)])
    # (the third call fails the guard on the second .item() after the print: the frame
    # continues from there, resume_code.py, instead of a second variant)
    assert len(c.variants) == 1 and c.stats.replays == 2


def test_formatted_tensor_printed():
    """`print(f"mean {y.mean():.3f}")`: Tensor.__format__ is the break; its text is printed."""
    def f(x, verbose=True):
        y = x.relu()
        if verbose:
            print(f"[debug] mean {y.mean():.3f} max {y.max()}", str(y.sum()))
        return y
    c = _check(f, [(torch.randn(6),) for _ in range(5)])
    assert len(c.variants) == 1 and c.stats.replays == 4
