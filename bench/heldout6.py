"""Held-out set 6: HuggingFace `transformers` models in the programs users write around them, with models
bench/capture*.py, cpu_heldout.py and modules*.py leave out (all built offline from a tiny config: 2 layers,
hidden 32-64): batched inference with padding and attention masks (`model(**inputs).logits`,
`output_hidden_states=True`, `return_dict=False`), losses the model computes from `labels=`, training steps
(AdamW, gradient clipping, transformers' schedulers), `model.generate` (greedy, a few tokens), hand-written
decoding loops over `past_key_values` / a DynamicCache / RWKV's state, evaluation loops under
`torch.no_grad()`, dropout and random masking in train mode (seeded), `model.train()` / `model.eval()`
toggled between and inside calls, CPU bf16 autocast, MoE routers, FFT mixing, a selective-scan SSM, CTC,
audio / time-series / vision / contrastive heads.

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, parameters and gradients, optimizer and scheduler
state, counters, the global RNG's state after the call, arguments): bench/heldout4.py's runner and report
(imported, same options):

    python bench/heldout6.py --threads 1 --dtypes fp32
    python bench/heldout6.py --threads 1 --dtypes bf16           # the cases where bf16 is meaningful
    python bench/heldout6.py --threads 1 --models mixtral_generate,esm_mlm_train --json /tmp/h6.jsonl
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
import transformers as T

import heldout4  # noqa: E402  (the runner: run_case, diff, main)

warnings.filterwarnings("ignore", module="transformers")
T.logging.set_verbosity_error()

V = 96  # vocabulary of the text models


def _flat(ts):
    ts = [t.detach().flatten() for t in ts if t is not None]
    return torch.cat(ts) if ts else None


def _state(model, *extra):
    """parameters and gradients, each side compared as one vector (on the scale of all of them): an attention
    key bias's gradient is zero up to rounding (softmax is shift-invariant), ~1e-12 against the others' ~1,
    so eager and compiled differ on it by rounding alone, and so do the parameters Adam moves by that noise;
    buffers (running statistics) one by one."""
    params = dict(model.named_parameters())
    bufs = {k: v for k, v in model.state_dict().items() if k not in params}
    return (_flat(params.values()), _flat(p.grad for p in params.values()),
            [p.grad is None for p in params.values()], bufs, *extra)


def _opt_state(opt, sched=None):
    """the optimizer's per-parameter state, each kind (exp_avg, momentum_buffer, step, ...) one vector over all
    parameters (as the gradients, see _state); learning rates, the scheduler's step"""
    st = opt.state_dict()["state"]
    kinds = sorted({k for v in st.values() for k in v})
    return ({k: _flat(v.get(k) for v in st.values()) for k in kinds},
            [g["lr"] for g in opt.param_groups], sched.last_epoch if sched else None)


def _padded(i, n=3, lo=5, hi=12, left=False, vocab=V, pad=0):
    """a tokenizer's batch: ids padded to the longest row, its attention mask (right padding, or left)."""
    g = torch.Generator().manual_seed(10 + i)
    lens = torch.randint(lo, hi + 1, (n,), generator=g)
    lens[0] = hi
    ids = torch.full((n, hi), pad, dtype=torch.long)
    mask = torch.zeros(n, hi, dtype=torch.long)
    for r, ln in enumerate(lens.tolist()):
        sl = slice(hi - ln, hi) if left else slice(0, ln)
        ids[r, sl] = torch.randint(3, vocab, (ln,), generator=g)
        mask[r, sl] = 1
    return ids, mask


def _llama_like(cls, **kw):
    base = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    base.update(kw)
    return cls(**base)


# ------------------------------------------------------------------------------------------------ decoder-only inference
def make_granite_logits(dt):
    model = T.GraniteForCausalLM(_llama_like(T.GraniteConfig, embedding_multiplier=2.0, logits_scaling=4.0,
                                             residual_multiplier=0.5, attention_multiplier=0.2)).to(dt).eval()

    def predict_next(inputs):
        with torch.no_grad():
            logits = model(**inputs).logits
        return logits[:, -1].argmax(-1), logits.float().log_softmax(-1)[:, -1]
    return predict_next, lambda: None


