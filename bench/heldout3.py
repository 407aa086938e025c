"""Held-out models, set 3: hand-written torch models of families that bench/heldout.py (transformers
architectures) and bench/heldout2.py (seq2seq RNNs, diffusion, VAEs, GNNs, state-space scans, ...) leave
out, each written the way its public reference implementation (torchvision, timm, torchaudio, fairseq,
lucidrains, the papers' own code) writes it: CNN classifiers with BatchNorm in eval and train mode,
torch.nn's own Transformer modules (their native inference fast path), FFT mixing, spectrogram
frontends, latent cross-attention, detection decoding, sparsemax, memory networks, fake quantization and
the losses of distillation, CTC and label smoothing.

Same runner, report and options as bench/heldout.py (its main() with this file's cases):

    python bench/heldout3.py --device cpu --dtypes fp32
    python bench/heldout3.py --device cpu --dtypes bf16
    python bench/heldout3.py --device cpu --dtypes fp32 --train     # loss and every parameter's .grad
    python bench/heldout3.py --device cpu --dtypes fp32 --models densenet,squeezenet --json /tmp/h3.jsonl

Models (CPU sizes; `big`: GPU sizes):
  resnet50          torchvision ResNet-50 Bottleneck stages (1x1-3x3-1x1, BatchNorm, downsample), eval
  resnet_bn_train   the same network in train mode: BatchNorm's batch statistics and running-stat updates
  mobilenetv3       torchvision MobileNetV3 blocks: hardswish, SE with hardsigmoid, _make_divisible widths
  efficientnet_sd   EfficientNet MBConv + SE + stochastic depth in train mode (torchvision's StochasticDepth
                    rows drawn from a generator seeded per call)
  swin_block        Swin (microsoft/Swin-Transformer): window partition, torch.roll shifts, the shift mask,
                    relative position bias table indexed by a buffer, patch merging
  densenet          torchvision DenseNet: _DenseLayer concatenations (BN-ReLU-Conv1x1-BN-ReLU-Conv3x3), transition
  shufflenet_v2     torchvision ShuffleNetV2: channel_shuffle (view, transpose, contiguous), chunk, branches
  inception         torchvision GoogLeNet / Inception-v3 modules: parallel branches, BasicConv2d (BN eps 1e-3),
                    ceil_mode max pooling, avg-pool branch, concatenation
  squeezenet        torchvision SqueezeNet 1.1: Fire modules, ceil_mode max pooling, conv classifier
  nn_transformer    torch.nn.Transformer (encoder-decoder) with a causal tgt_mask and key padding masks, eval
  encoder_fastpath  nn.TransformerEncoderLayer stack in eval mode under no_grad, no mask (its native fast path)
  mha_weights       nn.MultiheadAttention with key_padding_mask and need_weights (head-averaged weights)
  fnet              FNet: token mixing by torch.fft.fft2(...).real, feed-forward, post-LN
  melspec_cnn       torchaudio-style MelSpectrogram (torch.stft, Hann window, power, mel filterbank, log) + CNN
  perceiver         lucidrains perceiver-pytorch: latents cross-attending to the input (einsum), GEGLU, latent
                    self-attention, mean-pooled logits
  detr_head         DETR: CNN backbone, sine positional encoding, nn.Transformer with learned queries, class /
                    box (sigmoid) heads
  yolo_decode       YOLOv3 head: grid offsets by meshgrid, sigmoid xy + grid, exp(wh) * anchors, objectness
  tabnet            TabNet: GLU feature transformers, attentive transformer with sparsemax (sort, cumsum), prior
  ntm               Neural Turing Machine read head: content addressing (cosine, beta softmax), interpolation,
                    circular shift convolution, sharpening, looped over time
  qat_fakequant     quantization-aware training CNN: fake_quantize_per_tensor_affine on weights and activations
  gumbel_vq         DALL-E dVAE-style Gumbel-softmax quantizer (noise from a seeded generator), codebook einsum
  kd_loss           knowledge distillation: KL(student/T || teacher/T) * T^2 + hard-label cross entropy
  ctc_asr           conv + BiLSTM acoustic model, log_softmax, F.ctc_loss with input / target lengths
  label_smooth_lm   small transformer LM: cross_entropy with label_smoothing and ignore_index, and fairseq's
                    label_smoothed_nll_loss
  deeplab_aspp      DeepLabV3 ASPP: dilated parallel convs, image pooling branch, bilinear upsampling
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import heldout  # noqa: E402  (its runner, report format and options)


# -- torchvision-style CNN classifiers -------------------------------------------------------------------

def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


def conv3x3(cin, cout, stride=1, groups=1, dilation=1):
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=dilation, groups=groups, bias=False,
                     dilation=dilation)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = conv1x1(inplanes, planes), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv3x3(planes, planes, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = conv1x1(planes, planes * self.expansion), nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2), width=16, classes=10):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1, self.relu = nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.stages = nn.Sequential(*[self._make_layer(width * 2 ** i, n, stride=1 if i == 0 else 2)
                                      for i, n in enumerate(layers)])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(self.inplanes, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        for m in self.modules():   # zero_init_residual's opposite: the last BN of a block keeps scale 1
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.normal_(m.bias, 0, 0.1)

    def _make_layer(self, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * Bottleneck.expansion, stride),
                                       nn.BatchNorm2d(planes * Bottleneck.expansion))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.stages(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _make_divisible(v, divisor=8, min_value=None):
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class SqueezeExcitation(nn.Module):
    def __init__(self, cin, squeeze, activation=nn.ReLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(cin, squeeze, 1), nn.Conv2d(squeeze, cin, 1)
        self.activation, self.scale_activation = activation(), scale_activation()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class ConvBNAct(nn.Sequential):
    def __init__(self, cin, cout, k=3, stride=1, groups=1, act=nn.ReLU, eps=1e-5):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout, eps=eps)]
        if act is not None:
            layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU) else act())
        super().__init__(*layers)


class MobileV3Block(nn.Module):
    def __init__(self, cin, k, exp, cout, use_se, act, stride):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        layers = []
        if exp != cin:
            layers.append(ConvBNAct(cin, exp, 1, act=act))
        layers.append(ConvBNAct(exp, exp, k, stride, groups=exp, act=act))
        if use_se:
            layers.append(SqueezeExcitation(exp, _make_divisible(exp // 4, 8), scale_activation=nn.Hardsigmoid))
        layers.append(ConvBNAct(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        return result + x if self.use_res else result


class MobileNetV3(nn.Module):
    # (in, kernel, expanded, out, SE, activation, stride) of mobilenet_v3_small, narrowed
    CFG = [(16, 3, 16, 16, True, nn.ReLU, 2), (16, 3, 72, 24, False, nn.ReLU, 2), (24, 3, 88, 24, False, nn.ReLU, 1),
           (24, 5, 96, 40, True, nn.Hardswish, 2), (40, 5, 240, 40, True, nn.Hardswish, 1),
           (40, 5, 120, 48, True, nn.Hardswish, 1)]

    def __init__(self, classes=10):
        super().__init__()
        layers = [ConvBNAct(3, 16, 3, 2, act=nn.Hardswish)]
        layers += [MobileV3Block(*c) for c in self.CFG]
        layers.append(ConvBNAct(48, 288, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(288, 256), nn.Hardswish(inplace=True), nn.Dropout(0.2, inplace=True),
                                        nn.Linear(256, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def stochastic_depth(x, p, training, generator):
    """torchvision.ops.stochastic_depth(mode='row'), its noise drawn from `generator`."""
    if not training or p == 0.0:
        return x
    survival = 1.0 - p
    noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device)
    noise.bernoulli_(survival, generator=generator)
    if survival > 0.0:
        noise.div_(survival)
    return x * noise


class MBConv(nn.Module):
    def __init__(self, cin, cout, expand, k, stride, sd_prob):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        exp = _make_divisible(cin * expand)
        layers = []
        if exp != cin:
            layers.append(ConvBNAct(cin, exp, 1, act=nn.SiLU, eps=1e-3))
        layers.append(ConvBNAct(exp, exp, k, stride, groups=exp, act=nn.SiLU, eps=1e-3))
        layers.append(SqueezeExcitation(exp, max(1, cin // 4), activation=nn.SiLU))
        layers.append(ConvBNAct(exp, cout, 1, act=None, eps=1e-3))
        self.block = nn.Sequential(*layers)
        self.sd_prob = sd_prob

    def forward(self, x, g):
        result = self.block(x)
        if self.use_res:
            result = stochastic_depth(result, self.sd_prob, self.training, g) + x
        return result


class EfficientNetSD(nn.Module):
    """MBConv stages whose residual branches are dropped per sample (stochastic depth rising linearly
    to 0.2), in train mode: BatchNorm on batch statistics, dropout off (p=0) so only the seeded rows vary."""

    SETTINGS = [(1, 3, 1, 16, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 1, 40, 40, 2)]

    def __init__(self, classes=10):
        super().__init__()
        self.stem = ConvBNAct(3, 16, 3, 2, act=nn.SiLU, eps=1e-3)
        total = sum(s[-1] for s in self.SETTINGS)
        blocks, i = [], 0
        for expand, k, stride, cin, cout, n in self.SETTINGS:
            for j in range(n):
                blocks.append(MBConv(cin if j == 0 else cout, cout, expand, k, stride if j == 0 else 1, 0.2 * i / total))
                i += 1
        self.blocks = nn.ModuleList(blocks)
        self.head = ConvBNAct(40, 160, 1, act=nn.SiLU, eps=1e-3)
        self.classifier = nn.Sequential(nn.Dropout(p=0.0, inplace=True), nn.Linear(160, classes))

    def forward(self, x):
        g = torch.Generator(device=x.device).manual_seed(7)
        x = self.stem(x)
        for blk in self.blocks:
            x = blk(x, g)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.head(x), 1), 1))


class _DenseLayer(nn.Module):
    def __init__(self, cin, growth, bn_size):
        super().__init__()
        self.norm1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def bn_function(self, inputs):
        return self.conv1(self.relu1(self.norm1(torch.cat(inputs, 1))))

    def forward(self, input):
        prev = [input] if isinstance(input, torch.Tensor) else input
        return self.conv2(self.relu2(self.norm2(self.bn_function(prev))))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, n, cin, bn_size, growth):
        super().__init__()
        for i in range(n):
            self.add_module(f"denselayer{i + 1}", _DenseLayer(cin + i * growth, growth, bn_size))

    def forward(self, init_features):
        features = [init_features]
        for _, layer in self.items():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.BatchNorm2d(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, cout, 1, bias=False),
                         nn.AvgPool2d(kernel_size=2, stride=2))


class DenseNet(nn.Module):
    def __init__(self, growth=12, blocks=(4, 4, 4), init=24, bn_size=4, classes=10):
        super().__init__()
        feats = [nn.Conv2d(3, init, 7, 2, 3, bias=False), nn.BatchNorm2d(init), nn.ReLU(inplace=True),
                 nn.MaxPool2d(3, 2, 1)]
        c = init
        for i, n in enumerate(blocks):
            feats.append(_DenseBlock(n, c, bn_size, growth))
            c += n * growth
            if i != len(blocks) - 1:
                feats.append(_Transition(c, c // 2))
                c //= 2
        feats.append(nn.BatchNorm2d(c))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Linear(c, classes)

    def forward(self, x):
        out = F.relu(self.features(x), inplace=True)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1))


def channel_shuffle(x, groups):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleResidual(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        bf = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                                         nn.Conv2d(cin, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else bf, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
            nn.Conv2d(bf, bf, 3, stride, 1, groups=bf, bias=False), nn.BatchNorm2d(bf),
            nn.Conv2d(bf, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats=(2, 3, 2), channels=(24, 48, 96, 192, 512), classes=10):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages, cin = [], channels[0]
        for n, cout in zip(repeats, channels[1:]):
            stages.append(nn.Sequential(ShuffleResidual(cin, cout, 2), *[ShuffleResidual(cout, cout, 1)
                                                                          for _ in range(n - 1)]))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[-1], 1, bias=False), nn.BatchNorm2d(channels[-1]),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(channels[-1], classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


class BasicConv2d(nn.Module):
    def __init__(self, cin, cout, **kw):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **kw)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)), inplace=True)


class InceptionA(nn.Module):
    def __init__(self, cin, pool_features):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 16, kernel_size=1)
        self.branch5x5_1, self.branch5x5_2 = BasicConv2d(cin, 12, kernel_size=1), BasicConv2d(12, 16, kernel_size=5,
                                                                                              padding=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 16, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(16, 24, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(24, 24, kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(cin, pool_features, kernel_size=1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    """Inception-v3's grid reduction: stride-2 branches next to a max pool."""

    def __init__(self, cin):
        super().__init__()
        self.branch3x3 = BasicConv2d(cin, 32, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 16, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(16, 24, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(24, 24, kernel_size=3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([b3, bd, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionC(nn.Module):
    """Inception-v3's factorized 7x7 (1x7 then 7x1) branches."""

    def __init__(self, cin, c7=16):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 32, kernel_size=1)
        self.branch7x7 = nn.Sequential(BasicConv2d(cin, c7, kernel_size=1),
                                       BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3)),
                                       BasicConv2d(c7, 32, kernel_size=(7, 1), padding=(3, 0)))
        self.branch_pool = BasicConv2d(cin, 32, kernel_size=1)

    def forward(self, x):
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([self.branch1x1(x), self.branch7x7(x), bp], 1)


class Inception(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(BasicConv2d(3, 16, kernel_size=3, stride=2), BasicConv2d(16, 32, kernel_size=3),
                                  nn.MaxPool2d(3, stride=2, ceil_mode=True))
        self.mixed_a = InceptionA(32, pool_features=16)      # -> 72
        self.mixed_b = InceptionB(72)                        # -> 32 + 24 + 72 = 128
        self.mixed_c = InceptionC(128)                       # -> 96
        self.fc = nn.Linear(96, classes)

    def forward(self, x):
        x = self.mixed_c(self.mixed_b(self.mixed_a(self.stem(x))))
        x = F.dropout(F.adaptive_avg_pool2d(x, (1, 1)), 0.5, self.training)
        return self.fc(torch.flatten(x, 1))


class Fire(nn.Module):
    def __init__(self, cin, squeeze, e1, e3):
        super().__init__()
        self.squeeze, self.squeeze_activation = nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True)
        self.expand1x1, self.expand1x1_activation = nn.Conv2d(squeeze, e1, 1), nn.ReLU(inplace=True)
        self.expand3x3, self.expand3x3_activation = nn.Conv2d(squeeze, e3, 3, padding=1), nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, stride=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192, 192))
        final = nn.Conv2d(384, classes, 1)
        nn.init.normal_(final.weight, mean=0.0, std=0.01)
        self.classifier = nn.Sequential(nn.Dropout(0.5), final, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class ASPP(nn.Module):
    """torchvision's DeepLabV3 head: 1x1, three dilated 3x3 branches and image pooling, then projection."""

    def __init__(self, cin=64, cout=32, rates=(2, 4, 6)):
        super().__init__()
        mods = [nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())]
        mods += [nn.Sequential(nn.Conv2d(cin, cout, 3, padding=r, dilation=r, bias=False), nn.BatchNorm2d(cout),
                               nn.ReLU()) for r in rates]
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout),
                                  nn.ReLU())
        self.convs = nn.ModuleList(mods)
        self.project = nn.Sequential(nn.Conv2d((len(mods) + 1) * cout, cout, 1, bias=False), nn.BatchNorm2d(cout),
                                     nn.ReLU(), nn.Dropout(0.5))

    def forward(self, x):
        res = [conv(x) for conv in self.convs]
        res.append(F.interpolate(self.pool(x), size=x.shape[-2:], mode="bilinear", align_corners=False))
        return self.project(torch.cat(res, dim=1))


