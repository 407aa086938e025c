"""Held-out set 12: `transformers` architectures no earlier set, benchmark or test builds (checked against
every bench/*.py and test/python file by config class name), each built offline from a tiny config (2 layers,
hidden 32-128, fp32, CPU) and called the way inference code calls it: padded batches with attention masks,
logits gathered at the real tokens, `labels=` losses, encoder-decoders with decoder inputs, vision / audio /
time-series heads; one training step with AdamW. Decoders: DeepSeek-V3 (MLA + routed experts), gpt-oss (sinks,
sliding window, MoE), RecurrentGemma (RG-LRU), Falcon-H1 (Mamba-2 hybrid), OLMo-3, EXAONE-4, DiffLlama, Doge,
CTRL, ImageGPT; encoders: ModernBERT, RemBERT, NomicBERT, EuroBERT; seq2seq: LongT5 (transient global), ProphetNet,
FSMT; vision: PVTv2, SwiftFormer, MobileViTV2, ViTDet, HGNetV2; audio: SEW-D, UniSpeechSat; time series:
Autoformer. And torch.nn's own: nn.Transformer with causal and key-padding masks, packed LSTM / GRU stacks,
nn.MultiheadAttention with key_padding_mask and a float attn_mask.

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, parameters and gradients, optimizer state, the global
RNG's state after the call, arguments): bench/heldout4.py's runner and report (imported, same options):

    python bench/heldout12.py --threads 1 --dtypes fp32
    python bench/heldout12.py --threads 1 --models deepseek_v3_mla_moe,nn_transformer_masks --json /tmp/h12.jsonl
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers as T
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import heldout4  # noqa: E402  (the runner: run_case, diff, main)
from heldout6 import V, _llama_like, _padded, _state  # noqa: E402  (vocabulary, configs, padded batches, state)


def _eval(model, dt):
    return model.to(dt).eval()


def _text(left=False):
    def inputs(i, dt):
        return _padded(i, n=3, lo=5, hi=12, left=left)
    return inputs


# ------------------------------------------------------------------------------------------------ decoders
def causal_lm(build, left=True, loss=False, hidden=False):
    """a causal LM over a padded batch: the last real token's logits (left padding: position -1), their
    argmax, log-probabilities at every real token; with `loss` the masked-label loss; `hidden` the hidden
    states' means."""
    def make(dt):
        model = _eval(build(), dt)

        def run(ids, mask):
            kw = dict(labels=ids.masked_fill(mask == 0, -100)) if loss else {}
            with torch.no_grad():
                out = model(input_ids=ids, attention_mask=mask, output_hidden_states=hidden, **kw)
            last = out.logits[:, -1] if left else out.logits[torch.arange(ids.shape[0]), mask.sum(1) - 1]
            res = [last, last.argmax(-1), out.logits.float().log_softmax(-1)[mask.bool()]]
            if loss:
                res.append(out.loss)
            if hidden:
                res.append([h.mean(-1) for h in out.hidden_states])
            return res
        return run, lambda: None
    return make


def deepseek_v3():
    return T.DeepseekV3ForCausalLM(_llama_like(
        T.DeepseekV3Config, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=32, n_group=2,
        topk_group=1, first_k_dense_replace=1, num_key_value_heads=4))