def make_olmo2_loss(dt):
    model = T.Olmo2ForCausalLM(_llama_like(T.Olmo2Config)).to(dt).eval()

    def perplexity(ids, mask):
        labels = ids.masked_fill(mask == 0, -100)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        return out.loss, torch.exp(out.loss), out.logits.shape[-1]
    return perplexity, lambda: None


def make_gemma3_window(dt):
    cfg = _llama_like(T.Gemma3TextConfig, head_dim=16, sliding_window=4, layer_types=["sliding_attention",
                                                                                      "full_attention"],
                      query_pre_attn_scalar=16)
    model = T.Gemma3ForCausalLM(cfg).to(dt).eval()

    def score(ids, mask):
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        last = mask.sum(1) - 1
        return out.logits[torch.arange(ids.shape[0]), last], [h.mean(-1) for h in out.hidden_states]
    return score, lambda: None


def make_persimmon_autocast(dt):
    cfg = T.PersimmonConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, max_position_embeddings=128, pad_token_id=0, partial_rotary_factor=0.5)
    model = T.PersimmonForCausalLM(cfg).eval()      # float32 weights; bf16 autocast in the bf16 run (--dtypes bf16)
    use_amp = dt == torch.bfloat16                   # (whose tolerance fits it: one bf16 unit of a logit is 4e-3)

    def logits_bf16(ids, mask):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_amp):
            logits = model(input_ids=ids, attention_mask=mask).logits
        return logits.float().softmax(-1)
    return logits_bf16, lambda: None


def make_mamba_loss(dt):
    cfg = T.MambaConfig(vocab_size=V, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4,
                        pad_token_id=0, use_mambapy=False)
    model = T.MambaForCausalLM(cfg).to(dt).eval()

    def loss_and_hidden(ids):
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids, output_hidden_states=True)
        return out.loss, out.logits[:, -1], out.hidden_states[-1]
    return loss_and_hidden, lambda: None


def make_rwkv_state(dt):
    cfg = T.RwkvConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
                       intermediate_size=64, context_length=64)
    model = T.RwkvForCausalLM(cfg).to(dt).eval()

    def two_chunks(ids):
        """a long text fed in two chunks, the recurrent state carried between them"""
        with torch.no_grad():
            a = model(input_ids=ids[:, :6], use_cache=True)
            b = model(input_ids=ids[:, 6:], state=a.state, use_cache=True)
        return a.logits, b.logits, [s.clone() for s in b.state]
    return two_chunks, lambda: None


def make_xglm_cache(dt):
    cfg = T.XGLMConfig(vocab_size=V, d_model=64, ffn_dim=128, num_layers=2, attention_heads=4, max_position_embeddings=64,
                       pad_token_id=0)
    model = T.XGLMForCausalLM(cfg).to(dt).eval()

    @torch.no_grad()
    def greedy(ids, steps=4):
        past = T.DynamicCache()
        out = model(input_ids=ids, past_key_values=past, use_cache=True)
        toks = []
        for _ in range(steps):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(nxt)
            out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
        return torch.cat(toks, 1), past.get_seq_length()
    return greedy, lambda: None


def make_gptneo_kv(dt):
    cfg = T.GPTNeoConfig(vocab_size=V, hidden_size=64, num_layers=2, num_heads=4, window_size=4,
                         attention_types=[[["global", "local"], 1]], max_position_embeddings=64, intermediate_size=128, eos_token_id=2)
    model = T.GPTNeoForCausalLM(cfg).to(dt).eval()

    def decode(ids, max_new=4):
        """the tutorial loop: feed the prompt, then one token at a time with past_key_values, stop at eos"""
        past, cur, out_ids = None, ids, ids
        with torch.no_grad():
            for _ in range(max_new):
                out = model(input_ids=cur, past_key_values=past, use_cache=True)
                past = out.past_key_values
                cur = out.logits[:, -1:].argmax(-1)
                out_ids = torch.cat([out_ids, cur], dim=1)
                if (cur == cfg.eos_token_id).all():
                    break
        return out_ids
    return decode, lambda: None


def make_mixtral_generate(dt):
    model = T.MixtralForCausalLM(_llama_like(T.MixtralConfig, num_local_experts=4, num_experts_per_tok=2,
                                             sliding_window=None)).to(dt).eval()

    def generate(ids, mask):
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    return generate, lambda: None