class DeepLabASPP(nn.Module):
    def __init__(self, classes=6):
        super().__init__()
        self.backbone = nn.Sequential(ConvBNAct(3, 32, 3, 2), ConvBNAct(32, 64, 3, 2), ConvBNAct(64, 64, 3, 1))
        self.aspp = ASPP(64, 32)
        self.head = nn.Sequential(ConvBNAct(32, 32, 3), nn.Conv2d(32, classes, 1))

    def forward(self, x):
        out = self.head(self.aspp(self.backbone(x)))
        return F.interpolate(out, size=x.shape[-2:], mode="bilinear", align_corners=False)


# -- Swin ---------------------------------------------------------------------------------------------------

def window_partition(x, ws):
    B, H, W, C = x.shape
    x = x.view(B, H // ws, ws, W // ws, ws, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, C)


def window_reverse(windows, ws, H, W):
    B = int(windows.shape[0] / (H * W / ws / ws))
    x = windows.view(B, H // ws, W // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)


class WindowAttention(nn.Module):
    def __init__(self, dim, ws, heads):
        super().__init__()
        self.dim, self.ws, self.num_heads = dim, ws, heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * ws - 1) * (2 * ws - 1), heads) * 0.02)
        coords = torch.stack(torch.meshgrid([torch.arange(ws), torch.arange(ws)], indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        rel = (coords_flatten[:, :, None] - coords_flatten[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, mask=None):
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            self.ws * self.ws, self.ws * self.ws, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N, N)
        attn = self.softmax(attn)
        return self.proj((attn @ v).transpose(1, 2).reshape(B_, N, C))


class SwinBlock(nn.Module):
    def __init__(self, dim, res, heads, ws=4, shift=0, mlp_ratio=4.0):
        super().__init__()
        self.res, self.ws, self.shift = res, ws, shift
        self.norm1, self.attn = nn.LayerNorm(dim), WindowAttention(dim, ws, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))
        if shift > 0:
            H = W = res
            img_mask = torch.zeros((1, H, W, 1))
            cnt = 0
            for h in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                for w in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                    img_mask[:, h, w, :] = cnt
                    cnt += 1
            mask_windows = window_partition(img_mask, ws).view(-1, ws * ws)
            attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
            attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(attn_mask == 0, float(0.0))
        else:
            attn_mask = None
        self.register_buffer("attn_mask", attn_mask)

    def forward(self, x):
        H = W = self.res
        B, L, C = x.shape
        shortcut = x
        x = self.norm1(x).view(B, H, W, C)
        if self.shift > 0:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        xw = window_partition(x, self.ws).view(-1, self.ws * self.ws, C)
        aw = self.attn(xw, mask=self.attn_mask).view(-1, self.ws, self.ws, C)
        x = window_reverse(aw, self.ws, H, W)
        if self.shift > 0:
            x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        x = shortcut + x.view(B, H * W, C)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, res, dim):
        super().__init__()
        self.res = res
        self.reduction, self.norm = nn.Linear(4 * dim, 2 * dim, bias=False), nn.LayerNorm(4 * dim)

    def forward(self, x):
        H = W = self.res
        B, L, C = x.shape
        x = x.view(B, H, W, C)
        x = torch.cat([x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :], x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x.view(B, -1, 4 * C)))


