"""Capture defects of issue 11 (capture rate), training-step continuations: a training step
that returns numbers read after its optimizer's step (`loss.detach(), (pred == y).sum().item()`,
`loss.item(), td.abs().tolist()`, `None if a is None else a.item()`, `{"loss": loss.item()}`)
ran its whole frame eagerly ('a guard after call to uncapturable SGD.step ... with no
continuation'), or recompiled on every call: the returned int, list or float was guarded by
value.  A tensor first read after the step (a TD3 actor's parameters after the critic's step)
had its metadata guarded there, where no continuation was: now checked before the step."""
import re

import torch

from harness import run_program

_STATE = """
    def state(f):
        return [(p.detach().clone(), None if p.grad is None else p.grad.clone(),
                 {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in opt.state[p].items()})
                for p in m.parameters()]
"""


def _calls(n=5, rows=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 4, generator=g), (torch.rand(rows, generator=g) > 0.5).float()) for _ in range(n)]


def _breaks(c):
    return sum(len(v.breaks) for v in c.variants)


def test_train_step_returning_an_accuracy_count_after_the_step():
    src = '''
    m = nn.Linear(4, 1)
    opt = torch.optim.SGD(m.parameters(), 0.1, momentum=0.9)
    ''' + _STATE + '''
    def make():
        def step(x, t):
            z = torch.sigmoid(m(x)).squeeze(-1)
            loss = F.binary_cross_entropy(z, t)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach(), ((z > 0.5) == (t > 0.5)).sum().item()
        return step
    '''
    c = run_program(src, _calls())
    assert len(c.variants) == 1 and c.graph_count == 2 and _breaks(c) == 1, c.stats.recompile_reasons


def test_returned_int_item_is_not_guarded_by_value():
    # the count differs from call to call; an equal literal elsewhere in the value returned stays a literal
    src = '''
    def make():
        def f(x, t):
            n = ((x.sum(-1) > 0) == (t > 0.5)).sum().item()
            return x.sum(), n, 3
        return f
    '''
    calls = _calls(8)
    assert 3 in [((x.sum(-1) > 0) == (t > 0.5)).sum().item() for x, t in calls]   # (the literal's value too)
    run_program(src, calls, graphs=1, breaks=0, recompiles=0)
    for ret in ('{"n": n, "k": 3}', '[n, 3]', 'n'):
        run_program(src.replace("x.sum(), n, 3", ret), calls, graphs=1, breaks=0, recompiles=0)


def test_returned_int_item_alone_and_in_a_dict():
    src = '''
    def make():
        def f(x, t):
            return (x > 0).sum().item()
        return f
    '''
    run_program(src, _calls(5), graphs=1, breaks=0, recompiles=0)
    src = '''
    def make():
        def f(x, t):
            loss = (x.sum(-1) - t).pow(2).mean()
            return {"loss": loss.item()}
        return f
    '''
    run_program(src, _calls(5), graphs=1, breaks=0, recompiles=0)


def test_tolist_returned_after_the_step():
    src = '''
    m = nn.Linear(4, 1)
    opt = torch.optim.Adam(m.parameters(), 1e-2)
    ''' + _STATE + '''
    def make():
        def learn(x, t):
            q = m(x).squeeze(-1)
            td = t - q
            loss = (td ** 2).mean()
            m.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(m.parameters(), 10.0)
            opt.step()
            return loss.item(), td.detach().abs().add(1e-6).tolist()
        return learn
    '''
    c = run_program(src, _calls(5))
    assert len(c.variants) == 1, c.stats.recompile_reasons


def test_tolist_items_read_are_guarded_where_read():
    src = '''
    def make():
        def f(x):
            z = torch.sigmoid(x)
            rows = z.tolist()
            s = 0.0
            for r in rows:
                s = s + r[0] * 2
            rows[0].append(3.0)
            return z.sum(), rows, s, len(rows) > 2
        return f
    '''
    g = torch.Generator().manual_seed(1)
    # (results, the list written in place and the numbers read from it equal to eager's: the
    # items read are guarded where read)
    run_program(src, [(torch.randn(3 + i % 2, 2, generator=g),) for i in range(6)])


