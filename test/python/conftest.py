# mlircap is imported from this checkout's python/ through pytest.ini's `pythonpath`
# (ahead of any installed mlircap); no sys.path changes here.
import os

import pytest

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture
def compiled_whole(capsys, monkeypatch):
    """`check(fn, *args)`: the compiled calls of mlircap.compile(fn) (the second
    and third: on CUDA the third replays a CUDA graph) give eager's result bit for
    bit, on eager's device (NaN where eager has NaN); every graph compiled and no
    op ran as an eager island. Returns the last result. Used by test_op_coverage.py
    and gpu/test_op_coverage_gpu.py."""
    import torch

    import mlircap
    from mlircap import logs

    monkeypatch.setattr(logs, "_enabled", logs._enabled | {"fallback"})

    def check(fn, *args):
        want = fn(*args)
        fast = mlircap.compile(fn)
        capsys.readouterr()
        fast(*[a.clone() for a in args])   # records (runs for real)
        for _ in range(2):
            got = fast(*[a.clone() for a in args])
            assert got.device == want.device and got.dtype == want.dtype and got.shape == want.shape
            if want.is_floating_point():
                assert torch.equal(got.isnan(), want.isnan())
            assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want)), (got, want)
        err = capsys.readouterr().err
        assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)
        assert "eager islands" not in err and "no part of the graph compiled" not in err, err
        return got

    return check


@pytest.fixture
def fallback_log(capsys):
    """capsys with mlircap's 'fallback' log on (eager islands and whole-graph fallbacks are
    printed on stderr): the trust tests read it to check that every graph compiled."""
    from mlircap import logs

    logs.set_logs("fallback")
    yield capsys
    logs.set_logs()