def make_glm_generate_scores(dt):
    cfg = _llama_like(T.GlmConfig, head_dim=16, partial_rotary_factor=0.5)
    model = T.GlmForCausalLM(cfg).to(dt).eval()

    def generate(ids, mask):
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True, output_scores=True)
        return out.sequences, torch.stack(out.scores, 1).float().log_softmax(-1)
    return generate, lambda: None


# ------------------------------------------------------------------------------------------------ encoders
def _bert_like(cls, **kw):
    base = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                max_position_embeddings=64, type_vocab_size=2, pad_token_id=0)
    base.update(kw)
    return cls(**base)


def make_roformer_hidden(dt):
    model = T.RoFormerForSequenceClassification(_bert_like(T.RoFormerConfig, embedding_size=64, num_labels=3))
    model = model.to(dt).eval()

    def embed_and_classify(ids, mask):
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        m = mask.unsqueeze(-1).to(out.hidden_states[-1].dtype)
        pooled = (out.hidden_states[-1] * m).sum(1) / m.sum(1)       # mean pooling over real tokens
        return out.logits.softmax(-1), torch.nn.functional.normalize(pooled, dim=-1)
    return embed_and_classify, lambda: None


def make_megatron_tuple(dt):
    model = T.MegatronBertForMaskedLM(_bert_like(T.MegatronBertConfig)).to(dt).eval()

    def mlm(ids, mask):
        labels = torch.full_like(ids, -100)
        labels[:, 1::3] = ids[:, 1::3]
        masked = ids.clone()
        masked[:, 1::3] = 4                                            # [MASK]
        with torch.no_grad():
            loss, logits = model(masked, attention_mask=mask, labels=labels, return_dict=False)
        return loss, logits.argmax(-1)
    return mlm, lambda: None


def make_fnet_eval_loop(dt):
    cfg = T.FNetConfig(vocab_size=V, hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                       max_position_embeddings=64, num_labels=4, pad_token_id=0, use_tpu_fourier_optimizations=False)
    model = T.FNetForSequenceClassification(cfg).to(dt)
    stats = {"seen": 0, "correct": 0}

    def evaluate(batches):
        model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            for ids, y in batches:
                out = model(input_ids=ids, labels=y)
                total += out.loss.item() * len(y)
                n += len(y)
                stats["correct"] += int((out.logits.argmax(-1) == y).sum())
                stats["seen"] += len(y)
        return total / n, stats["correct"] / stats["seen"]
    return evaluate, lambda: dict(stats)


def fnet_inputs(i, dt):
    return ([(torch.randint(3, V, (4, 12)), torch.randint(0, 4, (4,))) for _ in range(2 + i % 2)],)


def make_nystrom_dropout(dt):
    cfg = _bert_like(T.NystromformerConfig, num_landmarks=4, segment_means_seq_len=16, num_labels=2,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.1, max_position_embeddings=40)
    model = T.NystromformerForSequenceClassification(cfg).to(dt)

    def mc_dropout(ids, samples=3):
        """Monte Carlo dropout: the model left in train mode, several stochastic passes averaged"""
        model.train()
        with torch.no_grad():
            probs = torch.stack([model(input_ids=ids).logits.softmax(-1) for _ in range(samples)])
        return probs.mean(0), probs.var(0)
    return mc_dropout, lambda: None


def make_ernie_token_grad(dt):
    model = T.ErnieForTokenClassification(_bert_like(T.ErnieConfig, num_labels=5, hidden_dropout_prob=0.1,
                                                     task_type_vocab_size=3, use_task_id=True))
    model = model.to(dt).train()

    def loss_and_grads(ids, mask, tags):
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=mask, task_type_ids=torch.ones_like(ids),
                    labels=tags.masked_fill(mask == 0, -100))
        out.loss.backward()
        return out.loss.detach(), out.logits.detach().argmax(-1)
    return loss_and_grads, lambda: _state(model)


def ernie_inputs(i, dt):
    ids, mask = _padded(i, n=3, lo=6, hi=10)
    return ids, mask, torch.randint(0, 5, ids.shape)