def test_second_model_read_after_the_first_models_step():
    # TD3: the actor's parameters are first read after the critic's optimizer stepped, in a
    # call that wrote a counter before (no continuation there), then a Polyak update of a target
    src = '''
    critic = nn.Linear(4, 1)
    actor = nn.Linear(4, 4)
    target = nn.Linear(4, 4)
    it = {"n": 0}
    copt = torch.optim.Adam(critic.parameters(), 1e-2)
    aopt = torch.optim.Adam(actor.parameters(), 1e-2)
    def state(f):
        out = []
        for o, mod in ((copt, critic), (aopt, actor)):
            for p in mod.parameters():
                out.append((p.detach().clone(), None if p.grad is None else p.grad.clone(),
                            {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in o.state[p].items()}))
        return out + [p.detach().clone() for p in target.parameters()] + [dict(it)]
    def make():
        def train(x, t):
            it["n"] += 1
            closs = F.mse_loss(critic(x).squeeze(-1), t)
            copt.zero_grad()
            closs.backward()
            copt.step()
            aloss = None
            if x.shape[0] > 4:
                aloss = -critic(actor(x)).mean()
                aopt.zero_grad()
                aloss.backward()
                aopt.step()
                for p, tp in zip(actor.parameters(), target.parameters()):
                    tp.data.copy_(0.1 * p.data + 0.9 * tp.data)
            return closs.item(), None if aloss is None else aloss.item()
        return train
    '''
    c = run_program(src, _calls(3, rows=8) + _calls(2, rows=3, seed=1) + _calls(2, rows=8, seed=2))
    assert len(c.variants) == 2, c.stats.recompile_reasons   # (the branch on the batch size)


def test_same_value_attribute_store_before_a_callee_run_eagerly():
    # a Switch-Transformers router stores its input's dtype on itself; the experts' data-dependent
    # loop is a callee capture gives up in, run eagerly between graphs: the store of the value the
    # attribute already holds is no write, so the caller is no frame that wrote state before it
    src = '''
    class Router(nn.Module):
        def __init__(self):
            super().__init__()
            self.classifier = nn.Linear(4, 3)
            self.dtype = torch.float32
        def forward(self, h):
            self.input_dtype = h.dtype
            p = F.softmax(self.classifier(h.to(self.dtype)), -1).to(self.input_dtype)
            return p.argmax(-1), p.max(-1).values
    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.e = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        def forward(self, h, idx):
            out = torch.zeros_like(h)
            for i in torch.unique(idx).unbind():
                m = idx == i
                out[m] = self.e[int(i)](h[m])
            return out
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = Router()
            self.experts = Experts()
        def forward(self, h):
            idx, w = self.router(h)
            return self.experts(h, idx) * w.unsqueeze(-1)
    def make():
        return M()
    def state(m):
        return str(m.router.__dict__.get("input_dtype"))
    '''
    g = torch.Generator().manual_seed(3)
    calls = [(torch.randn(6, 4, generator=g),) for _ in range(6)]
    c = run_program(src, calls, graphs=2, breaks=1, recompiles=0)
    assert len(c.variants) == 1
    # another value there between calls: the store writes it again (results and state as eager's)
    run_program(src + """
    def mutate(i, m):
        if i == 3:
            m.router.input_dtype = torch.float64
    """, calls, allow_eager=True)


