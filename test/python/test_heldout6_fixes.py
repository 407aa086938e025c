"""Fixes found by bench/heldout6.py (HuggingFace transformers models in user programs), each with the
model built offline from a tiny config; every call is compared with eager."""
import collections
import warnings

import pytest
import torch
import torch.nn as nn

import mlircap

transformers = pytest.importorskip("transformers")


def _same(a, b):
    if isinstance(a, (tuple, list)):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


class _Instantier(collections.OrderedDict):
    """transformers.activations.ClassInstantier: each item read makes a new module of the class held."""

    def __getitem__(self, key):
        cls, kwargs = super().__getitem__(key)
        return cls(**kwargs)


class _Scaled(nn.Module):
    def __init__(self, k=1.0):
        super().__init__()
        self.k = k

    def forward(self, x):
        return torch.tanh(x) * self.k


_ACTS = _Instantier({"scaled": (_Scaled, {"k": 2.0})})


def test_a_dict_whose_getitem_makes_a_module_is_no_recompile_per_call():
    """`ACT2FN[name](x)` (a classification head picking its activation at call time: RoFormer's,
    Electra's): the snapshot of the dict read its items through the subclass's __getitem__, which
    made a module; its identity was guarded against the class the replay reads, every call
    recompiled until cache_limit, then ran eagerly (heldout6 roformer_hidden_pool)."""
    lin = nn.Linear(4, 4)

    def head(x):
        return _ACTS["scaled"](lin(x)) + 1

    f = mlircap.compile(head)
    for i in range(4):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(i))
        assert _same(f(x), head(x))
    ex = f.explain()
    assert ex.variants == 1, ex.recompile_reasons
    assert not ex.eager_reasons


