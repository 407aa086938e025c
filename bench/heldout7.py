"""Held-out set 7: classic PyTorch project code beyond transformers, written the way public repositories and
tutorials write it (the DCGAN / WGAN-GP / SN-GAN training loops, the VAE example, REINFORCE / PPO / DQN / SAC
updates with torch.distributions, a GCN-style layer by index_add_ with scatter_reduce pooling, PointNet, a
mel-spectrogram front end with SpecAugment, a GRU seq2seq with teacher forcing drawn per step, CTC over a
BiLSTM, a gradient-reversal autograd.Function, checkpoint_sequential, style transfer with forward hooks and
a tensor hook, weight_norm / spectral_norm parametrizations, BYOL's EMA target, focal / GIoU / label-smoothing
/ ArcFace / triplet / NT-Xent losses, nn.MultiheadAttention with key_padding_mask, packed LSTM sequences, bf16
autocast with gradient accumulation, a Conformer block, RealNVP with ActNorm's data-dependent init and logdet,
a Gumbel-softmax categorical VAE, skip-gram with negative sampling, a char-RNN sampler, a U-Net with Dice
loss, the word_language_model Transformer).

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, parameters and gradients, optimizer state,
counters, the global RNG's state after the call, arguments): bench/heldout4.py's runner and report
(imported, same options):

    python bench/heldout7.py --threads 1 --dtypes fp32
    python bench/heldout7.py --threads 1 --dtypes bf16           # the cases where bf16 is meaningful
    python bench/heldout7.py --threads 1 --models wgan_gp,ppo_update --json /tmp/h7.jsonl
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, Normal
from torch.nn.utils import parametrizations
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils.checkpoint import checkpoint_sequential

import heldout4  # noqa: E402  (the runner: run_case, diff, main)


def _flat(ts):
    ts = [t.detach().flatten() for t in ts if t is not None]
    return torch.cat(ts) if ts else None


def _state(model, *extra):
    """parameters and gradients each compared as one vector (on the scale of all of them: a gradient that is
    zero up to rounding differs by rounding alone), buffers one by one; as bench/heldout6.py (not imported:
    it imports transformers)."""
    params = dict(model.named_parameters())
    bufs = {k: v for k, v in model.state_dict().items() if k not in params}
    return (_flat(params.values()), _flat(p.grad for p in params.values()),
            [p.grad is None for p in params.values()], bufs, *extra)


def _opt_state(opt, sched=None):
    """each kind of per-parameter optimizer state one vector, learning rates, the scheduler's step."""
    st = opt.state_dict()["state"]
    kinds = sorted({k for v in st.values() for k in v})
    return ({k: _flat(v.get(k) for v in st.values()) for k in kinds},
            [g["lr"] for g in opt.param_groups], sched.last_epoch if sched else None)


# ------------------------------------------------------------------------------------------------ GANs
class DCGenerator(nn.Module):
    def __init__(self, nz=8, ngf=8, nc=1):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class DCDiscriminator(nn.Module):
    def __init__(self, ndf=8, nc=1):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


def make_dcgan(dt):
    netG, netD = DCGenerator().to(dt), DCDiscriminator().to(dt)
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real_label, fake_label = 1.0, 0.0

    def train_step(real):
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        b_size = real.size(0)
        label = torch.full((b_size,), real_label, dtype=real.dtype)
        output = netD(real)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()
        noise = torch.randn(b_size, 8, 1, 1, dtype=real.dtype)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optD.step()
        # (2) Update G network: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optG.step()
        return errD.item(), errG.item(), D_x, D_G_z1, D_G_z2
    return train_step, lambda: (_state(netG), _state(netD), _opt_state(optD), _opt_state(optG))


def make_wgan_gp(dt):
    G = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10)).to(dt)
    D = nn.Sequential(nn.Linear(10, 32), nn.LeakyReLU(0.2), nn.Linear(32, 32), nn.LeakyReLU(0.2),
                      nn.Linear(32, 1)).to(dt)
    optD = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.0, 0.9))
    optG = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
    lambda_gp, n_critic = 10.0, 3

    def compute_gradient_penalty(D, real_samples, fake_samples):
        alpha = torch.rand(real_samples.size(0), 1, dtype=real_samples.dtype)
        interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
        d_interpolates = D(interpolates)
        fake = torch.ones(real_samples.shape[0], 1, dtype=real_samples.dtype)
        gradients = torch.autograd.grad(outputs=d_interpolates, inputs=interpolates, grad_outputs=fake,
                                        create_graph=True, retain_graph=True, only_inputs=True)[0]
        gradients = gradients.view(gradients.size(0), -1)
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

    def train_step(real_batches):
        d_losses = []
        for real in real_batches[:n_critic]:
            optD.zero_grad()
            z = torch.randn(real.shape[0], 6, dtype=real.dtype)
            fake = G(z)
            gp = compute_gradient_penalty(D, real.data, fake.data)
            d_loss = -torch.mean(D(real)) + torch.mean(D(fake.detach())) + lambda_gp * gp
            d_loss.backward()
            optD.step()
            d_losses.append(d_loss.item())
        optG.zero_grad()
        z = torch.randn(real_batches[0].shape[0], 6, dtype=real_batches[0].dtype)
        g_loss = -torch.mean(D(G(z)))
        g_loss.backward()
        optG.step()
        return d_losses, g_loss.detach()
    return train_step, lambda: (_state(G), _state(D), _opt_state(optD), _opt_state(optG))


def wgan_inputs(i, dt):
    return ([torch.randn(8, 10, dtype=dt) * 0.5 + 1.0 for _ in range(3)],)


def make_sngan(dt):
    """SN-GAN discriminator (spectral_norm: power iteration, u / v buffers updated in train mode), a weight_norm
    generator, hinge loss."""
    D = nn.Sequential(parametrizations.spectral_norm(nn.Linear(12, 32)), nn.LeakyReLU(0.1),
                      parametrizations.spectral_norm(nn.Linear(32, 32)), nn.LeakyReLU(0.1),
                      parametrizations.spectral_norm(nn.Linear(32, 1))).to(dt)
    G = nn.Sequential(parametrizations.weight_norm(nn.Linear(4, 32)), nn.ReLU(),
                      parametrizations.weight_norm(nn.Linear(32, 12))).to(dt)
    optD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.0, 0.9))
    optG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.0, 0.9))

    def step(real):
        z = torch.randn(real.shape[0], 4, dtype=real.dtype)
        fake = G(z)
        d_loss = F.relu(1.0 - D(real)).mean() + F.relu(1.0 + D(fake.detach())).mean()
        optD.zero_grad()
        d_loss.backward()
        optD.step()
        g_loss = -D(fake).mean()
        optG.zero_grad()
        g_loss.backward()
        optG.step()
        return d_loss.detach(), g_loss.detach()
    return step, lambda: (_state(D), _state(G), _opt_state(optD))


# ------------------------------------------------------------------------------------------------ VAEs, flows
class VAE(nn.Module):
    """pytorch/examples vae/main.py, smaller."""

    def __init__(self, d=36, h=24, z=4):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc21 = nn.Linear(h, z)
        self.fc22 = nn.Linear(h, z)
        self.fc3 = nn.Linear(z, h)
        self.fc4 = nn.Linear(h, d)
        self.d = d

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, self.d))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def vae_loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, recon_x.shape[-1]), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def make_vae(dt):
    model = VAE().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = {"train_loss": 0.0, "seen": 0}

    def train(data):
        model.train()
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = vae_loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        log["train_loss"] += loss.item()
        log["seen"] += len(data)
        optimizer.step()
        with torch.no_grad():
            sample = model.decode(torch.randn(4, 4, dtype=data.dtype))
        return loss.item() / len(data), sample
    return train, lambda: (_state(model), _opt_state(optimizer), dict(log))