class Swin(nn.Module):
    def __init__(self, img=32, patch=2, dim=32, heads=(2, 4), ws=4, classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.pe_norm = nn.LayerNorm(dim)
        r = img // patch
        self.stage1 = nn.Sequential(SwinBlock(dim, r, heads[0], ws, 0), SwinBlock(dim, r, heads[0], ws, ws // 2))
        self.merge = PatchMerging(r, dim)
        self.stage2 = nn.Sequential(SwinBlock(2 * dim, r // 2, heads[1], ws, 0),
                                    SwinBlock(2 * dim, r // 2, heads[1], ws, ws // 2))
        self.norm, self.head = nn.LayerNorm(2 * dim), nn.Linear(2 * dim, classes)

    def forward(self, x):
        x = self.pe_norm(self.patch_embed(x).flatten(2).transpose(1, 2))
        x = self.stage2(self.merge(self.stage1(x)))
        x = self.norm(x)
        return self.head(torch.flatten(F.adaptive_avg_pool1d(x.transpose(1, 2), 1), 1))


# -- torch.nn's Transformer modules ---------------------------------------------------------------------

class NNTransformer(nn.Module):
    def __init__(self, vocab=500, d=64, heads=4):
        super().__init__()
        self.d = d
        self.src_emb, self.tgt_emb = nn.Embedding(vocab, d, padding_idx=0), nn.Embedding(vocab, d, padding_idx=0)
        self.transformer = nn.Transformer(d, heads, 2, 2, 4 * d, dropout=0.1, batch_first=True)
        pe = torch.zeros(256, d)
        pos = torch.arange(256).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe)
        self.generator = nn.Linear(d, vocab)

    def forward(self, src, tgt):
        src_pad, tgt_pad = src == 0, tgt == 0
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)
        s = self.src_emb(src) * math.sqrt(self.d) + self.pe[: src.size(1)]
        t = self.tgt_emb(tgt) * math.sqrt(self.d) + self.pe[: tgt.size(1)]
        out = self.transformer(s, t, tgt_mask=tgt_mask.to(s.dtype), src_key_padding_mask=src_pad,
                               tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return self.generator(out)


class EncoderFastPath(nn.Module):
    """nn.TransformerEncoder of TransformerEncoderLayers, eval mode under no_grad with no mask: each
    layer runs torch._transformer_encoder_layer_fwd (its native fast path)."""

    def __init__(self, vocab=500, d=64, heads=4, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        return self.norm(self.encoder(self.emb(ids)))


class MHAWeights(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.cross = nn.MultiheadAttention(d, heads, kdim=48, vdim=32)
        self.ff = nn.Linear(d, d)

    def forward(self, x, mem_k, mem_v, lengths):
        pad = torch.arange(x.shape[1], device=x.device)[None, :] >= lengths[:, None]
        h, w = self.attn(x, x, x, key_padding_mask=pad, need_weights=True)
        h = x + h
        c, cw = self.cross(h.transpose(0, 1), mem_k, mem_v, need_weights=True, average_attn_weights=False)
        out = self.ff(h + c.transpose(0, 1))
        return torch.cat([out.flatten(1), w.flatten(1), cw.flatten(1)], dim=1)


# -- FFT / audio ------------------------------------------------------------------------------------------

class FNetBlock(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.mix_norm, self.ff_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

    def forward(self, x):
        mixed = torch.fft.fftn(x.float(), dim=(1, 2)).real.to(x.dtype)   # HF FNetBasicFourierTransform
        x = self.mix_norm(x + mixed)
        return self.ff_norm(x + self.ff(x))


class FNet(nn.Module):
    def __init__(self, vocab=500, d=64, layers=2, max_len=128):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, d)
        self.blocks = nn.ModuleList(FNetBlock(d, 4 * d) for _ in range(layers))

    def forward(self, ids):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        x = self.proj(self.norm(x))
        for blk in self.blocks:
            x = blk(x)
        return x


def _hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate):
    """torchaudio.functional.melscale_fbanks (htk scale, no norm)."""
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down, up))


class MelSpecCNN(nn.Module):
    def __init__(self, n_fft=256, hop=64, n_mels=32, sr=8000, classes=10):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("fb", melscale_fbanks(n_fft // 2 + 1, 0.0, sr / 2, n_mels, sr))
        self.bn0 = nn.BatchNorm2d(1)
        self.convs = nn.Sequential(ConvBNAct(1, 16, 3), nn.MaxPool2d(2), ConvBNAct(16, 32, 3), nn.MaxPool2d(2),
                                   ConvBNAct(32, 32, 3))
        self.fc = nn.Linear(32, classes)

    def forward(self, wav):
        spec = torch.stft(wav.float(), self.n_fft, self.hop, window=self.window.float(), center=True,
                          pad_mode="reflect", return_complex=True)
        power = spec.abs().pow(2.0)                                       # [b, freq, time]
        mel = torch.matmul(power.transpose(-1, -2), self.fb.float()).transpose(-1, -2)
        logmel = 10.0 * torch.log10(torch.clamp(mel, min=1e-10))
        logmel = torch.max(logmel, logmel.amax(dim=(-2, -1), keepdim=True) - 80.0)   # AmplitudeToDB top_db
        x = self.bn0(logmel.unsqueeze(1).to(wav.dtype))
        x = self.convs(x)
        x = torch.amax(x.mean(dim=2), dim=-1)                             # mean over mel, max over time
        return self.fc(x)


# -- latent / query attention ---------------------------------------------------------------------------

class PreNorm(nn.Module):
    def __init__(self, dim, fn, context_dim=None):
        super().__init__()
        self.fn, self.norm = fn, nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if context_dim is not None else None

    def forward(self, x, **kwargs):
        x = self.norm(x)
        if self.norm_context is not None:
            kwargs.update(context=self.norm_context(kwargs["context"]))
        return self.fn(x, **kwargs)


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult * 2), GEGLU(), nn.Linear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class PAttention(nn.Module):
    def __init__(self, qdim, context_dim=None, heads=4, dim_head=16):
        super().__init__()
        inner, context_dim = dim_head * heads, context_dim or qdim
        self.scale, self.heads = dim_head ** -0.5, heads
        self.to_q, self.to_kv = nn.Linear(qdim, inner, bias=False), nn.Linear(context_dim, inner * 2, bias=False)
        self.to_out = nn.Linear(inner, qdim)

    def forward(self, x, context=None, mask=None):
        h = self.heads
        q = self.to_q(x)
        context = x if context is None else context
        k, v = self.to_kv(context).chunk(2, dim=-1)
        q, k, v = (t.reshape(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3).reshape(t.shape[0] * h, t.shape[1], -1)
                   for t in (q, k, v))
        sim = torch.einsum("b i d, b j d -> b i j", q, k) * self.scale
        if mask is not None:
            mask = mask.repeat_interleave(h, dim=0)[:, None, :]
            sim.masked_fill_(~mask, -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b i j, b j d -> b i d", attn, v)
        out = out.reshape(-1, h, out.shape[1], out.shape[2]).permute(0, 2, 1, 3).flatten(2)
        return self.to_out(out)


class Perceiver(nn.Module):
    def __init__(self, input_dim=24, num_latents=16, latent_dim=64, depth=2, classes=10, freq_bands=4):
        super().__init__()
        self.freq_bands = freq_bands
        in_dim = input_dim + 3 * freq_bands
        self.latents = nn.Parameter(torch.randn(num_latents, latent_dim))
        self.layers = nn.ModuleList()
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                PreNorm(latent_dim, PAttention(latent_dim, in_dim, heads=1, dim_head=32), context_dim=in_dim),
                PreNorm(latent_dim, FeedForward(latent_dim)),
                PreNorm(latent_dim, PAttention(latent_dim, heads=4, dim_head=16)),
                PreNorm(latent_dim, FeedForward(latent_dim))]))
        self.to_logits = nn.Sequential(nn.LayerNorm(latent_dim), nn.Linear(latent_dim, classes))

    def fourier_encode(self, x):
        x = x.unsqueeze(-1)
        scales = torch.linspace(1.0, 16 / 2, self.freq_bands, device=x.device, dtype=x.dtype)
        x = x * scales * math.pi
        return torch.cat([x, x.sin(), x.cos()], dim=-1)       # [n, 3 * bands]

    def forward(self, data, mask):
        b, n, _ = data.shape
        pos = torch.linspace(-1.0, 1.0, steps=n, device=data.device, dtype=data.dtype)
        enc = self.fourier_encode(pos)[None].expand(b, n, -1)
        data = torch.cat([data, enc], dim=-1)
        x = self.latents.unsqueeze(0).expand(b, -1, -1)
        for cross, cross_ff, self_attn, self_ff in self.layers:
            x = cross(x, context=data, mask=mask) + x
            x = cross_ff(x) + x
            x = self_attn(x) + x
            x = self_ff(x) + x
        return self.to_logits(x.mean(dim=1))


class DETR(nn.Module):
    """facebookresearch/detr's "DETR in 50 lines" with a small backbone: sine-free learned row / column
    embeddings, nn.Transformer, learned object queries, class and box heads."""

    def __init__(self, classes=10, d=64, heads=4, queries=16):
        super().__init__()
        self.backbone = nn.Sequential(ConvBNAct(3, 32, 3, 2), ConvBNAct(32, 64, 3, 2), ConvBNAct(64, 128, 3, 2))
        self.conv = nn.Conv2d(128, d, 1)
        self.transformer = nn.Transformer(d, heads, 2, 2, 2 * d, dropout=0.0)
        self.linear_class, self.linear_bbox = nn.Linear(d, classes + 1), nn.Linear(d, 4)
        self.query_pos = nn.Parameter(torch.rand(queries, d))
        self.row_embed, self.col_embed = nn.Parameter(torch.rand(50, d // 2)), nn.Parameter(torch.rand(50, d // 2))

    def forward(self, inputs):
        h = self.conv(self.backbone(inputs))
        B, _, H, W = h.shape
        pos = torch.cat([self.col_embed[:W].unsqueeze(0).repeat(H, 1, 1),
                         self.row_embed[:H].unsqueeze(1).repeat(1, W, 1)], dim=-1).flatten(0, 1).unsqueeze(1)
        src = pos + 0.1 * h.flatten(2).permute(2, 0, 1)
        tgt = self.query_pos.unsqueeze(1).repeat(1, B, 1)
        h = self.transformer(src, tgt).transpose(0, 1)
        logits = self.linear_class(h).softmax(-1)
        boxes = self.linear_bbox(h).sigmoid()
        cxcywh = boxes.unbind(-1)
        xyxy = torch.stack([cxcywh[0] - 0.5 * cxcywh[2], cxcywh[1] - 0.5 * cxcywh[3],
                            cxcywh[0] + 0.5 * cxcywh[2], cxcywh[1] + 0.5 * cxcywh[3]], dim=-1)
        return torch.cat([logits, boxes, xyxy], dim=-1)


# -- detection decoding --------------------------------------------------------------------------------

class YOLOLayer(nn.Module):
    """eriklindernoren/PyTorch-YOLOv3's YOLOLayer in inference: sigmoid offsets plus the cell grid,
    exponentiated sizes times the anchors, sigmoid objectness and class scores."""

    def __init__(self, anchors, num_classes):
        super().__init__()
        self.num_anchors, self.num_classes = len(anchors), num_classes
        self.no = num_classes + 5
        self.register_buffer("anchors", torch.tensor(anchors, dtype=torch.float32))
        self.register_buffer("anchor_grid", torch.tensor(anchors, dtype=torch.float32).view(1, -1, 1, 1, 2))

    @staticmethod
    def _make_grid(nx, ny):
        yv, xv = torch.meshgrid([torch.arange(ny), torch.arange(nx)], indexing="ij")
        return torch.stack((xv, yv), 2).view((1, 1, ny, nx, 2)).float()

    def forward(self, x, img_size):
        stride = img_size // x.size(2)
        bs, _, ny, nx = x.shape
        x = x.view(bs, self.num_anchors, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        grid = self._make_grid(nx, ny).to(x.device)
        xy = (x[..., 0:2].sigmoid() + grid) * stride
        wh = torch.exp(x[..., 2:4]) * self.anchor_grid
        rest = x[..., 4:].sigmoid()
        return torch.cat([xy, wh, rest], dim=-1).view(bs, -1, self.no)


class YOLOHead(nn.Module):
    def __init__(self, classes=8):
        super().__init__()
        self.b1 = nn.Sequential(ConvBNAct(3, 16, 3, 2, act=nn.LeakyReLU), ConvBNAct(16, 32, 3, 2, act=nn.LeakyReLU),
                                ConvBNAct(32, 64, 3, 2, act=nn.LeakyReLU))
        self.b2 = ConvBNAct(64, 64, 3, 2, act=nn.LeakyReLU)
        self.out1, self.out2 = nn.Conv2d(64, 3 * (classes + 5), 1), nn.Conv2d(64, 3 * (classes + 5), 1)
        for out in (self.out1, self.out2):
            out.weight.data.mul_(0.1)
        self.yolo1 = YOLOLayer([(10, 14), (23, 27), (37, 58)], classes)
        self.yolo2 = YOLOLayer([(81, 82), (135, 169), (344, 319)], classes)

    def forward(self, x):
        img = x.size(2)
        f1 = self.b1(x)
        f2 = self.b2(f1)
        return torch.cat([self.yolo1(self.out1(f1), img), self.yolo2(self.out2(f2), img)], dim=1)


# -- tabular / memory ----------------------------------------------------------------------------------

def sparsemax(z, dim=-1):
    """Martins & Astudillo's sparsemax (the TabNet / entmax reference): sort, cumsum, support size, threshold."""
    z = z - z.max(dim=dim, keepdim=True).values
    zs = torch.sort(z, dim=dim, descending=True).values
    d = z.shape[dim]
    rho = torch.arange(1, d + 1, device=z.device, dtype=z.dtype).view([1] * (z.dim() - 1) + [d])
    cumsum = zs.cumsum(dim) - 1
    support = rho * zs > cumsum
    k = support.sum(dim=dim, keepdim=True)
    tau = cumsum.gather(dim, k - 1) / k.to(z.dtype)
    return torch.clamp(z - tau, min=0)


class GLUBlock(nn.Module):
    def __init__(self, cin, cout, first=False):
        super().__init__()
        self.first = first
        self.fc, self.bn = nn.Linear(cin, 2 * cout, bias=False), nn.BatchNorm1d(2 * cout, momentum=0.02)

    def forward(self, x):
        out = F.glu(self.bn(self.fc(x)), dim=-1)
        return out if self.first else (x + out) * math.sqrt(0.5)


class TabNet(nn.Module):
    def __init__(self, features=24, nd=16, na=16, steps=3, gamma=1.3, classes=4):
        super().__init__()
        self.nd, self.steps, self.gamma = nd, steps, gamma
        self.initial_bn = nn.BatchNorm1d(features, momentum=0.01)
        self.shared = GLUBlock(features, nd + na, first=True)
        self.step_ft = nn.ModuleList(GLUBlock(nd + na, nd + na) for _ in range(steps + 1))
        self.att_fc = nn.ModuleList(nn.Linear(na, features, bias=False) for _ in range(steps))
        self.att_bn = nn.ModuleList(nn.BatchNorm1d(features, momentum=0.02) for _ in range(steps))
        self.final = nn.Linear(nd, classes)

    def forward(self, x):
        x = self.initial_bn(x)
        prior = torch.ones_like(x)
        att = self.step_ft[0](self.shared(x))[:, self.nd:]
        out, m_loss = 0, 0
        for s in range(self.steps):
            mask = sparsemax(self.att_bn[s](self.att_fc[s](att)) * prior)
            m_loss = m_loss + torch.mean(torch.sum(-mask * torch.log(mask + 1e-15), dim=1))
            prior = prior * (self.gamma - mask)
            h = self.step_ft[s + 1](self.shared(x * mask))
            out = out + F.relu(h[:, : self.nd])
            att = h[:, self.nd:]
        logits = self.final(out)
        return torch.cat([logits, (m_loss / self.steps).expand(x.shape[0], 1)], dim=1)


class NTM(nn.Module):
    """An LSTM controller with one read and one write head over an N x M memory (Graves et al. 2014;
    loudinthecloud/pytorch-ntm's addressing): content weights softmax(beta * cosine(k, M)), interpolation
    with the previous weights by g, circular shift by a 3-tap kernel, sharpening by gamma."""

    def __init__(self, din=8, dout=8, hid=64, N=32, M=16):
        super().__init__()
        self.N, self.M, self.hid = N, M, hid
        self.controller = nn.LSTMCell(din + M, hid)
        self.read_fc = nn.Linear(hid, M + 1 + 1 + 3 + 1)
        self.write_fc = nn.Linear(hid, M + 1 + 1 + 3 + 1 + 2 * M)
        self.fc = nn.Linear(hid + M, dout)
        self.register_buffer("mem_bias", torch.randn(N, M) * 0.05)

    def address(self, k, beta, g, s, gamma, w_prev, mem):
        k = k.unsqueeze(1)
        wc = F.softmax(beta * F.cosine_similarity(mem + 1e-16, k + 1e-16, dim=-1), dim=1)
        wg = g * wc + (1 - g) * w_prev
        w_hat = torch.stack([torch.roll(wg, 1, dims=1), wg, torch.roll(wg, -1, dims=1)], dim=-1)
        w_hat = (w_hat * s.unsqueeze(1)).sum(-1)
        w = w_hat ** gamma
        return w / (w.sum(dim=1, keepdim=True) + 1e-16)

    def split(self, o):
        M = self.M
        k, beta, g, s, gamma = o[:, :M], F.softplus(o[:, M:M + 1]), torch.sigmoid(o[:, M + 1:M + 2]), \
            F.softmax(o[:, M + 2:M + 5], dim=1), 1 + F.softplus(o[:, M + 5:M + 6])
        return k, beta, g, s, gamma

    def forward(self, x):
        b, T, _ = x.shape
        mem = self.mem_bias.clone().unsqueeze(0).repeat(b, 1, 1)
        h = x.new_zeros(b, self.hid)
        c = x.new_zeros(b, self.hid)
        r = x.new_zeros(b, self.M)
        wr = x.new_zeros(b, self.N)
        ww = x.new_zeros(b, self.N)
        outs = []
        for t in range(T):
            h, c = self.controller(torch.cat([x[:, t], r], dim=1), (h, c))
            wr = self.address(*self.split(self.read_fc(h)), wr, mem)
            r = torch.matmul(wr.unsqueeze(1), mem).squeeze(1)
            o = self.write_fc(h)
            ww = self.address(*self.split(o[:, :self.M + 6]), ww, mem)
            e, a = torch.sigmoid(o[:, self.M + 6:2 * self.M + 6]), o[:, 2 * self.M + 6:]
            mem = mem * (1 - torch.matmul(ww.unsqueeze(-1), e.unsqueeze(1))) + torch.matmul(ww.unsqueeze(-1),
                                                                                             a.unsqueeze(1))
            outs.append(torch.sigmoid(self.fc(torch.cat([h, r], dim=1))))
        return torch.stack(outs, dim=1)


# -- quantization / discrete latents --------------------------------------------------------------------

class FakeQuantConv(nn.Module):
    """A QAT conv: weights fake-quantized symmetric int8 per tensor (scale from the weight's absmax),
    input activations fake-quantized uint8 affine from a running min / max observer buffer."""

    def __init__(self, cin, cout, k, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2)
        self.bn = nn.BatchNorm2d(cout)
        self.register_buffer("act_range", torch.tensor([-3.0, 3.0]))

    def forward(self, x):
        lo, hi = self.act_range[0].item(), self.act_range[1].item()
        scale = max(hi - lo, 1e-8) / 255.0
        zp = int(min(255, max(0, round(-lo / scale))))
        x = torch.fake_quantize_per_tensor_affine(x, scale, zp, 0, 255)
        w = self.conv.weight
        ws = (w.detach().abs().max() / 127.0).float()
        wq = torch.fake_quantize_per_tensor_affine(w, ws, torch.zeros((), dtype=torch.int32, device=w.device), -128, 127)
        return F.relu(self.bn(F.conv2d(x, wq, self.conv.bias, self.conv.stride, self.conv.padding)))


class QATNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.layers = nn.Sequential(FakeQuantConv(3, 16, 3, 2), FakeQuantConv(16, 32, 3, 2), FakeQuantConv(32, 32, 3))
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        return self.fc(self.layers(x).mean((2, 3)))


class GumbelVQ(nn.Module):
    """lucidrains DALLE-pytorch's DiscreteVAE quantizer: logits over the codebook per position,
    gumbel_softmax (noise from a generator seeded per call, tau 0.9, straight-through hard), codebook
    einsum, a KL-to-uniform term."""

    def __init__(self, num_tokens=64, dim=32, hid=32, tau=0.9):
        super().__init__()
        self.tau, self.num_tokens = tau, num_tokens
        self.enc = nn.Sequential(nn.Conv2d(3, hid, 4, 2, 1), nn.ReLU(), nn.Conv2d(hid, hid, 4, 2, 1), nn.ReLU(),
                                 nn.Conv2d(hid, num_tokens, 1))
        self.codebook = nn.Embedding(num_tokens, dim)
        self.dec = nn.Sequential(nn.ConvTranspose2d(dim, hid, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(hid, 3, 4, 2, 1))

    def forward(self, img):
        g = torch.Generator(device=img.device).manual_seed(3)
        logits = self.enc(img)
        u = torch.rand(logits.shape, generator=g, dtype=logits.dtype, device=logits.device)
        gumbels = -torch.log((-torch.log(u.clamp_min(1e-10))).clamp_min(1e-10))
        y_soft = ((logits + gumbels) / self.tau).softmax(dim=1)
        index = y_soft.argmax(dim=1, keepdim=True)
        y_hard = torch.zeros_like(logits).scatter_(1, index, 1.0)
        one_hot = y_hard - y_soft.detach() + y_soft
        sampled = torch.einsum("b n h w, n d -> b d h w", one_hot, self.codebook.weight)
        out = self.dec(sampled)
        qy = F.softmax(logits.permute(0, 2, 3, 1).flatten(1, 2), dim=-1)
        log_uniform = torch.log(torch.tensor([1.0 / self.num_tokens], device=img.device, dtype=qy.dtype))
        kl = F.kl_div(log_uniform, torch.log(qy + 1e-10), None, None, "batchmean", log_target=True)
        recon = F.mse_loss(img, out)
        return torch.cat([out.flatten(1), (recon + 1e-3 * kl).expand(img.shape[0], 1)], dim=1)


# -- losses -------------------------------------------------------------------------------------------------

class KDLoss(nn.Module):
    """Hinton et al. distillation: a frozen (eval, no grad) teacher CNN, a student; loss
    alpha * KL(log_softmax(s / T) || softmax(t / T)) * T^2 + (1 - alpha) * CE(s, y)."""

    def __init__(self, classes=10, T=4.0, alpha=0.7):
        super().__init__()
        self.T, self.alpha = T, alpha
        self.teacher = nn.Sequential(ConvBNAct(3, 32, 3, 2), ConvBNAct(32, 64, 3, 2), nn.AdaptiveAvgPool2d(1),
                                     nn.Flatten(), nn.Linear(64, classes))
        self.student = nn.Sequential(ConvBNAct(3, 16, 3, 2), ConvBNAct(16, 16, 3, 2), nn.AdaptiveAvgPool2d(1),
                                     nn.Flatten(), nn.Linear(16, classes))
        for p in self.teacher.parameters():
            p.requires_grad_(False)

    def forward(self, x, y):
        with torch.no_grad():
            t = self.teacher(x)
        s = self.student(x)
        kd = F.kl_div(F.log_softmax(s / self.T, dim=1), F.softmax(t / self.T, dim=1), reduction="batchmean")
        loss = self.alpha * kd * self.T * self.T + (1 - self.alpha) * F.cross_entropy(s, y)
        return torch.cat([s, loss.expand(x.shape[0], 1)], dim=1)


class CTCASR(nn.Module):
    """DeepSpeech-style: 2-D conv frontend over (time, features), BiLSTM, per-frame log_softmax,
    F.ctc_loss(blank=0, zero_infinity=True, mean over target lengths)."""

    def __init__(self, feats=40, hid=64, vocab=29):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 16, (11, 5), stride=(2, 2), padding=(5, 2)), nn.BatchNorm2d(16),
                                  nn.Hardtanh(0, 20, inplace=True))
        self.rnn = nn.LSTM(16 * (feats // 2), hid, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hid, vocab)

    def forward(self, feats, targets, input_lengths, target_lengths):
        x = self.conv(feats.unsqueeze(1))                       # [b, 16, T/2, F/2]
        b, c, t, f = x.shape
        x, _ = self.rnn(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
        log_probs = F.log_softmax(self.fc(x), dim=-1)
        out_lengths = torch.div(input_lengths + 1, 2, rounding_mode="floor")
        loss = F.ctc_loss(log_probs.transpose(0, 1).float(), targets, out_lengths, target_lengths, blank=0,
                          zero_infinity=True)
        return torch.cat([log_probs.flatten(1), loss.to(log_probs.dtype).expand(b, 1)], dim=1)


def label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index=None, reduce=True):
    """fairseq.criterions.label_smoothed_cross_entropy.label_smoothed_nll_loss."""
    if target.dim() == lprobs.dim() - 1:
        target = target.unsqueeze(-1)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
    if ignore_index is not None:
        pad_mask = target.eq(ignore_index)
        nll_loss.masked_fill_(pad_mask, 0.0)
        smooth_loss.masked_fill_(pad_mask, 0.0)
    else:
        nll_loss, smooth_loss = nll_loss.squeeze(-1), smooth_loss.squeeze(-1)
    if reduce:
        nll_loss, smooth_loss = nll_loss.sum(), smooth_loss.sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll_loss + eps_i * smooth_loss
    return loss, nll_loss


class LabelSmoothLM(nn.Module):
    def __init__(self, vocab=500, d=64, heads=4, pad=1):
        super().__init__()
        self.pad = pad
        self.emb = nn.Embedding(vocab, d, padding_idx=pad)
        self.pos = nn.Parameter(torch.randn(128, d) * 0.02)
        self.block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, ids, target):
        s = ids.shape[1]
        mask = torch.triu(torch.full((s, s), float("-inf"), device=ids.device), 1)
        h = self.block(self.emb(ids) + self.pos[:s], src_mask=mask, is_causal=True)
        logits = self.out(h)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=self.pad,
                             label_smoothing=0.1)
        lprobs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
        fs, nll = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), 0.1, ignore_index=self.pad)
        ntok = target.ne(self.pad).sum()
        losses = torch.stack([ce, fs / ntok, nll / ntok]).to(logits.dtype)
        return torch.cat([logits.flatten(1), losses.unsqueeze(0).expand(ids.shape[0], 3)], dim=1)


# -- cases ------------------------------------------------------------------------------------------------

def _lm_targets(b, s, pad=1, vocab=500):
    t = torch.randint(2, vocab, (b, s))
    t[0, -3:] = pad
    return t


def _ctc_inputs(b, T=48, feats=40, vocab=29):
    x = torch.randn(b, T, feats)
    in_lens = torch.tensor([T] + [T - 6 * i for i in range(1, b)])
    tgt_lens = torch.tensor([8] + [max(2, 8 - 2 * i) for i in range(1, b)])
    targets = torch.randint(1, vocab, (b, 8))
    return x, targets, in_lens, tgt_lens


def cases(big: bool):
    """(name, build() -> (module, example inputs)) as bench/heldout.py's cases(); `big`: GPU sizes."""
    b, s = (8, 64) if big else (2, 16)
    img = 64 if big else 32
    ids = lambda n=s: torch.randint(1, 500, (b, n))  # noqa: E731
    fi = heldout.fan_in_init

    def padded_ids(n=s):
        t = ids(n)
        t[-1, n - n // 4:] = 0
        return t

    def mha_inputs():
        return (torch.randn(b, s, 64), torch.randn(s + 3, b, 48), torch.randn(s + 3, b, 32),
                torch.tensor([s] + [max(1, s - 5 * i) for i in range(1, b)]))

    def perceiver_inputs():
        mask = torch.ones(b, 4 * s, dtype=torch.bool)
        mask[-1, 3 * s:] = False
        return torch.randn(b, 4 * s, 24), mask

    yield "resnet50", lambda: (ResNet().eval(), (torch.randn(b, 3, img, img),))
    yield "resnet_bn_train", lambda: (ResNet().train(), (torch.randn(max(b, 4), 3, img, img),))
    yield "mobilenetv3", lambda: (fi(MobileNetV3()).eval(), (torch.randn(b, 3, 2 * img, 2 * img),))
    yield "efficientnet_sd", lambda: (fi(EfficientNetSD()).train(), (torch.randn(max(b, 4), 3, img, img),))
    yield "swin_block", lambda: (Swin().eval(), (torch.randn(b, 3, 32, 32),))
    yield "densenet", lambda: (fi(DenseNet()).eval(), (torch.randn(b, 3, img, img),))
    yield "shufflenet_v2", lambda: (fi(ShuffleNetV2()).eval(), (torch.randn(b, 3, 2 * img, 2 * img),))
    yield "inception", lambda: (fi(Inception()).eval(), (torch.randn(b, 3, 2 * img - 1, 2 * img - 1),))
    yield "squeezenet", lambda: (SqueezeNet().eval(), (torch.randn(b, 3, 2 * img, 2 * img),))
    yield "deeplab_aspp", lambda: (fi(DeepLabASPP()).eval(), (torch.randn(b, 3, img, img),))
    yield "nn_transformer", lambda: (NNTransformer().eval(), (padded_ids(), padded_ids(s // 2)))
    yield "encoder_fastpath", lambda: (EncoderFastPath().eval(), (ids(),))
    yield "mha_weights", lambda: (MHAWeights().eval(), mha_inputs())
    yield "fnet", lambda: (FNet().eval(), (ids(),))
    yield "melspec_cnn", lambda: (fi(MelSpecCNN()).eval(), (torch.randn(b, 4000 if not big else 16000),))
    yield "perceiver", lambda: (Perceiver().eval(), perceiver_inputs())
    yield "detr_head", lambda: (fi(DETR()).eval(), (torch.randn(b, 3, 2 * img, 2 * img),))
    yield "yolo_decode", lambda: (fi(YOLOHead()).eval(), (torch.randn(b, 3, 2 * img, 2 * img),))
    yield "tabnet", lambda: (fi(TabNet()).eval(), (torch.randn(8 * b, 24),))
    yield "ntm", lambda: (NTM().eval(), (torch.randn(b, 8 if not big else 32, 8),))
    yield "qat_fakequant", lambda: (fi(QATNet()).eval(), (torch.randn(b, 3, img, img),))
    yield "gumbel_vq", lambda: (GumbelVQ().eval(), (torch.randn(b, 3, img, img),))
    yield "kd_loss", lambda: (fi(KDLoss()).eval(), (torch.randn(4 * b, 3, img, img), torch.randint(0, 10, (4 * b,))))
    yield "ctc_asr", lambda: (CTCASR().eval(), _ctc_inputs(b))
    yield "label_smooth_lm", lambda: (LabelSmoothLM().eval(), (ids(), _lm_targets(b, s)))


if __name__ == "__main__":
    heldout.main(cases, __doc__)