def test_roformer_classification_head_compiles_once():
    """The same through transformers' own ACT2FN: a tiny RoFormer classifier, padded batches."""
    cfg = transformers.RoFormerConfig(vocab_size=40, embedding_size=16, hidden_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=16,
                                      num_labels=3, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.RoFormerForSequenceClassification(cfg).eval()

    def classify(ids, mask):
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits.softmax(-1)

    f = mlircap.compile(classify)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(3, 40, (2, 8), generator=g)
            mask = torch.ones(2, 8, dtype=torch.long)
            mask[1, 5 + i % 3:] = 0
            assert _same(f(ids, mask), classify(ids, mask))
    ex = f.explain()
    assert ex.variants == 1, ex.recompile_reasons
    assert not ex.eager_reasons


def test_a_classmethod_of_a_builtin_class_is_no_recompile_per_call():
    """`dict.fromkeys(...)` / `int.from_bytes(...)`: each read of a C classmethod binds a new method
    object, which was guarded by identity, so every call missed (transformers' Mamba forward reads
    dict.fromkeys: heldout6 mamba_loss_hidden recompiled on every call until cache_limit)."""
    def f(x):
        d = dict.fromkeys(["a", "b"], 1.5)
        n = int.from_bytes(b"\x02", "little")
        return x * d["a"] + n

    cf = mlircap.compile(f)
    for i in range(4):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        assert torch.equal(cf(x), f(x))
    ex = cf.explain()
    assert ex.variants == 1, ex.recompile_reasons


def test_mamba_forward_is_no_recompile_per_call():
    """The same through a tiny transformers Mamba (its forward gives up on the selective scan and
    runs eagerly, its callees captured on their own): one variant for calls of one shape."""
    cfg = transformers.MambaConfig(vocab_size=40, hidden_size=16, state_size=4, num_hidden_layers=1, expand=2,
                                   conv_kernel=2, use_mambapy=False)
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(cfg).eval()

    def logits(ids):
        with torch.no_grad():
            return model(input_ids=ids).logits

    f = mlircap.compile(logits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(3):
            ids = torch.randint(3, 40, (2, 6), generator=torch.Generator().manual_seed(i))
            assert _same(f(ids), logits(ids))
    assert f.explain().variants == 1, f.explain().recompile_reasons


def test_train_then_eval_inside_the_call_is_no_recompile_per_call():
    """A training step followed by a validation pass, `model.train()` ... `model.eval()` in one
    call: nn.Module.train ran untraced, so dropout's `training` read after it was guarded as the
    state at the call's start (True), which the previous call's eval() had left False: every call
    recompiled (heldout6 data2vec_train_eval). The flags are writes of the call now; the modes
    after each call and the outputs (dropout drawn alike) equal eager's."""
    cfg = transformers.Data2VecTextConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=32, max_position_embeddings=24, num_labels=3,
                                          hidden_dropout_prob=0.2, pad_token_id=1)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(transformers.Data2VecTextForSequenceClassification(cfg))

    def make(model):
        def epoch(x, y, vx):
            model.train()
            loss = model(input_ids=x, labels=y).loss
            loss.backward()
            model.eval()
            with torch.no_grad():
                val = model(input_ids=vx).logits
            return loss.detach(), val
        return epoch

    fe, fc = make(models[0]), mlircap.compile(make(models[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            g = torch.Generator().manual_seed(i)
            args = (torch.randint(3, 40, (2, 8), generator=g), torch.randint(0, 3, (2,), generator=g),
                    torch.randint(3, 40, (2, 8), generator=g))
            torch.manual_seed(i)
            re = fe(*args)
            torch.manual_seed(i)
            rc = fc(*args)
            assert _same(re, rc)
            assert [m.training for m in models[0].modules()] == [m.training for m in models[1].modules()]
            for p, q in zip(models[0].parameters(), models[1].parameters()):
                assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    assert fc.explain().variants <= 2, fc.explain().recompile_reasons   # (the first call starts in train mode)


def test_dropout_after_a_layer_norm_of_a_transposed_input_drops_eagers_elements():
    """A ViT / Swin patch embedding in training: conv -> flatten -> transpose -> LayerNorm ->
    Dropout. The float32 layer_norm decomposition kept the transposed input's strides where eager's
    kernel returns a contiguous output, so the dropout island restrided its (contiguous) input to
    that layout and drew the mask in another memory order: other elements dropped from the first
    replay on (heldout6 swinv2_train: gradients 2-8e-2 off)."""
    torch.manual_seed(0)
    conv, ln, lin = nn.Conv2d(3, 16, 4, 4), nn.LayerNorm(16), nn.Linear(16, 8)

    def embed(x):
        e = ln(conv(x).flatten(2).transpose(1, 2))
        return lin(torch.nn.functional.dropout(e, 0.3, training=True))

    f = mlircap.compile(embed)
    for i in range(4):
        x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(i))
        torch.manual_seed(i)
        want = embed(x)
        torch.manual_seed(i)
        assert _same(f(x), want)


def test_swinv2_training_step_with_dropout_equals_eager():
    """The same through a tiny transformers Swinv2 classifier trained with SGD, hidden dropout on."""
    cfg = transformers.Swinv2Config(image_size=16, patch_size=4, embed_dim=8, depths=[1], num_heads=[2],
                                    window_size=2, num_labels=3, hidden_dropout_prob=0.2)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(transformers.Swinv2ForImageClassification(cfg))

    def make(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)

        def step(px, y):
            out = model(pixel_values=px, labels=y)
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            return out.loss.detach()
        return step

    fe, fc = make(models[0]), mlircap.compile(make(models[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            g = torch.Generator().manual_seed(i)
            px, y = torch.randn(2, 3, 16, 16, generator=g), torch.randint(0, 3, (2,), generator=g)
            torch.manual_seed(i)
            want = fe(px, y)
            torch.manual_seed(i)
            assert _same(fc(px, y), want)
            for p, q in zip(models[0].parameters(), models[1].parameters()):
                assert torch.allclose(p, q, rtol=1e-4, atol=1e-6)
