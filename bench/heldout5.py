"""Held-out set 5: more PROGRAMS, in styles bench/heldout.py .. heldout4.py and the capture corpora leave out
or use only inside single modules: learning-rate schedules driving a hand-written SGD, torch.optim's
schedulers, parameter groups, LBFGS with a closure and SWA averaging; gradient accumulation over
micro-batches; CPU autocast regions; custom autograd.Functions with non-tensor ctx attributes; forward and
backward hooks logging to lists; ModuleDict / ParameterList dispatch by a string argument; dataclass,
NamedTuple and dict outputs and carried state; generators yielding features; functools.partial and
closures over a config that changes between calls; torch.where-heavy physics (SPH, cloth), Monte Carlo
pricing from an owned torch.Generator; tokenizer-like integer code and integer hashing with wrap-around;
message passing and segment pooling with changing edge / node counts; running statistics and
non-persistent buffer caches; no_grad / inference_mode regions inside training steps; parameters frozen
and unfrozen between calls; dtype round trips; string-keyed caches; exceptions caught around shape
checks; a recursive tree-LSTM; torch.func (vmap of grad, functional_call) and MAML's inner loop;
activation checkpointing; compensated summation; masked attention with fully masked rows.

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, state, counters, generator states, arguments):
bench/heldout4.py's runner and report (imported, same options):

    python bench/heldout5.py --threads 1 --dtypes fp32
    python bench/heldout5.py --threads 1 --dtypes bf16           # the cases where bf16 is meaningful
    python bench/heldout5.py --threads 1 --models sph_fluid,kahan_sum --json /tmp/h5.jsonl
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from torch.utils.checkpoint import checkpoint

import heldout4  # noqa: E402  (the runner: run_case, diff, main)


def _params_and_grads(model):
    return dict(model.state_dict()), [p.grad for p in model.parameters()]


# ------------------------------------------------------------------------------------------------ schedules, optimizers
def warmup_cosine(step, warmup=3, total=20, base=0.1, floor=1e-3):
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + 0.5 * (base - floor) * (1 + math.cos(math.pi * progress))


class NesterovSGD:
    """SGD with Nesterov momentum and decoupled weight decay, momentum buffers created on first use, a
    Python step counter the learning-rate schedule reads."""

    def __init__(self, params, momentum=0.9, wd=1e-4):
        self.params = list(params)
        self.momentum, self.wd = momentum, wd
        self.buf = [None] * len(self.params)
        self.step_count = 0

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr):
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            d = p.grad
            if self.buf[i] is None:
                self.buf[i] = d.clone()
            else:
                self.buf[i].mul_(self.momentum).add_(d)
            d = d.add(self.buf[i], alpha=self.momentum)
            p.mul_(1 - lr * self.wd).add_(d, alpha=-lr)
        self.step_count += 1


def make_lr_sched(dt):
    model = nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Linear(32, 4)).to(dt)
    opt = NesterovSGD(model.parameters())

    def train_step(x, y):
        lr = warmup_cosine(opt.step_count)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(lr)
        return loss.detach(), lr
    return train_step, lambda: (dict(model.state_dict()), opt.buf, opt.step_count)


def cls_inputs(i, dt, n=16, d=10, c=4):
    return torch.randn(n, d, dtype=dt), torch.randint(0, c, (n,))


def make_grad_accum(dt):
    model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 1)).to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    st = {"micro": 0, "updates": 0}
    accum = 3

    def train_step(x, y):
        total = 0.0
        for xb, yb in zip(x.split(4), y.split(4)):
            loss = F.smooth_l1_loss(model(xb).squeeze(-1), yb) / accum
            loss.backward()
            total += loss.item()
            st["micro"] += 1
            if st["micro"] % accum == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                st["updates"] += 1
        return total
    return train_step, lambda: (_params_and_grads(model), opt.state_dict()["state"], dict(st))


def accum_inputs(i, dt):
    n = (8, 12, 8, 4, 12)[i]
    return torch.randn(n, 12, dtype=dt), torch.randn(n, dtype=dt)


def make_onecycle(dt):
    model = nn.Sequential(nn.Linear(6, 16), nn.SiLU(), nn.Linear(16, 2)).to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    # total_steps past any call count the timing loop makes (it sizes its blocks from a first
    # call: at 100, a fast run stepped past the schedule and raised)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=100_000)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach(), sched.get_last_lr()[0]
    return step, lambda: (dict(model.state_dict()), opt.state_dict(), sched.last_epoch)


def make_param_groups(dt):
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 3)).to(dt)
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    opt = torch.optim.Adam([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                           lr=1e-2)

    def step(x, y, epoch):
        for k, g in enumerate(opt.param_groups):      # a per-group schedule written into the groups
            g["lr"] = 1e-2 * (0.5 ** epoch) * (1.0 if k == 0 else 2.0)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach(), [g["lr"] for g in opt.param_groups]
    return step, lambda: (dict(model.state_dict()), opt.state_dict())


def make_lbfgs(dt):
    w = torch.zeros(6, 1, dtype=dt, requires_grad=True)
    b = torch.zeros(1, dtype=dt, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=4, history_size=5, line_search_fn="strong_wolfe")

    def fit(x, y):
        def closure():
            opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits((x @ w + b).squeeze(-1), y) + 1e-2 * w.pow(2).sum()
            loss.backward()
            return loss
        loss = opt.step(closure)
        return loss.detach(), w.detach().clone()
    return fit, lambda: (w, b)


def lbfgs_inputs(i, dt):
    x = torch.randn(32, 6, dtype=dt)
    return x, (x[:, 0] - x[:, 1] > 0).to(dt)


def make_swa(dt):
    model = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 1)).to(dt)
    swa = torch.optim.swa_utils.AveragedModel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        swa.update_parameters(model)
        with torch.no_grad():
            return loss.detach(), swa(x)
    return step, lambda: (dict(model.state_dict()), dict(swa.state_dict()))


# ------------------------------------------------------------------------------------------------ training-step idioms
class AmpNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = F.relu(self.conv(x)).transpose(1, 2)      # bf16 under autocast
        h = self.norm(h)                              # float32 under autocast
        return self.fc(h.mean(1))


def make_autocast(dt):
    model = AmpNet().to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
            probs = logits.softmax(-1)                # autocast runs softmax in float32
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), logits.detach(), probs.detach()
    return step, lambda: _params_and_grads(model)


class ScaledClamp(torch.autograd.Function):
    """(x @ w) * scale clamped below at lo; the scale and the bound kept on ctx as Python numbers."""

    @staticmethod
    def forward(ctx, x, w, scale, lo):
        y = (x @ w) * scale
        mask = y > lo
        ctx.save_for_backward(x, w, mask)
        ctx.scale, ctx.lo = scale, lo
        return y.clamp_min(lo)

    @staticmethod
    def backward(ctx, gy):
        x, w, mask = ctx.saved_tensors
        g = gy * mask * ctx.scale
        return g @ w.t(), x.t() @ g, None, None


def make_custom_fn(dt):
    w1 = (torch.randn(8, 16, dtype=dt) * 0.3).requires_grad_()
    w2 = (torch.randn(16, 2, dtype=dt) * 0.3).requires_grad_()

    def step(x, scale, lo):
        h = ScaledClamp.apply(x, w1, scale, lo)
        loss = (h @ w2).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for w in (w1, w2):
                w -= 0.1 * w.grad
                w.grad = None
        return loss.detach()
    return step, lambda: (w1, w2)


def make_hooks(dt):
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 2)).to(dt)
    log = {"act": [], "grad": []}

    def fwd_hook(mod, inp, out, name, log):
        log["act"].append((name, out.detach().abs().mean()))

    for name, m in model.named_children():
        if isinstance(m, nn.Linear):
            m.register_forward_hook(functools.partial(fwd_hook, name=name, log=log))
            m.register_full_backward_hook(lambda mod, gin, gout, name=name: log["grad"].append((name, gout[0].norm())))

    def step(x):
        out = model(x)
        loss = out.pow(2).mean()
        loss.backward()
        return loss.detach(), len(log["act"])
    return step, lambda: (log, [p.grad for p in model.parameters()])


class Teacher(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


def make_distill(dt):
    teacher, student = Teacher().to(dt).eval(), nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 4)).to(dt)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    T = 2.0

    def step(x, y):
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
        kd = F.kl_div(F.log_softmax(s_logits / T, -1), F.log_softmax(t_logits / T, -1), reduction="batchmean",
                      log_target=True) * T * T
        loss = 0.5 * kd + 0.5 * F.cross_entropy(s_logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.inference_mode():
            acc = (s_logits.argmax(-1) == y).float().mean()
            agree = (s_logits.argmax(-1) == t_logits.argmax(-1)).sum()
        return loss.detach(), acc, agree
    return step, lambda: dict(student.state_dict())


class FineTune(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(10, 24), nn.GELU(), nn.Linear(24, 24), nn.GELU())
        self.head = nn.Linear(24, 4)

    def forward(self, x):
        return self.head(self.backbone(x))


def make_freeze(dt):
    model = FineTune().to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y, unfreeze):
        for p in model.backbone.parameters():
            p.requires_grad_(unfreeze)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return loss.detach(), n_train
    return step, lambda: (dict(model.state_dict()), opt.state_dict()["state"])


def freeze_inputs(i, dt):
    return (*cls_inputs(i, dt), i in (2, 3))


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1, self.fc2, self.drop = nn.Linear(d, 2 * d), nn.Linear(2 * d, d), nn.Dropout(0.2)

    def forward(self, x):
        return x + self.fc2(self.drop(F.gelu(self.fc1(x))))


def make_checkpoint(dt):
    blocks = nn.ModuleList([Block(12) for _ in range(3)]).to(dt)
    head = nn.Linear(12, 1).to(dt)
    opt = torch.optim.Adam([*blocks.parameters(), *head.parameters()], lr=1e-2)

    def step(x, y):
        h = x
        for blk in blocks:
            h = checkpoint(blk, h, use_reentrant=False)
        loss = F.mse_loss(head(h).squeeze(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (dict(blocks.state_dict()), dict(head.state_dict()))


def make_maml(dt):
    model = nn.Sequential(nn.Linear(1, 24), nn.ReLU(), nn.Linear(24, 1)).to(dt)
    meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(xs, ys, xq, yq):
        params = dict(model.named_parameters())
        for _ in range(2):
            loss = F.mse_loss(functional_call(model, params, (xs,)), ys)
            grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
            params = {k: p - 0.1 * g for (k, p), g in zip(params.items(), grads)}
        qloss = F.mse_loss(functional_call(model, params, (xq,)), yq)
        meta_opt.zero_grad()
        qloss.backward()
        meta_opt.step()
        return qloss.detach()
    return step, lambda: dict(model.state_dict())


def maml_inputs(i, dt):
    amp, phase = 1 + i * 0.5, 0.3 * i
    xs, xq = torch.rand(10, 1, dtype=dt) * 6 - 3, torch.rand(10, 1, dtype=dt) * 6 - 3
    return xs, amp * torch.sin(xs + phase), xq, amp * torch.sin(xq + phase)


def make_dp_sgd(dt):
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(dt)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}

    def loss_fn(p, x, y):
        out = functional_call(model, p, (x[None],))
        return F.cross_entropy(out, y[None])

    per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))

    def step(x, y, clip):
        g = per_sample(params, x, y)
        norms = torch.stack([g[k].flatten(1).norm(dim=1) for k in g]).norm(dim=0)
        factor = (clip / (norms + 1e-6)).clamp(max=1.0)
        for k in params:
            gk = (g[k] * factor.view(-1, *[1] * (g[k].dim() - 1))).sum(0)
            gk = (gk + 0.1 * clip * torch.randn_like(gk)) / x.size(0)
            params[k].sub_(0.5 * gk)
        return norms
    return step, lambda: params


def dp_inputs(i, dt):
    return (*cls_inputs(i, dt, n=8, d=6, c=3), 1.0 + 0.5 * i)


# ------------------------------------------------------------------------------------------------ module idioms
class MultiTask(nn.Module):
    TASKS = {"cls": 0, "reg": 1, "emb": 2}

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(10, 16)
        self.heads = nn.ModuleDict({"cls": nn.Linear(16, 5), "reg": nn.Linear(16, 1),
                                    "emb": nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8))})
        self.temps = nn.ParameterList([nn.Parameter(torch.tensor([t])) for t in (1.0, 2.0, 0.5)])

    def forward(self, x, task):
        h = F.silu(self.trunk(x))
        out = self.heads[task](h) / self.temps[self.TASKS[task]]
        if task == "emb":
            out = F.normalize(out, dim=-1)
        elif task == "cls":
            out = out.log_softmax(-1)
        return out


def make_moduledict(dt):
    m = MultiTask().to(dt)
    return m, lambda: dict(m.state_dict())


def moduledict_inputs(i, dt):
    return torch.randn(4, 10, dtype=dt), ("cls", "reg", "emb", "cls", "emb", "reg")[i]


@dataclasses.dataclass
class DetOutput:
    logits: torch.Tensor
    boxes: torch.Tensor
    loss: Optional[torch.Tensor] = None
    aux: dict = dataclasses.field(default_factory=dict)


class DetHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.cls = nn.Linear(16, 3)
        self.box = nn.Linear(16, 4)

    def forward(self, feats, targets=None):
        out = DetOutput(self.cls(feats), self.box(feats).sigmoid())
        if targets is not None:
            out.loss = F.l1_loss(out.boxes, targets)
            out.aux["l1"] = out.loss.detach()
            out.aux["n"] = targets.size(0)
        return out


def make_dataclass_out(dt):
    m = DetHead().to(dt)
    return m, lambda: dict(m.state_dict())


def dataclass_inputs(i, dt):
    return torch.randn(5, 16, dtype=dt), (torch.rand(5, 4, dtype=dt) if i % 2 else None)


class LSTMState(NamedTuple):
    h: torch.Tensor
    c: torch.Tensor


class Streamer:
    """streaming LSTM over chunks; the NamedTuple state carried (detached) between calls, reset every 8 steps."""

    def __init__(self, dt):
        self.cell = nn.LSTMCell(6, 12).to(dt)
        self.state = None
        self.t = 0

    def __call__(self, chunk):
        outs = []
        for x in chunk.unbind(0):
            st = self.state if self.state is not None else LSTMState(x.new_zeros(x.size(0), 12), x.new_zeros(x.size(0), 12))
            h, c = self.cell(x, st)
            self.state = LSTMState(h, c)
            outs.append(h)
            self.t += 1
            if self.t % 8 == 0:
                self.state = None
        if self.state is not None:
            self.state = LSTMState(*(s.detach() for s in self.state))
        return torch.stack(outs)


def make_streamer(dt):
    s = Streamer(dt)
    return s, lambda: (s.state, s.t)


class Pyramid(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Conv1d(4 if i == 0 else 8, 8, 3, stride=2 if i % 2 else 1, padding=1)
                                     for i in range(5)])
        self.out_idx = (1, 3, 4)

    def stages(self, x):
        for i, blk in enumerate(self.blocks):
            x = F.relu(blk(x))
            if i in self.out_idx:
                yield f"p{i}", x

    def forward(self, x):
        feats = dict(self.stages(x))
        return {k: v.amax(-1) + v.mean(-1) for k, v in feats.items()}


def make_pyramid(dt):
    m = Pyramid().to(dt)
    return m, lambda: dict(m.state_dict())


ACTS = {"gelu": functools.partial(F.gelu, approximate="tanh"), "relu": F.relu,
        "leaky": functools.partial(F.leaky_relu, negative_slope=0.2)}


def make_partial(dt):
    lin1, lin2 = nn.Linear(8, 16).to(dt), nn.Linear(16, 8).to(dt)
    cfg = dict(act="gelu", scale=1.0, residual=True)

    def make_block(cfg):
        def block(x):
            h = ACTS[cfg["act"]](lin1(x)) * cfg["scale"]
            return x + lin2(h) if cfg["residual"] else lin2(h)
        return block
    block = make_block(cfg)

    def sweep(x, act, scale, residual):
        cfg.update(act=act, scale=scale, residual=residual)   # a sweep driver changing the closure's config
        return block(x)
    return sweep, lambda: dict(cfg)


def partial_inputs(i, dt):
    return (torch.randn(3, 8, dtype=dt), ("gelu", "gelu", "relu", "leaky", "gelu")[i], 1.0 + 0.25 * i, i % 2 == 0)


class Normalizer(nn.Module):
    """running mean / var buffers with a num_batches_tracked counter, train / eval toggled between calls,
    and a rotary cos / sin table in non-persistent buffers rebuilt when a longer sequence comes."""

    def __init__(self, d=8):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(d))
        self.register_buffer("running_var", torch.ones(d))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d)), persistent=False)
        self.register_buffer("cos_cached", torch.empty(0), persistent=False)
        self.register_buffer("sin_cached", torch.empty(0), persistent=False)
        self.max_seq = 0

    def _rope(self, T, dtype):
        if T > self.max_seq:
            t = torch.arange(T, dtype=torch.float32)
            emb = torch.cat([torch.outer(t, self.inv_freq)] * 2, dim=-1)
            self.cos_cached, self.sin_cached = emb.cos().to(dtype), emb.sin().to(dtype)
            self.max_seq = T
        return self.cos_cached[:T], self.sin_cached[:T]

    def forward(self, x):
        if self.training:
            mean, var = x.mean((0, 1)), x.var((0, 1))
            with torch.no_grad():
                self.running_mean.lerp_(mean, 0.1)
                self.running_var.mul_(0.9).add_(var, alpha=0.1)
                self.num_batches_tracked += 1
        else:
            mean, var = self.running_mean, self.running_var
        x = (x - mean) * torch.rsqrt(var + 1e-5)
        cos, sin = self._rope(x.size(1), x.dtype)
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat([-x2, x1], -1) * sin


def make_normalizer(dt):
    m = Normalizer().to(dt)

    def fn(x, train):
        m.train(train)
        return m(x)
    return fn, lambda: (dict(m.state_dict()), m.cos_cached, m.sin_cached, m.max_seq)


def normalizer_inputs(i, dt):
    return torch.randn(2, (5, 7, 7, 4, 9)[i], 8, dtype=dt) * 2 + 1, i != 3


class MaskedAttn(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self._cache = {}

    def causal(self, T, dtype):
        key = f"causal_{T}_{dtype}"
        if key not in self._cache:
            self._cache[key] = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)
        return self._cache[key]

    def forward(self, x, pad):
        q, k, v = self.qkv(x).chunk(3, -1)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + self.causal(x.size(1), x.dtype)
        s = s.masked_fill(pad[:, None, :], float("-inf"))
        p = s.softmax(-1)                                 # rows of padding-only prefixes are all -inf: NaN
        p = torch.nan_to_num(p, nan=0.0)
        return p @ v, sorted(self._cache)


def make_cache_attn(dt):
    m = MaskedAttn().to(dt)
    return m, lambda: (dict(m.state_dict()), sorted(m._cache))


def cache_attn_inputs(i, dt):
    T = (5, 7, 5, 9)[i]
    pad = torch.zeros(2, T, dtype=torch.bool)
    pad[0, :2] = True                                     # left padding: the first rows see only padding
    return torch.randn(2, T, 16, dtype=dt), pad


class FlexInput(nn.Module):
    def __init__(self, n_in=30):
        super().__init__()
        self.n_in = n_in
        self.lin = nn.Linear(n_in, 4)
        self.fallbacks = 0
        self.pads = 0

    def _check(self, h):
        if h.size(1) != self.n_in:
            raise ValueError(f"expected {self.n_in} features, got {h.size(1)}")

    def forward(self, x):
        try:
            h = x.view(x.size(0), -1)
        except RuntimeError:
            h = x.reshape(x.size(0), -1)
            self.fallbacks += 1
        try:
            self._check(h)
        except ValueError:
            h = F.pad(h, (0, self.n_in - h.size(1)))
            self.pads += 1
        return self.lin(h)


def make_try_except(dt):
    m = FlexInput().to(dt)
    return m, lambda: (dict(m.state_dict()), m.fallbacks, m.pads)


def try_except_inputs(i, dt):
    x = torch.randn(4, 6, 5, dtype=dt)
    if i in (1, 3):
        x = x.transpose(1, 2)                              # not viewable: the except path
    if i == 2:
        x = x[:, :, :4]                                    # 24 features: padded
    return (x,)


class TreeLSTM(nn.Module):
    """child-sum Tree-LSTM (Tai et al.) over a nested tuple; leaves are 0-d token-id tensors."""

    def __init__(self, vocab=20, d=8, hdim=12):
        super().__init__()
        self.hdim = hdim
        self.emb = nn.Embedding(vocab, d)
        self.iou_x, self.iou_h = nn.Linear(d, 3 * hdim), nn.Linear(hdim, 3 * hdim, bias=False)
        self.f_x, self.f_h = nn.Linear(d, hdim), nn.Linear(hdim, hdim, bias=False)

    def node(self, x, children):
        if children:
            hs = torch.stack([h for h, _ in children])
            cs = torch.stack([c for _, c in children])
            h_sum = hs.sum(0)
        else:
            hs = cs = x.new_zeros(0, self.hdim)
            h_sum = x.new_zeros(self.hdim)
        i, o, u = (self.iou_x(x) + self.iou_h(h_sum)).chunk(3, -1)
        f = torch.sigmoid(self.f_x(x)[None] + self.f_h(hs))
        c = torch.sigmoid(i) * torch.tanh(u) + (f * cs).sum(0)
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(self, tree):
        if isinstance(tree, torch.Tensor):
            return self.node(self.emb(tree), [])
        children = [self(t) for t in tree]
        x = self.emb.weight.mean(0)                       # an internal node's input: the mean embedding
        return self.node(x, children)


def make_tree(dt):
    m = TreeLSTM().to(dt)
    return (lambda tree: m(tree)[0]), lambda: dict(m.state_dict())


def tree_inputs(i, dt):
    t = lambda v: torch.tensor(v)  # noqa: E731
    trees = [((t(1), t(2)), t(3)), ((t(1), t(2)), t(3)), (t(4), (t(5), (t(6), t(7)))), ((t(1), t(2)), t(9))]
    return (trees[i],)


# ------------------------------------------------------------------------------------------------ simulation
class SPH:
    """2-D smoothed-particle hydrodynamics: poly6 density, spiky pressure gradient, reflecting walls."""

    def __init__(self, dt, n=48):
        g = torch.Generator().manual_seed(0)
        self.pos = torch.rand(n, 2, generator=g).to(dt) * 0.5 + 0.25
        self.vel = torch.zeros(n, 2, dtype=dt)
        self.h, self.mass, self.k, self.rho0 = 0.15, 0.02, 2.0, 1.0
        self.poly6 = 4.0 / (math.pi * self.h ** 8)
        self.spiky = -10.0 / (math.pi * self.h ** 5)
        self.steps = 0

    def step(self, dt_):
        d = self.pos[:, None] - self.pos[None]
        r2 = (d * d).sum(-1)
        h2 = self.h ** 2
        w = torch.where(r2 < h2, (h2 - r2) ** 3, torch.zeros_like(r2)) * self.poly6
        rho = self.mass * w.sum(1)
        p = self.k * (rho - self.rho0)
        r = r2.clamp_min(1e-12).sqrt()
        near = (r < self.h) & (r2 > 0)
        gw = torch.where(near, self.spiky * (self.h - r) ** 2 / r, torch.zeros_like(r))[..., None] * d
        f = -(self.mass * ((p[:, None] + p[None]) / (2 * rho[None]))[..., None] * gw).sum(1)
        f[:, 1] -= 9.8 * rho
        self.vel += dt_ * f / rho[:, None]
        self.pos += dt_ * self.vel
        out = (self.pos < 0) | (self.pos > 1)
        self.vel = torch.where(out, -0.5 * self.vel, self.vel)
        self.pos.clamp_(0, 1)
        self.steps += 1
        return rho


def make_sph(dt):
    sim = SPH(dt)

    def run(dt_, n):
        for _ in range(n):
            rho = sim.step(dt_)
        return rho.mean(), rho.max()
    return run, lambda: (sim.pos, sim.vel, sim.steps)


class Cloth:
    """mass-spring cloth: Verlet integration, Jacobi constraint projection by index_add_, pinned corners
    through torch.where, a ground plane by clamp."""

    def __init__(self, dt, n=6):
        ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        self.x = torch.stack([xs.flatten() * 0.1, torch.zeros(n * n), ys.flatten() * 0.1], -1).to(dt)
        self.prev = self.x.clone()
        idx = torch.arange(n * n).view(n, n)
        e = torch.cat([torch.stack([idx[:, :-1].flatten(), idx[:, 1:].flatten()]),
                       torch.stack([idx[:-1].flatten(), idx[1:].flatten()])], 1)
        self.i, self.j = e[0], e[1]
        self.rest = (self.x[self.j] - self.x[self.i]).norm(dim=-1, keepdim=True)
        self.deg = torch.zeros(n * n, 1, dtype=dt).index_add_(0, self.i, torch.ones(len(self.i), 1, dtype=dt)) \
            .index_add_(0, self.j, torch.ones(len(self.j), 1, dtype=dt))
        self.pinned = torch.zeros(n * n, dtype=torch.bool)
        self.pinned[[0, n - 1]] = True
        self.pin_pos = self.x.clone()

    def step(self, h, iters, wind):
        vel = (self.x - self.prev) * 0.99
        self.prev = self.x.clone()
        acc = torch.tensor([wind, -9.8, 0.0], dtype=self.x.dtype)
        self.x = self.x + vel + acc * h * h
        for _ in range(iters):
            d = self.x[self.j] - self.x[self.i]
            length = d.norm(dim=-1, keepdim=True).clamp_min(1e-9)
            corr = 0.5 * (length - self.rest) / length * d
            delta = torch.zeros_like(self.x).index_add_(0, self.i, corr).index_add_(0, self.j, -corr)
            self.x = torch.where(self.pinned[:, None], self.pin_pos, self.x + delta / self.deg)
        self.x[:, 1].clamp_(min=-0.3)
        return self.x


def make_cloth(dt):
    c = Cloth(dt)
    return c.step, lambda: (c.x, c.prev)


class AsianPricer:
    """Monte Carlo price of an Asian call: antithetic normals from a torch.Generator the object owns."""

    def __init__(self):
        self.gen = torch.Generator().manual_seed(1234)
        self.paths = 0

    def __call__(self, s0, k, sigma, r=0.02, T=1.0, n=2048, steps=16):
        h = T / steps
        z = torch.randn(n // 2, steps, generator=self.gen)
        z = torch.cat([z, -z])
        log_s = math.log(s0) + torch.cumsum((r - 0.5 * sigma ** 2) * h + sigma * math.sqrt(h) * z, dim=1)
        payoff = torch.clamp(log_s.exp().mean(1) - k, min=0)
        disc = math.exp(-r * T)
        self.paths += n
        return disc * payoff.mean(), disc * payoff.std() / math.sqrt(n), (payoff > 0).float().mean()


def make_pricer(dt):
    p = AsianPricer()
    return p, lambda: (p.gen.get_state(), p.paths)


def pricer_inputs(i, dt):
    return 100.0 + 5 * i, 100.0, 0.2 + 0.05 * i


class GMM:
    """diagonal Gaussian mixture by EM: log-responsibilities by logsumexp, empty components re-seeded
    through torch.where, a tolerance on the log-likelihood."""

    def __init__(self, k=3):
        self.k = k
        self.iters = []

    def fit(self, x, max_iter=15, tol=1e-4):
        n, d = x.shape
        mu = x[torch.linspace(0, n - 1, self.k).long()].clone()
        var = x.var(0, keepdim=True).expand(self.k, d).clone()
        logpi = torch.full((self.k,), -math.log(self.k), dtype=x.dtype)
        prev = -math.inf
        for it in range(max_iter):
            lp = -0.5 * (((x[:, None] - mu) ** 2) / var + var.log() + math.log(2 * math.pi)).sum(-1) + logpi
            ll = torch.logsumexp(lp, 1)
            resp = (lp - ll[:, None]).exp()
            nk = resp.sum(0)
            empty = nk < 1e-3
            mu = torch.where(empty[:, None], x[:self.k], (resp.t() @ x) / nk.clamp_min(1e-3)[:, None])
            var = (resp.t() @ x ** 2) / nk.clamp_min(1e-3)[:, None] - mu ** 2
            var = torch.where(empty[:, None], torch.ones_like(var), var.clamp_min(1e-4))
            logpi = (nk / n).clamp_min(1e-8).log()
            cur = ll.mean().item()
            if abs(cur - prev) < tol:
                break
            prev = cur
        self.iters.append(it)
        return mu, var, logpi.exp(), cur


def make_gmm(dt):
    g = GMM()
    return g.fit, lambda: g.iters


def gmm_inputs(i, dt):
    centers = torch.tensor([[0.0, 0.0], [4.0, 4.0], [-4.0, 3.0]])
    x = torch.cat([c + torch.randn(20 + 4 * i, 2) for c in centers])
    return (x.to(dt),)


def make_early_stop(dt):
    st = {"fits": 0}

    def fit(A, b, tol):
        x = torch.zeros(A.size(1), 1, dtype=A.dtype, requires_grad=True)
        opt = torch.optim.SGD([x], lr=0.2)
        best, bad = math.inf, 0
        for it in range(40):
            opt.zero_grad()
            loss = ((A @ x - b) ** 2).mean()
            loss.backward()
            opt.step()
            cur = loss.item()
            if cur < best - 1e-6:
                best, bad = cur, 0
            else:
                bad += 1
            if cur < tol or bad >= 3:
                break
        st["fits"] += 1
        return x.detach(), it, best
    return fit, lambda: dict(st)


def early_inputs(i, dt):
    A = torch.randn(20, 4, dtype=dt) / 2
    return A, A @ torch.randn(4, 1, dtype=dt) + 0.01 * torch.randn(20, 1, dtype=dt), (1e-2, 1e-3, 1e-4, 1e-3)[i]


# ------------------------------------------------------------------------------------------------ integers, graphs
BOUNDS = torch.tensor([47, 57, 64, 90, 96, 122])          # ascii classes: punct, digit, punct, upper, punct, lower
OFFSETS = torch.tensor([0, 100, 110, 140, 170, 200, 230, 260])


def char_tokenize(codes):
    """codes: int64 [B, L] of ascii codes, 0 = padding. Word ids by cumsum of word starts, a class per
    character by bucketize, vocabulary ids by class offsets, positions inside each word."""
    cls = torch.bucketize(codes, BOUNDS, right=False)
    is_pad, is_space = codes == 0, codes == 32
    is_char = ~is_pad & ~is_space
    prev_char = F.pad(is_char[:, :-1], (1, 0), value=False)
    start = is_char & ~prev_char
    word_id = torch.cumsum(start.long(), 1) * is_char
    ids = OFFSETS[cls] + codes % 30
    ids = torch.where(is_char, ids, torch.where(is_pad, torch.zeros_like(ids), torch.ones_like(ids)))
    idx = torch.arange(codes.size(1)).expand_as(codes)
    start_pos = torch.cummax(torch.where(start, idx, torch.zeros_like(idx)), 1).values
    pos_in_word = torch.where(is_char, idx - start_pos, -1)
    bucket = torch.searchsorted(torch.tensor([0, 4, 8, 16, 32]), (~is_pad).sum(1, keepdim=True), right=True)
    return ids, word_id, pos_in_word, bucket, int(word_id.max())


def make_tokenizer(dt):
    return char_tokenize, lambda: None


def tokenizer_inputs(i, dt):
    texts = [["hello World 42", "a b", "Tok-en!ize"], ["x", "GPU  fast", "ok ok ok ok"],
             ["The cat sat.", "", "zz 9"], ["mlir", "compile me now", "A"]][i]
    L = max(1, max(len(t) for t in texts)) + i
    codes = torch.zeros(len(texts), L, dtype=torch.long)
    for r, t in enumerate(texts):
        if t:
            codes[r, :len(t)] = torch.tensor([ord(ch) for ch in t], dtype=torch.long)
    return (codes,)


def hash_features(ids, n_buckets, seed):
    """feature hashing with a 64-bit LCG (wrap-around multiplication), xor-shift mixing, a signed bucket."""
    h = ids * 6364136223846793005 + (1442695040888963407 + seed)
    h = h ^ (h >> 29)
    h = h * -4658895280553007687
    h = h ^ (h >> 32)
    bucket = torch.remainder(h, n_buckets)
    sign = 1 - 2 * ((h >> 63) & 1)
    counts = torch.zeros(ids.size(0), n_buckets, dtype=torch.long).scatter_add_(1, bucket, sign)
    return counts, torch.div(h, 1 << 40, rounding_mode="floor"), torch.fmod(h, 977)


def make_hash(dt):
    return hash_features, lambda: None


def hash_inputs(i, dt):
    return torch.randint(-(1 << 40), 1 << 40, (3, 10 + i)), (16, 16, 31, 64)[i], i


def make_label_encoder(dt):
    stoi = {"<unk>": 0}
    bag = nn.EmbeddingBag(64, 8, mode="mean").to(dt)

    def encode(sentences):
        ids, offsets = [], []
        for s in sentences:
            offsets.append(len(ids))
            for w in s.lower().split():
                ids.append(stoi.setdefault(w, len(stoi)) % 64)
        return bag(torch.tensor(ids, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)), len(stoi)
    return encode, lambda: (dict(stoi), dict(bag.state_dict()))


def label_inputs(i, dt):
    return ([["the cat", "a dog runs"], ["The Cat sat", "dog"], ["a new word here", "cat"], ["the end", "x y z"]][i],)


class SAGEMax(nn.Module):
    """GraphSAGE with max aggregation (scatter_reduce amax over incoming edges, include_self=False) and a
    mean aggregation by index_add_ / degree; edge counts change between calls."""

    def __init__(self, d=8):
        super().__init__()
        self.lin_self, self.lin_max, self.lin_mean = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x, edge_index):
        src, dst = edge_index
        msg = F.relu(self.lin_max(x))[src]
        agg_max = torch.zeros_like(x).scatter_reduce(0, dst[:, None].expand_as(msg), msg, "amax", include_self=False)
        deg = torch.zeros(x.size(0), dtype=x.dtype).index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
        agg_mean = torch.zeros_like(x).index_add_(0, dst, x[src]) / deg.clamp_min(1)[:, None]
        h = self.lin_self(x) + agg_max + self.lin_mean(agg_mean)
        return F.normalize(h, dim=-1), deg


def make_sage(dt):
    m = SAGEMax().to(dt)
    return m, lambda: dict(m.state_dict())


def graph_inputs(i, dt):
    n, e = 10, (24, 31, 17, 40)[i]
    return torch.randn(n, 8, dtype=dt), torch.randint(0, n, (2, e))


def segment_pool(x, batch, num_graphs, gate):
    """PyG-style global attention pooling: segment softmax (scatter amax, exp, scatter sum) and segment
    mean by scatter_reduce('mean')."""
    score = x @ gate
    smax = torch.full((num_graphs,), -math.inf, dtype=x.dtype).scatter_reduce(0, batch, score, "amax")
    e = (score - smax[batch]).exp()
    denom = torch.zeros(num_graphs, dtype=x.dtype).scatter_add_(0, batch, e)
    alpha = e / denom[batch]
    att = torch.zeros(num_graphs, x.size(1), dtype=x.dtype).index_add_(0, batch, alpha[:, None] * x)
    mean = torch.zeros(num_graphs, x.size(1), dtype=x.dtype).scatter_reduce(
        0, batch[:, None].expand_as(x), x, "mean", include_self=False)
    return att, mean, alpha


def make_segment(dt):
    gate = torch.randn(6, dtype=dt)
    return (lambda x, batch, g: segment_pool(x, batch, g, gate)), lambda: None


def segment_inputs(i, dt):
    sizes = [(3, 5, 2), (4, 4), (1, 6, 2, 3), (7,)][i]
    batch = torch.cat([torch.full((s,), k) for k, s in enumerate(sizes)])
    return torch.randn(len(batch), 6, dtype=dt), batch, len(sizes)


def ctc_greedy(logp, lengths):
    best = logp.argmax(-1).t()                            # [B, T]
    outs = []
    for b in range(best.size(0)):
        seq = torch.unique_consecutive(best[b, :lengths[b]])
        outs.append(seq[seq != 0])
    return nn.utils.rnn.pad_sequence(outs, batch_first=True, padding_value=-1), [len(o) for o in outs]


def make_ctc_greedy(dt):
    return ctc_greedy, lambda: None


def ctc_inputs(i, dt):
    T = 12 + i
    return torch.randn(T, 3, 5, dtype=dt).log_softmax(-1), torch.tensor([T, T - 3, T - 5 - i])


# ------------------------------------------------------------------------------------------------ numerics
def kahan_sum(chunks):
    s = torch.zeros_like(chunks[0])
    c = torch.zeros_like(s)
    for x in chunks:
        y = x - c
        t = s + y
        c = (t - s) - y
        s = t
    return s, c, sum(chunks)


def make_kahan(dt):
    return kahan_sum, lambda: None


def kahan_inputs(i, dt):
    big = torch.full((64,), 1e6, dtype=dt)
    return ([big] + [torch.rand(64, dtype=dt) * 0.01 for _ in range(6 + i)],)


def dtype_roundtrip(x, w, scale):
    xh = x.to(torch.float16)                              # activations stored in half
    wq = (w / scale).round().clamp(-127, 127).to(torch.int8)
    y = xh.float() @ (wq.to(torch.float32) * scale).t()
    y16 = y.to(torch.bfloat16).to(x.dtype)
    acc = x.double().cumsum(0).to(x.dtype)
    overflow = (x * 1e4).to(torch.float16).isinf().sum()
    return y, y16, acc, wq, overflow, xh.to(torch.int32)


def make_roundtrip(dt):
    return dtype_roundtrip, lambda: None


def roundtrip_inputs(i, dt):
    return torch.randn(6, 8, dtype=dt) * (1 + 3 * i), torch.randn(5, 8, dtype=dt), 0.02 * (1 + i)


CASES = [
    ("lr_sched_sgd", make_lr_sched, cls_inputs, 6, True),
    ("grad_accum", make_grad_accum, accum_inputs, 5, False),
    ("onecycle_sched", make_onecycle, lambda i, dt: (torch.randn(8, 6, dtype=dt), torch.randn(8, 2, dtype=dt)), 5, True),
    ("param_groups", make_param_groups, lambda i, dt: (*cls_inputs(i, dt, n=8, d=8, c=3), i // 2), 5, False),
    ("lbfgs_closure", make_lbfgs, lbfgs_inputs, 3, False),
    ("swa_average", make_swa, lambda i, dt: (torch.randn(8, 5, dtype=dt), torch.randn(8, 1, dtype=dt)), 4, True),
    ("autocast_bf16", make_autocast, lambda i, dt: (torch.randn(3, 4, 10 + i, dtype=dt), torch.randint(0, 5, (3,))),
     4, False),
    ("custom_fn_ctx", make_custom_fn, lambda i, dt: (torch.randn(5, 8, dtype=dt), 0.5 + 0.25 * i, -0.1 * i), 4, True),
    ("hooks_logging", make_hooks, lambda i, dt: (torch.randn(4, 6, dtype=dt),), 4, True),
    ("distill_no_grad", make_distill, lambda i, dt: cls_inputs(i, dt), 4, True),
    ("freeze_unfreeze", make_freeze, freeze_inputs, 5, False),
    ("checkpoint_dropout", make_checkpoint, lambda i, dt: (torch.randn(6, 12, dtype=dt), torch.randn(6, dtype=dt)),
     4, False),
    ("maml_inner", make_maml, maml_inputs, 4, False),
    ("dp_sgd_vmap", make_dp_sgd, dp_inputs, 4, False),
    ("moduledict_dispatch", make_moduledict, moduledict_inputs, 6, True),
    ("dataclass_output", make_dataclass_out, dataclass_inputs, 4, True),
    ("namedtuple_stream", make_streamer, lambda i, dt: (torch.randn(3 + i % 3, 2, 6, dtype=dt),), 5, True),
    ("generator_pyramid", make_pyramid, lambda i, dt: (torch.randn(2, 4, 16 + 4 * (i % 2), dtype=dt),), 4, True),
    ("partial_config", make_partial, partial_inputs, 5, True),
    ("running_stats_rope", make_normalizer, normalizer_inputs, 5, True),
    ("string_key_cache", make_cache_attn, cache_attn_inputs, 4, True),
    ("try_except_shape", make_try_except, try_except_inputs, 4, True),
    ("tree_lstm", make_tree, tree_inputs, 4, True),
    ("sph_fluid", make_sph, lambda i, dt: (0.002 * (1 + i % 2), 2), 4, False),
    ("cloth_verlet", make_cloth, lambda i, dt: (0.016, 3 + i % 2, 0.5 * i), 4, False),
    ("mc_asian_option", make_pricer, pricer_inputs, 4, False),
    ("gmm_em", make_gmm, gmm_inputs, 3, False),
    ("early_stopping", make_early_stop, early_inputs, 4, False),
    ("char_tokenize", make_tokenizer, tokenizer_inputs, 4, False),
    ("hash_features", make_hash, hash_inputs, 4, False),
    ("label_encoder", make_label_encoder, label_inputs, 4, False),
    ("sage_max_edges", make_sage, graph_inputs, 4, True),
    ("segment_softmax", make_segment, segment_inputs, 4, True),
    ("ctc_greedy", make_ctc_greedy, ctc_inputs, 4, False),
    ("kahan_sum", make_kahan, kahan_inputs, 4, False),
    ("dtype_roundtrip", make_roundtrip, roundtrip_inputs, 4, False),
]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout5.py")
