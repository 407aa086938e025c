"""bench/modules14.py's third part (same runner, its CASES appended there): what fine-tuning
and experiment scripts change between calls of a compiled model, each a guard to hold: a
module-level config dict, a class attribute, a buffer reassigned with another shape, an
embedding resized in place (resize_token_embeddings), a submodule's forward monkeypatched, a
dropout's p, a forward hook registered, a layer of a ModuleList replaced, layers frozen in the
middle of training, a global learning-rate schedule read in forward."""
from __future__ import annotations

import types

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, grad_ctx, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)

CFG = {"act": "gelu", "scale": 1.0}


class GlobalCfgBlock(nn.Module):
    """Reads a module-level dict of settings (a config loaded once, edited by a script)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x) * CFG["scale"]
        return F.gelu(h) if CFG["act"] == "gelu" else F.silu(h)


def _edit_cfg(m, i):
    CFG.update({0: {"act": "gelu", "scale": 1.0}, 1: {}, 2: {"scale": 0.5}, 3: {"act": "silu"}}[i])


case("module_level_cfg_dict_edited_between_calls", lambda: (R(2, 4),), ncalls=4, between=_edit_cfg)(
    lambda: GlobalCfgBlock())


class ClassFlagBlock(nn.Module):
    """A class attribute read as self.fused (a library-wide switch: `Block.fused = False`)."""

    fused = True

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if self.fused:
            return F.layer_norm(self.fc(x) + x, (4,))
        return F.layer_norm(self.fc(x), (4,)) + x


def _class_flag(m, i):
    ClassFlagBlock.fused = i != 2


case("class_attribute_switch_between_calls", lambda: (R(2, 4),), ncalls=4, between=_class_flag)(
    lambda: ClassFlagBlock())


class PosBuffer(nn.Module):
    """Learned positions as a buffer reassigned with a longer table between calls (interpolated
    position embeddings for a longer context)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.randn(1, 4, 3))

    def forward(self, x):
        return x + self.pos[:, :x.shape[1]], self.pos.shape[1]


def _grow_pos(m, i):
    if i == 2:
        m.pos = F.interpolate(m.pos.transpose(1, 2), size=8, mode="linear", align_corners=False).transpose(1, 2)


case("buffer_reassigned_longer_between_calls", lambda i=0: (R(2, 4 if i < 2 else 6, 3),), ncalls=4,
     between=_grow_pos)(lambda: PosBuffer())


class TiedLM(nn.Module):
    """An embedding tied to the output projection; resize_token_embeddings-style growth of the
    vocabulary by assigning weight.data between calls."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids):
        h = torch.tanh(self.emb(ids))
        return h @ self.emb.weight.t()


def _resize_vocab(m, i):
    if i == 2:
        with torch.no_grad():
            torch.manual_seed(5)
            m.emb.weight.data = torch.cat([m.emb.weight.data, torch.randn(3, 4) * 0.02])
            m.emb.num_embeddings = 13


case("embedding_weight_data_resized_between_calls", lambda i=0: (I(0, 10 if i < 2 else 13, 2, 5),), ncalls=4,
     between=_resize_vocab)(lambda: TiedLM())


class Patched(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.enc(x))


def _lora_like_forward(self, x):
    return F.linear(x, self.weight, self.bias) + 0.5 * x


def _patch_forward(m, i):
    if i == 2:
        m.enc.forward = types.MethodType(_lora_like_forward, m.enc)
    if i == 3:
        del m.enc.forward


case("submodule_forward_monkeypatched_between_calls", lambda: (R(3, 4),), ncalls=4, between=_patch_forward)(
    lambda: Patched())


class DropSchedule(nn.Module):
    """Dropout whose p a schedule sets between calls (p = 0 from some step on), train mode."""

    def __init__(self):
        super().__init__()
        self.fc, self.drop = nn.Linear(4, 4), nn.Dropout(0.3)

    def forward(self, x):
        return self.drop(self.fc(x))


case("dropout_p_scheduled_between_calls", lambda: (R(3, 4),), train=True, ncalls=4,
     between=lambda m, i: setattr(m.drop, "p", [0.3, 0.3, 0.1, 0.0][i]))(lambda: DropSchedule())


class Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _clip_hook(mod, inp, out):
    return out.clamp(-0.2, 0.2)


def _add_hook(m, i):
    if i == 2:
        m._h = m.a.register_forward_hook(_clip_hook)
    if i == 3:
        m._h.remove()


case("forward_hook_registered_then_removed_between_calls", lambda: (R(3, 4),), ncalls=4, between=_add_hook)(
    lambda: Hooked())


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return x


def _replace_layer(m, i):
    if i == 2:
        m.layers[1] = nn.Identity()
    if i == 3:
        del m.layers[0]


case("modulelist_layer_replaced_and_deleted_between_calls", lambda: (R(2, 4),), ncalls=4,
     between=_replace_layer)(lambda: Stack())


class FreezeStep(nn.Module):
    """A training step with torch.optim.SGD over all parameters; the encoder frozen
    (requires_grad_(False)) between calls, as gradual unfreezing schedules do in reverse."""

    def __init__(self):
        super().__init__()
        self.enc, self.head = nn.Linear(4, 4), nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.parameters(), lr=0.1)

    def forward(self, x, y):
        loss = F.mse_loss(self.head(torch.relu(self.enc(x))), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach()


case("layers_frozen_between_training_steps", lambda: (R(5, 4), R(5, 1)), train=True, ncalls=5, context=grad_ctx,
     between=lambda m, i: m.enc.requires_grad_(i < 2))(lambda: FreezeStep())


LR = [0.1]


class GlobalScheduleScale(nn.Module):
    """A float read from a module-level list a training loop updates (`LR[0] = sched(step)`)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x) * LR[0], LR[0] * 2


case("global_list_float_updated_between_calls", lambda: (R(2, 3),), ncalls=5,
     between=lambda m, i: LR.__setitem__(0, [0.1, 0.1, 0.05, 0.025, 0.0125][i]))(lambda: GlobalScheduleScale())
