"""Capture defects of issue 11 (runaway recompiles): Python floats a training step keeps in a
dict, read back each call, were guarded by value, a recompile per call until cache_limit, then
eager: `st["best"] is None` (the identity test of a followed float), `np.quantile(...)` (a NumPy
float from an operation the graph does not reproduce), `alpha=-st["lr"]` read after
`loss.backward()` (an item of a followed dict read again after a backward).  And a wrong
result: `clip_grad_norm_` right after a backward, then a guard that misses later in the replay:
the rollback restored the gradients but the recording that followed reused the clipping's
logged result instead of running it again (its gradients stayed unclipped)."""
import torch

from harness import run_program


def _calls(n, rows=6, seed=0, scale=None):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 4, generator=g) * (1 + (i % 3 if scale is None else scale[i])),) for i in range(n)]


def _breaks(c):
    return sum(len(v.breaks) for v in c.variants)


def test_best_loss_none_check_is_not_a_value_guard():
    # st["best"] changes on most calls; `is None` decides the branch by its type alone
    src = '''
    st = {"best": None}
    def make():
        def f(x):
            loss = (x * 2).sum()
            if st["best"] is None or loss.item() < st["best"]:
                st["best"] = loss.item()
            return x * 3 - st["best"]
        return f
    def state(f):
        return dict(st)
    '''
    g = torch.Generator().manual_seed(0)
    calls = [(torch.rand(8, generator=g) + 10 - i,) for i in range(10)]   # a falling loss: a new best each call
    c = run_program(src, calls)
    assert c.recompiles == 1 and c.graph_count == 2, c.stats.recompile_reasons   # (None, then a float)


def test_is_not_none_and_branch_on_item_against_a_followed_best():
    src = '''
    st = {"best": None, "scale": 1.0}
    def make():
        def f(x):
            loss = x.pow(2).mean()
            if st["best"] is not None and loss.item() > st["best"]:
                st["scale"] = st["scale"] * 0.5
            else:
                st["best"] = loss.item()
            return x * st["scale"]
        return f
    def state(f):
        return dict(st)
    '''
    c = run_program(src, _calls(10, scale=[0, 1, 0, 0, 2, 1, 0, 2, 0, 1]))
    # None / a float; then each side of the branch once
    assert c.recompiles <= 2, c.stats.recompile_reasons


def test_numpy_quantile_result_is_followed_not_guarded():
    # Deep SVDD's radius: np.quantile of distances (torch._numpy does not reproduce it: a break)
    src = '''
    import numpy as np
    st = {"R": 0.0}
    def make():
        def f(x):
            d = (x ** 2).sum(1)
            st["R"] = float(np.quantile(d.detach().numpy(), 0.9))
            return d - st["R"]
        return f
    def state(f):
        return dict(st)
    '''
    c = run_program(src, _calls(8, rows=16))
    assert c.recompiles == 0 and _breaks(c) == 1, c.stats.recompile_reasons


def test_numpy_float_written_back_to_a_dict_item():
    src = '''
    import numpy as np
    st = {"R": np.float32(0.5)}
    def make():
        def f(x):
            d = (x ** 2).sum(1)
            out = d - st["R"] ** 2
            st["R"] = np.quantile(d.detach().numpy(), 0.9)
            return out
        return f
    def state(f):
        return dict(st)
    '''
    c = run_program(src, _calls(8, rows=16))
    assert c.recompiles == 0, c.stats.recompile_reasons


_SGD = '''
    m = nn.Linear(4, 2)
    st = {"lr": 0.5, "best": None, "shift": torch.full((4,), 0.1)}
    def state(f):
        return [(p.detach().clone(), p.grad.clone()) for p in m.parameters()], dict(st)
'''


def test_learning_rate_item_read_after_backward_is_a_graph_input():
    # word_language_model: p.data.add_(p.grad, alpha=-lr), lr in a dict the schedule changes per call
    src = _SGD + '''
    def mutate(i, f):
        st["lr"] = 0.5 / (i + 1)
    def make():
        def f(x):
            m.zero_grad()
            loss = m(x + st["shift"]).pow(2).sum()   # (the dict read before the backward)
            loss.backward()
            for p in m.parameters():
                p.data.add_(p.grad, alpha=-st["lr"])
            return loss.detach()
        return f
    '''
    c = run_program(src, _calls(8))
    assert c.recompiles == 0, c.stats.recompile_reasons


def test_clip_after_backward_runs_again_after_a_miss():
    # the branch on loss.item() misses mid-replay after the clipping: was a wrong result (the
    # gradients and parameters of the recording that followed were unclipped)
    src = _SGD + '''
    def make():
        def f(x):
            m.zero_grad()
            loss = m(x).pow(2).sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.25)
            for p in m.parameters():
                p.data.add_(p.grad, alpha=-st["lr"])
            if st["best"] is not None and loss.item() > st["best"]:
                st["lr"] /= 4.0
            else:
                st["best"] = loss.item()
            return loss.detach()
        return f
    '''
    c = run_program(src, _calls(8))
    assert c.recompiles <= 2 and c.stats.replays >= 4, c.stats.recompile_reasons