def make_gumbel_vae(dt):
    """a categorical VAE: F.gumbel_softmax(hard=True) with an annealed temperature, KL to a uniform prior."""
    K, N = 5, 3
    enc = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, N * K)).to(dt)
    dec = nn.Sequential(nn.Linear(N * K, 32), nn.ReLU(), nn.Linear(32, 20)).to(dt)
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=1e-3)
    st = {"step": 0}

    def step(x):
        tau = max(0.5, math.exp(-3e-2 * st["step"]))
        logits = enc(x).view(-1, N, K)
        z = F.gumbel_softmax(logits, tau=tau, hard=True)
        recon = dec(z.view(-1, N * K))
        q = F.softmax(logits, dim=-1)
        kl = (q * (torch.log(q + 1e-20) - math.log(1.0 / K))).sum((1, 2)).mean()
        rec = F.binary_cross_entropy_with_logits(recon, x, reduction="sum") / x.shape[0]
        loss = rec + kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        st["step"] += 1
        return loss.detach(), z.argmax(-1), tau
    return step, lambda: (_state(enc), _state(dec), dict(st))


class ActNorm(nn.Module):
    """Glow's ActNorm: data-dependent initialization on the first batch (a flag buffer), logdet."""

    def __init__(self, d):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, d))
        self.logs = nn.Parameter(torch.zeros(1, d))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))

    def initialize(self, x):
        with torch.no_grad():
            mean = x.mean(0, keepdim=True)
            std = x.std(0, keepdim=True)
            self.loc.data.copy_(-mean)
            self.logs.data.copy_(torch.log(1 / (std + 1e-6)))

    def forward(self, x):
        if self.initialized.item() == 0:
            self.initialize(x)
            self.initialized.fill_(1)
        y = (x + self.loc) * torch.exp(self.logs)
        return y, self.logs.sum().expand(x.shape[0])


class Coupling(nn.Module):
    """RealNVP affine coupling with a fixed binary mask, tanh-bounded scale."""

    def __init__(self, d, mask):
        super().__init__()
        self.register_buffer("mask", mask)
        self.net = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2 * d))

    def forward(self, x):
        x_ = x * self.mask
        s, t = self.net(x_).chunk(2, dim=1)
        s = torch.tanh(s) * (1 - self.mask)
        t = t * (1 - self.mask)
        y = x_ + (1 - self.mask) * (x * torch.exp(s) + t)
        return y, s.sum(dim=1)

    def inverse(self, y):
        y_ = y * self.mask
        s, t = self.net(y_).chunk(2, dim=1)
        s = torch.tanh(s) * (1 - self.mask)
        t = t * (1 - self.mask)
        return y_ + (1 - self.mask) * ((y - t) * torch.exp(-s))


class RealNVP(nn.Module):
    def __init__(self, d=4, n=4):
        super().__init__()
        layers = []
        for i in range(n):
            mask = torch.tensor([(j + i) % 2 for j in range(d)], dtype=torch.float32)
            layers += [ActNorm(d), Coupling(d, mask)]
        self.layers = nn.ModuleList(layers)
        self.prior = torch.distributions.Normal(0.0, 1.0)

    def forward(self, x):
        logdet = torch.zeros(x.shape[0], dtype=x.dtype)
        for layer in self.layers:
            x, ld = layer(x)
            logdet = logdet + ld
        return x, logdet

    def log_prob(self, x):
        z, logdet = self(x)
        return self.prior.log_prob(z).sum(1) + logdet

    @torch.no_grad()
    def sample(self, n, dtype):
        z = torch.randn(n, 4, dtype=dtype)
        for layer in reversed(self.layers):
            if isinstance(layer, Coupling):
                z = layer.inverse(z)
            else:
                z = z * torch.exp(-layer.logs) - layer.loc
        return z


def make_realnvp(dt):
    flow = RealNVP().to(dt)
    opt = torch.optim.Adam(flow.parameters(), lr=1e-3)

    def step(x):
        loss = -flow.log_prob(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), flow.sample(3, x.dtype)
    return step, lambda: (_state(flow), _opt_state(opt))


def moons(i, dt, n=16):
    t = torch.rand(n) * math.pi
    x = torch.stack([torch.cos(t), torch.sin(t), torch.cos(2 * t), t / math.pi], 1) + 0.05 * torch.randn(n, 4)
    return (x.to(dt),)


# ------------------------------------------------------------------------------------------------ RL
class Policy(nn.Module):
    """pytorch/examples reinforcement_learning/reinforce.py, on a batch of states of one episode."""

    def __init__(self, obs=4, act=3):
        super().__init__()
        self.affine1 = nn.Linear(obs, 32)
        self.dropout = nn.Dropout(p=0.2)
        self.affine2 = nn.Linear(32, act)

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        return F.softmax(self.affine2(x), dim=1)


