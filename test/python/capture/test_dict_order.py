"""Key order of dicts the captured call builds or reorders: an OrderedDict's order is its
links (move_to_end changes it, not the dict storage), and a dict whose keys were popped and
reinserted ends in a new order with the same items.  The replay must leave (and return)
them in eager's order: the harness compares dict keys in order."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(5)]


def test_returned_ordereddict_after_move_to_end():
    """A result OrderedDict built during the call, reordered by move_to_end (bench/capture2.py
    ordereddict_defaultdict_outputs: the replay returned it in insertion order)."""
    run_program("""
import collections
class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 2)
        self.b = nn.Linear(8, 2)
    def forward(self, x):
        out = collections.OrderedDict(a=self.a(x), b=self.b(x))
        out.move_to_end("a")
        out["sum"] = out["a"] + out["b"]
        out.move_to_end("b", last=False)
        return out
def make():
    return Heads()
""", [(x,) for x in X[:3]], graphs=1, breaks=0)


def test_lru_cache_ordereddict_on_module():
    """An LRU cache of tables on the module: a hit moves its key to the end, a miss inserts and
    evicts the least recently used (popitem(last=False)); eviction depends on the order the
    replays leave."""
    run_program("""
import collections
class Cached(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.cache = collections.OrderedDict((k, torch.full((8,), float(k))) for k in range(3))
    def forward(self, x, k):
        if k in self.cache:
            self.cache.move_to_end(k)
        else:
            self.cache[k] = torch.full((8,), float(k))
            if len(self.cache) > 3:
                self.cache.popitem(last=False)
        return self.fc(x) + self.cache[k]
def make():
    return Cached()
def state(m):
    return list(m.cache)
""", [(X[0], 0), (X[1], 1), (X[2], 0), (X[3], 5), (X[4], 1), (X[0], 0)])


def test_plain_dict_pop_and_reinsert_global():
    """A global dict whose first key is popped and set again (same value object): the items
    are unchanged, the order rotates by one every call."""
    run_program("""
REG = {"a": 1.0, "b": 2.0, "c": 3.0}
def make():
    def f(x):
        k = next(iter(REG))
        REG[k] = REG.pop(k)
        return x * REG[k]
    return f
""", [(x,) for x in X] + [(x,) for x in X], breaks=0)


def test_module_ordereddict_rotated_by_move_to_end():
    """Round-robin over an OrderedDict of scales on the module: the first key is used, then
    moved to the end (the replays must rotate it as eager does, or every later call uses
    the wrong scale)."""
    run_program("""
import collections
class RoundRobin(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scales = collections.OrderedDict((k, torch.tensor(float(i + 1))) for i, k in enumerate("abc"))
    def forward(self, x):
        k = next(iter(self.scales))
        self.scales.move_to_end(k)
        return self.fc(x) * self.scales[k]
def make():
    return RoundRobin()
def state(m):
    return list(m.scales)
""", [(x,) for x in X] + [(x,) for x in X], breaks=0)