def test_clip_value_after_backward_then_a_miss_on_an_argument_threshold():
    src = '''
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    n = [0]
    def state(f):
        return [(p.detach().clone(), p.grad.clone()) for p in m.parameters()], list(n)
    def make():
        def f(x, th):
            m.zero_grad()
            loss = m(x).pow(2).mean()
            loss.backward()
            torch.nn.utils.clip_grad_value_(m.parameters(), 0.05)
            for p in m.parameters():
                p.data.add_(p.grad, alpha=-0.1)
            if loss.item() > th:
                n[0] += 1
            return loss.detach()
        return f
    '''
    ths = [100.0, -1.0, -1.0, 100.0, -1.0, 100.0]
    c = run_program(src, [(x, th) for (x,), th in zip(_calls(6), ths)])
    assert c.recompiles <= 2, c.stats.recompile_reasons


def test_truth_of_a_data_dependent_count_is_guarded_by_its_truth():
    # `if not n:` / `if n:` jump on the int itself: guarded by its value before (a recording per count)
    src = '''
    def make():
        def f(x):
            n = int((x > 0).sum())
            if not n:
                return x * 0
            m = (x > 1).sum().item()
            if m:
                x = x * 2
            return x + n
        return f
    '''
    g = torch.Generator().manual_seed(0)
    calls = [(torch.randn(32, generator=g) + (3 if i % 3 == 0 else 0),) for i in range(8)]
    c = run_program(src, calls)
    assert c.recompiles == 0, c.stats.recompile_reasons


def test_in_place_product_of_interleaved_columns_is_captured():
    # YOLOv5's non_max_suppression: `x[:, 5:] *= x[:, 4:5]` (the byte spans overlap, no element
    # does): the function ran eagerly ('wrote in place to a tensor whose elements share memory')
    src = '''
    def make():
        @torch.no_grad()
        def f(p):
            x = p * 1.5
            x[:, 5:] *= x[:, 4:5]
            x[:, :2] += x[:, 2:4]
            return x
        return f
    '''
    g = torch.Generator().manual_seed(0)
    c = run_program(src, [(torch.rand(10, 8, generator=g),) for _ in range(3)])
    assert c.recompiles == 0 and c.graph_count == 1, c.stats.recompile_reasons


def test_in_place_write_reading_elements_it_writes_still_runs_eagerly():
    src = '''
    def make():
        def f(p):
            x = p * 1.5
            x[:, 1:] *= x[:, :-1]   # (shares elements: eager's order of writes decides)
            return x
        return f
    '''
    g = torch.Generator().manual_seed(0)
    c = run_program(src, [(torch.rand(10, 8, generator=g),) for _ in range(3)], allow_eager=True)
    assert any(v.eager for v in c.variants)


def test_comprehension_of_items_returned_after_the_step():
    # `{k: v.item() for k, v in losses.items()}` after opt.step(): each item was guarded by value
    # after the step, with no continuation there: the whole frame ran eagerly
    src = '''
    net = nn.Linear(6, 5)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    def state(f):
        return [(p.detach().clone(), p.grad.clone()) for p in net.parameters()]
    def make():
        def f(x, box, cls):
            out = net(x)
            losses = {"box": F.smooth_l1_loss(out[:, :4], box),
                      "cls": F.binary_cross_entropy_with_logits(out[:, 4], cls)}
            total = sum(losses.values())
            opt.zero_grad(set_to_none=False)
            total.backward()
            opt.step()
            if total > 1e6:
                return [v.item() * 2 for v in losses.values()]
            return total.detach(), {k: v.item() for k, v in losses.items()}
        return f
    '''
    g = torch.Generator().manual_seed(0)
    calls = [(torch.randn(6, 6, generator=g), torch.randn(6, 4, generator=g), torch.rand(6, generator=g))
             for _ in range(5)]
    c = run_program(src, calls)
    assert c.recompiles == 0, c.stats.recompile_reasons


def test_list_comprehension_of_items_returned():
    src = '''
    def make():
        def f(x):
            parts = x.split(2)
            return [p.sum().item() * 2 for p in parts]
        return f
    '''
    g = torch.Generator().manual_seed(0)
    c = run_program(src, [(torch.randn(6, generator=g),) for _ in range(5)])
    assert c.recompiles == 0, c.stats.recompile_reasons


def test_comprehension_result_read_before_the_return_is_guarded():
    src = '''
    def make():
        def f(x):
            d = {i: p.sum().item() for i, p in enumerate(x.split(2))}
            return x * 2 if d[0] > 0 else x, d
        return f
    '''
    g = torch.Generator().manual_seed(0)
    run_program(src, [(torch.randn(6, generator=g),) for _ in range(6)])


def test_comprehension_stored_after_the_step_still_runs_eagerly():
    # the dict bound to a variable before the return: its items are guarded after the step, where no
    # continuation is (a replay missing there would step twice): eager, as before
    src = '''
    net = nn.Linear(6, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    def state(f):
        return [p.detach().clone() for p in net.parameters()]
    def make():
        def f(x):
            losses = {"a": net(x).pow(2).mean(), "b": net(x).abs().mean()}
            total = sum(losses.values())
            opt.zero_grad()
            total.backward()
            opt.step()
            logs = {k: v.item() for k, v in losses.items()}
            return total.detach(), logs
        return f
    '''
    g = torch.Generator().manual_seed(0)
    c = run_program(src, [(torch.randn(5, 6, generator=g),) for _ in range(4)], allow_eager=True)
    assert any("wrote in place tensors the function read before it" in (v.reason or "") for v in c.variants)