def make_reinforce(dt):
    policy = Policy().to(dt)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    eps = torch.finfo(torch.float32).eps
    gamma = 0.99

    def finish_episode(states, rewards):
        probs = policy(states)
        m = Categorical(probs)
        actions = m.sample()
        log_probs = m.log_prob(actions)
        R = 0
        returns = []
        for r in rewards.tolist()[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns, dtype=states.dtype)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        policy_loss = []
        for log_prob, R in zip(log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.stack(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        return policy_loss.detach(), actions
    return finish_episode, lambda: (_state(policy), _opt_state(optimizer))


def reinforce_inputs(i, dt):
    T = 6 + 2 * (i % 2)
    return torch.randn(T, 4, dtype=dt), torch.rand(T, dtype=dt)


class ActorCritic(nn.Module):
    def __init__(self, obs=6, act=4, h=32):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(obs, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(), nn.Linear(h, act))
        self.critic = nn.Sequential(nn.Linear(obs, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(), nn.Linear(h, 1))

    def evaluate(self, state, action):
        dist = Categorical(logits=self.actor(state))
        return dist.log_prob(action), self.critic(state).squeeze(-1), dist.entropy()


def make_ppo(dt):
    ac = ActorCritic().to(dt)
    opt = torch.optim.Adam(ac.parameters(), lr=3e-4, eps=1e-5)
    clip, K_epochs, mb = 0.2, 2, 8

    def update(states, actions, old_logprobs, rewards, dones, values):
        # GAE-free discounted returns (nanoPPO style), advantages normalised
        returns, disc = [], 0.0
        for r, d in zip(reversed(rewards.tolist()), reversed(dones.tolist())):
            if d:
                disc = 0.0
            disc = r + 0.99 * disc
            returns.insert(0, disc)
        returns = torch.tensor(returns, dtype=states.dtype)
        returns = (returns - returns.mean()) / (returns.std() + 1e-7)
        advantages = returns - values.detach()
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        stats = []
        for _ in range(K_epochs):
            perm = torch.randperm(states.shape[0])
            for start in range(0, states.shape[0], mb):
                idx = perm[start:start + mb]
                logprobs, state_values, dist_entropy = ac.evaluate(states[idx], actions[idx])
                ratios = torch.exp(logprobs - old_logprobs[idx].detach())
                surr1 = ratios * advantages[idx]
                surr2 = torch.clamp(ratios, 1 - clip, 1 + clip) * advantages[idx]
                loss = (-torch.min(surr1, surr2) + 0.5 * F.mse_loss(state_values, returns[idx], reduction="none")
                        - 0.01 * dist_entropy).mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(ac.parameters(), 0.5)
                opt.step()
                with torch.no_grad():
                    approx_kl = ((ratios - 1) - (logprobs - old_logprobs[idx])).mean()
                    clipfrac = ((ratios - 1.0).abs() > clip).float().mean().item()
                stats.append((loss.item(), approx_kl.item(), clipfrac))
        return stats
    return update, lambda: (_state(ac), _opt_state(opt))


def ppo_inputs(i, dt, n=16):
    dones = torch.zeros(n, dtype=torch.bool)
    dones[[5 + i, 11]] = True
    return (torch.randn(n, 6, dtype=dt), torch.randint(0, 4, (n,)), -torch.rand(n, dtype=dt) * 2,
            torch.randn(n, dtype=dt), dones, torch.randn(n, dtype=dt))


class DQN(nn.Module):
    def __init__(self, n_obs=5, n_act=3):
        super().__init__()
        self.layer1 = nn.Linear(n_obs, 32)
        self.layer2 = nn.Linear(32, 32)
        self.layer3 = nn.Linear(32, n_act)

    def forward(self, x):
        x = F.relu(self.layer1(x))
        x = F.relu(self.layer2(x))
        return self.layer3(x)


def make_dqn(dt):
    """the PyTorch DQN tutorial's optimize_model: non-final mask, gather, target net's max, Huber loss,
    value clipping of gradients, soft target update by state_dict; epsilon-greedy selection."""
    policy_net, target_net = DQN().to(dt), DQN().to(dt)
    target_net.load_state_dict(policy_net.state_dict())
    optimizer = torch.optim.AdamW(policy_net.parameters(), lr=1e-3, amsgrad=True)
    GAMMA, TAU = 0.99, 0.005
    steps = {"done": 0}

    def select_action(state):
        sample = torch.rand(()).item()
        eps_threshold = 0.05 + (0.9 - 0.05) * math.exp(-1.0 * steps["done"] / 10)
        steps["done"] += 1
        if sample > eps_threshold:
            with torch.no_grad():
                return policy_net(state).max(1).indices.view(1, 1)
        return torch.randint(0, 3, (1, 1))

    def optimize_model(state_batch, action_batch, reward_batch, next_states, done):
        action = select_action(state_batch[:1])
        non_final_mask = ~done
        non_final_next_states = next_states[non_final_mask]
        state_action_values = policy_net(state_batch).gather(1, action_batch)
        next_state_values = torch.zeros(state_batch.shape[0], dtype=state_batch.dtype)
        with torch.no_grad():
            next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
        expected_state_action_values = (next_state_values * GAMMA) + reward_batch
        criterion = nn.SmoothL1Loss()
        loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
        target_net_state_dict = target_net.state_dict()
        policy_net_state_dict = policy_net.state_dict()
        for key in policy_net_state_dict:
            target_net_state_dict[key] = policy_net_state_dict[key] * TAU + target_net_state_dict[key] * (1 - TAU)
        target_net.load_state_dict(target_net_state_dict)
        return loss.detach(), action
    return optimize_model, lambda: (_state(policy_net), _state(target_net), _opt_state(optimizer), dict(steps))


def dqn_inputs(i, dt, n=12):
    done = torch.zeros(n, dtype=torch.bool)
    done[torch.randperm(n)[: 2 + i % 3]] = True
    return (torch.randn(n, 5, dtype=dt), torch.randint(0, 3, (n, 1)), torch.randn(n, dtype=dt),
            torch.randn(n, 5, dtype=dt), done)


class SACActor(nn.Module):
    def __init__(self, obs=6, act=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.mu, self.log_std = nn.Linear(32, act), nn.Linear(32, act)

    def forward(self, s):
        h = self.net(s)
        log_std = torch.clamp(self.log_std(h), -20, 2)
        dist = Normal(self.mu(h), log_std.exp())
        u = dist.rsample()
        a = torch.tanh(u)
        logp = dist.log_prob(u).sum(-1) - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return a, logp


def make_sac(dt):
    """SAC (spinning-up style): twin Q and their Polyak-averaged targets (p_targ.data.mul_ / add_),
    reparameterized tanh-Gaussian actor, automatic entropy tuning with log_alpha."""
    actor = SACActor().to(dt)

    def q():
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)).to(dt)
    q1, q2 = q(), q()
    q1_t, q2_t = q(), q()
    q1_t.load_state_dict(q1.state_dict())
    q2_t.load_state_dict(q2.state_dict())
    for p in [*q1_t.parameters(), *q2_t.parameters()]:
        p.requires_grad = False
    log_alpha = torch.zeros(1, dtype=dt, requires_grad=True)
    pi_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    q_opt = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=3e-4)
    a_opt = torch.optim.Adam([log_alpha], lr=3e-4)
    target_entropy, gamma, polyak = -2.0, 0.99, 0.995

    def update(o, a, r, o2, d):
        alpha = log_alpha.exp().detach()
        qa1, qa2 = q1(torch.cat([o, a], -1)).squeeze(-1), q2(torch.cat([o, a], -1)).squeeze(-1)
        with torch.no_grad():
            a2, logp_a2 = actor(o2)
            oa2 = torch.cat([o2, a2], -1)
            q_pi_targ = torch.min(q1_t(oa2), q2_t(oa2)).squeeze(-1)
            backup = r + gamma * (1 - d) * (q_pi_targ - alpha * logp_a2)
        loss_q = ((qa1 - backup) ** 2).mean() + ((qa2 - backup) ** 2).mean()
        q_opt.zero_grad()
        loss_q.backward()
        q_opt.step()
        for p in [*q1.parameters(), *q2.parameters()]:
            p.requires_grad = False
        pi, logp_pi = actor(o)
        opi = torch.cat([o, pi], -1)
        q_pi = torch.min(q1(opi), q2(opi)).squeeze(-1)
        loss_pi = (alpha * logp_pi - q_pi).mean()
        pi_opt.zero_grad()
        loss_pi.backward()
        pi_opt.step()
        for p in [*q1.parameters(), *q2.parameters()]:
            p.requires_grad = True
        alpha_loss = -(log_alpha * (logp_pi.detach() + target_entropy)).mean()
        a_opt.zero_grad()
        alpha_loss.backward()
        a_opt.step()
        with torch.no_grad():
            for net, targ in ((q1, q1_t), (q2, q2_t)):
                for p, p_targ in zip(net.parameters(), targ.parameters()):
                    p_targ.data.mul_(polyak)
                    p_targ.data.add_((1 - polyak) * p.data)
        return loss_q.item(), loss_pi.item(), alpha.item()
    return update, lambda: (_state(actor), _state(q1), _state(q2_t), log_alpha, _opt_state(q_opt))


def sac_inputs(i, dt, n=10):
    return (torch.randn(n, 6, dtype=dt), torch.rand(n, 2, dtype=dt) * 2 - 1, torch.randn(n, dtype=dt),
            torch.randn(n, 6, dtype=dt), (torch.rand(n) < 0.2).to(dt))


# ------------------------------------------------------------------------------------------------ graphs, points
class GraphConv(nn.Module):
    """a GCN layer written without PyG: self-loops, symmetric degree normalisation by index_add_, messages
    summed into targets with index_add_."""

    def __init__(self, i, o):
        super().__init__()
        self.lin = nn.Linear(i, o, bias=False)
        self.bias = nn.Parameter(torch.zeros(o))

    def forward(self, x, edge_index):
        n = x.size(0)
        loops = torch.arange(n).unsqueeze(0).repeat(2, 1)
        edge_index = torch.cat([edge_index, loops], dim=1)
        row, col = edge_index
        deg = torch.zeros(n, dtype=x.dtype).index_add_(0, col, torch.ones(col.size(0), dtype=x.dtype))
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, col, h[row] * norm.view(-1, 1))
        return out + self.bias


def global_pool(x, batch, num_graphs, reduce):
    out = torch.zeros(num_graphs, x.size(1), dtype=x.dtype)
    idx = batch.unsqueeze(1).expand_as(x)
    return out.scatter_reduce(0, idx, x, reduce=reduce, include_self=False)


class GCNGraphClassifier(nn.Module):
    def __init__(self, d=6, h=16, c=3):
        super().__init__()
        self.conv1, self.conv2 = GraphConv(d, h), GraphConv(h, h)
        self.lin = nn.Linear(2 * h, c)

    def forward(self, x, edge_index, batch, num_graphs):
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.1, training=self.training)
        x = F.relu(self.conv2(x, edge_index))
        pooled = torch.cat([global_pool(x, batch, num_graphs, "mean"), global_pool(x, batch, num_graphs, "amax")], 1)
        return self.lin(pooled)


def make_gcn_graphs(dt):
    model = GCNGraphClassifier().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=5e-4)

    def train(x, edge_index, batch, y):
        model.train()
        num_graphs = int(batch.max()) + 1
        opt.zero_grad()
        out = model(x, edge_index, batch, num_graphs)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        correct = int((out.argmax(dim=1) == y).sum())
        return loss.detach(), correct
    return train, lambda: (_state(model), _opt_state(opt))


