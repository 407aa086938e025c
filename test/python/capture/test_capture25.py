"""Capture defects of issue 11 (runaway recompiles) found by bench/heldout11.py: a counter or a clock
kept in a dict (or a list), incremented inside a time-step loop, while the loop's result is stored into
another key of the same dict after it (`state["f"] = f`, lattice Boltzmann / molecular dynamics / Ising
drivers; a forward pre-hook storing `stats["mean"]` after the step's `stats["calls"] += 1`).  That other
store ended the counter's followed store, so it was guarded by value: a new recording on every call
until cache_limit.  Each test compares results and state with eager after every call (harness), counts
recordings, and changes the value between calls (`mutate`) to check the replay reads it."""
import torch

from harness import run_program


def _calls(n, steps=3, size=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, generator=g), steps) for i in range(n)]


_CARRIED = '''
sim = {"f": None, "steps": 0, "t": 0.0}
def make():
    def simulate(x, n_steps):
        if sim["f"] is not None:
            x = x + sim["f"]
        for _ in range(n_steps):
            x = x * 0.9 + 0.01
            sim["steps"] += 1
            sim["t"] += 0.25
        sim["f"] = x            # another key of the dict, stored after the loop
        return x * sim["t"], sim["steps"]
    return simulate
def state(f):
    return dict(sim)
'''


def test_dict_counter_with_another_key_stored_after_the_loop():
    c = run_program(_CARRIED, _calls(8))
    # (state["f"] None, then a tensor: the one recompile; not one per value of the counter / clock)
    assert c.stats.records <= 2 and c.stats.replays >= 6, (c.stats.records, c.stats.replays,
                                                          c.stats.recompile_reasons)
    assert c.recompiles == 1, c.stats.recompile_reasons


def test_dict_counter_changed_between_calls_is_read_by_the_replay():
    # the program's user resets / advances the counter and the clock between calls: the replay
    # starts from the value the dict holds then
    src = _CARRIED + '''
def mutate(i, f):
    if i % 3 == 2:
        sim["steps"] = 100 * i
        sim["t"] = -1.5 * i
'''
    c = run_program(src, _calls(9))
    assert c.stats.records <= 2, (c.stats.records, c.stats.recompile_reasons)


def test_same_key_stored_after_the_loop_still_correct():
    # the counter's own key stored again after the loop (a reset): that followed store ends, the
    # result is still eager's
    src = '''
    st = {"steps": 0, "total": 0}
    def make():
        def f(x, n):
            for _ in range(n):
                x = x + 1
                st["steps"] += 1
            st["total"] = st["total"] + st["steps"]
            st["steps"] = 0 if st["total"] > 6 else st["steps"]
            return x, st["total"]
        return f
    def state(f):
        return dict(st)
    '''
    run_program(src, _calls(6))


def test_list_counter_with_another_index_stored_after_the_loop():
    src = '''
    N = [0, None]
    def make():
        def f(x, n):
            for _ in range(n):
                x = x * 2
                N[0] += 1
            N[-1] = x.sum()     # the other item (by a negative index)
            return x + N[0]
        return f
    def state(f):
        return list(N)
    def mutate(i, f):
        if i == 4:
            N[0] = 50
    '''
    c = run_program(src, _calls(7))
    assert c.stats.records <= 2, (c.stats.records, c.stats.recompile_reasons)


def test_pre_hook_storing_another_key_after_the_call_counter():
    # bench/heldout11.py pre_hooks_edit: the step counts its calls in a dict and branches on it; a
    # forward pre-hook stores the running mean into another key of that dict
    src = '''
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    stats = {"mean": torch.zeros(4), "n": 0, "calls": 0}
    def standardize(module, args):
        (x,) = args
        stats["mean"] = 0.9 * stats["mean"] + 0.1 * x.mean(0)
        stats["n"] += 1
        return (x - stats["mean"],)
    lin.register_forward_pre_hook(standardize)
    def make():
        def step(x, n):
            stats["calls"] += 1
            y = lin(x[None].expand(n, 4))
            if stats["calls"] == 3:
                y = y * 2
            return y.sum(), stats["n"]
        return step
    def state(f):
        return {k: v for k, v in stats.items()}
    def mutate(i, f):
        if i == 6:
            stats["calls"] = 1      # the branch's outcome at the next call changes
    '''
    c = run_program(src, _calls(9))
    # (the branch of call 3, and of call 8 after the reset: its outcome is guarded, not the count)
    assert c.stats.records <= 3, (c.stats.records, c.stats.recompile_reasons)
