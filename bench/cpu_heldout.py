"""Held-out CPU models: small real-world-style networks that no other benchmark or test
here was tuned on, fp32 and bf16, eager vs mlircap vs inductor side by side in one process.

    python bench/cpu_heldout.py [--threads 1] [--dtypes fp32,bf16] [--models mha77,textcnn]
                                [--rounds 9] [--no-inductor] [--profile MODEL]

Models (written for this file; batch and sizes of CPU inference):
  mha77        CLIP-text-style pre-LN block: nn.MultiheadAttention over T=77, QuickGELU MLP
  textcnn      embedding, Conv1d of widths 3/4/5 + ReLU, max over time, linear classifier
  mobilenetv2  inverted residuals (1x1 expand, 3x3 depthwise, 1x1 project; BatchNorm, ReLU6)
  unet_gn      diffusion-UNet resblocks: GroupNorm + SiLU, time embedding, down/up sampling, skip
  convnext     ConvNeXt blocks: 7x7 depthwise, LayerNorm over channels (permute), GELU MLP, layer scale
  mixer        MLP-Mixer: token-mixing and channel-mixing MLPs with LayerNorm
  distilbert   transformers DistilBertModel from a small config
  vit_tiny     transformers ViTModel, ViT-tiny widths (192, 3 heads) at 64x64
  llama_block  a hand-written Llama decoder block: RMSNorm, rotary, GQA SDPA (causal), SwiGLU
  conformer    Conformer convolution module: pointwise conv + GLU, depthwise Conv1d, BatchNorm, Swish
  effnet_se    EfficientNet MBConv blocks with squeeze-excitation (global pool, FC, sigmoid gate)
  encoder256   nn.TransformerEncoderLayer(256, 4, 1024), seq 128, batch 8
  bert_small   transformers BertModel, BERT-small widths (512, 8 heads, 4 layers), batch 8, seq 128

Latencies come from benchutil.side_by_side_ms: the fronts run in turns, a block of calls
(~20 ms) each per round, median over rounds; process CPU time on one thread (other
processes on this shared machine do not inflate it), wall time on more.  Each line:
eager / mlircap / inductor ms, x eager, mlircap's max |diff| against eager (next to the
output's scale), graphs (fallbacks).  --profile MODEL prints torch.profiler's op table of
eager's and mlircap's calls of that model instead (per dtype); --segments MODEL the process
CPU time of each kernel and library step of its CPU plans, slowest first.
"""
from __future__ import annotations

import argparse
import math
import os
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mlircap  # noqa: E402
from mlircap.benchutil import geomean, side_by_side_ms  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# -- models ------------------------------------------------------------------------------------------