def graphs_inputs(i, dt):
    sizes = [5, 7, 4 + i % 3]
    xs, edges, batch, off = [], [], [], 0
    for g, n in enumerate(sizes):
        xs.append(torch.randn(n, 6, dtype=dt))
        src = torch.randint(0, n, (2 * n,))
        dst = (src + torch.randint(1, n, (2 * n,))) % n
        edges.append(torch.stack([src, dst]) + off)
        batch.append(torch.full((n,), g))
        off += n
    return torch.cat(xs), torch.cat(edges, 1), torch.cat(batch), torch.randint(0, 3, (len(sizes),))


class TNet(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.conv1, self.conv2 = nn.Conv1d(k, 16, 1), nn.Conv1d(16, 32, 1)
        self.fc1, self.fc2 = nn.Linear(32, 16), nn.Linear(16, k * k)
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm1d(16), nn.BatchNorm1d(32), nn.BatchNorm1d(16)

    def forward(self, x):
        b = x.size(0)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = torch.max(x, 2, keepdim=True)[0].view(-1, 32)
        x = self.fc2(F.relu(self.bn3(self.fc1(x))))
        iden = torch.eye(self.k, dtype=x.dtype).view(1, self.k * self.k).repeat(b, 1)
        return (x + iden).view(-1, self.k, self.k)


class PointNetCls(nn.Module):
    """fxia22/pointnet.pytorch: input and feature T-Nets, shared MLPs as Conv1d + BatchNorm, max-pool over
    points, feature-transform regularizer."""

    def __init__(self, k=4):
        super().__init__()
        self.stn, self.fstn = TNet(3), TNet(16)
        self.conv1, self.conv2 = nn.Conv1d(3, 16, 1), nn.Conv1d(16, 64, 1)
        self.bn1, self.bn2 = nn.BatchNorm1d(16), nn.BatchNorm1d(64)
        self.fc = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, k))

    def forward(self, x):
        trans = self.stn(x)
        x = torch.bmm(x.transpose(2, 1), trans).transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        trans_feat = self.fstn(x)
        x = torch.bmm(x.transpose(2, 1), trans_feat).transpose(2, 1)
        x = self.bn2(self.conv2(x))
        x = torch.max(x, 2, keepdim=True)[0].view(-1, 64)
        return F.log_softmax(self.fc(x), dim=1), trans_feat


def feature_transform_regularizer(trans):
    d = trans.size()[1]
    eye = torch.eye(d, dtype=trans.dtype)[None, :, :]
    return torch.mean(torch.norm(torch.bmm(trans, trans.transpose(2, 1)) - eye, dim=(1, 2)))


def make_pointnet(dt):
    classifier = PointNetCls().to(dt)
    optimizer = torch.optim.Adam(classifier.parameters(), lr=1e-3, betas=(0.9, 0.999))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    def train(points, target):
        points = points.transpose(2, 1)
        optimizer.zero_grad()
        classifier.train()
        pred, trans_feat = classifier(points)
        loss = F.nll_loss(pred, target) + feature_transform_regularizer(trans_feat) * 0.001
        loss.backward()
        optimizer.step()
        scheduler.step()
        pred_choice = pred.data.max(1)[1]
        correct = pred_choice.eq(target.data).cpu().sum()
        return loss.item(), correct.item()
    return train, lambda: (_state(classifier), _opt_state(optimizer, scheduler))


def points_inputs(i, dt):
    return torch.randn(4, 32 + 8 * (i % 2), 3, dtype=dt), torch.randint(0, 4, (4,))


# ------------------------------------------------------------------------------------------------ audio, sequences
def hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_filterbank(n_fft, n_mels, sr, f_min=0.0, f_max=None):
    f_max = f_max or sr / 2
    all_freqs = torch.linspace(0, sr // 2, n_fft // 2 + 1)
    m_pts = torch.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down, up))


class LogMel(nn.Module):
    """torchaudio's MelSpectrogram written out: hann-windowed STFT, power, mel matrix, log; per-utterance
    mean / variance normalisation; SpecAugment time and frequency masks in training."""

    def __init__(self, n_fft=64, hop=16, n_mels=12, sr=8000):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("fb", mel_filterbank(n_fft, n_mels, sr))

    def forward(self, wav, specaug=True):
        spec = torch.stft(wav, self.n_fft, hop_length=self.hop, window=self.window, center=True,
                          pad_mode="reflect", return_complex=True)
        power = spec.abs().pow(2.0)
        mel = torch.matmul(power.transpose(-1, -2), self.fb).transpose(-1, -2)
        logmel = torch.log(torch.clamp(mel, min=1e-10))
        logmel = (logmel - logmel.mean(-1, keepdim=True)) / (logmel.std(-1, keepdim=True) + 1e-5)
        if self.training and specaug:
            B, Fq, T = logmel.shape
            logmel = logmel.clone()
            for b in range(B):
                f = int(torch.randint(0, 4, ()))
                f0 = int(torch.randint(0, Fq - f + 1, ()))
                logmel[b, f0:f0 + f, :] = 0
                t = int(torch.randint(0, 5, ()))
                t0 = int(torch.randint(0, T - t + 1, ()))
                logmel[b, :, t0:t0 + t] = 0
        return logmel


def make_melspec(dt):
    front = LogMel().to(dt)
    cls = nn.Sequential(nn.Conv1d(12, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                        nn.Linear(16, 4)).to(dt)
    opt = torch.optim.SGD(cls.parameters(), lr=0.05, momentum=0.9)

    def step(wav, y):
        front.train()
        feats = front(wav)
        loss = F.cross_entropy(cls(feats), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), feats
    return step, lambda: (_state(cls), _opt_state(opt))


def wav_inputs(i, dt):
    n = 800 + 80 * (i % 2)
    t = torch.arange(n) / 8000
    wav = torch.stack([torch.sin(2 * math.pi * (300 + 200 * k) * t) for k in range(3)]) + 0.1 * torch.randn(3, n)
    return wav.to(dt), torch.randint(0, 4, (3,))


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)

    def forward(self, input):
        output, hidden = self.gru(self.embedding(input))
        return output, hidden


class AttnDecoderRNN(nn.Module):
    """the seq2seq translation tutorial's Bahdanau decoder, one step per call."""

    def __init__(self, hidden_size, output_size):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.Wa, self.Ua, self.Va = (nn.Linear(hidden_size, hidden_size), nn.Linear(hidden_size, hidden_size),
                                     nn.Linear(hidden_size, 1))
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.embedding(input)
        query = hidden.permute(1, 0, 2)
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(encoder_outputs))).squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, encoder_outputs)
        output, hidden = self.gru(torch.cat((embedded, context), dim=2), hidden)
        return self.out(output), hidden, weights


def make_seq2seq(dt):
    SOS, V, H = 1, 20, 16
    encoder, decoder = EncoderRNN(V, H).to(dt), AttnDecoderRNN(H, V).to(dt)
    enc_opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    dec_opt = torch.optim.Adam(decoder.parameters(), lr=1e-3)
    teacher_forcing_ratio = 0.5

    def train(input_tensor, target_tensor):
        enc_opt.zero_grad()
        dec_opt.zero_grad()
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_input = torch.full((input_tensor.size(0), 1), SOS, dtype=torch.long)
        decoder_hidden = encoder_hidden
        loss, forced = 0, 0
        for di in range(target_tensor.size(1)):
            out, decoder_hidden, _ = decoder.forward_step(decoder_input, decoder_hidden, encoder_outputs)
            loss = loss + F.cross_entropy(out.squeeze(1), target_tensor[:, di])
            if torch.rand(1).item() < teacher_forcing_ratio:
                decoder_input = target_tensor[:, di].unsqueeze(1)  # Teacher forcing
                forced += 1
            else:
                _, topi = out.topk(1)
                decoder_input = topi.squeeze(-1).detach()
        loss.backward()
        enc_opt.step()
        dec_opt.step()
        return loss.item() / target_tensor.size(1), forced
    return train, lambda: (_state(encoder), _state(decoder))