def test_numbers_read_into_a_returned_dict_or_left_unused_need_no_guard():
    # `{"loss": loss.item(), "acc": acc}` (the first value of a dict built with its keys was taken
    # for a key: guarded by value), `{"acc": acc}` (BUILD_MAP: the value on top was taken for the
    # key), and a number read into a variable never used again
    nl = "\n" + " " * 16
    for body in ('acc = ((x.sum(-1) > 0) == (t > 0.5)).float().mean().item()' + nl +
                 'return {"loss": loss.item(), "acc": acc}',
                 'acc = ((x.sum(-1) > 0) == (t > 0.5)).float().mean().item()' + nl + 'return {"acc": acc}',
                 'n = (x > 0).sum().item()' + nl + 'unused = loss.item()' + nl + 'return loss, n',
                 'return loss, f"loss {loss.item():.3f}"'):
        src = f'''
        def make():
            def f(x, t):
                loss = (x.sum(-1) - t).pow(2).mean()
                {body}
            return f
        '''
        run_program(src, _calls(5), graphs=1, breaks=0, recompiles=0)
    # a number used where it decides something is still guarded
    src = '''
    def make():
        def f(x, t):
            loss = (x.sum(-1) - t).pow(2).mean()
            u = loss.item()
            v = u * 2
            return loss, v > 1.0
        return f
    '''
    run_program(src, _calls(5))


def test_store_with_an_extended_arg_prefix_is_replayed():
    # the 257th name of a function: STORE_ATTR carries an EXTENDED_ARG prefix, and 3.11 traces the
    # instruction at its prefix only; the tracer saw EXTENDED_ARG there and missed the store (the
    # replay never wrote cfg.count: a wrong result from the second call on)
    reads = "\n".join(f"        _u{i} = cfg.a{i}" for i in range(300))
    src = f'''
class Cfg:
    pass
cfg = Cfg()
for i in range(300):
    setattr(cfg, f"a{{i}}", i)
cfg.count = 0
def state(f):
    return cfg.count
def make():
    def f(x):
{reads}
        cfg.count = cfg.count + 1
        return x * 2
    return f
'''
    run_program(src, [(torch.randn(3),) for _ in range(4)])


def test_counter_branch_over_a_long_jump_is_followed():
    # `if it["n"] % freq == 0:` jumping over a long block (an EXTENDED_ARG prefix on the jump):
    # the followed counter lost the jump's step and was guarded by value, one variant per call
    body = "\n".join(f"            y = y + {i}.5 * x" for i in range(150))
    src = f'''
def make():
    it = {{"n": 0}}
    freq = 2
    def f(x):
        it["n"] += 1
        y = x
        if it["n"] % freq == 0:
{body}
        return y
    return f
'''
    run_program(src, [(torch.randn(3),) for _ in range(6)], recompiles=1)


def test_module_zero_grad_starts_no_epoch():
    # Rainbow's learn(): online.zero_grad() (nn.Module's), backward, step, then a dict counter
    # incremented and branched on: module.zero_grad counted as a call that may write any state,
    # after which the counter's store could not be replayed as its expression (guarded by value,
    # a new variant every call)
    src = '''
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(m.parameters(), 1e-2)
    st = {"steps": 0}
    def state(f):
        return [(p.detach().clone(), None if p.grad is None else p.grad.clone(),
                 {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in opt.state[p].items()})
                for p in m.parameters()] + [dict(st)]
    def make():
        def learn(x, t):
            loss = F.mse_loss(m(x).squeeze(-1), t)
            m.zero_grad()
            loss.backward()
            opt.step()
            st["steps"] += 1
            if st["steps"] % 3 == 0:
                with torch.no_grad():
                    m[0].bias.mul_(0.5)
            return loss.item()
        return learn
    '''
    c = run_program(src, _calls(7))
    # the counter is followed: no guard of its value (checked after zero_grad, it failed on
    # every call, which then ran the rest of the frame eagerly as a continuation)
    guards = [getattr(p, "guard", p).describe() for v in c.variants for p in list(v.pre) + list(v.mid_guards)]
    by_value = [g for g in guards if re.fullmatch(r".*\['steps'\] == \d+", g)]
    assert not by_value, by_value
    assert len(c.variants) == 2, c.stats.recompile_reasons   # (the branch taken and not)