class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class MHABlock(nn.Module):
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), QuickGELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TextCNN(nn.Module):
    def __init__(self, vocab=5000, d=128, filters=100, classes=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.convs = nn.ModuleList(nn.Conv1d(d, filters, k) for k in (3, 4, 5))
        self.fc = nn.Linear(3 * filters, classes)

    def forward(self, ids):
        x = self.emb(ids).transpose(1, 2)
        pooled = [torch.relu(c(x)).amax(-1) for c in self.convs]
        return self.fc(torch.cat(pooled, 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        h = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.body(x)
        return x + y if self.use_res else y


class MobileNetV2(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 2, 2), (6, 96, 1, 1)):
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 320, 1, bias=False), nn.BatchNorm2d(320), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(320, 100)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class ResBlockGN(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.n1, self.n2 = nn.GroupNorm(8, cin), nn.GroupNorm(8, cout)
        self.c1, self.c2 = nn.Conv2d(cin, cout, 3, padding=1), nn.Conv2d(cout, cout, 3, padding=1)
        self.t = nn.Linear(temb, cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, t):
        h = self.c1(F.silu(self.n1(x)))
        h = h + self.t(F.silu(t))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return self.skip(x) + h


class UNetGN(nn.Module):
    def __init__(self, c=32, temb=128):
        super().__init__()
        self.temb = nn.Sequential(nn.Linear(c, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = nn.Conv2d(3, c, 3, padding=1)
        self.d1 = ResBlockGN(c, c, temb)
        self.down = nn.Conv2d(c, c, 3, 2, 1)
        self.d2 = ResBlockGN(c, 2 * c, temb)
        self.mid = ResBlockGN(2 * c, 2 * c, temb)
        self.up = nn.ConvTranspose2d(2 * c, 2 * c, 4, 2, 1)
        self.u1 = ResBlockGN(3 * c, c, temb)
        self.out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))
        self.c = c

    def forward(self, x, steps):
        half = self.c // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=x.dtype) / half)
        args = steps[:, None] * freqs[None]
        t = self.temb(torch.cat([args.sin(), args.cos()], 1))
        h0 = self.d1(self.inp(x), t)
        h = self.mid(self.d2(self.down(h0), t), t)
        h = self.u1(torch.cat([self.up(h), h0], 1), t)
        return self.out(h)


class ConvNeXtBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.ln = nn.LayerNorm(d, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(1e-2 * torch.ones(d))

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.pw2(F.gelu(self.pw1(self.ln(h))))
        return x + (self.gamma * h).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims=(48, 96)):
        super().__init__()
        self.stem = nn.Conv2d(3, dims[0], 4, 4)
        self.stem_ln = nn.LayerNorm(dims[0], eps=1e-6)
        self.s1 = nn.Sequential(ConvNeXtBlock(dims[0]), ConvNeXtBlock(dims[0]))
        self.ds_ln = nn.LayerNorm(dims[0], eps=1e-6)
        self.ds = nn.Conv2d(dims[0], dims[1], 2, 2)
        self.s2 = nn.Sequential(ConvNeXtBlock(dims[1]), ConvNeXtBlock(dims[1]))

    def forward(self, x):
        x = self.stem(x)
        x = self.stem_ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = self.s1(x)
        x = self.ds(self.ds_ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))
        return self.s2(x).mean((2, 3))


class MixerBlock(nn.Module):
    def __init__(self, tokens, d):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
        self.ch = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.tok(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.ln2(x))


class Mixer(nn.Module):
    def __init__(self, image=64, patch=8, d=128, depth=2):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.blocks = nn.Sequential(*(MixerBlock(tokens, d) for _ in range(depth)))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.ln(self.blocks(x)).mean(1))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.w


def _rotate(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, d=256, heads=8, kv_heads=2, ffn=688, max_t=256):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        ang = torch.outer(torch.arange(max_t).float(), inv)
        emb = torch.cat([ang, ang], -1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        rep = self.h // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class ConformerConv(nn.Module):
    def __init__(self, d=144, kernel=31):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)

    def forward(self, x):   # (b, t, d)
        h = self.ln(x).transpose(1, 2)
        h = F.glu(self.pw1(h), dim=1)
        h = F.silu(self.bn(self.dw(h)))
        return x + self.pw2(h).transpose(1, 2)