def gpt_oss():
    return T.GptOssForCausalLM(_llama_like(
        T.GptOssConfig, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"]))


def recurrent_gemma():
    return T.RecurrentGemmaForCausalLM(T.RecurrentGemmaConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, lru_width=64, attention_window_size=8, conv1d_width=4, logits_soft_cap=30.0,
        block_types=["recurrent", "recurrent", "attention"], pad_token_id=0, bos_token_id=1, eos_token_id=2))


def falcon_h1():
    return T.FalconH1ForCausalLM(_llama_like(
        T.FalconH1Config, head_dim=16, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1,
        mamba_d_state=8, mamba_d_conv=4, mamba_expand=1, mamba_chunk_size=8, projectors_bias=False))


def olmo3():
    return T.Olmo3ForCausalLM(_llama_like(T.Olmo3Config, sliding_window=4,
                                          layer_types=["sliding_attention", "full_attention"]))


def exaone4():
    return T.Exaone4ForCausalLM(_llama_like(T.Exaone4Config, sliding_window=4, sliding_window_pattern="LG",
                                            layer_types=["sliding_attention", "full_attention"]))


def diffllama():
    return T.DiffLlamaForCausalLM(_llama_like(T.DiffLlamaConfig))


def doge():
    return T.DogeForCausalLM(_llama_like(T.DogeConfig, num_key_value_heads=4, keep_window_size=6,
                                         is_moe=False))


def ctrl():
    return T.CTRLLMHeadModel(T.CTRLConfig(vocab_size=V, n_embd=64, dff=128, n_layer=2, n_head=4, n_positions=64,
                                          pad_token_id=0))


def imagegpt():
    return T.ImageGPTForCausalImageModeling(T.ImageGPTConfig(vocab_size=V + 1, n_embd=64, n_layer=2, n_head=4,
                                                             n_positions=64))


# ------------------------------------------------------------------------------------------------ encoders
def encoder(build, pool="mean", train=False):
    """an encoder over a padded batch: masked mean pooling of the last hidden state (sentence embeddings,
    L2-normalised, their cosine similarities), or a masked-LM's logits at the real tokens; `train`: a
    sequence-classification step with AdamW and gradient clipping."""
    def make(dt):
        model = build().to(dt)
        if train:
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

            def step(ids, mask):
                y = ids[:, 1] % 3
                out = model(input_ids=ids, attention_mask=mask, labels=y)
                opt.zero_grad()
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                return out.loss.detach(), out.logits.detach()
            return step, lambda: _state(model)
        model.eval()

        def run(ids, mask):
            with torch.no_grad():
                out = model(input_ids=ids, attention_mask=mask)
            if pool == "mlm":
                return out.logits[mask.bool()]
            m = mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
            emb = F.normalize((out.last_hidden_state * m).sum(1) / m.sum(1), dim=-1)
            return emb, emb @ emb.T
        return run, lambda: None
    return make


def _bert_like(cls, **kw):
    base = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                max_position_embeddings=64, pad_token_id=0)
    base.update(kw)
    return cls(**base)


def modernbert():
    return T.ModernBertForMaskedLM(_bert_like(T.ModernBertConfig, global_attn_every_n_layers=2, local_attention=4,
                                              bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2))


def rembert():
    return T.RemBertModel(_bert_like(T.RemBertConfig, input_embedding_size=32, output_embedding_size=32),
                          add_pooling_layer=False)


def nomic_bert():
    return T.NomicBertModel(_bert_like(T.NomicBertConfig))


def eurobert_cls():
    return T.EuroBertForSequenceClassification(_bert_like(T.EuroBertConfig, num_key_value_heads=2, num_labels=3,
                                                          bos_token_id=1, eos_token_id=2))


# ------------------------------------------------------------------------------------------------ seq2seq
def seq2seq(build):
    """an encoder-decoder: the decoder's logits (teacher forcing) and the loss against shifted labels."""
    def make(dt):
        model = _eval(build(), dt)

        def run(ids, mask, dec):
            with torch.no_grad():
                out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec[:, :-1],
                            labels=dec[:, 1:].contiguous())
            return out.logits, out.loss, out.logits.argmax(-1)
        return run, lambda: None
    return make


def s2s_inputs(i, dt):
    ids, mask = _padded(i, n=2, lo=6, hi=12)
    g = torch.Generator().manual_seed(50 + i)
    return ids, mask, torch.randint(3, V, (2, 7), generator=g)


def longt5():
    return T.LongT5ForConditionalGeneration(T.LongT5Config(
        vocab_size=V, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
        local_radius=4, global_block_size=4, encoder_attention_type="transient-global", pad_token_id=0,
        decoder_start_token_id=0))


