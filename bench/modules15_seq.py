"""bench/modules15.py's sequence part (same runner, its CASES appended there): recurrent nets
with packed sequences (a bidirectional GRU tagger, an LSTM language model with tied weights and
detached hidden state carried across calls, a char-level seq2seq with teacher forcing drawn by
random.random, a CTC acoustic model), Bahdanau attention over padded encoder states, a pointer
network, beam search and recursion (a tree-LSTM over a nested tuple, a recursive Fibonacci-shaped
module), generators yielding layers, and transformers-style modules built from config objects
(a PretrainedConfig-like class with attribute_map, ModelOutput-like dataclass outputs, a head
chosen by problem_type, GQA with repeat_kv, Mixtral's expert loop, ALBERT's shared layers).
"""
from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, fields
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, grad_ctx, registrars
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ recurrent
class GRUTagger(nn.Module):
    """A BiGRU tagger: pad_sequence of a list of variable-length token tensors, lengths from the
    list, pack (enforce_sorted False), unpack to the batch's max length, CE ignoring padding."""

    def __init__(self, v=20, d=6, h=5, tags=4):
        super().__init__()
        self.emb = nn.Embedding(v, d, padding_idx=0)
        self.rnn = nn.GRU(d, h, batch_first=True, bidirectional=True, num_layers=2, dropout=0.0)
        self.out = nn.Linear(2 * h, tags)

    def forward(self, seqs, tags):
        lengths = torch.tensor([len(s) for s in seqs])
        x = self.emb(pad_sequence(seqs, batch_first=True))
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h = self.rnn(packed)
        out, lens = pad_packed_sequence(out, batch_first=True, padding_value=0.0)
        logits = self.out(out)
        tgt = pad_sequence(tags, batch_first=True, padding_value=-100)
        return F.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=-100), h.shape, lens


def _tagger_in(i=0):
    lens = [[5, 3, 4], [5, 3, 4], [2, 6, 1], [4, 4, 4]][i]
    return [I(1, 20, n) for n in lens], [I(0, 4, n) for n in lens]


case("bigru_tagger_pad_sequence_list_packed", _tagger_in, ncalls=4)(lambda: GRUTagger())