class MBConvSE(nn.Module):
    def __init__(self, cin, cout, stride, expand=4, se=0.25):
        super().__init__()
        h = cin * expand
        s = max(1, int(cin * se))
        self.use_res = stride == 1 and cin == cout
        self.expand = nn.Sequential(nn.Conv2d(cin, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        self.se1, self.se2 = nn.Conv2d(h, s, 1), nn.Conv2d(s, h, 1)
        self.proj = nn.Sequential(nn.Conv2d(h, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = self.dw(self.expand(x))
        g = torch.sigmoid(self.se2(F.silu(self.se1(h.mean((2, 3), keepdim=True)))))
        y = self.proj(h * g)
        return x + y if self.use_res else y


class EffNetSE(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.SiLU())
        self.blocks = nn.Sequential(MBConvSE(24, 24, 1), MBConvSE(24, 40, 2), MBConvSE(40, 40, 1),
                                    MBConvSE(40, 80, 2))
        self.head = nn.Linear(80, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class FirstOutput(nn.Module):
    def __init__(self, m, key):
        super().__init__()
        self.m, self.key = m, key

    def forward(self, x):
        return self.m(**{self.key: x}).last_hidden_state


def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(vocab_size=3000, dim=192, n_layers=2, n_heads=4, hidden_dim=768,
                           max_position_embeddings=128)
    return FirstOutput(DistilBertModel(cfg).eval(), "input_ids"), (torch.randint(0, 3000, (2, 64)),)


def _vit_tiny():
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=64, patch_size=8, hidden_size=192, num_hidden_layers=2, num_attention_heads=3,
                    intermediate_size=768)
    return FirstOutput(ViTModel(cfg, add_pooling_layer=False).eval(), "pixel_values"), (torch.randn(2, 3, 64, 64),)


def _bert_small():
    from transformers import BertConfig, BertModel

    # BERT-small widths (google/bert_uncased_L-4_H-512_A-8), batch 8, seq 128
    cfg = BertConfig(vocab_size=3000, hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                     intermediate_size=2048, max_position_embeddings=128)
    return FirstOutput(BertModel(cfg, add_pooling_layer=False).eval(), "input_ids"), \
        (torch.randint(0, 3000, (8, 128)),)


def _randn(*s):
    return torch.randn(*s)


CASES = {
    "mha77": lambda: (MHABlock(), (_randn(2, 77, 256),)),
    "textcnn": lambda: (TextCNN(), (torch.randint(0, 5000, (8, 64)),)),
    "mobilenetv2": lambda: (MobileNetV2(), (_randn(1, 3, 96, 96),)),
    "unet_gn": lambda: (UNetGN(), (_randn(1, 3, 32, 32), torch.tensor([10.0]))),
    "convnext": lambda: (ConvNeXt(), (_randn(1, 3, 64, 64),)),
    "mixer": lambda: (Mixer(), (_randn(2, 3, 64, 64),)),
    "distilbert": _distilbert,
    "vit_tiny": _vit_tiny,
    "llama_block": lambda: (LlamaBlock(), (_randn(1, 64, 256),)),
    "conformer": lambda: (ConformerConv(), (_randn(2, 100, 144),)),
    "effnet_se": lambda: (EffNetSE(), (_randn(1, 3, 64, 64),)),
    # nn.TransformerEncoderLayer(256, 4, 1024) as constructed (seq-first), seq 128, batch 8
    "encoder256": lambda: (nn.TransformerEncoderLayer(256, 4, 1024), (_randn(128, 8, 256),)),
    "bert_small": _bert_small,
}


def build(name: str, dtype: torch.dtype):
    torch.manual_seed(0)
    m, args = CASES[name]()
    m = m.eval().to(dtype)
    for mod in m.modules():   # BatchNorm statistics as trained, not the identity
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
    args = tuple(a.to(dtype) if a.is_floating_point() else a for a in args)
    return m, args


# -- runs ----------------------------------------------------------------------------------------------

def _err(out, ref):
    return (out.double() - ref.double()).abs().max().item(), ref.double().abs().max().item()


def profile(name, dtypes, rows):
    from torch.profiler import ProfilerActivity, profile as prof

    for dname in dtypes:
        m, args = build(name, DTYPES[dname])
        fast = mlircap.compile(m)
        with torch.no_grad():
            for _ in range(3):
                m(*args)
                fast(*args)
            for label, fn in (("eager", m), ("mlircap", fast)):
                with prof(activities=[ProfilerActivity.CPU]) as p:
                    for _ in range(20):
                        fn(*args)
                print(f"== {name} {dname} {label} (20 calls)")
                print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def _plans(fast):
    from mlircap.runtime.cpu import CpuPlanExecutable

    return [g.executable for g in fast.graphs if isinstance(g.executable, CpuPlanExecutable)]


def segments(name, dtypes, rows):
    """Process CPU time of each step of each CPU plan of `name` (kernels one by one,
    library steps through the runtime's own call), on the inputs a real call gives it,
    next to eager's profile total per call."""
    import time

    from mlircap.runtime.schema import KernelStep

    for dname in dtypes:
        m, args = build(name, DTYPES[dname])
        fast = mlircap.compile(m)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast(*args)
            fast(*args)
        seen = {}
        for exe in _plans(fast):
            call = exe._call

            def rec(*a, exe=exe, call=call):
                seen[id(exe)] = a
                return call(*a)
            exe._call = rec
        with torch.no_grad():
            fast(*args)
        rows_out = []
        for gi, exe in enumerate(_plans(fast)):
            exe._call = exe._generate(tg=None)
            a = seen.get(id(exe))
            if a is None:
                continue
            t = exe._template.copy()
            for vid, i, _, _ in exe._inputs:
                t[vid] = a[i].contiguous()
            for vid, new, sizes in exe._alloc:
                t[vid] = new(*sizes)
            for vid, of, shape, strides, offset in exe._views:
                t[vid] = t[of].as_strided(shape, strides, t[of].storage_offset() + offset)
            for vid, of, _ in exe._ptr_views:
                t[vid] = t[of]
            table = [x.data_ptr() for x in t]
            for vid, _, nbytes in exe._ptr_views:
                table[vid] += nbytes
            names = getattr(exe, "labels", None) or [st.name for st in exe.plan.steps if isinstance(st, KernelStep)]
            with torch.no_grad():
                for step, begin, end in exe._segments:
                    work = [(lambda k=k: exe.program.run(table, k, k + 1), f"kernel {names[k]}")
                            for k in range(begin, end)] if step is None else \
                        [(lambda step=step: exe.exe._run_library(step, t),
                          f"library {step.op} {tuple(exe.exe.values[step.out].shape)}")]
                    for fn, label in work:
                        fn()
                        reps, t0 = 0, time.process_time()
                        while time.process_time() - t0 < 0.02:
                            fn()
                            reps += 1
                        rows_out.append(((time.process_time() - t0) / reps * 1e6, f"g{gi} {label}"))
        total = sum(us for us, _ in rows_out)
        print(f"== {name} {dname}: {len(rows_out)} steps, {total:.0f} us summed")
        for us, label in sorted(rows_out, reverse=True)[:rows]:
            print(f"  {us:9.1f} us  {label}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N); 0: torch's default")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--models", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--profile", default="", help="torch.profiler tables of one model instead")
    ap.add_argument("--segments", default="", help="time each kernel and library step of one model instead")
    ap.add_argument("--rows", type=int, default=25)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dtypes = a.dtypes.split(",")
    if a.profile:
        profile(a.profile, dtypes, a.rows)
        return
    if a.segments:
        segments(a.segments, dtypes, a.rows)
        return
    clock = "process CPU time" if torch.get_num_threads() == 1 else "wall time"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, held-out CPU models; side by side, "
          f"{clock}, median of {a.rounds} rounds; load average {os.getloadavg()[0]:.2f}")
    cores = len(os.sched_getaffinity(0))
    if torch.get_num_threads() > 1 and os.getloadavg()[0] > cores - 0.5:
        print(f"note: load average above this host's {cores} cores: wall times on {torch.get_num_threads()} threads "
              "are then mostly OpenMP barriers waiting for threads off their cores (eager's and mlircap's alike; "
              "ratios swung 0.15x-6x between runs minutes apart); compare --threads 1 or bench/cpu_threads.py")
    hdr = f"{'model':<12} {'dtype':<5} {'eager ms':>9} {'mlircap ms':>11} {'x eager':>8}"
    if not a.no_inductor:
        hdr += f" {'inductor ms':>12} {'x eager':>8}"
    print(hdr + f" {'max|diff|':>9} {'(scale)':>8} graphs")
    ratios, ind_ratios, below = {d: [] for d in dtypes}, {d: [] for d in dtypes}, []
    for dname in dtypes:
        for name in a.models.split(","):
            try:
                m, args = build(name, DTYPES[dname])
                with torch.no_grad():
                    ref = m(*args)
                fast = mlircap.compile(m)
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fast(*args)
                    out = fast(*args)
                fns = [m, fast]
                if not a.no_inductor:
                    torch._dynamo.reset()
                    ind = torch.compile(m)
                    with torch.no_grad():
                        ind(*args)
                    fns.append(ind)
                times = side_by_side_ms(fns, args, a.rounds)
            except Exception as e:  # noqa: BLE001 - one model's failure must not lose the others'
                print(f"{name:<12} {dname:<5} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            err, scale = _err(out, ref)
            r = times[0] / times[1]
            ratios[dname].append(r)
            if r < 1:
                below.append(f"{name} {dname} {r:.2f}x")
            line = f"{name:<12} {dname:<5} {times[0]:>9.3f} {times[1]:>11.3f} {r:>7.2f}x"
            if not a.no_inductor:
                ind_ratios[dname].append(times[0] / times[2])
                line += f" {times[2]:>12.3f} {times[0] / times[2]:>7.2f}x"
            fell = sum(1 for g in fast.graphs if g.fallback_reason)
            print(line + f" {err:>9.1e} {scale:>8.1e} {len(fast.graphs)}({fell})", flush=True)
    for dname in dtypes:
        s = f"geomean {dname}: mlircap {geomean(ratios[dname]):.2f}x eager"
        if not a.no_inductor:
            s += f", inductor {geomean(ind_ratios[dname]):.2f}x"
        print(s)
    allr = [r for d in dtypes for r in ratios[d]]
    alli = [r for d in dtypes for r in ind_ratios[d]]
    print(f"geomean all: mlircap {geomean(allr):.2f}x eager" +
          ("" if a.no_inductor else f", inductor {geomean(alli):.2f}x") +
          f"; below eager: {', '.join(below) or 'none'}")


if __name__ == "__main__":
    main()