def make_esm_train(dt):
    cfg = T.EsmConfig(vocab_size=33, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                      max_position_embeddings=64, position_embedding_type="rotary", pad_token_id=1, mask_token_id=32,
                      token_dropout=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = T.EsmForMaskedLM(cfg).to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    sched = T.get_cosine_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=10)

    def train_step(ids, mask):
        model.train()
        sel = torch.rand(ids.shape) < 0.3                                  # BERT-style random masking
        sel &= mask.bool()
        labels = ids.masked_fill(~sel, -100)
        inp = ids.masked_fill(sel, cfg.mask_token_id)
        loss = model(input_ids=inp, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        return loss.detach(), sched.get_last_lr()[0]
    return train_step, lambda: (_state(model), _opt_state(opt, sched))


def esm_inputs(i, dt):
    ids, mask = _padded(i, n=2, lo=8, hi=12, vocab=32, pad=1)
    return ids.clamp(min=4).masked_fill(mask == 0, 1), mask


def make_data2vec_toggle(dt):
    model = T.Data2VecTextForSequenceClassification(_bert_like(T.Data2VecTextConfig, num_labels=3,
                                                               hidden_dropout_prob=0.1, pad_token_id=1))
    model = model.to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    hist = {"train": [], "val": []}

    def epoch(x, y, vx, vy):
        model.train()
        loss = model(input_ids=x, labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        hist["train"].append(loss.item())
        model.eval()
        with torch.no_grad():
            vl = model(input_ids=vx, labels=vy).loss
        hist["val"].append(vl.item())
        return loss.detach(), vl
    return epoch, lambda: (_state(model), _opt_state(opt), hist)


def d2v_inputs(i, dt):
    return (torch.randint(3, V, (4, 10)), torch.randint(0, 3, (4,)), torch.randint(3, V, (3, 10)),
            torch.randint(0, 3, (3,)))


def make_canine_cls(dt):
    cfg = T.CanineConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                         max_position_embeddings=256, downsampling_rate=4, num_hash_functions=4, num_hash_buckets=256,
                         local_transformer_stride=16, num_labels=2)
    model = T.CanineForSequenceClassification(cfg).to(dt).eval()

    def classify(text_codes, mask):
        with torch.no_grad():
            return model(input_ids=text_codes, attention_mask=mask, return_dict=False)[0]
    return classify, lambda: None


def canine_inputs(i, dt):
    codes = torch.randint(32, 127, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.long)
    mask[1, 20 + i:] = 0
    return codes.masked_fill(mask == 0, 0), mask


# ------------------------------------------------------------------------------------------------ encoder-decoders
def make_blenderbot_train(dt):
    cfg = T.BlenderbotSmallConfig(vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                  decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                  max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                  decoder_start_token_id=1, dropout=0.1)
    model = T.BlenderbotSmallForConditionalGeneration(cfg).to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = T.get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=20)
    log = []

    def train_step(src, src_mask, tgt):
        model.train()
        out = model(input_ids=src, attention_mask=src_mask, labels=tgt.masked_fill(tgt == 0, -100))
        out.loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        log.append(round(out.loss.item(), 4))
        return out.loss.detach(), gn
    return train_step, lambda: (_state(model), _opt_state(opt, sched), log)


def s2s_inputs(i, dt):
    src, mask = _padded(i, n=3, lo=6, hi=10)
    tgt, _ = _padded(i + 50, n=3, lo=4, hi=7)
    return src, mask, tgt


def make_switch_moe(dt):
    cfg = T.SwitchTransformersConfig(vocab_size=V, d_model=32, d_kv=8, d_ff=64, expert_capacity=8, num_layers=2,
                                     num_sparse_encoder_layers=1, num_decoder_layers=2, num_sparse_decoder_layers=1,
                                     num_heads=4, num_experts=4, pad_token_id=0, eos_token_id=2,
                                     decoder_start_token_id=0, router_jitter_noise=0.0)
    model = T.SwitchTransformersForConditionalGeneration(cfg).to(dt).eval()

    def loss_with_router(src, src_mask, tgt):
        with torch.no_grad():
            out = model(input_ids=src, attention_mask=src_mask, labels=tgt, output_router_logits=True)
        return out.loss, out.encoder_z_loss, out.decoder_aux_loss, out.logits.argmax(-1)
    return loss_with_router, lambda: None


def make_umt5_generate(dt):
    cfg = T.UMT5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, pad_token_id=0,
                       eos_token_id=2, decoder_start_token_id=0, relative_attention_num_buckets=8)
    model = T.UMT5ForConditionalGeneration(cfg).to(dt).eval()

    def summarize(src, src_mask):
        return model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=4, do_sample=False)
    return summarize, lambda: None