def make_ctc(dt):
    """a BiLSTM acoustic model over log-mel frames trained with nn.CTCLoss, per-utterance input lengths,
    greedy decode of the best path (collapse repeats, drop blanks) as a list of lists."""
    lstm = nn.LSTM(12, 16, num_layers=2, bidirectional=True, batch_first=True).to(dt)
    proj = nn.Linear(32, 8).to(dt)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)
    opt = torch.optim.Adam([*lstm.parameters(), *proj.parameters()], lr=1e-3)

    def step(feats, feat_lens, targets, target_lens):
        out, _ = lstm(feats)
        log_probs = proj(out).log_softmax(-1)
        loss = ctc(log_probs.transpose(0, 1).float(), targets, feat_lens, target_lens)
        opt.zero_grad()
        loss.backward()
        opt.step()
        best = log_probs.argmax(-1)
        hyps = []
        for b in range(best.shape[0]):
            seq = torch.unique_consecutive(best[b, : feat_lens[b]])
            hyps.append(seq[seq != 0].tolist())
        return loss.detach(), hyps
    return step, lambda: (_state(lstm), _state(proj), _opt_state(opt))


def ctc_inputs(i, dt):
    feat_lens = torch.tensor([20, 16 + i, 12])
    target_lens = torch.tensor([5, 4, 3 + i % 2])
    return (torch.randn(3, 20, 12, dtype=dt), feat_lens, torch.randint(1, 8, (int(target_lens.sum()),)),
            target_lens)


def make_packed_lstm(dt):
    """a sentiment classifier over variable-length sentences: pack_padded_sequence (enforce_sorted=False),
    a 2-layer bidirectional LSTM with dropout, the last hidden states of both directions, a masked mean."""
    emb = nn.Embedding(30, 12, padding_idx=0).to(dt)
    rnn = nn.LSTM(12, 16, num_layers=2, bidirectional=True, dropout=0.2, batch_first=True).to(dt)
    fc = nn.Linear(16 * 2 + 32, 2).to(dt)
    opt = torch.optim.Adam([*emb.parameters(), *rnn.parameters(), *fc.parameters()], lr=1e-3)

    def step(text, lengths, label):
        embedded = F.dropout(emb(text), 0.3, training=True)
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        packed_out, (hidden, cell) = rnn(packed)
        output, out_lens = pad_packed_sequence(packed_out, batch_first=True)
        hidden = torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)
        mask = (torch.arange(output.shape[1])[None, :] < out_lens[:, None]).unsqueeze(-1)
        mean = (output * mask).sum(1) / out_lens[:, None].to(output.dtype)
        logits = fc(torch.cat([hidden, mean], 1))
        loss = F.cross_entropy(logits, label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), logits.detach(), output.shape[1]
    return step, lambda: (_state(emb), _state(rnn), _state(fc))


def packed_inputs(i, dt):
    lengths = torch.tensor([7, 3, 9 - i % 3, 5])
    text = torch.zeros(4, int(lengths.max()), dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        text[b, :n] = torch.randint(1, 30, (n,))
    return text, lengths, torch.randint(0, 2, (4,))


def make_char_rnn(dt):
    """char-RNN sampling: a GRU fed its own samples from torch.multinomial at a temperature, a prime string
    warmed up first, the generated indices joined into a string."""
    vocab = "abcdefghijklmnopqrstuvwxyz .,"
    emb = nn.Embedding(len(vocab), 16).to(dt)
    gru = nn.GRU(16, 24, num_layers=2).to(dt).eval()
    dec = nn.Linear(24, len(vocab)).to(dt)

    @torch.no_grad()
    def generate(prime, predict_len, temperature):
        hidden = torch.zeros(2, 1, 24, dtype=dt)
        prime_input = torch.tensor([vocab.index(c) for c in prime]).view(-1, 1)
        for p in range(len(prime) - 1):
            _, hidden = gru(emb(prime_input[p]).view(1, 1, -1), hidden)
        inp = prime_input[-1]
        predicted = prime
        for _ in range(predict_len):
            out, hidden = gru(emb(inp).view(1, 1, -1), hidden)
            output_dist = dec(out.view(1, -1)).div(temperature).exp()
            top_i = torch.multinomial(output_dist.view(-1).float(), 1)[0]
            predicted += vocab[top_i]
            inp = top_i.view(1)
        return predicted
    return generate, lambda: None


def char_inputs(i, dt):
    return ["ab", "hello", "a, b", "ji. "][i % 4], 6 + i % 2, [0.8, 1.0, 0.5, 1.2][i % 4]


# ------------------------------------------------------------------------------------------------ autograd tricks
class GradReverse(torch.autograd.Function):
    """DANN's gradient reversal layer."""

    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.lambd, None


def make_dann(dt):
    feat = nn.Sequential(nn.Linear(10, 24), nn.ReLU(), nn.Linear(24, 16), nn.ReLU()).to(dt)
    label_clf = nn.Linear(16, 3).to(dt)
    domain_clf = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)).to(dt)
    params = [*feat.parameters(), *label_clf.parameters(), *domain_clf.parameters()]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    st = {"it": 0, "total": 10}

    def step(xs, ys, xt):
        p = st["it"] / st["total"]
        lambd = 2.0 / (1.0 + math.exp(-10 * p)) - 1
        fs, ft = feat(xs), feat(xt)
        cls_loss = F.cross_entropy(label_clf(fs), ys)
        f_all = torch.cat([fs, ft])
        d_pred = domain_clf(GradReverse.apply(f_all, lambd)).squeeze(-1)
        d_lbl = torch.cat([torch.zeros(len(xs), dtype=xs.dtype), torch.ones(len(xt), dtype=xs.dtype)])
        dom_loss = F.binary_cross_entropy_with_logits(d_pred, d_lbl)
        loss = cls_loss + dom_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        st["it"] += 1
        return cls_loss.detach(), dom_loss.detach(), lambd
    return step, lambda: (_state(feat), _state(domain_clf), dict(st))


def make_ckpt_sequential(dt):
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU())],
                          nn.Linear(16, 2)).to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        x = x.requires_grad_()
        out = checkpoint_sequential(model, 3, x, use_reentrant=False)
        loss = F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), x.grad
    return step, lambda: _state(model)


class VGGish(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                                      nn.ReLU(), nn.AvgPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())

    def forward(self, x):
        return self.features(x)


def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


def make_style_transfer(dt):
    """neural style transfer (the PyTorch tutorial's losses): features captured by forward hooks into a dict,
    Gram-matrix style loss, content loss, the input image optimized in place and clamped under no_grad, a
    tensor hook clipping the image's gradient."""
    cnn = VGGish().to(dt).eval()
    for p in cnn.parameters():
        p.requires_grad_(False)
    feats = {}
    names = {1: "relu1_1", 3: "relu1_2", 6: "relu2_1", 8: "relu2_2"}
    for idx, name in names.items():
        cnn.features[idx].register_forward_hook(lambda m, i, o, name=name: feats.__setitem__(name, o))
    state = {}

    def step(style_img, content_img, iters):
        with torch.no_grad():
            cnn(style_img)
            style_targets = {k: gram_matrix(v) for k, v in feats.items()}
            cnn(content_img)
            content_target = feats["relu2_1"].clone()
        if "img" not in state:
            state["img"] = content_img.clone().requires_grad_(True)
            state["opt"] = torch.optim.Adam([state["img"]], lr=0.05)
        img, opt = state["img"], state["opt"]
        losses = []
        for _ in range(iters):
            opt.zero_grad()
            img.register_hook(lambda g: g.clamp(-0.1, 0.1))
            cnn(img)
            s_loss = sum(F.mse_loss(gram_matrix(feats[k]), style_targets[k]) for k in names.values())
            c_loss = F.mse_loss(feats["relu2_1"], content_target)
            loss = 1e4 * s_loss + c_loss
            loss.backward()
            opt.step()
            with torch.no_grad():
                img.clamp_(0, 1)
            losses.append(loss.item())
        return losses
    return step, lambda: (state["img"], state["opt"].state_dict()["state"])


