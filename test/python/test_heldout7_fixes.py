"""Fixes found by bench/heldout7.py (classic PyTorch project code: GAN / VAE / RL / GNN training steps,
hooks, parametrizations, autograd tricks), each a tiny program compared with eager after every call."""
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations

import mlircap


def _close(a, b):
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def _gan(spectral=False, weight_norm=False):
    torch.manual_seed(0)
    G, D = nn.Linear(2, 4), nn.Linear(4, 1)
    if weight_norm:
        G = parametrizations.weight_norm(G)
    if spectral:
        D = parametrizations.spectral_norm(D)
    optD = torch.optim.SGD(D.parameters(), lr=0.1)
    optG = torch.optim.SGD(G.parameters(), lr=0.1)

    def step(real, z=None):
        if z is None:
            z = torch.randn(real.shape[0], 2)
        fake = G(z)
        d_loss = D(real).mean() - D(fake.detach()).mean()
        optD.zero_grad()
        d_loss.backward()
        optD.step()
        g_loss = -D(fake).mean()
        optG.zero_grad()
        g_loss.backward()
        optG.step()
        return d_loss.detach(), g_loss.detach()
    return step, lambda: [p.detach().clone() for p in (*G.parameters(), *D.parameters())] + \
        [p.grad for p in (*G.parameters(), *D.parameters())]


def _check_gan(calls, **kw):
    (fe, se), (fc, sc) = _gan(**kw), _gan(**kw)
    fast = mlircap.compile(fc)
    for i, args in enumerate(calls):
        torch.manual_seed(10 + i)
        re = fe(*args)
        torch.manual_seed(10 + i)
        rc = fast(*args)
        assert _close(re, rc), (i, re, rc)
        assert _close(se(), sc()), i


def test_gan_step_discriminator_loss_and_fake_in_one_graph():
    """A GAN step (the DCGAN / WGAN loop): `fake = G(z)`, the discriminator's loss on `fake.detach()`,
    its backward, then the generator's loss through `fake` and its backward. The graph up to the first
    backward returns the loss (of D's parameters) and `fake` (of G's): as one autograd node, the loss's
    backward freed the saved tensors `fake`'s backward needs ('Trying to backward through the graph a
    second time' where eager runs); parameters alone were kept in one graph."""
    torch.manual_seed(1)
    _check_gan([(torch.randn(3, 4), torch.randn(3, 2)) for _ in range(3)])


def test_gan_step_weight_norm_generator():
    torch.manual_seed(2)
    _check_gan([(torch.randn(3, 4), torch.randn(3, 2)) for _ in range(3)], weight_norm=True)


def test_sngan_step_spectral_norm_power_iteration_and_noise_drawn_inside():
    """the same with the noise drawn in the graph (`torch.randn`) and a spectral_norm discriminator (its
    power iteration writes the u / v buffers with `out=` under no_grad): the parts run in the order of
    their draws, the buffer writes in the discriminator's part."""
    torch.manual_seed(3)
    _check_gan([(torch.randn(3, 4),) for _ in range(3)], spectral=True)


def test_gradient_hook_on_a_leaf_made_in_the_call_each_loop_step():
    """`x = x.clone().requires_grad_()` then, in a loop, `x.register_hook(lambda g: ...)`, a forward and
    `loss.backward()` (style transfer's clamped image gradient): the graph held the hook as a node
    returning x, and its result stood in for the leaf, a non-leaf whose history is that graph's autograd
    node; the next step's backward walked into it, freed by the first ('backward through the graph a
    second time'). A leaf's hook stays a step between graphs."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)

    def step(x):
        x = x.clone().requires_grad_(True)
        losses = []
        for _ in range(2):
            x.register_hook(lambda g: g.clamp(-0.1, 0.1))
            loss = torch.relu(lin(x)).sum()
            loss.backward()
            losses.append(loss.detach())
        return losses, x.grad

    fast = mlircap.compile(step)
    for _ in range(3):
        x = torch.randn(2, 4)
        lin.zero_grad()
        ref, ref_lin = step(x), lin.weight.grad.clone()
        lin.zero_grad()
        got = fast(x)
        assert _close(ref, got) and _close(ref_lin, lin.weight.grad)


def _hooked_net(store):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    feats = {}
    if store == "default":
        hook = lambda m, i, o, feats=feats: feats.__setitem__("relu", o)  # noqa: E731
    elif store:
        def hook(m, i, o):
            feats["relu"] = o
    else:
        hook = lambda m, i, o: feats.__setitem__("relu", o)  # noqa: E731
    net[1].register_forward_hook(hook)
    return net, feats


def test_forward_hook_writing_a_dict_of_its_closure():
    """Features taken by a forward hook into a dict of the enclosing function (style transfer's and
    perceptual losses' `feats[name] = out`, Grad-CAM): the hook's closure was no source capture knew, so
    the write went untracked, and from the first replay on the dict held the recording's tensor (a wrong
    value; with a backward through it, 'backward through the graph a second time')."""
    for store in (True, False):
        net, feats = _hooked_net(store)
        _check_hooked(net, feats)


def test_forward_hook_writing_a_dict_given_as_its_default_argument():
    """the same dict handed to the hook as a default argument (`lambda m, i, o, feats=feats: ...`)."""
    _check_hooked(*_hooked_net("default"))


def _check_hooked(net, feats):
    fast = mlircap.compile(net)
    for _ in range(3):
        x = torch.randn(2, 4)
        out = fast(x)
        got = feats["relu"]
        assert torch.allclose(out, net(x)) and torch.allclose(got, feats["relu"])
