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


# ---------------------------------------------------------------------------------------------------------------
# Floats in a container built by a helper and returned later (RAFT's `return flow_loss, metrics` with metrics =
# {"epe": epe.mean().item(), ...}, returned again by the step as `return loss.detach(), metrics`): each float was
# guarded by value, a recording per call.  (Exact metrics here: a max, a fraction over 16 elements.)
_METRICS = '''
def seq_loss(preds, gt):
    loss = 0.0
    for p in preds:
        loss += (p - gt).abs().mean()
    err = (preds[-1] - gt).abs().view(-1)
    metrics = {"max": err.max().item(), "1px": (err < 1).float().mean().item()}
    return loss, metrics
def make():
    def step(x, gt):
        preds = [x * 2, x * 3]
        loss, metrics = seq_loss(preds, gt)
        return loss.detach(), metrics
    return step
'''


def _pairs(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, 8, generator=g), torch.randn(2, 8, generator=g)) for _ in range(n)]


def test_metrics_dict_returned_through_a_tuple_is_not_guarded():
    c = run_program(_METRICS, _pairs(6))
    assert c.stats.records == 1 and c.stats.replays == 5, (c.stats.records, c.stats.recompile_reasons)


def test_floats_in_a_returned_list_and_tuple_unpacked_again():
    src = '''
    def stats(x):
        return x.sum(), [x.max().item(), x.min().item()], (x.abs().max().item(),)
    def make():
        def f(x):
            s, mm, (am,) = stats(x * 2)
            out = {"range": mm, "absmax": am}
            return s, out
        return f
    '''
    c = run_program(src, [(x,) for x, _ in _pairs(5)])
    assert c.stats.records == 1, (c.stats.records, c.stats.recompile_reasons)


def test_metrics_read_by_the_program_are_still_guarded():
    # soundness: the dict's floats used after it is built (a branch, a subscript, a call reading it)
    src = '''
    LOG = []
    def make():
        def step(x, gt):
            m = {"max": (x - gt).abs().max().item(), "n": 2.0}
            t = (x, m)
            a, mm = t
            if mm["max"] > 3.0:           # a subscript of the container: its floats guarded
                a = a * 0
            LOG.append(sorted(mm.items()))  # handed to a call
            return a + 1, mm
        return step
    def state(f):
        return list(LOG)
    '''
    g = torch.Generator().manual_seed(3)
    calls = [(torch.randn(4, generator=g) * s, torch.zeros(4)) for s in (0.5, 4.0, 0.5, 4.0, 0.7)]
    run_program(src, calls)


def test_metrics_dict_mutated_or_stored_after_it_is_built():
    src = '''
    class Tracker:
        last = None
    T = Tracker()
    def make():
        def step(x):
            m = {"max": x.max().item()}
            lst = [x.min().item()]
            lst.append(1.0)                 # a method of the list: its float guarded
            m["scaled"] = m["max"] * 2      # a store into the dict
            T.last = m                      # kept by the program's state
            return x * 2, m, lst
        return step
    def state(f):
        return dict(T.last)
    def mutate(i, f):
        if i == 3:
            T.last["max"] = -1.0
    '''
    run_program(src, [(x,) for x, _ in _pairs(5)])


def test_metrics_dict_held_across_a_graph_break():
    # a resume point with the container in a variable (the break: a data-dependent branch)
    src = '''
    def make():
        def step(x):
            m = {"max": x.max().item(), "frac": (x > 0).float().mean().item()}
            if x.sum() > 0:
                y = x * 2
            else:
                y = x - 1
            return y, m
        return step
    '''
    g = torch.Generator().manual_seed(5)
    run_program(src, [(torch.randn(8, generator=g) + (0.8 if i % 2 else -0.8),) for i in range(6)])


def test_float_argument_returned_in_a_list_is_not_guarded():
    # (test_float_inputs used `return x * s, [s]` as a use that needs the value: the list is followed now)
    src = '''
    def make():
        def f(x, t):
            s = t * 2.0
            return x * s, [s], (s + 1,)
        return f
    '''
    c = run_program(src, [(x, 0.25 * i + 0.5) for i, (x, _) in enumerate(_pairs(4))])
    assert c.recompiles == 0, c.stats.recompile_reasons


def test_metrics_dict_held_across_backward_and_optimizer_step():
    # RAFT's train step: the metrics built by the loss helper, then backward / clip / step (a resume point
    # with the dict in a variable: made again there with its floats as their expressions)
    src = '''
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-2)
    def seq_loss(preds, gt, valid):
        loss = 0.0
        for p in preds:
            loss += (p - gt).abs().mean()
        err = (preds[-1] - gt).abs().view(-1)[valid.view(-1)]
        metrics = {"max": err.max().item(), "n1": (err < 1).float().sum().item()}
        return loss, metrics
    def make():
        def step(x, gt, valid):
            opt.zero_grad()
            h = lin(x)
            loss, metrics = seq_loss([h * 2, h * 3], gt, valid)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
            opt.step()
            return loss.detach(), metrics
        return step
    def state(f):
        return [p.detach().clone() for p in lin.parameters()]
    '''
    g = torch.Generator().manual_seed(7)
    calls = [(torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g), torch.rand(4, 8, generator=g) > 0.3)
             for _ in range(6)]
    c = run_program(src, calls)
    assert c.stats.records <= 2 and c.stats.replays >= 4, (c.stats.records, c.stats.recompile_reasons)