class LSTMLM(nn.Module):
    """The word_language_model example: tied embedding / decoder weights, the hidden state kept on
    the module and detached between calls (repackage_hidden, a recursive helper on tuples),
    truncated BPTT loss with clip_grad_norm_ and a manual SGD update of p.data."""

    def __init__(self, v=15, d=8):
        super().__init__()
        self.enc = nn.Embedding(v, d)
        self.rnn = nn.LSTM(d, d, num_layers=2)
        self.dec = nn.Linear(d, v)
        self.dec.weight = self.enc.weight
        self.hidden = None

    @staticmethod
    def repackage(h):
        if isinstance(h, torch.Tensor):
            return h.detach()
        return tuple(LSTMLM.repackage(v) for v in h)

    def forward(self, data, targets):
        if self.hidden is None:
            self.hidden = (torch.zeros(2, data.shape[1], 8), torch.zeros(2, data.shape[1], 8))
        self.hidden = self.repackage(self.hidden)
        self.zero_grad()
        out, self.hidden = self.rnn(self.enc(data), self.hidden)
        loss = F.cross_entropy(self.dec(out).view(-1, self.dec.out_features), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(self.parameters(), 0.25)
        for p in self.parameters():
            p.data.add_(p.grad, alpha=-0.5)
        return loss.item()


case("lstm_lm_tied_weights_repackage_hidden_bptt", lambda: (I(0, 15, 5, 2), I(0, 15, 5, 2)), train=True, ncalls=4,
     context=grad_ctx)(lambda: LSTMLM())


class Seq2Seq(nn.Module):
    """A char seq2seq with teacher forcing: `random.random() < ratio` per step (Python's random,
    seeded by the case), the decoder's own argmax fed back otherwise, outputs written into a
    preallocated tensor by index."""

    def __init__(self, v=10, h=8):
        super().__init__()
        self.emb = nn.Embedding(v, h)
        self.enc = nn.GRU(h, h)
        self.dec = nn.GRUCell(h, h)
        self.out = nn.Linear(h, v)
        self.ratio = 0.5

    def forward(self, src, trg):
        random.seed(7)
        _, hidden = self.enc(self.emb(src))
        h = hidden[0]
        outputs = torch.zeros(trg.shape[0], trg.shape[1], self.out.out_features)
        inp = trg[0]
        for t in range(1, trg.shape[0]):
            h = self.dec(self.emb(inp), h)
            logits = self.out(h)
            outputs[t] = logits
            inp = trg[t] if random.random() < self.ratio else logits.argmax(1)
        return outputs, F.cross_entropy(outputs[1:].reshape(-1, outputs.shape[-1]), trg[1:].reshape(-1))


case("seq2seq_teacher_forcing_python_random", lambda: (I(0, 10, 6, 3), I(0, 10, 5, 3)))(lambda: Seq2Seq())


class CTCModel(nn.Module):
    """A CTC acoustic model: conv subsampling with output lengths by floor arithmetic on the input
    lengths, a BiLSTM over packed frames, log_softmax time-major, ctc_loss with zero_infinity, a
    greedy decode collapsing repeats and blanks in Python."""

    def __init__(self, feats=6, v=5):
        super().__init__()
        self.conv = nn.Conv1d(feats, 8, 3, stride=2, padding=1)
        self.rnn = nn.LSTM(8, 6, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(12, v)

    def forward(self, x, xlens, y, ylens):
        h = F.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        olens = torch.div(xlens + 2 * 1 - 3, 2, rounding_mode="floor") + 1
        packed = pack_padded_sequence(h, olens, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=h.shape[1])
        lp = self.fc(out).log_softmax(-1).transpose(0, 1)
        loss = F.ctc_loss(lp, y, olens, ylens, blank=0, zero_infinity=True)
        best = lp.argmax(-1).t()
        hyps = []
        for b in range(best.shape[0]):
            seq = torch.unique_consecutive(best[b, :olens[b]])
            hyps.append(seq[seq != 0].tolist())
        return loss, hyps


case("ctc_conv_subsample_lengths_packed_greedy_decode",
     lambda: (R(3, 12, 6), torch.tensor([12, 9, 7]), I(1, 5, 3, 3), torch.tensor([3, 2, 1])))(lambda: CTCModel())


class Bahdanau(nn.Module):
    """Additive attention over padded encoder states: energies by tanh(W q + U k), masked with
    -1e10 from lengths (not -inf, as the tutorial), weights bmm'd with the values."""

    def __init__(self, d=6):
        super().__init__()
        self.W, self.U, self.v = nn.Linear(d, d, bias=False), nn.Linear(d, d), nn.Linear(d, 1, bias=False)

    def forward(self, q, keys, lengths):
        e = self.v(torch.tanh(self.W(q)[:, None] + self.U(keys))).squeeze(-1)
        mask = torch.arange(keys.shape[1])[None] >= lengths[:, None]
        a = e.masked_fill(mask, -1e10).softmax(1)
        return torch.bmm(a[:, None], keys).squeeze(1), a


case("bahdanau_additive_attention_length_mask", lambda: (R(3, 6), R(3, 5, 6), torch.tensor([5, 2, 3])))(
    lambda: Bahdanau())


class PointerNet(nn.Module):
    """A pointer network decoding a permutation: at each step attention logits over the inputs,
    already chosen positions masked by a bool mask updated in place with scatter_, the glimpse of the
    chosen input fed back by gather."""

    def __init__(self, d=6):
        super().__init__()
        self.enc = nn.LSTM(2, d, batch_first=True)
        self.cell = nn.LSTMCell(d, d)
        self.W1, self.W2, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, 1)

    def forward(self, pts):
        b, n, _ = pts.shape
        enc, (h, c) = self.enc(pts)
        h, c = h[0], c[0]
        mask = torch.zeros(b, n, dtype=torch.bool)
        inp = enc.mean(1)
        order, logps = [], []
        for _ in range(n):
            h, c = self.cell(inp, (h, c))
            u = self.v(torch.tanh(self.W1(enc) + self.W2(h)[:, None])).squeeze(-1)
            logp = u.masked_fill(mask, float("-inf")).log_softmax(-1)
            idx = logp.argmax(-1)
            mask = mask.scatter(1, idx[:, None], True)
            inp = enc.gather(1, idx[:, None, None].expand(-1, 1, enc.shape[-1])).squeeze(1)
            order.append(idx)
            logps.append(logp.gather(1, idx[:, None]))
        return torch.stack(order, 1), torch.cat(logps, 1).sum(1)


case("pointer_network_mask_scatter_gather_feedback", lambda: (torch.rand(2, 5, 2),))(lambda: PointerNet())


# ============================================================================ recursion / generators
class TreeLSTM(nn.Module):
    """A child-sum Tree-LSTM over a nested tuple tree (leaves are token ids), recursive calls on
    the children, h / c summed over children; the root's state."""

    def __init__(self, v=10, d=5):
        super().__init__()
        self.emb = nn.Embedding(v, d)
        self.iou = nn.Linear(2 * d, 3 * d)
        self.f = nn.Linear(2 * d, d)
        self.d = d

    def node(self, tree, ids):
        if isinstance(tree, int):
            x = self.emb(ids[tree])
            hs = cs = torch.zeros(1, self.d)
        else:
            x = torch.zeros(self.d)
            kids = [self.node(t, ids) for t in tree]
            hs, cs = torch.stack([k[0] for k in kids]), torch.stack([k[1] for k in kids])
        hsum = hs.sum(0)
        i, o, u = self.iou(torch.cat([x, hsum])).chunk(3)
        f = torch.sigmoid(self.f(torch.cat([x.expand(hs.shape[0], -1), hs], -1)))
        c = torch.sigmoid(i) * torch.tanh(u) + (f * cs).sum(0)
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(self, ids, tree):
        return self.node(tree, ids)


case("tree_lstm_recursive_nested_tuple", lambda: (I(0, 10, 6), ((0, 1), (2, (3, 4)), 5)))(lambda: TreeLSTM())


class FractalBlock(nn.Module):
    """FractalNet's recursive expansion: a block of depth c is the mean of a conv and two blocks of
    depth c - 1 in sequence, built recursively in __init__ and called recursively."""

    def __init__(self, c, ch=4):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU())
        self.sub = nn.ModuleList([FractalBlock(c - 1, ch), FractalBlock(c - 1, ch)]) if c > 1 else None

    def forward(self, x):
        y = self.conv(x)
        if self.sub is None:
            return y
        return (y + self.sub[1](self.sub[0](x))) / 2