def prophetnet():
    return T.ProphetNetForConditionalGeneration(T.ProphetNetConfig(
        vocab_size=V, hidden_size=64, encoder_ffn_dim=128, decoder_ffn_dim=128, num_encoder_layers=2,
        num_decoder_layers=2, num_encoder_attention_heads=4, num_decoder_attention_heads=4, ngram=2,
        num_buckets=8, relative_max_distance=16, max_position_embeddings=64, pad_token_id=0))


def fsmt():
    return T.FSMTForConditionalGeneration(T.FSMTConfig(
        langs=["en", "de"], src_vocab_size=V, tgt_vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_position_embeddings=64, pad_token_id=0))


# ------------------------------------------------------------------------------------------------ vision / audio
def vision(build, size=32, head="logits"):
    """an image model on a batch of 2: class probabilities and the top class, or the last hidden state."""
    def make(dt):
        model = _eval(heldout_init(build()), dt)

        def run(pixels):
            with torch.no_grad():
                out = model(pixel_values=pixels)
            if head == "logits":
                return out.logits.softmax(-1), out.logits.argmax(-1)
            feat = out.last_hidden_state
            return feat, feat.flatten(1).norm(dim=-1)
        return run, lambda: None
    return make, lambda i, dt: (torch.randn(2, 3, size, size, dtype=dt),)


def heldout_init(m):
    from heldout import fan_in_init  # (deep vision stacks' default init leaves an output of ~0)
    return fan_in_init(m)


def pvt_v2():
    return T.PvtV2ForImageClassification(T.PvtV2Config(
        image_size=32, hidden_sizes=[16, 32], depths=[1, 1], num_encoder_blocks=2, sr_ratios=[2, 1],
        num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2], num_labels=5))


def swiftformer():
    return T.SwiftFormerForImageClassification(T.SwiftFormerConfig(
        image_size=32, depths=[1, 1, 1, 1], embed_dims=[16, 24, 32, 48], num_labels=5))


def mobilevitv2():
    return T.MobileViTV2ForImageClassification(T.MobileViTV2Config(image_size=32, width_multiplier=0.5,
                                                                   num_labels=5))


def vitdet():
    return T.VitDetModel(T.VitDetConfig(image_size=32, patch_size=4, hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, mlp_ratio=2, pretrain_image_size=32,
                                        window_size=4, window_block_indices=[0],
                                        use_relative_position_embeddings=True))


def hgnet_v2():
    return T.HGNetV2ForImageClassification(T.HGNetV2Config(
        embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1], stem_channels=[3, 8, 16],
        stage_in_channels=[16, 32], stage_mid_channels=[8, 16], stage_out_channels=[32, 64],
        stage_num_blocks=[1, 1], stage_downsample=[False, True], stage_light_block=[False, True],
        stage_kernel_size=[3, 5], stage_numb_of_layers=[2, 2], num_labels=5))


def audio(build):
    """a speech encoder over a padded batch of waveforms (attention_mask), its frame features' masked mean."""
    def make(dt):
        model = _eval(build(), dt)

        def run(wave, mask):
            with torch.no_grad():
                out = model(input_values=wave, attention_mask=mask)
            h = out.last_hidden_state
            return h, h.mean(1)
        return run, lambda: None
    return make


def audio_inputs(i, dt):
    wave = torch.randn(2, 1600, dtype=dt)
    mask = torch.ones(2, 1600, dtype=torch.long)
    mask[1, 1200 - 100 * i:] = 0
    return wave * mask, mask


_AUDIO = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
              conv_dim=(32, 32, 32), conv_stride=(5, 4, 4), conv_kernel=(10, 4, 4), num_feat_extract_layers=3,
              num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, feat_extract_norm="layer",
              do_stable_layer_norm=True, mask_time_prob=0.0)


def sew_d():
    cfg = dict(_AUDIO, squeeze_factor=2, max_position_embeddings=64, position_buckets=16, share_att_key=True,
               relative_attention=True, pos_att_type=("p2c", "c2p"), norm_rel_ebd="layer_norm")
    cfg.pop("do_stable_layer_norm")
    return T.SEWDModel(T.SEWDConfig(**cfg))