def make_m2m_generate(dt):
    cfg = T.M2M100Config(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2)
    model = T.M2M100ForConditionalGeneration(cfg).to(dt).eval()

    def translate(src, src_mask):
        return model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=4, forced_bos_token_id=5,
                              num_beams=1, do_sample=False)
    return translate, lambda: None


def make_speech2text(dt):
    cfg = T.Speech2TextConfig(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                              max_source_positions=64, max_target_positions=32, input_feat_per_channel=16,
                              conv_channels=32, num_conv_layers=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                              decoder_start_token_id=2)
    model = T.Speech2TextForConditionalGeneration(cfg).to(dt).eval()

    def transcribe_loss(feats, feat_mask, labels):
        with torch.no_grad():
            out = model(input_features=feats, attention_mask=feat_mask, labels=labels)
        return out.loss, out.encoder_last_hidden_state[:, :, :8]
    return transcribe_loss, lambda: None


def s2t_inputs(i, dt):
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, 16 + i:] = 0
    return torch.randn(2, 24, 16, dtype=dt), mask, torch.randint(3, V, (2, 5))


# ------------------------------------------------------------------------------------------------ audio, speech
def make_unispeech_ctc(dt):
    cfg = T.UniSpeechConfig(vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, conv_dim=(16, 16), conv_stride=(4, 2), conv_kernel=(8, 4),
                            num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, pad_token_id=0,
                            ctc_loss_reduction="mean", mask_time_prob=0.2, mask_time_length=2, layerdrop=0.0,
                            hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
                            do_stable_layer_norm=True, feat_extract_norm="layer")
    model = T.UniSpeechForCTC(cfg).to(dt)
    model.freeze_feature_encoder()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    steps = [0]

    def train_step(wave, labels):
        np.random.seed(steps[0])                   # SpecAugment's time masks come from numpy's RNG
        model.train()
        out = model(input_values=wave, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        opt.zero_grad()
        steps[0] += 1
        return out.loss.detach(), out.logits.detach().argmax(-1)
    return train_step, lambda: (_state(model), _opt_state(opt), steps[0])


def ctc_inputs(i, dt):
    return torch.randn(2, 400, dtype=dt), torch.randint(1, 12, (2, 4 + i % 2))


def make_ast_cls(dt):
    cfg = T.ASTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                      patch_size=8, frequency_stride=8, time_stride=8, max_length=32, num_mel_bins=16, num_labels=5)
    model = T.ASTForAudioClassification(cfg).to(dt).eval()

    def tag(spec, labels):
        with torch.no_grad():
            out = model(input_values=spec, labels=labels)
        return out.loss, out.logits.sigmoid() > 0.5
    return tag, lambda: None


# ------------------------------------------------------------------------------------------------ vision
def _vit_px(i, dt, n=2, c=3, s=32):
    return torch.randn(n, c, s, s, dtype=dt)


def make_swinv2_train(dt):
    cfg = T.Swinv2Config(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4,
                         num_labels=3, drop_path_rate=0.1, hidden_dropout_prob=0.1)
    model = T.Swinv2ForImageClassification(cfg).to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def train_step(px, y):
        model.train()
        out = model(pixel_values=px, labels=y)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        return out.loss.detach(), (out.logits.argmax(-1) == y).float().mean()
    return train_step, lambda: (_state(model), _opt_state(opt))


def make_cvt_toggle(dt):
    cfg = T.CvtConfig(num_channels=3, patch_sizes=[7, 3], patch_stride=[4, 2], patch_padding=[2, 1], embed_dim=[16, 32],
                      num_heads=[1, 2], depth=[1, 2], mlp_ratio=[2.0, 2.0], attention_drop_rate=[0.0, 0.0],
                      drop_rate=[0.1, 0.1], drop_path_rate=[0.0, 0.1], qkv_bias=[True, True], cls_token=[False, True],
                      qkv_projection_method=["dw_bn", "dw_bn"], padding_q=[1, 1], padding_kv=[1, 1], stride_kv=[2, 2], stride_q=[1, 1], kernel_qkv=[3, 3],
                      num_labels=4)
    model = T.CvtForImageClassification(cfg).to(dt)

    def predict(px, train):
        model.train(train)                         # the caller flips the mode between calls
        with torch.no_grad():
            return model(pixel_values=px).logits
    return predict, lambda: _state(model)


