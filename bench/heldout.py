"""Held-out models: transformers architectures that no benchmark or test here was tuned on,
built from small config objects (offline), compiled as a new user would compile them.

Each model runs eager, then mlircap (and, with --inductor, torch.compile with CUDA graphs),
side by side in one process; it prints latency ratios, the largest difference from eager
next to the output's scale, the number of compiled graphs and how many fell back, and the
warnings mlircap gave. A model that fails to build in eager is reported and skipped. A line past the
tolerance (TOL, TRAIN_TOL: relative to the output's scale, a gradient to its own) ends in OFF TOLERANCE.
A low-precision (bf16) inference line past TOL is judged once more as inductor's accuracy check does: against
a float32 run of the same (bf16-valued) weights and inputs, the compiled output's error may be at most
FP32_REF_MULTIPLIER times eager's own error (an ill-conditioned model differs from eager by about as much
as eager differs from the float32 result; a wrong result does not).

    python bench/heldout.py --device cpu --dtypes fp32
    python bench/heldout.py --device cpu --dtypes fp32 --train     # a training step: loss and every .grad
    python bench/heldout.py --device cuda --dtypes bf16 --inductor
    python bench/heldout.py --device cuda --dtypes bf16 --timm default   # timm's image models, where installed
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import mlircap  # noqa: E402
from mlircap.benchutil import geomean, latency_ms, side_by_side_ms  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class FirstOutput(nn.Module):
    """The model's first output tensor (last_hidden_state for transformers models)."""

    def __init__(self, m: nn.Module, **call_kw):
        super().__init__()
        self.m, self.call_kw = m, call_kw

    def forward(self, *args):
        o = self.m(*args, **self.call_kw)
        if hasattr(o, "last_hidden_state"):
            return o.last_hidden_state
        if hasattr(o, "to_tuple"):
            o = o.to_tuple()
        while isinstance(o, (tuple, list)):
            o = o[0]
        return o


class EncoderDecoder(nn.Module):
    def __init__(self, m: nn.Module):
        super().__init__()
        self.m = m

    def forward(self, ids, dec_ids):
        return self.m(input_ids=ids, decoder_input_ids=dec_ids).last_hidden_state


def hf(config: str, model: str, **kw) -> nn.Module:
    """transformers' `model` built from `config(**kw)`, with SDPA attention where it has it."""
    import transformers

    cfg = getattr(transformers, config)(**kw)
    cls = getattr(transformers, model)
    try:
        return cls(cfg, attn_implementation="sdpa").eval()
    except (ValueError, TypeError):
        return cls(cfg).eval()


def fan_in_init(m: nn.Module) -> nn.Module:
    """Convolution / linear weights drawn N(0, 1/fan_in), norms' scales U(0.8, 1.2) and BatchNorm's
    running statistics random (mean N(0, 0.1), var U(0.5, 1.5)): deep vision models' default init (norm
    scales ~N(0, 0.02)) leaves an output of ~0 (mobilevit, efficientnet), where a comparison with eager
    says nothing."""
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Linear)):
                w = mod.weight
                w.normal_(0, (w[0].numel()) ** -0.5)
            elif isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)):
                if mod.weight is not None:
                    mod.weight.uniform_(0.8, 1.2)
                if getattr(mod, "running_var", None) is not None:
                    mod.running_mean.normal_(0, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)
    return m