def unispeech_sat():
    return T.UniSpeechSatModel(T.UniSpeechSatConfig(**_AUDIO))


def make_autoformer(dt):
    cfg = T.AutoformerConfig(prediction_length=4, context_length=8, lags_sequence=[1, 2], num_time_features=1,
                             input_size=1, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                             decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, moving_average=3,
                             autocorrelation_factor=2, scaling="mean", label_length=4)
    model = _eval(T.AutoformerForPrediction(cfg), dt)

    def run(past, past_time, past_mask, future, future_time):
        with torch.no_grad():
            out = model(past_values=past, past_time_features=past_time, past_observed_mask=past_mask,
                        future_values=future, future_time_features=future_time)
        return out.loss, out.params, out.loc, out.scale
    return run, lambda: None


def autoformer_inputs(i, dt):
    b, past_len = 3, 8 + 2
    t = torch.arange(past_len + 4, dtype=dt)
    series = torch.sin(t / 3 + i)[None] * torch.linspace(1, 3, b, dtype=dt)[:, None] + 0.1 * torch.randn(b, past_len + 4)
    mask = torch.ones(b, past_len, dtype=dt)
    mask[0, :2] = 0
    tf = (t / 10)[None, :, None].expand(b, -1, 1).contiguous()
    return series[:, :past_len], tf[:, :past_len], mask, series[:, past_len:], tf[:, past_len:]


# ------------------------------------------------------------------------------------------------ torch.nn
def make_nn_transformer(dt):
    model = _eval(nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                                 dim_feedforward=64, dropout=0.0, batch_first=True), dt)
    emb = nn.Embedding(V, 32).to(dt)
    head = nn.Linear(32, V).to(dt)

    def translate(src, src_mask, tgt):
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=emb.weight.dtype)
        pad = src_mask == 0
        with torch.no_grad():
            h = model(emb(src), emb(tgt), tgt_mask=tgt_mask, src_key_padding_mask=pad, memory_key_padding_mask=pad,
                      tgt_is_causal=True)
            logits = head(h)
        return logits.log_softmax(-1), logits.argmax(-1)
    return translate, lambda: None


def make_nn_transformer_train(dt):
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True, norm_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(dt)
    emb, head = nn.Embedding(V, 32).to(dt), nn.Linear(32, 3).to(dt)
    params = [*model.parameters(), *emb.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3)

    def step(ids, mask):
        model.train()
        h = model(emb(ids), src_key_padding_mask=mask == 0)
        m = mask.unsqueeze(-1).to(h.dtype)
        loss = F.cross_entropy(head((h * m).sum(1) / m.sum(1)), ids[:, 1] % 3)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (_state(model), _state(head))


def make_packed_rnn(dt):
    emb = nn.Embedding(V, 16, padding_idx=0).to(dt)
    lstm = nn.LSTM(16, 24, num_layers=2, bidirectional=True, batch_first=True).to(dt)
    gru = nn.GRU(48, 16, num_layers=2, batch_first=True).to(dt)
    head = nn.Linear(16, 4).to(dt)
    mods = nn.ModuleList([emb, lstm, gru, head]).eval()

    def classify(ids, lengths):
        with torch.no_grad():
            packed = pack_padded_sequence(emb(ids), lengths, batch_first=True, enforce_sorted=False)
            out, (h, c) = lstm(packed)
            out2, hg = gru(out)
            seq, lens = pad_packed_sequence(out2, batch_first=True, total_length=ids.shape[1])
            logits = head(hg[-1])
        return logits.softmax(-1), seq, lens, h, c
    return classify, lambda: _state(mods)


def packed_inputs(i, dt):
    ids, mask = _padded(i, n=4, lo=3, hi=10)
    return ids, mask.sum(1)