def style_inputs(i, dt):
    return torch.rand(1, 3, 12, 12, dtype=dt), torch.rand(1, 3, 12, 12, dtype=dt), 2


def make_byol(dt):
    """BYOL: online encoder + projector + predictor, a target network updated as an EMA of the online
    weights (torch._foreach_mul_ / _foreach_add_ under no_grad), symmetric normalized-MSE loss."""
    def mlp(i, h, o):
        return nn.Sequential(nn.Linear(i, h), nn.BatchNorm1d(h), nn.ReLU(inplace=True), nn.Linear(h, o))
    online = nn.Sequential(mlp(12, 32, 16), mlp(16, 32, 8)).to(dt)
    predictor = mlp(8, 32, 8).to(dt)
    target = nn.Sequential(mlp(12, 32, 16), mlp(16, 32, 8)).to(dt)
    target.load_state_dict(online.state_dict())
    target.requires_grad_(False)
    opt = torch.optim.SGD([*online.parameters(), *predictor.parameters()], lr=0.03, momentum=0.9, weight_decay=1e-4)
    st = {"k": 0, "K": 20}

    def loss_fn(x, y):
        x, y = F.normalize(x, dim=-1, p=2), F.normalize(y, dim=-1, p=2)
        return 2 - 2 * (x * y).sum(dim=-1)

    def step(v1, v2):
        p1, p2 = predictor(online(v1)), predictor(online(v2))
        with torch.no_grad():
            t1, t2 = target(v1), target(v2)
        loss = (loss_fn(p1, t2.detach()) + loss_fn(p2, t1.detach())).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        tau = 1 - (1 - 0.996) * (math.cos(math.pi * st["k"] / st["K"]) + 1) / 2
        with torch.no_grad():
            tp, op = list(target.parameters()), list(online.parameters())
            torch._foreach_mul_(tp, tau)
            torch._foreach_add_(tp, op, alpha=1 - tau)
        st["k"] += 1
        return loss.detach(), tau
    return step, lambda: (_state(online), _state(target), dict(st))


# ------------------------------------------------------------------------------------------------ losses
def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0, reduction="none"):
    """torchvision.ops.sigmoid_focal_loss."""
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    return loss


def generalized_box_iou_loss(boxes1, boxes2, reduction="none", eps=1e-7):
    """torchvision.ops.generalized_box_iou_loss (x1, y1, x2, y2)."""
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    xkis1, ykis1 = torch.max(x1, x1g), torch.max(y1, y1g)
    xkis2, ykis2 = torch.min(x2, x2g), torch.min(y2, y2g)
    intsctk = torch.zeros_like(x1)
    mask = (ykis2 > ykis1) & (xkis2 > xkis1)
    intsctk[mask] = (xkis2[mask] - xkis1[mask]) * (ykis2[mask] - ykis1[mask])
    unionk = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsctk
    iouk = intsctk / (unionk + eps)
    xc1, yc1 = torch.min(x1, x1g), torch.min(y1, y1g)
    xc2, yc2 = torch.max(x2, x2g), torch.max(y2, y2g)
    area_c = (xc2 - xc1) * (yc2 - yc1)
    miouk = iouk - ((area_c - unionk) / (area_c + eps))
    loss = 1 - miouk
    if reduction == "mean":
        loss = loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
    return loss


class DetHead(nn.Module):
    """a single-level anchor-free head: class logits and (l, t, r, b) distances per location."""

    def __init__(self, c=8, k=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.GroupNorm(2, c), nn.ReLU())
        self.cls, self.reg = nn.Conv2d(c, k, 3, padding=1), nn.Conv2d(c, 4, 3, padding=1)
        nn.init.constant_(self.cls.bias, -math.log((1 - 0.01) / 0.01))

    def forward(self, x):
        h = self.stem(x)
        return self.cls(h), F.relu(self.reg(h))


def make_focal_giou(dt):
    model = DetHead().to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def step(img, cls_t, boxes_t, pos):
        logits, ltrb = model(img)
        B, K, H, W = logits.shape
        logits = logits.permute(0, 2, 3, 1).reshape(-1, K)
        ltrb = ltrb.permute(0, 2, 3, 1).reshape(-1, 4)
        ys, xs = torch.meshgrid(torch.arange(H, dtype=img.dtype), torch.arange(W, dtype=img.dtype), indexing="ij")
        centers = torch.stack([xs, ys], -1).reshape(-1, 2).repeat(B, 1)
        pred_boxes = torch.cat([centers - ltrb[:, :2], centers + ltrb[:, 2:]], -1)
        num_pos = max(pos.sum().item(), 1)
        onehot = torch.zeros_like(logits)
        onehot[pos, cls_t[pos]] = 1.0
        l_cls = sigmoid_focal_loss(logits, onehot, reduction="sum") / num_pos
        l_box = generalized_box_iou_loss(pred_boxes[pos], boxes_t[pos], reduction="mean")
        loss = l_cls + l_box
        opt.zero_grad()
        loss.backward()
        opt.step()
        return l_cls.detach(), l_box.detach(), num_pos
    return step, lambda: (_state(model), _opt_state(opt))


def det_inputs(i, dt, B=2, H=6, W=6):
    n = B * H * W
    pos = torch.rand(n) < 0.2 + 0.05 * i
    ys, xs = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    c = torch.stack([xs, ys], -1).reshape(-1, 2).repeat(B, 1).to(dt)
    wh = torch.rand(n, 2, dtype=dt) * 3 + 0.5
    return torch.randn(B, 3, H, W, dtype=dt), torch.randint(0, 3, (n,)), torch.cat([c - wh, c + wh], -1), pos


class LabelSmoothingCrossEntropy(nn.Module):
    """timm.loss.LabelSmoothingCrossEntropy."""

    def __init__(self, smoothing=0.1):
        super().__init__()
        self.smoothing, self.confidence = smoothing, 1.0 - smoothing

    def forward(self, x, target):
        logprobs = F.log_softmax(x, dim=-1)
        nll_loss = -logprobs.gather(dim=-1, index=target.unsqueeze(1)).squeeze(1)
        smooth_loss = -logprobs.mean(dim=-1)
        return (self.confidence * nll_loss + self.smoothing * smooth_loss).mean()


class ArcMarginProduct(nn.Module):
    """ArcFace (ronghuaiyang/arcface-pytorch): cos(theta + m) for the target class, easy margin off."""

    def __init__(self, in_features, out_features, s=30.0, m=0.50):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)
        self.s, self.m = s, m
        self.cos_m, self.sin_m = math.cos(m), math.sin(m)
        self.th, self.mm = math.cos(math.pi - m), math.sin(math.pi - m) * m

    def forward(self, input, label):
        cosine = F.linear(F.normalize(input), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        phi = torch.where(cosine > self.th, phi, cosine - self.mm)
        one_hot = torch.zeros(cosine.size(), dtype=cosine.dtype)
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        output = (one_hot * phi) + ((1.0 - one_hot) * cosine)
        return output * self.s


def make_arcface_ls(dt):
    backbone = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.PReLU(), nn.Linear(32, 12)).to(dt)
    head = ArcMarginProduct(12, 6).to(dt)
    crit = LabelSmoothingCrossEntropy(0.1)
    opt = torch.optim.SGD([{"params": backbone.parameters()}, {"params": head.parameters(), "weight_decay": 5e-4}],
                          lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 3], gamma=0.1)

    def step(x, y):
        backbone.train()
        logits = head(backbone(x), y)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        acc = (logits.argmax(1) == y).float().mean()
        return loss.detach(), acc, sched.get_last_lr()
    return step, lambda: (_state(backbone), _state(head), _opt_state(opt, sched))


