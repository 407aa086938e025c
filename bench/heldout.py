"""Held-out models: transformers architectures that no benchmark or test here was tuned on,
built from small config objects (offline), compiled as a new user would compile them.

Each model runs eager, then mlircap (and, with --inductor, torch.compile with CUDA graphs),
side by side in one process; it prints latency ratios, the largest difference from eager
next to the output's scale, the number of compiled graphs and how many fell back, and the
warnings mlircap gave. A model that fails to build in eager is reported and skipped.

    python bench/heldout.py --device cpu --dtypes fp32
    python bench/heldout.py --device cuda --dtypes bf16 --inductor
    python bench/heldout.py --device cuda --dtypes bf16 --timm default   # timm's image models, where installed
"""
from __future__ import annotations

import argparse
import os
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
    yield "mobilenet_v2", lambda: (FirstOutput(hf("MobileNetV2Config", "MobileNetV2Model", image_size=size)), img())


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtypes", default="fp32")
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--timm", default="", help="timm models instead: comma-separated names or 'default'")
    ap.add_argument("--inductor", action="store_true", help="also torch.compile(mode='reduce-overhead') (CUDA)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads (1: timed in process CPU time, which other load does not inflate)")
    a = ap.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    dev, only = a.device, set(filter(None, a.models.split(",")))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ratios, ind_ratios, bad = [], [], 0
    for dname in a.dtypes.split(","):
        dt = DTYPES[dname]
        for name, build in (timm_cases(a.timm, dev == "cuda") if a.timm else cases(dev == "cuda")):
            if only and name not in only and name.removeprefix("timm:") not in only:
                continue
            torch.manual_seed(0)
            try:
                m, args = build()
            except Exception as e:  # noqa: BLE001 - a config this transformers rejects
                print(f"{name} {dname}: cannot build in eager ({type(e).__name__}: {str(e)[:120]})", flush=True)
                continue
            m = m.to(dev, dt)
            args = tuple(x.to(dev, dt) if x.is_floating_point() else x.to(dev) for x in args)
            try:
                with torch.no_grad(), warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
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
                        cg(*args)
                        cg(*args)
                        tc = latency_ms(cg, args, device=dev)
                        torch._dynamo.reset()
            except Exception as e:  # noqa: BLE001 - one model's failure must not lose the others'
                bad += 1
                print(f"{name} {dname}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            err = (out.double() - ref.double()).abs().max().item()
            scale = ref.double().abs().max().item()
            fell = sum(1 for g in fast.graphs if g.fallback_reason)
            notes = sorted({str(x.message).splitlines()[0][:160] for x in w if "mlircap" in str(x.message)})
            ratios.append(te / tm)
            line = f"{name} {dname}: eager {te:.3f} ms, mlircap {tm:.3f} ms = {te / tm:.2f}x eager"
            if a.inductor:
                ind_ratios.append(tc / tm)
                line += f", inductor+cg {tc:.3f} ms = {tc / tm:.2f}x"
            line += (f", max|diff| {err:.1e} (output scale {scale:.1e}), graphs {len(fast.graphs)} "
                     f"({fell} fell back), first call {compile_s:.0f} s")
            print(line + (f"\n    warnings: {notes[:3]}" if notes else ""), flush=True)
            if dev == "cuda":
                torch.cuda.empty_cache()
    summary = f"geomean mlircap/eager {geomean(ratios):.2f}x over {len(ratios)} models"
    if ind_ratios:
        summary += f", mlircap/(inductor+cg) {geomean(ind_ratios):.2f}x"
    print(summary + (f"; {bad} errors" if bad else ""))


if __name__ == "__main__":
    main()
