"""Batched guard checks (mlircap/capture/guard_batches.py, guards._merge_guards): version
tags taken at install where the members hold, one C call for every dict group, for the
FunctionCode guards and for closure cells; each batch fails exactly where its members do."""
import collections
import textwrap

import torch

from harness import run_program
from mlircap.capture import capture

EAGER = lambda gm, ex: gm.forward  # noqa: E731


def test_one_list_through_two_dicts_rebound_in_one():
    """`D1["l"].append(..); D2["l"].append(..)` on one list: the second path is guarded to be
    the first (SameAs), which depends on both dicts; with D1's entry rebound, the replay must
    not write both items through D1 while D2's dict is unchanged."""
    src = """
    LST = [1.0]
    D1 = {"l": LST, "n": 1.0}
    D2 = {"l": LST}
    G = 2.0
    def make():
        def f(x):
            D1["l"].append(1.0)
            D2["l"].append(2.0)
            return x * G + D1["n"]
        return f
    def mutate(i, f):
        if i == 2:
            D1["l"] = []
    def state(f):
        return (list(D1["l"]), list(D2["l"]), list(LST))
    """
    run_program(textwrap.dedent(src), [(torch.ones(2),)] * 4, name="two_paths", cache_limit=8)


def test_dict_group_flag_flipped_by_the_call_is_left_unbatched():
    """A flag the call flips in a module dict (`self.first = False`): the group's members do
    not hold on the state the recording leaves, so no version tag may vouch for them; the
    second call (flag False) records a variant, the third replays it."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = True
            self.scale = 2.0
            self.mode = "a"
            self.k = 3

        def forward(self, x):
            y = x * self.k if self.mode == "a" else x
            if self.first:
                self.first = False
                return y + 1
            return y * self.scale
    m = M()
    ref = M()
    w = capture(m, EAGER)
    x = torch.ones(2)
    for _ in range(4):
        torch.testing.assert_close(w(x), ref(x))
    c = w._mlircap_capture
    assert len(c.variants) == 2 and c.stats.replays == 2, (len(c.variants), c.stats.replays)


def test_batches_fail_as_their_members():
    """Each batch's compiled check agrees with its members' typed checks: a function's
    __code__ / __defaults__ / __kwdefaults__ replaced, a closure cell rebound, a config
    attribute changed, an OrderedDict reordered (no new version tag: not batched)."""
    def make_scale(s):
        def scale(v, k=1.0, *, z=0.0):
            return v * s * k + z
        return scale

    def make_other(s):
        def other(v, k=1.0, *, z=0.0):
            return v - s * k
        return other

    sc = make_scale(2.0)
    sc2 = make_scale(3.0)

    class Cfg:
        pass
    cfg = Cfg()
    cfg.h, cfg.act = 2.0, "relu"
    od = collections.OrderedDict(a=1.0, b=2.0)

    def f(x):
        y = sc(x) + sc2(x)
        for k, v in cfg.__dict__.items():
            y = y + (v if type(v) is float else len(v))
        for k, v in od.items():
            y = y * v + len(k)
        return y

    w = capture(f, EAGER)
    x = torch.ones(2)
    w(x)
    v = w._mlircap_capture.variants[0]
    a = (x,)
    assert v.guard(a, f) and v.first_failure(a, f) is None
    kinds = {type(g).__name__ for g in v.pre}
    assert {"FunctionCode", "Is", "Keys"} <= kinds, kinds

    def agree(mut, undo):
        mut()
        try:
            fast, why = bool(v.guard(a, f)), v.first_failure(a, f)
            assert fast is False and why is not None, (fast, why)
            torch.testing.assert_close(w(x), f(x))
        finally:
            undo()
        assert v.guard(a, f), v.first_failure(a, f)

    code, dflt = sc.__code__, sc.__defaults__
    agree(lambda: setattr(sc, "__code__", make_other(1.0).__code__), lambda: setattr(sc, "__code__", code))
    agree(lambda: setattr(sc, "__defaults__", (2.0,)), lambda: setattr(sc, "__defaults__", dflt))
    kwd2 = sc2.__kwdefaults__
    agree(lambda: setattr(sc2, "__kwdefaults__", {"z": 1.0}), lambda: setattr(sc2, "__kwdefaults__", kwd2))
    agree(lambda: setattr(sc.__closure__[0], "cell_contents", 5.0),
          lambda: setattr(sc.__closure__[0], "cell_contents", 2.0))
    agree(lambda: setattr(cfg, "h", 4.0), lambda: setattr(cfg, "h", 2.0))
    agree(lambda: setattr(cfg, "extra", "xy"), lambda: delattr(cfg, "extra"))
    agree(lambda: od.move_to_end("a"), lambda: od.move_to_end("b"))


def test_large_module_guard_is_batched():
    """A module tree with many submodules and a config object: its pre-call guards compile
    to a handful of checks (one version-tag batch), and still fail on a changed attribute
    of a leaf module."""
    class Cfg:
        def __init__(self):
            self.eps, self.act, self.n = 1e-5, "gelu", 4

    class Blk(torch.nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            self.lin = torch.nn.Linear(4, 4)
            self.gain = 1.0

        def forward(self, x):
            y = self.lin(x) * self.gain
            return torch.nn.functional.gelu(y) if self.cfg.act == "gelu" else y.relu()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            cfg = Cfg()
            self.blocks = torch.nn.ModuleList([Blk(cfg) for _ in range(8)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x
    torch.manual_seed(0)
    m = M()
    w = capture(m, EAGER)
    x = torch.randn(2, 4)
    w(x)
    v = w._mlircap_capture.variants[0]
    assert v.guard((m, x), M.forward)
    assert len(v.pre) > 60, len(v.pre)
    from mlircap.capture.guard_batches import AllDictVersions
    assert any(isinstance(g, AllDictVersions) for g in v.guard.__code__.co_consts) or \
        "_dvs" in v.guard.__code__.co_names or "_dvs" in v.guard.__code__.co_freevars
    for change, undo in ((lambda: setattr(m.blocks[5], "gain", 2), lambda: setattr(m.blocks[5], "gain", 1.0)),
                         (lambda: setattr(m.blocks[0].cfg, "act", "relu"),
                          lambda: setattr(m.blocks[0].cfg, "act", "gelu"))):
        change()
        assert not v.guard((m, x), M.forward)
        torch.testing.assert_close(w(x), m(x))
        undo()
        assert v.guard((m, x), M.forward)


def test_dict_tags_are_retaken_after_an_unrelated_change():
    """A dict of the version-tag batch changes without touching a guarded entry (a class
    attribute nobody reads is set once): the members still hold, so the call replays and the
    tags are retaken (the fast path serves the next calls); a guarded entry changed after
    that still fails the guard. The guard binds its constants as globals, not closure cells
    (a closure's cells are copied into every call's frame)."""
    from mlircap.capture import guard_batches

    class Blk(torch.nn.Module):
        scale = 2.0

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) * self.scale

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Blk() for _ in range(4)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x
    torch.manual_seed(0)
    m = M()
    w = capture(m, EAGER)
    x = torch.randn(2, 4)
    w(x)
    v = w._mlircap_capture.variants[0]
    assert v.guard.__code__.co_freevars == ()
    retags = []
    orig = guard_batches.retag

    def spy(dicts, tags):
        retags.append(1)
        return orig(dicts, tags)
    guard_batches.retag = spy
    try:
        w2 = capture(M(), EAGER)   # a fresh capture: its guard binds the spy
        m2 = w2._mlircap_capture.fn
        w2(x)
        v2 = w2._mlircap_capture.variants[0]
        assert v2.guard((m2, x), M.forward)
        assert not retags
        Blk.unrelated = 1             # Blk's class dict changes; no guard reads `unrelated`
        assert v2.guard((m2, x), M.forward)
        assert len(retags) == 1
        assert v2.guard((m2, x), M.forward)
        assert len(retags) == 1       # the retaken tags hold: fast path again
        torch.testing.assert_close(w2(x), m2(x))
        Blk.scale = 3.0               # a guarded class attribute: the guard fails
        assert not v2.guard((m2, x), M.forward)
        torch.testing.assert_close(w2(x), m2(x))
    finally:
        guard_batches.retag = orig
        Blk.scale = 2.0


def test_code_object_attributes_are_not_guarded_one_by_one():
    """`fn.__code__.co_varnames` (transformers' decorators read it): a code object is
    immutable, so the identity guard on `fn.__code__` covers its attributes; replacing
    `__code__` still fails the variant."""
    import types

    def helper(a, b):
        return a + b

    def other(u, v, w=1):
        return u - v
    holder = types.SimpleNamespace(fn=helper)

    def f(x):
        names = holder.fn.__code__.co_varnames
        return x * len(names) + (1.0 if names[0] == "a" else 2.0)
    w = capture(f, EAGER)
    x = torch.ones(2)
    torch.testing.assert_close(w(x), f(x))
    v = w._mlircap_capture.variants[0]
    assert not any("co_varnames" in g.describe() for g in v.pre), [g.describe() for g in v.pre]
    torch.testing.assert_close(w(x), f(x))
    helper.__code__ = other.__code__
    assert not v.guard((x,), f)
    torch.testing.assert_close(w(x), f(x))
    assert len(w._mlircap_capture.variants) == 2