def make_vitmae(dt):
    cfg = T.ViTMAEConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, decoder_hidden_size=32, decoder_num_hidden_layers=1,
                         decoder_num_attention_heads=4, decoder_intermediate_size=64, mask_ratio=0.5)
    model = T.ViTMAEForPreTraining(cfg).to(dt).eval()

    def pretrain_loss(px):
        with torch.no_grad():
            out = model(pixel_values=px)           # random masking: noise from the global RNG
        return out.loss, out.mask, out.ids_restore
    return pretrain_loss, lambda: None


def make_pvt_eval(dt):
    cfg = T.PvtConfig(image_size=32, num_encoder_blocks=2, depths=[1, 1], sequence_reduction_ratios=[2, 1],
                      hidden_sizes=[16, 32], patch_sizes=[4, 2], strides=[4, 2], num_attention_heads=[1, 2],
                      mlp_ratios=[2, 2], num_labels=5)
    model = T.PvtForImageClassification(cfg).to(dt)

    @torch.no_grad()
    def top2(px):
        model.eval()
        probs = model(px).logits.softmax(-1)
        return probs.topk(2, dim=-1)
    return top2, lambda: None


def make_clip_contrastive(dt):
    text = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=16, pad_token_id=0, eos_token_id=2)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                  patch_size=8)
    model = T.CLIPModel(T.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)).to(dt).eval()

    def retrieve(ids, mask, px):
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, pixel_values=px, return_loss=True)
        return out.loss, out.logits_per_image.softmax(-1)
    return retrieve, lambda: None


def clip_inputs(i, dt):
    ids, mask = _padded(i, n=2, lo=5, hi=8)
    ids[0, -1] = 2
    return ids, mask, _vit_px(i, dt)


def make_siglip_batches(dt):
    text = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=16)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                  patch_size=8)
    model = T.SiglipModel(T.SiglipConfig(text_config=text, vision_config=vision)).to(dt).eval()

    def zero_shot(px, prompts):
        with torch.no_grad():
            t = model.get_text_features(input_ids=prompts)
            t = t if isinstance(t, torch.Tensor) else t.pooler_output
            v = model.get_image_features(pixel_values=px)
            v = v if isinstance(v, torch.Tensor) else v.pooler_output
        t, v = t / t.norm(dim=-1, keepdim=True), v / v.norm(dim=-1, keepdim=True)
        return torch.sigmoid(v @ t.T * model.logit_scale.exp() + model.logit_bias)
    return zero_shot, lambda: None


# ------------------------------------------------------------------------------------------------ time series, RL
def make_patchtst(dt):
    cfg = T.PatchTSTConfig(num_input_channels=3, context_length=32, patch_length=8, patch_stride=8,
                           prediction_length=8, d_model=32, num_attention_heads=4, num_hidden_layers=2, ffn_dim=64,
                           scaling="std")
    model = T.PatchTSTForPrediction(cfg).to(dt).eval()

    def forecast(past, future):
        with torch.no_grad():
            out = model(past_values=past, future_values=future)
        return out.loss, out.prediction_outputs, out.loc, out.scale
    return forecast, lambda: None


def patchtst_inputs(i, dt):
    t = torch.arange(40, dtype=dt)
    x = torch.stack([torch.sin(t / (3 + c + i)) * (c + 1) + 0.1 * torch.randn(40, dtype=dt) for c in range(3)], -1)
    return torch.stack([x[:32], x[:32] * 2]), torch.stack([x[32:], x[32:] * 2])


def make_decision_transformer(dt):
    cfg = T.DecisionTransformerConfig(state_dim=6, act_dim=2, hidden_size=32, max_ep_len=64, n_layer=2, n_head=4,
                                      n_inner=64, n_positions=64)
    model = T.DecisionTransformerModel(cfg).to(dt).eval()

    def act(states, actions, rtg, timesteps, mask):
        with torch.no_grad():
            s, a, r = model(states=states, actions=actions, returns_to_go=rtg, timesteps=timesteps,
                            attention_mask=mask, return_dict=False)
        return a[:, -1], s, r
    return act, lambda: None


def dt_inputs(i, dt, n=2, L=6):
    mask = torch.ones(n, L, dtype=torch.long)
    mask[1, : 2 + i % 2] = 0                           # left-padded short episode
    return (torch.randn(n, L, 6, dtype=dt), torch.randn(n, L, 2, dtype=dt), torch.rand(n, L, 1, dtype=dt) * 10,
            torch.arange(L).repeat(n, 1) + i, mask)