def cases(big: bool):
    """(name, build() -> (module, example inputs)). `big`: GPU sizes."""
    h, layers = (256, 2) if big else (64, 2)
    b, s = (8, 128) if big else (2, 16)
    size = 128 if big else 32

    def ids(vocab=1000, n=s):
        return (torch.randint(0, vocab, (b, n)),)

    def img():
        return (torch.randn(b, 3, size, size),)

    dec = dict(num_hidden_layers=layers, hidden_size=h, intermediate_size=2 * h, num_attention_heads=4,
               vocab_size=1000)
    seq2seq = dict(d_model=h, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=2 * h, decoder_ffn_dim=2 * h, vocab_size=1000)
    vit = dict(hidden_size=h, num_hidden_layers=layers, num_attention_heads=4, image_size=size, patch_size=16)
    yield "qwen2", lambda: (FirstOutput(hf("Qwen2Config", "Qwen2Model", num_key_value_heads=2, **dec)), ids())
    yield "gemma", lambda: (FirstOutput(hf("GemmaConfig", "GemmaModel", num_key_value_heads=1, head_dim=h // 4,
                                           **dec)), ids())
    yield "phi", lambda: (FirstOutput(hf("PhiConfig", "PhiModel", **dec)), ids())
    yield "gpt_neox", lambda: (FirstOutput(hf("GPTNeoXConfig", "GPTNeoXModel", **dec)), ids())
    yield "opt", lambda: (FirstOutput(hf("OPTConfig", "OPTModel", hidden_size=h, num_hidden_layers=layers,
                                         ffn_dim=2 * h, num_attention_heads=4, word_embed_proj_dim=h,
                                         vocab_size=1000)), ids())
    yield "bloom", lambda: (FirstOutput(hf("BloomConfig", "BloomModel", hidden_size=h, n_layer=layers, n_head=4,
                                           vocab_size=1000)), ids())
    yield "roberta", lambda: (FirstOutput(hf("RobertaConfig", "RobertaModel", **dec)), ids())
    yield "deberta_v2", lambda: (FirstOutput(hf("DebertaV2Config", "DebertaV2Model", **dec)), ids())
    yield "bart", lambda: (EncoderDecoder(hf("BartConfig", "BartModel", **seq2seq)),
                           ids() + (torch.randint(0, 1000, (b, s // 2)),))
    yield "whisper_encoder", lambda: (
        FirstOutput(hf("WhisperConfig", "WhisperModel", num_mel_bins=40, max_source_positions=s, pad_token_id=1,
                       **seq2seq).encoder), (torch.randn(b, 40, 2 * s),))
    yield "wav2vec2", lambda: (
        FirstOutput(hf("Wav2Vec2Config", "Wav2Vec2Model", hidden_size=h, num_hidden_layers=layers,
                       num_attention_heads=4, intermediate_size=2 * h, conv_dim=(64,) * 4,
                       conv_stride=(5, 2, 2, 2), conv_kernel=(10, 3, 3, 2), num_feat_extract_layers=4,
                       feat_extract_norm="group")), (torch.randn(b, 40 * s),))
    yield "clip_vision", lambda: (FirstOutput(hf("CLIPVisionConfig", "CLIPVisionModel", intermediate_size=2 * h,
                                                 **vit)), img())
    yield "dinov2", lambda: (FirstOutput(hf("Dinov2Config", "Dinov2Model", mlp_ratio=2, **vit)), img())
    yield "convnext", lambda: (FirstOutput(hf("ConvNextConfig", "ConvNextModel", hidden_sizes=[32, 64, 128, 256],
                                              depths=[1, 1, 2, 1])), img())
    yield "resnet", lambda: (FirstOutput(hf("ResNetConfig", "ResNetModel", hidden_sizes=[32, 64, 128, 256],
                                            depths=[1, 1, 1, 1], embedding_size=32)), img())
    yield "mobilenet_v2", lambda: (FirstOutput(fan_in_init(hf("MobileNetV2Config", "MobileNetV2Model",
                                                              image_size=size))), img())
    # -- held-out set 2 (architectures no test here uses) --
    yield "mistral", lambda: (FirstOutput(hf("MistralConfig", "MistralModel", num_key_value_heads=2,
                                             sliding_window=8, **dec)), ids())
    yield "qwen2_moe", lambda: (FirstOutput(hf("Qwen2MoeConfig", "Qwen2MoeModel", num_key_value_heads=2,
                                               num_experts=4, num_experts_per_tok=2, moe_intermediate_size=h,
                                               shared_expert_intermediate_size=2 * h, **dec)), ids())
    yield "olmoe", lambda: (FirstOutput(hf("OlmoeConfig", "OlmoeModel", num_experts=4, num_experts_per_tok=2,
                                           **dec)), ids())
    yield "falcon", lambda: (FirstOutput(hf("FalconConfig", "FalconModel", hidden_size=h, num_hidden_layers=layers,
                                            num_attention_heads=4, vocab_size=1000, new_decoder_architecture=True,
                                            num_kv_heads=2)), ids())
    yield "gptj", lambda: (FirstOutput(hf("GPTJConfig", "GPTJModel", n_embd=h, n_layer=layers, n_head=4,
                                          rotary_dim=8, vocab_size=1000, n_positions=4 * s)), ids())
    yield "codegen", lambda: (FirstOutput(hf("CodeGenConfig", "CodeGenModel", n_embd=h, n_layer=layers, n_head=4,
                                             rotary_dim=8, vocab_size=1000, n_positions=4 * s, n_ctx=4 * s)), ids())
    yield "gpt_bigcode", lambda: (FirstOutput(hf("GPTBigCodeConfig", "GPTBigCodeModel", n_embd=h, n_layer=layers,
                                                 n_head=4, vocab_size=1000, n_positions=4 * s)), ids())
    yield "stablelm", lambda: (FirstOutput(hf("StableLmConfig", "StableLmModel", num_key_value_heads=2, **dec)),
                               ids())
    yield "gemma2", lambda: (FirstOutput(hf("Gemma2Config", "Gemma2Model", num_key_value_heads=2, head_dim=h // 4,
                                            sliding_window=8, **dec)), ids())
    yield "phi3", lambda: (FirstOutput(hf("Phi3Config", "Phi3Model", num_key_value_heads=2, pad_token_id=0,
                                          **dec)), ids())
    yield "starcoder2", lambda: (FirstOutput(hf("Starcoder2Config", "Starcoder2Model", num_key_value_heads=2,
                                                **dec)), ids())
    yield "cohere", lambda: (FirstOutput(hf("CohereConfig", "CohereModel", num_key_value_heads=2, **dec)), ids())
    yield "qwen3", lambda: (FirstOutput(hf("Qwen3Config", "Qwen3Model", num_key_value_heads=2, head_dim=h // 4,
                                           **dec)), ids())
    yield "biogpt", lambda: (FirstOutput(hf("BioGptConfig", "BioGptModel", **dec)), ids())
    yield "electra", lambda: (FirstOutput(hf("ElectraConfig", "ElectraModel", embedding_size=h // 2, **dec)), ids())
    yield "xlm_roberta", lambda: (FirstOutput(hf("XLMRobertaConfig", "XLMRobertaModel", **dec)), ids())
    yield "funnel", lambda: (FirstOutput(hf("FunnelConfig", "FunnelBaseModel", d_model=h, n_head=4, d_head=h // 4,
                                            d_inner=2 * h, block_sizes=[1, 1], vocab_size=1000)), ids())
    yield "mpnet", lambda: (FirstOutput(hf("MPNetConfig", "MPNetModel", **dec)), ids())
    yield "squeezebert", lambda: (FirstOutput(hf("SqueezeBertConfig", "SqueezeBertModel", embedding_size=h,
                                                 **dec)), ids())
    yield "mobilebert", lambda: (FirstOutput(hf("MobileBertConfig", "MobileBertModel", hidden_size=h,
                                                num_hidden_layers=layers, num_attention_heads=4,
                                                intermediate_size=2 * h, embedding_size=h // 2, true_hidden_size=h // 2,
                                                intra_bottleneck_size=h // 2, vocab_size=1000)), ids())
    yield "convbert", lambda: (FirstOutput(hf("ConvBertConfig", "ConvBertModel", embedding_size=h, **dec)), ids())
    yield "mt5", lambda: (EncoderDecoder(hf("MT5Config", "MT5Model", d_model=h, d_kv=h // 4, d_ff=2 * h,
                                            num_layers=layers, num_decoder_layers=layers, num_heads=4,
                                            vocab_size=1000)), ids() + (torch.randint(0, 1000, (b, s // 2)),))
    yield "pegasus", lambda: (EncoderDecoder(hf("PegasusConfig", "PegasusModel", **seq2seq)),
                              ids() + (torch.randint(0, 1000, (b, s // 2)),))
    yield "marian", lambda: (EncoderDecoder(hf("MarianConfig", "MarianModel", pad_token_id=1,
                                               decoder_start_token_id=1, **seq2seq)),
                             ids() + (torch.randint(0, 1000, (b, s // 2)),))
    yield "mbart", lambda: (EncoderDecoder(hf("MBartConfig", "MBartModel", **seq2seq)),
                            ids() + (torch.randint(0, 1000, (b, s // 2)),))
    yield "swin", lambda: (FirstOutput(hf("SwinConfig", "SwinModel", image_size=size, patch_size=4, embed_dim=32,
                                          depths=[1, 1], num_heads=[2, 4], window_size=4)), img())
    yield "beit", lambda: (FirstOutput(hf("BeitConfig", "BeitModel", intermediate_size=2 * h,
                                          use_relative_position_bias=True, **vit)), img())
    yield "deit", lambda: (FirstOutput(hf("DeiTConfig", "DeiTModel", intermediate_size=2 * h, **vit)), img())
    yield "segformer", lambda: (FirstOutput(hf("SegformerConfig", "SegformerModel", hidden_sizes=[16, 32, 64, 128],
                                               depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 4, 4],
                                               decoder_hidden_size=64)), img())
    yield "mobilevit", lambda: (FirstOutput(fan_in_init(hf("MobileViTConfig", "MobileViTModel", image_size=size,
                                               hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 40, 48,
                                                                                              64]))), img())
    yield "levit", lambda: (FirstOutput(fan_in_init(hf("LevitConfig", "LevitModel", image_size=size, hidden_sizes=[32, 48, 64],
                                           num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8]))),
                            img())
    yield "convnextv2", lambda: (FirstOutput(hf("ConvNextV2Config", "ConvNextV2Model",
                                                hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1])), img())
    yield "regnet", lambda: (FirstOutput(fan_in_init(hf("RegNetConfig", "RegNetModel", hidden_sizes=[32, 64, 128, 256],
                                            depths=[1, 1, 1, 1], embedding_size=32, groups_width=16))), img())
    yield "efficientnet", lambda: (FirstOutput(fan_in_init(hf("EfficientNetConfig", "EfficientNetModel", image_size=size,
                                                  width_coefficient=0.25, depth_coefficient=0.25,
                                                  hidden_dim=320))), img())
    yield "poolformer", lambda: (FirstOutput(fan_in_init(hf("PoolFormerConfig", "PoolFormerModel", hidden_sizes=[16, 32, 64, 128],
                                                depths=[1, 1, 1, 1]))), img())
    yield "focalnet", lambda: (FirstOutput(hf("FocalNetConfig", "FocalNetModel", image_size=size, patch_size=4,
                                              embed_dim=16, depths=[1, 1], focal_levels=[2, 2],
                                              focal_windows=[3, 3])), img())
    yield "bit", lambda: (FirstOutput(hf("BitConfig", "BitModel", hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1],
                                         embedding_size=32, num_groups=8)), img())
    yield "hubert", lambda: (FirstOutput(hf("HubertConfig", "HubertModel", hidden_size=h, num_hidden_layers=layers,
                                            num_attention_heads=4, intermediate_size=2 * h, conv_dim=(64,) * 4,
                                            conv_stride=(5, 2, 2, 2), conv_kernel=(10, 3, 3, 2),
                                            num_feat_extract_layers=4, num_conv_pos_embeddings=16)),
                             (torch.randn(b, 40 * s),))
    yield "data2vec_audio", lambda: (
        FirstOutput(hf("Data2VecAudioConfig", "Data2VecAudioModel", hidden_size=h, num_hidden_layers=layers,
                       num_attention_heads=4, intermediate_size=2 * h, conv_dim=(64,) * 4, conv_stride=(5, 2, 2, 2),
                       conv_kernel=(10, 3, 3, 2), num_feat_extract_layers=4, num_conv_pos_embeddings=5,
                       num_conv_pos_embedding_layers=2)), (torch.randn(b, 40 * s),))
    yield "wavlm", lambda: (FirstOutput(hf("WavLMConfig", "WavLMModel", hidden_size=h, num_hidden_layers=layers,
                                           num_attention_heads=4, intermediate_size=2 * h, conv_dim=(64,) * 4,
                                           conv_stride=(5, 2, 2, 2), conv_kernel=(10, 3, 3, 2),
                                           num_feat_extract_layers=4, num_conv_pos_embeddings=16)),
                            (torch.randn(b, 40 * s),))


# timm image models (where timm is installed, e.g. the GPU host): randomly initialized,
# nothing downloaded; --timm NAME,NAME or --timm default
TIMM_DEFAULT = ("resnet50,efficientnet_b0,mobilenetv3_large_100,convnext_tiny,vit_small_patch16_224,"
                "swin_tiny_patch4_window7_224,regnety_016,deit_small_patch16_224,densenet121,"
                "poolformer_s12,levit_128,mixer_b16_224")


def timm_cases(names: str, big: bool):
    import timm

    b, size = (8, 224) if big else (2, 224)
    for name in (TIMM_DEFAULT if names == "default" else names).split(","):
        yield f"timm:{name}", lambda name=name: (timm.create_model(name, pretrained=False).eval(),
                                                 (torch.randn(b, 3, size, size),))


def unconstant_vectors(m: nn.Module) -> nn.Module:
    """--train: every 1-D parameter whose elements are all equal (norm scales of 1, biases of 0)
    gets +-20% of noise. With a last LayerNorm of scale 1 and shift 0 (DeiT, BERT-style encoders),
    output.pow(2).mean() is a constant (the mean square of a normalized row), so every gradient
    before that norm is rounding noise, eager's and mlircap's alike, where a comparison says nothing."""
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1 and p.numel() > 1 and p.is_floating_point() and bool((p == p[0]).all()):
                p.add_(torch.empty_like(p).uniform_(-0.2, 0.2) * (p[0].abs().item() or 1.0))
    return m


def record_error(rec: dict, what: str, e: Exception, json_path: str) -> None:
    """A case that raised: printed, kept in `rec` and appended to the --json file."""
    print(f"{what}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
    rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    if json_path:
        with open(json_path, "a") as f:
            f.write(json.dumps(rec) + "\n")


def train_step(fn, args, params):
    """One training step's values: output.float().pow(2).mean() backward through `fn`;
    (loss, [each parameter's .grad or None])."""
    for q in params:
        q.grad = None
    loss = fn(*args).float().pow(2).mean()
    loss.backward()
    return loss.detach(), [None if q.grad is None else q.grad.detach().clone() for q in params]


def train_side_by_side_ms(fns, args, params, rounds=7, block_s=0.02):
    """side_by_side_ms for a training step (forward, loss, backward) with grad on. On CUDA each
    block ends with a synchronize and is timed on the wall clock, so device time counts."""
    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    clock = time.process_time if torch.get_num_threads() == 1 and not cuda else time.perf_counter
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for fn in fns:
        for _ in range(2):
            train_step(fn, args, params)
    t0 = time.perf_counter()
    train_step(fns[0], args, params)
    calls = max(1, int(block_s / max(time.perf_counter() - t0, 1e-6)))
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for fn, out in zip(fns, samples):
            sync()
            t0 = clock()
            for _ in range(calls):
                train_step(fn, args, params)
            sync()
            out.append((clock() - t0) / calls * 1e3)
    return [statistics.median(x) for x in samples]


def grad_error(ref, got, names):
    """The largest |grad - eager's grad| relative to that grad's scale (floored at 1e-3 of the
    largest grad scale, so parameters whose gradient is ~0 are compared on the model's scale),
    and the parameter it occurs at. A grad missing on one side only is an error of inf."""
    scales = [0.0 if g is None else g.double().abs().max().item() for g in ref]
    floor = max(scales + [0.0]) * 1e-3 or 1e-30
    worst, at = 0.0, ""
    for r, g, sc, n in zip(ref, got, scales, names):
        if (r is None) != (g is None):
            return float("inf"), n
        if r is None:
            continue
        e = (g.double() - r.double()).abs().max().item() / max(sc, floor)
        if not e <= worst:  # NaN counts as worst
            worst, at = e, n
    return worst, at


# tolerances of the verdict (max|diff| / output scale): fp32 1e-4 relative, bf16 a few ulps
TOL = {"fp32": 1e-4, "bf16": 3e-2}
TRAIN_TOL = {"fp32": 1e-3, "bf16": 6e-2}
FP32_REF_MULTIPLIER = 2.0


def fp32_reference_errors(m: nn.Module, args: tuple, ref: torch.Tensor, out: torch.Tensor) -> tuple[float, float]:
    """(eager's, the compiled output's) largest difference from a float32 run of m's own low-precision
    weights and inputs, each relative to that run's scale."""
    import copy

    m32 = copy.deepcopy(m).float()
    args32 = tuple(x.float() if x.is_floating_point() else x for x in args)
    with torch.no_grad():
        r32 = m32(*args32).double()
    scale = r32.abs().max().item() or 1.0
    return ((ref.double() - r32).abs().max().item() / scale, (out.double() - r32).abs().max().item() / scale)


def main(cases_fn=cases, doc=__doc__):
    """The runner; `cases_fn(big)` yields (name, build) as cases() does (bench/heldout2.py passes its own)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtypes", default="fp32")
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--skip", default="", help="comma-separated names to leave out")
    ap.add_argument("--timm", default="", help="timm models instead: comma-separated names or 'default'")
    ap.add_argument("--inductor", action="store_true", help="also torch.compile(mode='reduce-overhead') (CUDA)")
    ap.add_argument("--train", action="store_true",
                    help="a training step instead: output.float().pow(2).mean().backward() through the compiled "
                         "module; the loss and every parameter's .grad compared with eager's")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads (1: timed in process CPU time, which other load does not inflate)")
    ap.add_argument("--json", default="", help="also append one JSON record per model to this file")
    a = ap.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    dev, only = a.device, set(filter(None, a.models.split(",")))
    skip = set(filter(None, a.skip.split(",")))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ratios, ind_ratios, bad, off = [], [], 0, []
    for dname in a.dtypes.split(","):
        dt = DTYPES[dname]
        for name, build in (timm_cases(a.timm, dev == "cuda") if a.timm else cases_fn(dev == "cuda")):
            if only and name not in only and name.removeprefix("timm:") not in only or name in skip:
                continue
            torch.manual_seed(0)
            try:
                m, args = build()
            except Exception as e:  # noqa: BLE001 - a config this transformers rejects
                print(f"{name} {dname}: cannot build in eager ({type(e).__name__}: {str(e)[:120]})", flush=True)
                continue
            if a.train:
                unconstant_vectors(m)
            m = m.to(dev, dt)
            args = tuple(x.to(dev, dt) if x.is_floating_point() else x.to(dev) for x in args)
            rec = {"model": name, "dtype": dname, "train": a.train}
            try:
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    if a.train:
                        named = [(n, q) for n, q in m.named_parameters() if q.requires_grad]
                        params = [q for _, q in named]
                        try:   # (two steps: a model that cannot take a second one, LeViT's eval-mode bias
                            # cache holding the first step's graph, is no case here)
                            train_step(m, args, params)
                            ref, ref_grads = train_step(m, args, params)
                        except RuntimeError as e:
                            print(f"{name} {dname}: cannot train in eager ({str(e)[:100]})", flush=True)
                            continue
                        t0 = time.perf_counter()
                        fast = mlircap.compile(m)
                        train_step(fast, args, params)
                        out, grads = train_step(fast, args, params)
                        compile_s = time.perf_counter() - t0
                        te, tm = train_side_by_side_ms([m, fast], args, params)
                        gerr, gat = grad_error(ref_grads, grads, [n for n, _ in named])
                    else:
                        with torch.no_grad():
                            ref = m(*args)
                            t0 = time.perf_counter()
                            fast = mlircap.compile(m)
                            fast(*args)
                            out = fast(*args)
                            compile_s = time.perf_counter() - t0
                            if dev == "cuda":
                                te, tm = latency_ms(m, args, device=dev), latency_ms(fast, args, device=dev)
                            else:
                                te, tm = side_by_side_ms([m, fast], args, rounds=7)
                    tc = float("nan")
                    if a.inductor:
                        torch._dynamo.reset()
                        cg = torch.compile(m, mode="reduce-overhead")
                        with torch.no_grad():
                            cg(*args)
                            cg(*args)
                        tc = latency_ms(cg, args, device=dev)
                        torch._dynamo.reset()
            except Exception as e:  # noqa: BLE001 - one model's failure must not lose the others'
                bad += 1
                record_error(rec, f"{name} {dname}", e, a.json)
                continue
            err = (out.double() - ref.double()).abs().max().item()
            scale = ref.double().abs().max().item()
            rel = err / scale if scale else err
            fell = sum(1 for g in fast.graphs if g.fallback_reason)
            notes = sorted({str(x.message).splitlines()[0][:160] for x in w if "mlircap" in str(x.message)})
            ratios.append(te / tm)
            line = f"{name} {dname}{' train' if a.train else ''}: eager {te:.3f} ms, mlircap {tm:.3f} ms = {te / tm:.2f}x eager"
            if a.inductor:
                ind_ratios.append(tc / tm)
                line += f", inductor+cg {tc:.3f} ms = {tc / tm:.2f}x"
            what = "loss" if a.train else "max|diff|"
            line += (f", {what} {err:.1e} (output scale {scale:.1e}, {rel:.1e} rel), graphs {len(fast.graphs)} "
                     f"({fell} fell back), first call {compile_s:.0f} s")
            ok = rel <= TOL[dname]
            if not ok and not a.train and dname != "fp32":
                eref, oref = fp32_reference_errors(m, args, ref, out)
                ok = oref <= FP32_REF_MULTIPLIER * eref
                line += f", vs float32: eager {eref:.1e}, mlircap {oref:.1e}"
                rec.update(fp32_ref_eager=eref, fp32_ref_mlircap=oref)
            if a.train:
                line += f", grads {gerr:.1e} rel (worst at {gat})"
                ok = ok and gerr <= TRAIN_TOL[dname]
            if not ok:
                off.append(f"{name} {dname}")
                line += "  <-- OFF TOLERANCE"
            print(line + (f"\n    warnings: {notes[:3]}" if notes else ""), flush=True)
            rec.update(eager_ms=te, mlircap_ms=tm, ratio=te / tm, err=err, scale=scale, rel=rel,
                       graphs=len(fast.graphs), fell_back=fell, first_call_s=compile_s, ok=ok, warnings=notes[:3])
            if a.train:
                rec.update(grad_rel=gerr, grad_worst=gat)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            if dev == "cuda":
                torch.cuda.empty_cache()
    summary = f"geomean mlircap/eager {geomean(ratios):.2f}x over {len(ratios)} models"
    if ind_ratios:
        summary += f", mlircap/(inductor+cg) {geomean(ind_ratios):.2f}x"
    print(summary + (f"; {bad} errors" if bad else "") + (f"; off tolerance: {', '.join(off)}" if off else ""))


if __name__ == "__main__":
    main()