def batch_hard_triplet_loss(embeddings, labels, margin=0.3):
    dist = torch.cdist(embeddings, embeddings, p=2)
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    eye = torch.eye(len(labels), dtype=torch.bool)
    pos_mask = same & ~eye
    hardest_pos = (dist * pos_mask.float()).max(1)[0]
    max_d = dist.max(1, keepdim=True)[0]
    hardest_neg = (dist + max_d * same.float()).min(1)[0]
    valid = pos_mask.any(1)
    loss = F.relu(hardest_pos - hardest_neg + margin)[valid]
    return loss.mean(), (loss > 0).float().sum()


def make_triplet(dt):
    net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 8)).to(dt)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(x, y):
        emb = F.normalize(net(x), dim=1)
        loss, active = batch_hard_triplet_loss(emb, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), active
    return step, lambda: (_state(net), _opt_state(opt))


def triplet_inputs(i, dt):
    y = torch.arange(4).repeat_interleave(3)[torch.randperm(12)]
    return torch.randn(12, 10, dtype=dt) + y[:, None].to(dt), y


def nt_xent(z1, z2, temperature=0.5):
    """SimCLR's NT-Xent: 2N x 2N cosine similarities, the diagonal masked out, positives at i +- N."""
    N = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    sim = torch.mm(z, z.t()) / temperature
    sim.fill_diagonal_(-1e9)
    targets = torch.cat([torch.arange(N, 2 * N), torch.arange(0, N)])
    return F.cross_entropy(sim, targets)


def supcon_loss(features, labels, temperature=0.1):
    """SupContrast (HobbitLong): positives by label, self-contrast masked with scatter."""
    features = F.normalize(features, dim=-1)
    n = features.shape[0]
    mask = torch.eq(labels.view(-1, 1), labels.view(1, -1)).to(features.dtype)
    logits = torch.div(features @ features.T, temperature)
    logits_max, _ = torch.max(logits, dim=1, keepdim=True)
    logits = logits - logits_max.detach()
    logits_mask = torch.scatter(torch.ones_like(mask), 1, torch.arange(n).view(-1, 1), 0)
    mask = mask * logits_mask
    exp_logits = torch.exp(logits) * logits_mask
    log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
    mask_pos_pairs = mask.sum(1)
    mask_pos_pairs = torch.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)
    return -((mask * log_prob).sum(1) / mask_pos_pairs).mean()


def make_contrastive(dt):
    enc = nn.Sequential(nn.Linear(12, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 16)).to(dt)
    proj = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8)).to(dt)
    opt = torch.optim.Adam([*enc.parameters(), *proj.parameters()], lr=1e-3, weight_decay=1e-6)

    def augment(x):
        noise = 0.1 * torch.randn_like(x)
        keep = (torch.rand_like(x) > 0.2).to(x.dtype)
        return (x + noise) * keep

    def step(x, y):
        z1, z2 = proj(enc(augment(x))), proj(enc(augment(x)))
        loss = nt_xent(z1, z2) + 0.5 * supcon_loss(torch.cat([z1, z2]), torch.cat([y, y]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (_state(enc), _state(proj), _opt_state(opt))


def make_skipgram(dt):
    """word2vec skip-gram with negative sampling: negatives from the unigram^0.75 table by torch.multinomial,
    logsigmoid losses, sparse=False embeddings with SGD."""
    V, D, K = 40, 8, 4
    counts = torch.arange(V, 0, -1, dtype=torch.float64) ** 1.5
    noise_dist = (counts ** 0.75 / (counts ** 0.75).sum()).float()
    in_embed, out_embed = nn.Embedding(V, D).to(dt), nn.Embedding(V, D).to(dt)
    in_embed.weight.data.uniform_(-0.5 / D, 0.5 / D)
    out_embed.weight.data.zero_()
    opt = torch.optim.SGD([*in_embed.parameters(), *out_embed.parameters()], lr=0.5)

    def step(centers, contexts):
        B = centers.shape[0]
        negs = torch.multinomial(noise_dist, B * K, replacement=True).view(B, K)
        v = in_embed(centers)
        u = out_embed(contexts)
        u_neg = out_embed(negs)
        pos = F.logsigmoid((v * u).sum(-1))
        neg = F.logsigmoid(-torch.bmm(u_neg, v.unsqueeze(2)).squeeze(2)).sum(1)
        loss = -(pos + neg).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), negs
    return step, lambda: (_state(in_embed), _state(out_embed))


def skipgram_inputs(i, dt):
    c = torch.randint(0, 40, (16,))
    return c, (c + torch.randint(-2, 3, (16,))).clamp(0, 39)


# ------------------------------------------------------------------------------------------------ attention, conv blocks
def make_mha_padding(dt):
    """nn.MultiheadAttention (batch_first) with a key_padding_mask from lengths, attention weights averaged
    over heads in train mode (dropout), then the eval fast path with need_weights=False."""
    mha = nn.MultiheadAttention(16, 4, dropout=0.1, batch_first=True).to(dt)
    ln = nn.LayerNorm(16).to(dt)
    head = nn.Linear(16, 3).to(dt)
    opt = torch.optim.AdamW([*mha.parameters(), *ln.parameters(), *head.parameters()], lr=1e-3)

    def step(x, lengths, y):
        mha.train()
        key_padding_mask = torch.arange(x.shape[1])[None, :] >= lengths[:, None]
        attn_out, attn_w = mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=True)
        h = ln(x + attn_out)
        keep = (~key_padding_mask).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(1) / keep.sum(1)
        loss = F.cross_entropy(head(pooled), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mha.eval()
        with torch.no_grad():
            inf_out, _ = mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        return loss.detach(), attn_w.detach(), inf_out.masked_fill(key_padding_mask.unsqueeze(-1), 0)
    return step, lambda: (_state(mha), _state(ln), _opt_state(opt))


def mha_inputs(i, dt):
    return torch.randn(3, 7, 16, dtype=dt), torch.tensor([7, 4 + i % 3, 2]), torch.randint(0, 3, (3,))


class ConformerConvModule(nn.Module):
    def __init__(self, d, k=7):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        x = self.ln(x).transpose(1, 2)
        x = F.glu(self.pw1(x), dim=1)
        x = F.silu(self.bn(self.dw(x)))
        return self.drop(self.pw2(x).transpose(1, 2))


class FeedForward(nn.Module):
    def __init__(self, d, mult=4):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d * mult), nn.SiLU(), nn.Dropout(0.1),
                                 nn.Linear(d * mult, d), nn.Dropout(0.1))

    def forward(self, x):
        return self.net(x)


class ConformerBlock(nn.Module):
    def __init__(self, d=16, heads=4):
        super().__init__()
        self.ff1, self.ff2 = FeedForward(d), FeedForward(d)
        self.ln_att = nn.LayerNorm(d)
        self.att = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True)
        self.conv = ConformerConvModule(d)
        self.ln_out = nn.LayerNorm(d)

    def forward(self, x, mask=None):
        x = x + 0.5 * self.ff1(x)
        h = self.ln_att(x)
        x = x + self.att(h, h, h, key_padding_mask=mask, need_weights=False)[0]
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.ln_out(x)