case("fractalnet_recursive_blocks", lambda: (R(2, 4, 5, 5),), train=True)(lambda: FractalBlock(3))


class GenStack(nn.Module):
    """Layers walked through a generator method that yields (name, layer) and skips by a set of
    names, intermediate features collected by a generator expression into a dict."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict(OrderedDict((f"l{i}", nn.Linear(5, 5)) for i in range(5)))
        self.skip = {"l2"}

    def active(self):
        for name, layer in self.layers.items():
            if name in self.skip:
                continue
            yield name, layer

    def forward(self, x):
        feats = {}
        for name, layer in self.active():
            x = torch.relu(layer(x)) + x
            feats[name] = x
        return x, {k: v.sum() for k, v in feats.items() if k != "l0"}, sum(v.mean() for v in feats.values())


def _skip_more(m, i):
    if i == 2:
        m.skip = {"l1", "l4"}


case("generator_method_yields_layers_skip_set_changed", lambda: (R(3, 5),), ncalls=4, between=_skip_more)(
    lambda: GenStack())


# ============================================================================ transformers-style configs
class PretrainedConfigLike:
    """A PretrainedConfig-style object: attribute_map aliasing names through __getattribute__,
    defaults filled from kwargs, to_dict."""

    attribute_map = {"hidden_size": "n_embd", "num_attention_heads": "n_head"}

    def __init__(self, **kw):
        self.n_embd, self.n_head, self.num_key_value_heads = 16, 4, 2
        self.num_local_experts, self.num_experts_per_tok = 4, 2
        self.problem_type = None
        self.use_return_dict = True
        for k, v in kw.items():
            setattr(self, k, v)

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


@dataclass
class ModelOutputLike(OrderedDict):
    """transformers' ModelOutput idea: a dataclass that is also an OrderedDict holding only the
    fields that are not None; indexable by name and by position."""

    loss: Optional[torch.Tensor] = None
    logits: torch.Tensor = None
    aux_loss: Optional[torch.Tensor] = None

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


def repeat_kv(x, n_rep):
    b, h, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class MixtralLike(nn.Module):
    """GQA attention with repeat_kv, then Mixtral's sparse MoE block: router softmax in float, top-2
    renormalised, the expert loop over one_hot(...).permute masks with torch.where, index_add_
    into the flat output, the load-balancing aux loss; the output a ModelOutputLike, the loss
    chosen by config.problem_type."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, h, kvh = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = d // h
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * kvh * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, cfg.num_local_experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d))
                                     for _ in range(cfg.num_local_experts))
        self.head = nn.Linear(d, 3)

    def forward(self, x, labels=None):
        cfg = self.cfg
        b, s, d = x.shape
        q = self.q(x).view(b, s, -1, self.hd).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, -1, self.hd).permute(2, 0, 3, 1, 4)
        k = repeat_kv(k, cfg.num_attention_heads // cfg.num_key_value_heads)
        v = repeat_kv(v, cfg.num_attention_heads // cfg.num_key_value_heads)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        flat = x.view(-1, d)
        router_logits = self.gate(flat)
        rw = F.softmax(router_logits, dim=1, dtype=torch.float)
        rw, sel = torch.topk(rw, cfg.num_experts_per_tok, dim=-1)
        rw = (rw / rw.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(flat)
        mask = F.one_hot(sel, num_classes=cfg.num_local_experts).permute(2, 1, 0)
        for e in range(cfg.num_local_experts):
            idx, top = torch.where(mask[e])
            if top.numel() == 0:
                continue
            out.index_add_(0, top, self.experts[e](flat[top]) * rw[top, idx, None])
        x = x + out.view(b, s, d)
        probs = router_logits.softmax(-1)
        aux = cfg.num_local_experts * (mask.float().mean((1, 2)) * probs.mean(0)).sum()
        logits = self.head(x[:, -1])
        loss = None
        if labels is not None:
            if cfg.problem_type == "regression":
                loss = F.mse_loss(logits[:, 0], labels.float())
            elif cfg.problem_type == "multi_label_classification":
                loss = F.binary_cross_entropy_with_logits(logits, labels.float())
            else:
                loss = F.cross_entropy(logits, labels)
        if not cfg.use_return_dict:
            return (logits, aux)
        return ModelOutputLike(loss=loss, logits=logits, aux_loss=aux)


def _mixtral_in(i=0):
    x = R(2, 5, 16)
    if i == 3:
        return (x, torch.tensor([[1, 0, 1], [0, 0, 1]]))
    return (x, I(0, 3, 2)) if i != 2 else (x,)


def _problem(m, i):
    if i == 3:
        m.cfg.problem_type = "multi_label_classification"


case("mixtral_config_attribute_map_expert_loop_model_output", _mixtral_in, ncalls=4, between=_problem)(
    lambda: MixtralLike(PretrainedConfigLike()))


class AlbertShared(nn.Module):
    """ALBERT's cross-layer sharing: one encoder layer called num_hidden_layers times from a
    config, a factorised embedding projection, hidden states collected in a tuple when
    output_hidden_states, an extended attention mask with finfo.min."""

    def __init__(self, layers=3):
        super().__init__()
        self.layers = layers
        self.emb = nn.Embedding(12, 4)
        self.proj = nn.Linear(4, 8)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.output_hidden_states = True

    def forward(self, ids, attention_mask):
        h = self.proj(self.emb(ids))
        ext = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        mask = ext.expand(-1, 2, ids.shape[1], -1).reshape(-1, ids.shape[1], ids.shape[1])
        states = (h,) if self.output_hidden_states else None
        for _ in range(self.layers):
            h = self.layer(h, src_mask=mask)
            if self.output_hidden_states:
                states = states + (h,)
        return h, states


def _albert_in():
    m = torch.ones(2, 6, dtype=torch.long)
    m[1, 4:] = 0
    return I(0, 12, 2, 6), m


case("albert_shared_layer_loop_extended_mask_states", _albert_in, ncalls=3,
     between=lambda m, i: setattr(m, "output_hidden_states", i != 2))(lambda: AlbertShared())


@fn_case("beam_search_length_penalty_python_heaps", lambda: (R(5, 7).log_softmax(-1), R(7, 7).log_softmax(-1)))
def beam_search(init, trans, beams=3, steps=4, alpha=0.6):
    """A beam search over a transition table: hypotheses as (score, list) tuples, topk over the
    flattened beam x vocab scores, divmod of the flat indices, finished beams on token 0 kept
    apart with a GNMT length penalty, the best by max()."""
    hyps = [(0.0, [int(t)]) for t in init[0].topk(beams).indices]
    scores = init[0].topk(beams).values
    finished = []
    for _ in range(steps):
        last = torch.tensor([h[1][-1] for h in hyps])
        cand = scores[:, None] + trans[last]
        top = cand.flatten().topk(beams)
        new_hyps, new_scores = [], []
        for s, flat in zip(top.values, top.indices.tolist()):
            b, tok = divmod(flat, trans.shape[1])
            seq = hyps[b][1] + [tok]
            if tok == 0:
                lp = ((5 + len(seq)) / 6) ** alpha
                finished.append((float(s) / lp, seq))
            else:
                new_hyps.append((float(s), seq))
                new_scores.append(s)
        if not new_hyps:
            break
        hyps, scores = new_hyps, torch.stack(new_scores)
    finished += [(s / ((5 + len(q)) / 6) ** alpha, q) for s, q in hyps]
    return max(finished, key=lambda t: t[0]), len(finished)
