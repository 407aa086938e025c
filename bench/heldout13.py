"""Held-out set 13: `transformers` architectures no earlier set, benchmark or test builds (checked against
every bench/*.py and test/python file by config class name), each built offline from a tiny config (2 layers,
hidden 32-128, CPU) and called the way inference code calls it: padded batches with attention masks, logits
gathered at the real tokens, `labels=` losses, encoder-decoders with decoder inputs, vision / video / audio
heads; a few training steps (AdamW, dropout on) and a few models in bf16 too. Decoders: JetMoE (mixture of
attention heads), MiniCPM3 (MLA, scaled residuals), Cohere2 (sliding + global, logit scale), GraniteMoE, BitNet
(ternary weights, int8 activations), Apertus (xIELU), xLSTM (mLSTM), Qwen3-Next (gated DeltaNet + MoE), OLMo
(clip_qkv), OpenAI-GPT (training), Reformer (LSH + local attention), LFM2-MoE (short convolutions), VaultGemma;
encoders: RoBERTa-PreLayerNorm (training), X-MOD (language adapters), RoCBert; seq2seq: Blenderbot, MVP (prompts),
LED (local + global attention); vision: DINOv2 with registers, Data2Vec-Vision (relative position bias),
TextNet; video: ViViT; audio: Wav2Vec2-BERT (conformer), Moonshine (speech to text). And torch.nn's own: an
adaptive-softmax LM training step, a ShuffleNet block (ChannelShuffle, grouped convolutions) in bf16, a
bidirectional ReLU nn.RNN trained with CTC loss.

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, parameters and gradients, optimizer state, the global
RNG's state after the call, arguments): bench/heldout4.py's runner and report (imported, same options):

    python bench/heldout13.py --threads 1 --dtypes fp32,bf16
    python bench/heldout13.py --threads 1 --models jetmoe_moa,rnn_ctc_train --json /tmp/h13.jsonl
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers as T

import heldout4  # noqa: E402  (the runner: run_case, diff, main)
from heldout6 import V, _llama_like, _padded, _state  # noqa: E402  (vocabulary, configs, padded batches, state)
from heldout12 import (_LEFT, _TXT, _bert_like, audio_inputs, causal_lm, encoder, heldout_init,  # noqa: E402
                       s2s_inputs, seq2seq, vision)


# ------------------------------------------------------------------------------------------------ decoders
def jetmoe():
    return T.JetMoeForCausalLM(T.JetMoeConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_key_value_heads=2, kv_channels=16,
        intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2))


def minicpm3():
    return T.MiniCPM3ForCausalLM(_llama_like(
        T.MiniCPM3Config, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8,
        qk_rope_head_dim=8, v_head_dim=16, head_dim=16, scale_emb=4.0, scale_depth=1.4, dim_model_base=32))


def cohere2():
    return T.Cohere2ForCausalLM(_llama_like(T.Cohere2Config, logit_scale=0.25, sliding_window=4,
                                            layer_types=["sliding_attention", "full_attention"]))


def granitemoe():
    return T.GraniteMoeForCausalLM(_llama_like(
        T.GraniteMoeConfig, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
        embedding_multiplier=2.0, logits_scaling=4.0, residual_multiplier=0.5, attention_multiplier=0.2))


def bitnet():
    return T.BitNetForCausalLM(_llama_like(T.BitNetConfig))


def apertus():
    return T.ApertusForCausalLM(_llama_like(T.ApertusConfig))


def qwen3_next():
    return T.Qwen3NextForCausalLM(_llama_like(
        T.Qwen3NextConfig, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        num_experts=4, num_experts_per_tok=2, layer_types=["linear_attention", "full_attention"]))


def olmo():
    return T.OlmoForCausalLM(_llama_like(T.OlmoConfig, clip_qkv=0.5))


def lfm2_moe():
    return T.Lfm2MoeForCausalLM(_llama_like(
        T.Lfm2MoeConfig, moe_intermediate_size=32, num_dense_layers=1, num_experts=4, num_experts_per_tok=2,
        layer_types=["conv", "full_attention"], conv_L_cache=3))


def vaultgemma():
    return T.VaultGemmaForCausalLM(_llama_like(
        T.VaultGemmaConfig, num_key_value_heads=1, head_dim=16, sliding_window=4, final_logit_softcapping=30.0,
        attn_logit_softcapping=50.0, layer_types=["sliding_attention", "full_attention"]))


def reformer():
    return T.ReformerModelWithLMHead(T.ReformerConfig(
        vocab_size=V, hidden_size=64, attention_head_size=16, num_attention_heads=2, feed_forward_size=128,
        attn_layers=["local", "lsh"], axial_pos_shape=[4, 4], axial_pos_embds_dim=[32, 32],
        local_attn_chunk_length=4, lsh_attn_chunk_length=4, num_buckets=4, num_hashes=1, is_decoder=True,
        max_position_embeddings=16, hash_seed=7, pad_token_id=0, eos_token_id=2))


def make_xlstm(dt):
    """xLSTM's recurrent LM (no attention mask): the next-token loss and the last token's logits."""
    cfg = T.xLSTMConfig(vocab_size=V, hidden_size=64, embedding_dim=64, num_hidden_layers=2, num_blocks=2,
                        num_heads=2, mode="train", chunkwise_kernel="chunkwise--native_autograd",
                        sequence_kernel="native_sequence__native", step_kernel="native", chunk_size=4,
                        use_cache=False, pad_token_id=0)
    model = T.xLSTMForCausalLM(cfg).to(dt).eval()

    def run(ids, mask):
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids)
        return out.logits[:, -1], out.loss, out.logits.argmax(-1)
    return run, lambda: None


def causal_lm_states(build):
    """a causal LM over a left-padded batch: the last token's logits and every layer's hidden states at the real
    tokens (whole: their mean over features is zero up to rounding after a LayerNorm without weights)."""
    def make(dt):
        model = build().to(dt).eval()

        def run(ids, mask):
            with torch.no_grad():
                out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            return out.logits[:, -1], [h[mask.bool()] for h in out.hidden_states]
        return run, lambda: None
    return make


def lm_train(build):
    """a causal-LM training step over a padded batch (labels -100 at padding, dropout on), AdamW."""
    def make(dt):
        model = build().to(dt).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(ids, mask):
            out = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            return out.loss.detach(), out.logits.detach()[mask.bool()]
        return step, lambda: _state(model)
    return make


def openai_gpt():
    return T.OpenAIGPTLMHeadModel(T.OpenAIGPTConfig(vocab_size=V, n_positions=64, n_embd=64, n_layer=2, n_head=4))


# ------------------------------------------------------------------------------------------------ encoders
def roberta_prelayernorm_cls():
    return T.RobertaPreLayerNormForSequenceClassification(_bert_like(T.RobertaPreLayerNormConfig, num_labels=3,
                                                                       max_position_embeddings=80))


def xmod():
    return T.XmodModel(_bert_like(T.XmodConfig, languages=["en_XX", "de_DE"], default_language="de_DE",
                                  max_position_embeddings=80), add_pooling_layer=False)


def roc_bert():
    return T.RoCBertModel(_bert_like(T.RoCBertConfig, shape_vocab_size=V, pronunciation_vocab_size=V),
                          add_pooling_layer=False)


# ------------------------------------------------------------------------------------------------ seq2seq
def _bart_like(cls, **kw):
    base = dict(vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2)
    base.update(kw)
    return cls(**base)


def blenderbot():
    return T.BlenderbotForConditionalGeneration(_bart_like(T.BlenderbotConfig))


def mvp():
    return T.MvpForConditionalGeneration(_bart_like(T.MvpConfig, use_prompt=True, prompt_length=3, prompt_mid_dim=32))


def led():
    cfg = _bart_like(T.LEDConfig, attention_window=[4, 4], max_encoder_position_embeddings=64,
                     max_decoder_position_embeddings=64)
    return T.LEDForConditionalGeneration(cfg)


# ------------------------------------------------------------------------------------------------ vision / video / audio
def dinov2_registers():
    return T.Dinov2WithRegistersModel(T.Dinov2WithRegistersConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
        num_register_tokens=4, use_swiglu_ffn=True))


def data2vec_vision():
    return T.Data2VecVisionForImageClassification(T.Data2VecVisionConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, use_relative_position_bias=True, use_mean_pooling=True, num_labels=5))


def textnet():
    return T.TextNetForImageClassification(T.TextNetConfig(
        stem_out_channels=16, hidden_sizes=[16, 16, 32, 48, 64], image_size=[32, 32],
        conv_layer_kernel_sizes=[[[3, 3]], [[3, 3], [1, 3]], [[3, 1], [3, 3]], [[3, 3]]],
        conv_layer_strides=[[1], [2, 1], [2, 1], [2]], num_labels=5))


def make_vivit(dt):
    cfg = T.VivitConfig(image_size=32, num_frames=4, tubelet_size=[2, 8, 8], hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128, num_labels=5)
    model = heldout_init(T.VivitForVideoClassification(cfg)).to(dt).eval()

    def run(video):
        with torch.no_grad():
            logits = model(pixel_values=video).logits
        return logits.softmax(-1), logits.argmax(-1)
    return run, lambda: None


def make_w2v_bert(dt):
    cfg = T.Wav2Vec2BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                               feature_projection_input_dim=40, conv_depthwise_kernel_size=5,
                               position_embeddings_type="relative_key", left_max_position_embeddings=8,
                               right_max_position_embeddings=8, mask_time_prob=0.0, add_adapter=False)
    model = T.Wav2Vec2BertModel(cfg).to(dt).eval()

    def run(feats, mask):
        with torch.no_grad():
            h = model(input_features=feats, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)
        return h * m, (h * m).sum(1) / m.sum(1)
    return run, lambda: None


def w2v_bert_inputs(i, dt):
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, 14 - i:] = 0
    return torch.randn(2, 20, 40, dtype=dt) * mask.unsqueeze(-1), mask


def make_moonshine(dt):
    cfg = T.MoonshineConfig(vocab_size=V, hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2,
                            decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
                            max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                            decoder_start_token_id=1)
    model = T.MoonshineForConditionalGeneration(cfg).to(dt).eval()

    def run(wave, mask, dec):
        with torch.no_grad():
            out = model(input_values=wave, attention_mask=mask, decoder_input_ids=dec[:, :-1],
                        labels=dec[:, 1:].contiguous())
        return out.logits, out.loss, out.logits.argmax(-1)
    return run, lambda: None


def moonshine_inputs(i, dt):
    wave, mask = audio_inputs(i, dt)
    g = torch.Generator().manual_seed(70 + i)
    return wave, mask, torch.randint(3, V, (2, 6), generator=g)


# ------------------------------------------------------------------------------------------------ torch.nn
def make_adaptive_lm(dt):
    emb = nn.Embedding(V, 32).to(dt)
    rnn = nn.GRU(32, 32, batch_first=True).to(dt)
    head = nn.AdaptiveLogSoftmaxWithLoss(32, V, cutoffs=[8, 32], div_value=2.0).to(dt)
    mods = nn.ModuleList([emb, rnn, head]).train()
    opt = torch.optim.AdamW(mods.parameters(), lr=1e-3)

    def step(ids, mask):
        h, _ = rnn(emb(ids))
        real = mask[:, 1:].bool()
        out = head(h[:, :-1][real], ids[:, 1:][real])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        return out.loss.detach(), out.output.detach(), head.predict(h[:, -1].detach())
    return step, lambda: _state(mods)


class ShuffleBlock(nn.Module):
    def __init__(self, c=32, groups=4):
        super().__init__()
        self.g1 = nn.Conv2d(c, c, 1, groups=groups, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.shuffle = nn.ChannelShuffle(groups)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
        self.b2 = nn.BatchNorm2d(c)
        self.g2 = nn.Conv2d(c, c, 1, groups=groups, bias=False)
        self.b3 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.shuffle(F.relu(self.b1(self.g1(x))))
        y = self.b3(self.g2(self.b2(self.dw(y))))
        return F.relu(x + y)


def make_shufflenet(dt):
    net = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), ShuffleBlock(), ShuffleBlock(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 5))
    net = heldout_init(net)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    net = net.to(dt).eval()

    def run(x):
        with torch.no_grad():
            logits = net(x)
        return logits.softmax(-1), logits
    return run, lambda: None


def make_rnn_ctc(dt):
    rnn = nn.RNN(12, 16, num_layers=2, nonlinearity="relu", bidirectional=True, batch_first=True).to(dt)
    head = nn.Linear(32, 6).to(dt)
    mods = nn.ModuleList([rnn, head]).train()
    opt = torch.optim.SGD(mods.parameters(), lr=0.05, momentum=0.9)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)

    def step(x, in_lens, targets, tgt_lens):
        h, _ = rnn(x)
        logp = head(h).log_softmax(-1).transpose(0, 1)
        loss = ctc(logp, targets, in_lens, tgt_lens)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(mods.parameters(), 5.0)
        opt.step()
        return loss.detach(), logp.detach().argmax(-1)
    return step, lambda: _state(mods)


def rnn_ctc_inputs(i, dt):
    g = torch.Generator().manual_seed(90 + i)
    x = torch.randn(3, 14, 12, generator=g).to(dt)
    in_lens = torch.tensor([14, 12 - i, 10])
    tgt_lens = torch.tensor([5, 4, 3 + i % 2])
    targets = torch.randint(1, 6, (3, 5), generator=g)
    return x, in_lens, targets, tgt_lens


# ------------------------------------------------------------------------------------------------ the cases
_CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("jetmoe_moa", causal_lm(jetmoe, loss=True), _LEFT, 3, False),
    ("minicpm3_mla", causal_lm(minicpm3), _LEFT, 3, False),
    ("cohere2_sliding", causal_lm(cohere2, loss=True), _LEFT, 3, True),
    ("granitemoe_scaled", causal_lm(granitemoe, left=False), _TXT, 3, True),
    ("bitnet_ternary", causal_lm(bitnet), _LEFT, 3, False),
    ("apertus_xielu", causal_lm(apertus, loss=True), _LEFT, 3, False),
    ("qwen3_next_gdn", causal_lm(qwen3_next, left=False), _TXT, 3, False),
    ("olmo_clip_qkv", causal_lm_states(olmo), _LEFT, 3, True),
    ("lfm2_moe_conv", causal_lm(lfm2_moe, left=False), _TXT, 3, False),
    ("vaultgemma_softcap", causal_lm(vaultgemma), _LEFT, 3, True),
    ("reformer_lsh", causal_lm(reformer, left=False), lambda i, dt: _padded(i, n=2, lo=10, hi=16), 3, False),
    ("xlstm_mlstm", make_xlstm, lambda i, dt: _padded(i, n=2, lo=8, hi=8), 3, False),
    ("openai_gpt_train", lm_train(openai_gpt), _TXT, 4, False),
    ("roberta_prelayernorm_train", encoder(roberta_prelayernorm_cls, train=True), _TXT, 4, False),
    ("xmod_adapters", encoder(xmod), _TXT, 3, False),
    ("roc_bert_embed", encoder(roc_bert), _TXT, 3, False),
    ("blenderbot_s2s", seq2seq(blenderbot), s2s_inputs, 3, False),
    ("mvp_prompt", seq2seq(mvp), s2s_inputs, 3, False),
    ("led_local_global", seq2seq(led), s2s_inputs, 3, False),
    ("dinov2_registers", *vision(dinov2_registers, head="hidden"), 3, True),
    ("data2vec_vision_cls", *vision(data2vec_vision), 3, False),
    ("textnet_cls", *vision(textnet), 3, False),
    ("vivit_video", make_vivit, lambda i, dt: (torch.randn(2, 4, 3, 32, 32, dtype=dt),), 3, False),
    ("w2v_bert_conformer", make_w2v_bert, w2v_bert_inputs, 3, False),
    ("moonshine_asr", make_moonshine, moonshine_inputs, 3, False),
    ("adaptive_softmax_train", make_adaptive_lm, _TXT, 4, False),
    ("shufflenet_block", make_shufflenet, lambda i, dt: (torch.randn(2, 3, 32, 32, dtype=dt),), 3, True),
    ("rnn_ctc_train", make_rnn_ctc, rnn_ctc_inputs, 4, False),
]

CASES = [(name, heldout4.with_rng(make, n), inputs, n, low) for name, make, inputs, n, low in _CASES]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout13.py")