def make_mha_padding(dt):
    mha = nn.MultiheadAttention(32, 4, batch_first=True, kdim=24, vdim=20).to(dt).eval()

    def attend(q, k, v, key_pad, bias):
        with torch.no_grad():
            out, w = mha(q, k, v, key_padding_mask=key_pad, attn_mask=bias, need_weights=True,
                         average_attn_weights=True)
            out2, _ = mha(q, k, v, key_padding_mask=key_pad, need_weights=False)
        return out, w, out2

    return attend, lambda: None


def mha_inputs(i, dt):
    b, lq, lk = 3, 5, 7
    pad = torch.zeros(b, lk, dtype=torch.bool)
    pad[1, 5 - i % 2:] = True
    pad[2, 3:] = True
    bias = -torch.arange(lk, dtype=dt).abs()[None].expand(lq, lk) * 0.1 * (i + 1)
    return (torch.randn(b, lq, 32, dtype=dt), torch.randn(b, lk, 24, dtype=dt), torch.randn(b, lk, 20, dtype=dt),
            pad, bias.contiguous())


# ------------------------------------------------------------------------------------------------ the cases
_TXT, _LEFT = _text(), _text(left=True)
_CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("deepseek_v3_mla_moe", causal_lm(deepseek_v3), _LEFT, 3, False),
    ("gpt_oss_sinks_moe", causal_lm(gpt_oss, loss=True), _LEFT, 3, False),
    ("recurrent_gemma_rglru", causal_lm(recurrent_gemma, left=False), _TXT, 3, False),
    ("falcon_h1_mamba2", causal_lm(falcon_h1, left=False), _TXT, 3, False),
    ("olmo3_sliding", causal_lm(olmo3, hidden=True), _LEFT, 3, False),
    ("exaone4_local_global", causal_lm(exaone4, loss=True), _LEFT, 3, False),
    ("diffllama_diff_attn", causal_lm(diffllama), _LEFT, 3, False),
    ("doge_dynamic_mask", causal_lm(doge, left=False), _TXT, 3, False),
    ("ctrl_lm", causal_lm(ctrl, left=False, loss=True), _TXT, 3, False),
    ("imagegpt_pixels", causal_lm(imagegpt, left=False, hidden=True), _TXT, 3, False),
    ("modernbert_mlm", encoder(modernbert, pool="mlm"), _TXT, 3, False),
    ("rembert_embed", encoder(rembert), _TXT, 3, False),
    ("nomic_bert_embed", encoder(nomic_bert), _TXT, 3, False),
    ("eurobert_cls_train", encoder(eurobert_cls, train=True), _TXT, 4, False),
    ("longt5_tglobal", seq2seq(longt5), s2s_inputs, 3, False),
    ("prophetnet_ngram", seq2seq(prophetnet), s2s_inputs, 3, False),
    ("fsmt_translate", seq2seq(fsmt), s2s_inputs, 3, False),
    ("pvt_v2_cls", *vision(pvt_v2), 3, False),
    ("swiftformer_cls", *vision(swiftformer), 3, False),
    ("mobilevitv2_cls", *vision(mobilevitv2, size=64), 3, False),
    ("vitdet_windows", *vision(vitdet, head="hidden"), 3, False),
    ("hgnet_v2_cls", *vision(hgnet_v2, size=64), 3, False),
    ("sew_d_audio", audio(sew_d), audio_inputs, 3, False),
    ("unispeech_sat_audio", audio(unispeech_sat), audio_inputs, 3, False),
    ("autoformer_forecast", make_autoformer, autoformer_inputs, 3, False),
    ("nn_transformer_masks", make_nn_transformer, s2s_inputs, 3, False),
    ("nn_encoder_train", make_nn_transformer_train, _TXT, 4, False),
    ("packed_lstm_gru", make_packed_rnn, packed_inputs, 3, False),
    ("mha_key_padding", make_mha_padding, mha_inputs, 3, False),
]

CASES = [(name, heldout4.with_rng(make, n), inputs, n, low) for name, make, inputs, n, low in _CASES]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout12.py")