def make_conformer(dt):
    blocks = nn.Sequential(ConformerBlock(), ConformerBlock()).to(dt)
    head = nn.Linear(16, 5).to(dt)
    opt = torch.optim.AdamW([*blocks.parameters(), *head.parameters()], lr=1e-3, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / 3, 1.0))

    def step(x, y):
        blocks.train()
        h = x
        for blk in blocks:
            h = blk(h)
        loss = F.cross_entropy(head(h).reshape(-1, 5), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(blocks.parameters(), 5.0)
        opt.step()
        sched.step()
        return loss.detach()
    return step, lambda: (_state(blocks), _state(head), _opt_state(opt, sched))


def make_autocast_accum(dt):
    """a small CNN trained under CPU bf16 autocast (no GradScaler) with gradient accumulation over 2
    micro-batches, an optimizer step every other call, a running loss meter."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 4)).to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    meter = {"sum": 0.0, "n": 0, "it": 0}
    accum_steps = 2

    def train_iter(images, target):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            output = model(images)
            loss = F.cross_entropy(output, target) / accum_steps
        loss.backward()
        meter["sum"] += loss.item() * accum_steps * images.size(0)
        meter["n"] += images.size(0)
        meter["it"] += 1
        if meter["it"] % accum_steps == 0:
            opt.step()
            opt.zero_grad()
        return output.float().detach(), meter["sum"] / meter["n"]
    return train_iter, lambda: (_state(model), _opt_state(opt), dict(meter))


def make_unet_dice(dt):
    class DoubleConv(nn.Sequential):
        def __init__(self, i, o):
            super().__init__(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                             nn.Conv2d(o, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        """milesial/Pytorch-UNet, two levels: Down (maxpool + double conv), Up (bilinear, pad, concat)."""

        def __init__(self, n_channels=3, n_classes=3):
            super().__init__()
            self.inc, self.down1 = DoubleConv(n_channels, 8), nn.Sequential(nn.MaxPool2d(2), DoubleConv(8, 16))
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv_up = DoubleConv(24, 8)
            self.outc = nn.Conv2d(8, n_classes, 1)

        def forward(self, x):
            x1 = self.inc(x)
            x2 = self.down1(x1)
            x2 = self.up(x2)
            diffY, diffX = x1.size()[2] - x2.size()[2], x1.size()[3] - x2.size()[3]
            x2 = F.pad(x2, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
            return self.outc(self.conv_up(torch.cat([x1, x2], dim=1)))

    def dice_coeff(input, target, reduce_batch_first=False, epsilon=1e-6):
        sum_dim = (-1, -2) if input.dim() == 2 or not reduce_batch_first else (-1, -2, -3)
        inter = 2 * (input * target).sum(dim=sum_dim)
        sets_sum = input.sum(dim=sum_dim) + target.sum(dim=sum_dim)
        sets_sum = torch.where(sets_sum == 0, inter, sets_sum)
        return ((inter + epsilon) / (sets_sum + epsilon)).mean()

    def multiclass_dice_coeff(input, target, reduce_batch_first=False, epsilon=1e-6):
        return dice_coeff(input.flatten(0, 1), target.flatten(0, 1), reduce_batch_first, epsilon)

    model = UNet().to(dt)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-4, weight_decay=1e-8, momentum=0.999, foreach=True)
    criterion = nn.CrossEntropyLoss()

    def train_step(images, true_masks):
        model.train()
        masks_pred = model(images)
        loss = criterion(masks_pred, true_masks)
        loss += 1 - multiclass_dice_coeff(F.softmax(masks_pred, dim=1).float(),
                                          F.one_hot(true_masks, 3).permute(0, 3, 1, 2).float(),
                                          reduce_batch_first=True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()
    return train_step, lambda: (_state(model), _opt_state(opt))


def unet_inputs(i, dt):
    s = 8 + 2 * (i % 2)
    return torch.randn(2, 3, s, s, dtype=dt), torch.randint(0, 3, (2, s, s))


class TransformerModel(nn.Module):
    """pytorch/examples word_language_model: PositionalEncoding buffer, nn.TransformerEncoder with a square
    subsequent mask, tied-free decoder, training with dropout."""

    def __init__(self, ntoken=50, ninp=16, nhead=2, nhid=32, nlayers=2, dropout=0.2):
        super().__init__()
        pe = torch.zeros(64, ninp)
        position = torch.arange(0, 64, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, ninp, 2).float() * (-math.log(10000.0) / ninp))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))
        self.pos_drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.src_mask = None

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def forward(self, src, has_mask=True):
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src))
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_drop(src + self.pe[: src.size(0), :])
        output = self.encoder(src, mask=self.src_mask)
        return F.log_softmax(self.decoder(output), dim=-1)


def make_word_lm(dt):
    model = TransformerModel().to(dt)
    criterion = nn.NLLLoss()
    lr, clip, bptt = 5.0, 0.25, 6

    def get_batch(source, i):
        seq_len = min(bptt, len(source) - 1 - i)
        return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)

    def train(train_data):
        model.train()
        total_loss = 0.0
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            data, targets = get_batch(train_data, i)
            model.zero_grad()
            output = model(data)
            output = output.view(-1, 50)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            total_loss += loss.item()
        return total_loss / (batch + 1)
    return train, lambda: _state(model)


def word_lm_inputs(i, dt):
    return (torch.randint(0, 50, (13 + 2 * (i % 2), 3)),)


# ------------------------------------------------------------------------------------------------ the cases
_CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("dcgan_step", make_dcgan, lambda i, dt: (torch.rand(4, 1, 16, 16, dtype=dt) * 2 - 1,), 4, True),
    ("wgan_gp", make_wgan_gp, wgan_inputs, 4, False),
    ("sngan_hinge", make_sngan, lambda i, dt: (torch.randn(8, 12, dtype=dt),), 4, True),
    ("vae_example", make_vae, lambda i, dt: (torch.rand(8 + 4 * (i % 2), 36, dtype=dt),), 4, True),
    ("gumbel_vae", make_gumbel_vae, lambda i, dt: ((torch.rand(8, 20) > 0.5).to(dt),), 4, True),
    ("realnvp_actnorm", make_realnvp, moons, 4, False),
    ("reinforce", make_reinforce, reinforce_inputs, 4, True),
    ("ppo_update", make_ppo, ppo_inputs, 3, False),
    ("dqn_target", make_dqn, dqn_inputs, 5, False),
    ("sac_update", make_sac, sac_inputs, 4, False),
    ("gcn_graph_pool", make_gcn_graphs, graphs_inputs, 4, True),
    ("pointnet_cls", make_pointnet, points_inputs, 4, True),
    ("melspec_specaug", make_melspec, wav_inputs, 4, False),
    ("seq2seq_teacher", make_seq2seq, lambda i, dt: (torch.randint(2, 20, (3, 6)), torch.randint(2, 20, (3, 5))),
     4, True),
    ("ctc_bilstm", make_ctc, ctc_inputs, 4, False),
    ("packed_lstm", make_packed_lstm, packed_inputs, 4, True),
    ("char_rnn_sample", make_char_rnn, char_inputs, 4, False),
    ("dann_grad_reverse", make_dann, lambda i, dt: (torch.randn(6, 10, dtype=dt), torch.randint(0, 3, (6,)),
                                                    torch.randn(6, 10, dtype=dt) + 0.5), 4, True),
    ("ckpt_sequential", make_ckpt_sequential, lambda i, dt: (torch.randn(5, 16, dtype=dt),
                                                             torch.randint(0, 2, (5,))), 4, True),
    ("style_transfer_hooks", make_style_transfer, style_inputs, 3, False),
    ("byol_ema", make_byol, lambda i, dt: (torch.randn(8, 12, dtype=dt), torch.randn(8, 12, dtype=dt)), 4, True),
    ("focal_giou", make_focal_giou, det_inputs, 4, False),
    ("arcface_label_smooth", make_arcface_ls, lambda i, dt: (torch.randn(8, 16, dtype=dt),
                                                             torch.randint(0, 6, (8,))), 4, False),
    ("triplet_batch_hard", make_triplet, triplet_inputs, 4, False),
    ("simclr_supcon", make_contrastive, lambda i, dt: (torch.randn(8, 12, dtype=dt), torch.randint(0, 3, (8,))),
     4, True),
    ("skipgram_negsample", make_skipgram, skipgram_inputs, 4, True),
    ("mha_key_padding", make_mha_padding, mha_inputs, 4, True),
    ("conformer_train", make_conformer, lambda i, dt: (torch.randn(2, 10 + 2 * (i % 2), 16, dtype=dt),
                                                       torch.randint(0, 5, (2, 10 + 2 * (i % 2)))), 4, True),
    ("autocast_accum_bf16", make_autocast_accum, lambda i, dt: (torch.randn(4, 3, 8, 8, dtype=dt),
                                                                torch.randint(0, 4, (4,))), 4, False),
    ("unet_dice", make_unet_dice, unet_inputs, 4, False),
    ("word_lm_transformer", make_word_lm, word_lm_inputs, 3, False),
]

CASES = [(name, heldout4.with_rng(make, n), inputs, n, low) for name, make, inputs, n, low in _CASES]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout7.py")
