"""Capture rate and guard cost (issue 11 items 4 and 5), session 26.

Guard cost of a deep-copied config: copy.deepcopy of a constant object (transformers'
encoder-decoder models copy their config inside forward, reductions.py) read the object's
`__dict__` through `obj.__dict__`, and every key and item of it was then guarded through that
expression, ungrouped: with a Python `__getattribute__` on the config class (transformers'
PreTrainedConfig) each guard paid ~1 us, 70-90 us a call for a tiny BART / T5.  The instance
dict is now read as the dict itself, its keys and items grouped by its version tag as ordinary
attribute reads are, and one guard checks that the object still holds that dict.

Each test compares results, arguments and module state with eager after every call (harness),
and changes what the copy reads between calls (guards)."""
import sys

import torch

from harness import EAGER, run_program
from mlircap.capture import capture

_CFG_GETATTRIBUTE = """
import copy

class Config:
    # a Python __getattribute__, as transformers' PreTrainedConfig has (attribute_map)
    def __getattribute__(self, name):
        return super().__getattribute__(name)

    def __init__(self):
        self.d_model = 4
        self.scale = 2.0
        self.act = "relu"
        self.sizes = [1, 2]
        self.extra = {"k": 1}

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Config()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        c = copy.deepcopy(self.cfg)
        c.scale = c.scale * 3
        y = self.a(x) * c.scale + len(c.sizes) + c.extra["k"]
        y = y.relu() if c.act == "relu" else y.tanh()
        return y, c.d_model, getattr(c, "new", None)

def make():
    return M()

def mutate(i, m):
    if i == 2:
        m.cfg.scale = 0.5               # an item's value
    if i == 3:
        m.cfg.act = "tanh"
    if i == 4:
        m.cfg.sizes.append(7)           # a nested list, in place
    if i == 5:
        m.cfg.extra["k"] = 5            # a nested dict, in place
    if i == 6:
        m.cfg.new = 3                   # a new key
    if i == 7:
        del m.cfg.new                   # a key removed
    if i == 8:                          # the whole instance dict replaced
        m.cfg.__dict__ = {"d_model": 4, "scale": 1.5, "act": "relu", "sizes": [1], "extra": {"k": 2}}
    if i == 9:
        m.cfg.__dict__["scale"] = 4.0   # written through the dict itself
"""


def test_deepcopied_config_guards_follow_every_change():
    calls = [(torch.randn(2, 4),) for _ in range(11)]
    run_program(_CFG_GETATTRIBUTE, calls, cache_limit=16)


def test_deepcopied_config_guard_reads_its_dict_once():
    """The guard of a call that deep-copies a constant config reads the config's __dict__
    through its Python __getattribute__ once (the identity of the dict), not once per key and
    item (50-90 guards for transformers' configs, ~1 us each)."""
    ns = {"__name__": "prog_g"}
    exec("import torch\nimport torch.nn as nn\n" + _CFG_GETATTRIBUTE, ns)
    m = ns["make"]()
    w = capture(m, EAGER)
    x = torch.randn(2, 4)
    w(x)
    w(x)
    c = w._mlircap_capture
    assert len(c.variants) == 1 and len(c.variants[0].graphs) == 1 and not c.variants[0].breaks
    v = c.variants[0]
    args = (m, x)
    code = ns["Config"].__getattribute__.__code__
    reads = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code is code:
            reads.append(frame.f_locals["name"])
    sys.setprofile(prof)
    try:
        ok = v.guard(args, c.func)
    finally:
        sys.setprofile(None)
    assert ok
    assert len(reads) <= 1, reads
    # the fast path still sees a change (and the slow path then fails the right guard)
    m.cfg.scale = 9.0
    assert not v.guard(args, c.func)
    m.cfg.scale = 2.0
    assert v.guard(args, c.func)
    m.cfg.__dict__ = dict(m.cfg.__dict__)   # an equal dict, another object: the guard fails
    assert not v.guard(args, c.func)