# ------------------------------------------------------------------------------------------------ the cases
def _text(lo=5, hi=12, left=False, n=3):
    return lambda i, dt: _padded(i, n=n, lo=lo, hi=hi, left=left)


def _gran_inputs(i, dt):
    ids, mask = _padded(i, n=3, lo=5, hi=10, left=True)
    return ({"input_ids": ids, "attention_mask": mask},)


_CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("granite_padded_logits", make_granite_logits, _gran_inputs, 4, True),
    ("olmo2_labels_loss", make_olmo2_loss, _text(), 4, True),
    ("gemma3_sliding_hidden", make_gemma3_window, _text(lo=6, hi=9), 4, True),
    ("persimmon_autocast", make_persimmon_autocast, _text(), 6, True),
    ("mamba_loss_hidden", make_mamba_loss, lambda i, dt: (torch.randint(3, V, (2, 8 + 2 * (i % 2))),), 4, True),
    ("rwkv_state_chunks", make_rwkv_state, lambda i, dt: (torch.randint(3, V, (2, 10)),), 4, True),
    ("xglm_dynamic_cache", make_xglm_cache, lambda i, dt: (torch.randint(3, V, (2, 5 + i % 2)),), 4, True),
    ("gptneo_kv_loop", make_gptneo_kv, lambda i, dt: (torch.randint(3, V, (2, 6)),), 4, True),
    ("mixtral_generate", make_mixtral_generate, _text(lo=4, hi=7, left=True, n=2), 3, False),
    ("glm_generate_scores", make_glm_generate_scores, _text(lo=4, hi=6, left=True, n=2), 3, False),
    ("roformer_hidden_pool", make_roformer_hidden, _text(), 4, True),
    ("megatron_mlm_tuple", make_megatron_tuple, _text(lo=6, hi=10), 4, True),
    ("fnet_eval_loop", make_fnet_eval_loop, fnet_inputs, 4, False),
    ("nystrom_mc_dropout", make_nystrom_dropout, lambda i, dt: (torch.randint(3, V, (2, 16)),), 4, True),
    ("ernie_token_grads", make_ernie_token_grad, ernie_inputs, 4, False),
    ("esm_mlm_train", make_esm_train, esm_inputs, 5, False),
    ("data2vec_train_eval", make_data2vec_toggle, d2v_inputs, 4, False),
    ("canine_chars", make_canine_cls, canine_inputs, 3, True),
    ("blenderbot_train", make_blenderbot_train, s2s_inputs, 5, False),
    ("switch_moe_router", make_switch_moe, s2s_inputs, 4, True),
    ("umt5_generate", make_umt5_generate, _text(lo=5, hi=8, n=2), 3, False),
    ("m2m100_generate", make_m2m_generate, _text(lo=5, hi=8, n=2), 3, False),
    ("speech2text_loss", make_speech2text, s2t_inputs, 4, True),
    ("unispeech_ctc_train", make_unispeech_ctc, ctc_inputs, 4, False),
    ("ast_audio_tags", make_ast_cls, lambda i, dt: (torch.randn(2, 32, 16, dtype=dt),
                                                    torch.randint(0, 2, (2, 5)).to(dt)), 4, True),
    ("swinv2_train", make_swinv2_train, lambda i, dt: (_vit_px(i, dt), torch.randint(0, 3, (2,))), 4, False),
    ("cvt_train_eval_toggle", make_cvt_toggle, lambda i, dt: (_vit_px(i, dt), i % 2 == 0), 4, True),
    ("vitmae_random_mask", make_vitmae, lambda i, dt: (_vit_px(i, dt),), 4, True),
    ("pvt_topk_eval", make_pvt_eval, lambda i, dt: (_vit_px(i, dt),), 4, True),
    ("clip_contrastive", make_clip_contrastive, clip_inputs, 4, True),
    ("siglip_zero_shot", make_siglip_batches, lambda i, dt: (_vit_px(i, dt, n=3), torch.randint(3, V, (4, 6))), 4,
     True),
    ("patchtst_forecast", make_patchtst, patchtst_inputs, 4, True),
    ("decision_transformer", make_decision_transformer, dt_inputs, 4, True),
]

CASES = [(name, heldout4.with_rng(make, n), inputs, n, low) for name, make, inputs, n, low in _CASES]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout6.py")
