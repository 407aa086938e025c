"""Held-out set 9: programs from domains the earlier sets leave out or touch once, written the way those
domains' reference code writes them: reinforcement learning (TD3 with target-policy smoothing and a delayed
actor update, C51's distributional projection with floor / ceil and index_add_ on flattened offsets, Rainbow's
factorised NoisyLinear with n-step double-DQN and prioritised weights, CleanRL's continuous PPO with GAE in a
reversed Python loop and shuffled minibatch epochs), audio (spectral-gating denoise through stft / istft,
an MFCC keyword spotter with torchaudio's filterbank, DCT and deltas, Griffin-Lim with momentum and complex
random phases), graph networks (edge-list GAT with a segment softmax by scatter_reduce amax / index_add_,
GraphSAGE neighbour sampling from a CSR built by bincount / cumsum / repeat_interleave, SchNet-style
continuous-filter convolutions with forces by autograd.grad), point clouds (DGCNN's EdgeConv kNN with
flattened index bases, PointNet++ farthest-point sampling and ball query, a FoldingNet decoder with a Chamfer
loss), recommenders (DLRM with EmbeddingBag offsets / per_sample_weights and a triu_indices interaction, a
two-tower retrieval model with in-batch softmax and logQ correction under Adagrad, DeepFM with field offsets
and a rank-based AUC), sequence models (a batched BiGRU-CRF with a masked forward algorithm and Viterbi
backtrace, an LSTM LM with truncated BPTT and its hidden state carried between calls, HMM Baum-Welch in log
space), time series (a WaveNet-style causal forecaster with RevIN and a quantile loss, N-BEATS with trend and
seasonality bases, DeepAR with a StudentT likelihood and sampled quantiles), tabular (TabNet's sparsemax,
ghost batch norm and attention prior, an FT-Transformer), physics-informed nets (Burgers' PINN residual by
nested autograd.grad, a Hamiltonian NN), segmentation / vision (a spatial transformer through affine_grid /
grid_sample, DeepLab's ASPP with bilinear align_corners upsampling, ignore_index and a running confusion
matrix by bincount, unfold / fold patch denoising with overlap counts), detection (RetinaNet's anchor matcher
with low-quality matches and sigmoid focal loss, YOLO decoding with class-offset batched NMS by argsort) and
a kNN monitor (top-k weighted voting).

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, parameters and gradients, optimizer state,
counters, the global RNG's state after the call, arguments): bench/heldout4.py's runner and report
(imported, same options):

    python bench/heldout9.py --threads 1 --dtypes fp32
    python bench/heldout9.py --threads 1 --dtypes bf16           # the cases where bf16 is meaningful
    python bench/heldout9.py --threads 1 --models td3_update,gat_edge_softmax --json /tmp/h9.jsonl
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal, StudentT
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from heldout7 import _opt_state, _state, sigmoid_focal_loss  # noqa: E402  (state; torchvision's focal loss)
import heldout4  # noqa: E402  (the runner: run_case, diff, main)


# ------------------------------------------------------------------------------------------------ RL
class TD3Actor(nn.Module):
    def __init__(self, state_dim, action_dim, max_action=1.0):
        super().__init__()
        self.l1 = nn.Linear(state_dim, 32)
        self.l2 = nn.Linear(32, 32)
        self.l3 = nn.Linear(32, action_dim)
        self.max_action = max_action

    def forward(self, state):
        a = F.relu(self.l1(state))
        a = F.relu(self.l2(a))
        return self.max_action * torch.tanh(self.l3(a))


class TD3Critic(nn.Module):
    def __init__(self, state_dim, action_dim):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(state_dim + action_dim, 32), nn.Linear(32, 32), nn.Linear(32, 1)
        self.l4, self.l5, self.l6 = nn.Linear(state_dim + action_dim, 32), nn.Linear(32, 32), nn.Linear(32, 1)

    def forward(self, state, action):
        sa = torch.cat([state, action], 1)
        q1 = F.relu(self.l1(sa))
        q1 = F.relu(self.l2(q1))
        q1 = self.l3(q1)
        q2 = F.relu(self.l4(sa))
        q2 = F.relu(self.l5(q2))
        q2 = self.l6(q2)
        return q1, q2

    def Q1(self, state, action):
        sa = torch.cat([state, action], 1)
        q1 = F.relu(self.l1(sa))
        q1 = F.relu(self.l2(q1))
        return self.l3(q1)


def make_td3(dt):
    """sfujim/TD3's TD3.train: clipped target-policy noise, twin-Q minimum, actor and Polyak update every
    policy_freq-th call (a Python counter)."""
    actor = TD3Actor(6, 2).to(dt)
    actor_target = copy.deepcopy(actor)
    critic = TD3Critic(6, 2).to(dt)
    critic_target = copy.deepcopy(critic)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=3e-4)
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=3e-4)
    it = {"total_it": 0}
    discount, tau, policy_noise, noise_clip, policy_freq, max_action = 0.99, 0.005, 0.2, 0.5, 2, 1.0

    def train(state, action, next_state, reward, not_done):
        it["total_it"] += 1
        with torch.no_grad():
            noise = (torch.randn_like(action) * policy_noise).clamp(-noise_clip, noise_clip)
            next_action = (actor_target(next_state) + noise).clamp(-max_action, max_action)
            target_Q1, target_Q2 = critic_target(next_state, next_action)
            target_Q = torch.min(target_Q1, target_Q2)
            target_Q = reward + not_done * discount * target_Q
        current_Q1, current_Q2 = critic(state, action)
        critic_loss = F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)
        critic_optimizer.zero_grad()
        critic_loss.backward()
        critic_optimizer.step()
        actor_loss = None
        if it["total_it"] % policy_freq == 0:
            actor_loss = -critic.Q1(state, actor(state)).mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            for param, target_param in zip(critic.parameters(), critic_target.parameters()):
                target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)
            for param, target_param in zip(actor.parameters(), actor_target.parameters()):
                target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)
        return critic_loss.item(), None if actor_loss is None else actor_loss.item()
    return train, lambda: (_state(actor), _state(critic), _state(actor_target), _state(critic_target),
                           _opt_state(actor_optimizer), _opt_state(critic_optimizer), dict(it))


def td3_inputs(i, dt):
    n = 16
    return (torch.randn(n, 6, dtype=dt), torch.rand(n, 2, dtype=dt) * 2 - 1, torch.randn(n, 6, dtype=dt),
            torch.randn(n, 1, dtype=dt), (torch.rand(n, 1) > 0.1).to(dt))


class C51Net(nn.Module):
    def __init__(self, obs_dim, n_actions, n_atoms):
        super().__init__()
        self.n_actions, self.n_atoms = n_actions, n_atoms
        self.net = nn.Sequential(nn.Linear(obs_dim, 32), nn.ReLU(), nn.Linear(32, n_actions * n_atoms))

    def forward(self, x):
        return F.softmax(self.net(x).view(-1, self.n_actions, self.n_atoms), dim=2)


def make_c51(dt):
    """categorical DQN (Bellemare et al.): the Bellman-updated support projected onto the fixed atoms with
    floor / ceil neighbours (the l == u fix) and index_add_ into the flattened distribution."""
    n_atoms, v_min, v_max = 11, -5.0, 5.0
    support = torch.linspace(v_min, v_max, n_atoms, dtype=dt)
    delta_z = (v_max - v_min) / (n_atoms - 1)
    net = C51Net(4, 3, n_atoms).to(dt)
    target = copy.deepcopy(net)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, eps=0.01 / 32)
    steps = {"n": 0}

    def update(obs, actions, rewards, next_obs, dones, gamma=0.99):
        batch_size = obs.shape[0]
        with torch.no_grad():
            next_dist = target(next_obs)
            next_q = (next_dist * support).sum(2)
            next_action = next_q.argmax(1)
            next_dist = next_dist[range(batch_size), next_action]
            Tz = rewards.unsqueeze(1) + (1 - dones).unsqueeze(1) * gamma * support.unsqueeze(0)
            Tz = Tz.clamp(min=v_min, max=v_max)
            b = (Tz - v_min) / delta_z
            lo, u = b.floor().long(), b.ceil().long()
            lo[(u > 0) * (lo == u)] -= 1
            u[(lo < (n_atoms - 1)) * (lo == u)] += 1
            offset = torch.linspace(0, (batch_size - 1) * n_atoms, batch_size).long()
            offset = offset.unsqueeze(1).expand(batch_size, n_atoms)
            proj_dist = torch.zeros(next_dist.size(), dtype=dt)
            proj_dist.view(-1).index_add_(0, (lo + offset).view(-1), (next_dist * (u.float() - b)).view(-1))
            proj_dist.view(-1).index_add_(0, (u + offset).view(-1), (next_dist * (b - lo.float())).view(-1))
        dist = net(obs)
        log_p = torch.log(dist[range(batch_size), actions].clamp(min=1e-5))
        loss = -(proj_dist * log_p).sum(1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps["n"] += 1
        if steps["n"] % 2 == 0:
            target.load_state_dict(net.state_dict())
        return loss.detach(), proj_dist
    return update, lambda: (_state(net), _state(target), _opt_state(optimizer), dict(steps))


def c51_inputs(i, dt):
    n = 12 + 4 * (i % 2)
    return (torch.randn(n, 4, dtype=dt), torch.randint(0, 3, (n,)), torch.randn(n, dtype=dt) * 3,
            torch.randn(n, 4, dtype=dt), (torch.rand(n) < 0.2).to(dt))


class NoisyLinear(nn.Module):
    """Kaixhin/Rainbow's factorised Gaussian noisy layer."""
    def __init__(self, in_features, out_features, std_init=0.5):
        super().__init__()
        self.in_features, self.out_features, self.std_init = in_features, out_features, std_init
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.register_buffer("weight_epsilon", torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("bias_epsilon", torch.empty(out_features))
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self):
        mu_range = 1 / math.sqrt(self.in_features)
        self.weight_mu.data.uniform_(-mu_range, mu_range)
        self.weight_sigma.data.fill_(self.std_init / math.sqrt(self.in_features))
        self.bias_mu.data.uniform_(-mu_range, mu_range)
        self.bias_sigma.data.fill_(self.std_init / math.sqrt(self.out_features))

    def _scale_noise(self, size):
        x = torch.randn(size, device=self.weight_mu.device)
        return x.sign().mul_(x.abs().sqrt_())

    def reset_noise(self):
        epsilon_in = self._scale_noise(self.in_features)
        epsilon_out = self._scale_noise(self.out_features)
        self.weight_epsilon.copy_(epsilon_out.ger(epsilon_in))
        self.bias_epsilon.copy_(epsilon_out)

    def forward(self, input):
        if self.training:
            return F.linear(input, self.weight_mu + self.weight_sigma * self.weight_epsilon,
                            self.bias_mu + self.bias_sigma * self.bias_epsilon)
        return F.linear(input, self.weight_mu, self.bias_mu)


class NoisyDQN(nn.Module):
    def __init__(self, obs_dim=5, n_actions=4, hidden=32):
        super().__init__()
        self.fc = nn.Linear(obs_dim, hidden)
        self.fc_h_v, self.fc_h_a = NoisyLinear(hidden, hidden), NoisyLinear(hidden, hidden)
        self.fc_z_v, self.fc_z_a = NoisyLinear(hidden, 1), NoisyLinear(hidden, n_actions)

    def forward(self, x):
        x = F.relu(self.fc(x))
        v = self.fc_z_v(F.relu(self.fc_h_v(x)))
        a = self.fc_z_a(F.relu(self.fc_h_a(x)))
        return v + a - a.mean(1, keepdim=True)

    def reset_noise(self):
        for name, module in self.named_children():
            if "fc_" in name:
                module.reset_noise()


def make_noisy_dqn(dt):
    """Rainbow-style learn(): n-step double DQN on a dueling noisy net, Huber loss weighted by importance
    weights, new priorities returned as a Python list, the noise redrawn after each step, the target synced
    every third call."""
    online = NoisyDQN().to(dt)
    target_net = copy.deepcopy(online)
    for p in target_net.parameters():
        p.requires_grad = False
    optimiser = torch.optim.Adam(online.parameters(), lr=1e-3, eps=1.5e-4)
    discount, n = 0.99, 3
    st = {"steps": 0}

    def learn(states, actions, returns, next_states, nonterminals, weights):
        q = online(states)
        q_a = q.gather(1, actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_a = online(next_states).argmax(1)
            target_net.reset_noise()
            q_next = target_net(next_states).gather(1, next_a.unsqueeze(1)).squeeze(1)
            target_q = returns + nonterminals * (discount ** n) * q_next
        td_error = target_q - q_a
        loss = (weights * F.smooth_l1_loss(q_a, target_q, reduction="none")).mean()
        online.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(online.parameters(), 10.0)
        optimiser.step()
        online.reset_noise()
        st["steps"] += 1
        if st["steps"] % 3 == 0:
            target_net.load_state_dict(online.state_dict())
        return loss.item(), td_error.detach().abs().add(1e-6).tolist()
    return learn, lambda: (_state(online), _state(target_net), _opt_state(optimiser), dict(st))


def noisy_inputs(i, dt):
    n = 10
    w = torch.rand(n, dtype=dt)
    return (torch.randn(n, 5, dtype=dt), torch.randint(0, 4, (n,)), torch.randn(n, dtype=dt),
            torch.randn(n, 5, dtype=dt), (torch.rand(n) > 0.2).to(dt), w / w.max())


class PPOAgent(nn.Module):
    def __init__(self, obs_dim=4, act_dim=2):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(obs_dim, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
        self.actor_mean = nn.Sequential(nn.Linear(obs_dim, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                                        nn.Linear(32, act_dim))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        action_mean = self.actor_mean(x)
        action_logstd = self.actor_logstd.expand_as(action_mean)
        action_std = torch.exp(action_logstd)
        probs = Normal(action_mean, action_std)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


def make_ppo_gae(dt):
    """CleanRL's ppo_continuous_action update: GAE by a reversed loop over the rollout, flattened batch,
    update_epochs passes over torch.randperm minibatches, normalised advantages, clipped value loss,
    clip fractions collected with .item()."""
    agent = PPOAgent().to(dt)
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5)
    gamma, gae_lambda, clip_coef, ent_coef, vf_coef, update_epochs, num_minibatches = 0.99, 0.95, 0.2, 0.0, 0.5, 2, 2

    def update(obs, actions, logprobs, rewards, dones, values, next_obs, next_done):
        num_steps = rewards.shape[0]
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(num_steps)):
                if t == num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values
        b_obs = obs.reshape((-1, obs.shape[-1]))
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1, actions.shape[-1]))
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
        batch_size = b_obs.shape[0]
        minibatch_size = batch_size // num_minibatches
        clipfracs = []
        for epoch in range(update_epochs):
            b_inds = torch.randperm(batch_size)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start:start + minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > clip_coef).float().mean().item()]
                mb_advantages = b_advantages[mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                newvalue = newvalue.view(-1)
                v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -clip_coef, clip_coef)
                v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                entropy_loss = entropy.mean()
                loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
        return pg_loss.item(), v_loss.item(), approx_kl.item(), sum(clipfracs) / len(clipfracs)
    return update, lambda: (_state(agent), _opt_state(optimizer))


def ppo_gae_inputs(i, dt):
    T, E = 8, 2
    return (torch.randn(T, E, 4, dtype=dt), torch.randn(T, E, 2, dtype=dt), torch.randn(T, E, dtype=dt) - 2,
            torch.randn(T, E, dtype=dt), (torch.rand(T, E) < 0.1).to(dt), torch.randn(T, E, dtype=dt),
            torch.randn(E, 4, dtype=dt), (torch.rand(E) < 0.5).to(dt))


# ------------------------------------------------------------------------------------------------ audio
def make_spectral_gate(dt):
    """noisereduce-style stationary spectral gating: per-frequency threshold from a noise clip's dB
    statistics, a smoothed mask by conv2d, the masked STFT inverted with istft(length=)."""
    n_fft, hop = 64, 16
    window = torch.hann_window(n_fft, dtype=dt)
    smoothing = torch.outer(torch.cat([torch.linspace(0, 1, 3), torch.linspace(1, 0, 4)[1:]]),
                            torch.cat([torch.linspace(0, 1, 2), torch.linspace(1, 0, 3)[1:]])).to(dt)
    smoothing = smoothing / smoothing.sum()

    def denoise(wav, noise_clip, prop_decrease=0.8, n_std_thresh=1.5):
        noise_stft = torch.stft(noise_clip, n_fft, hop_length=hop, window=window, return_complex=True)
        noise_db = 20 * torch.log10(noise_stft.abs().clamp(min=1e-5))
        mean_freq_noise, std_freq_noise = noise_db.mean(-1), noise_db.std(-1)
        thresh = mean_freq_noise + std_freq_noise * n_std_thresh
        sig_stft = torch.stft(wav, n_fft, hop_length=hop, window=window, return_complex=True)
        sig_db = 20 * torch.log10(sig_stft.abs().clamp(min=1e-5))
        mask = (sig_db < thresh[..., None]).to(sig_db.dtype)
        mask = F.conv2d(mask[:, None], smoothing[None, None], padding="same")[:, 0] * prop_decrease
        sig_stft_denoised = sig_stft * (1 - mask)
        out = torch.istft(sig_stft_denoised, n_fft, hop_length=hop, window=window, length=wav.shape[-1])
        return out, mask.mean().item()
    return denoise, lambda: None


def gate_inputs(i, dt):
    t = torch.arange(400 + 40 * i, dtype=dt) / 8000
    wav = torch.sin(2 * math.pi * 440 * t)[None].repeat(2, 1) + 0.3 * torch.randn(2, t.numel(), dtype=dt)
    return wav, 0.3 * torch.randn(2, 320, dtype=dt)


def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate):
    """torchaudio.functional.melscale_fbanks (htk scale, no norm)."""
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_min = 2595.0 * math.log10(1.0 + (f_min / 700.0))
    m_max = 2595.0 * math.log10(1.0 + (f_max / 700.0))
    m_pts = torch.linspace(m_min, m_max, n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up_slopes = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down_slopes, up_slopes))


def create_dct(n_mfcc, n_mels, norm="ortho"):
    """torchaudio.functional.create_dct."""
    n = torch.arange(float(n_mels))
    k = torch.arange(float(n_mfcc)).unsqueeze(1)
    dct = torch.cos(math.pi / float(n_mels) * (n + 0.5) * k)
    if norm is None:
        dct *= 2.0
    else:
        dct[0] *= 1.0 / math.sqrt(2.0)
        dct *= math.sqrt(2.0 / float(n_mels))
    return dct.t()


def compute_deltas(specgram, win_length=5, mode="replicate"):
    """torchaudio.functional.compute_deltas."""
    shape = specgram.size()
    specgram = specgram.reshape(1, -1, shape[-1])
    n = (win_length - 1) // 2
    denom = n * (n + 1) * (2 * n + 1) / 3
    specgram = F.pad(specgram, (n, n), mode=mode)
    kernel = torch.arange(-n, n + 1, 1, dtype=specgram.dtype).repeat(specgram.shape[1], 1, 1)
    output = F.conv1d(specgram, kernel, groups=specgram.shape[1]) / denom
    return output.reshape(shape)


class MFCCKWS(nn.Module):
    def __init__(self, n_mfcc=10, n_mels=16, n_fft=64, hop=16, n_classes=5):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("fb", melscale_fbanks(n_fft // 2 + 1, 0.0, 4000.0, n_mels, 8000))
        self.register_buffer("dct_mat", create_dct(n_mfcc, n_mels))
        self.conv = nn.Sequential(nn.Conv1d(3 * n_mfcc, 24, 3, padding=1), nn.BatchNorm1d(24), nn.ReLU(),
                                  nn.Conv1d(24, 24, 3, padding=1), nn.BatchNorm1d(24), nn.ReLU())
        self.fc = nn.Linear(24, n_classes)

    def forward(self, wav):
        spec = torch.stft(wav, self.n_fft, self.hop, window=self.window, return_complex=True).abs().pow(2.0)
        mel = torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)
        log_mel = 10.0 * torch.log10(torch.clamp(mel, min=1e-10))
        log_mel = torch.max(log_mel, log_mel.amax(dim=(-2, -1), keepdim=True) - 80.0)
        mfcc = torch.matmul(log_mel.transpose(-1, -2), self.dct_mat).transpose(-1, -2)
        d1 = compute_deltas(mfcc)
        d2 = compute_deltas(d1)
        feats = torch.cat([mfcc, d1, d2], dim=1)
        feats = (feats - feats.mean(-1, keepdim=True)) / (feats.std(-1, keepdim=True) + 1e-5)
        return self.fc(self.conv(feats).mean(-1))


def make_mfcc_kws(dt):
    model = MFCCKWS().to(dt)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)

    def step(wav, labels):
        model.train()
        logits = model(wav)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item(), (logits.argmax(1) == labels).sum().item()
    return step, lambda: (_state(model), _opt_state(optimizer))


def kws_inputs(i, dt):
    return torch.randn(4, 480 + 32 * (i % 2), dtype=dt), torch.randint(0, 5, (4,))


def griffinlim(specgram, window, n_fft, hop_length, win_length, power, n_iter, momentum, length, rand_init):
    """torchaudio.functional.griffinlim."""
    shape = specgram.size()
    specgram = specgram.reshape([-1] + list(shape[-2:]))
    specgram = specgram.pow(1 / power)
    if rand_init:
        angles = torch.rand(specgram.size(), dtype=torch.complex64 if specgram.dtype == torch.float32
                            else torch.complex128)
    else:
        angles = torch.full(specgram.size(), 1, dtype=torch.complex64)
    tprev = torch.tensor(0.0, dtype=specgram.dtype)
    for _ in range(n_iter):
        inverse = torch.istft(specgram * angles, n_fft=n_fft, hop_length=hop_length, win_length=win_length,
                              window=window, length=length)
        rebuilt = torch.stft(input=inverse, n_fft=n_fft, hop_length=hop_length, win_length=win_length,
                             window=window, center=True, pad_mode="reflect", normalized=False, onesided=True,
                             return_complex=True)
        angles = rebuilt
        if momentum:
            angles = angles - tprev.mul_(momentum / (1 + momentum))
        angles = angles.div(angles.abs().add(1e-16))
        tprev = rebuilt
    waveform = torch.istft(specgram * angles, n_fft=n_fft, hop_length=hop_length, win_length=win_length,
                           window=window, length=length)
    return waveform.reshape(shape[:-2] + waveform.shape[-1:])


def make_griffinlim(dt):
    window = torch.hann_window(64, dtype=dt)

    def reconstruct(spec, length, n_iter):
        return griffinlim(spec, window, 64, 16, 64, 2.0, n_iter, 0.99, length, True)
    return reconstruct, lambda: None


def gl_inputs(i, dt):
    n = 256 + 32 * i
    wav = torch.randn(2, n, dtype=dt)
    spec = torch.stft(wav, 64, 16, window=torch.hann_window(64, dtype=dt), return_complex=True).abs().pow(2)
    return spec, n, 3 + i % 2


# ------------------------------------------------------------------------------------------------ graphs
class GATConv(nn.Module):
    """PyG-style GATConv on an edge list: self loops added, attention logits per edge by index_select,
    the segment softmax over destination nodes by scatter_reduce(amax) of the detached logits and
    index_add_ of the exponentials, messages aggregated by index_add_."""
    def __init__(self, in_channels, out_channels, heads=2, negative_slope=0.2, dropout=0.1, concat=True):
        super().__init__()
        self.heads, self.out_channels, self.negative_slope, self.dropout, self.concat = (
            heads, out_channels, negative_slope, dropout, concat)
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(heads * out_channels if concat else out_channels))
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x, edge_index):
        N, H, C = x.size(0), self.heads, self.out_channels
        loop = torch.arange(N, device=x.device)
        mask = edge_index[0] != edge_index[1]
        edge_index = torch.cat([edge_index[:, mask], torch.stack([loop, loop])], dim=1)
        src, dst = edge_index[0], edge_index[1]
        h = self.lin(x).view(-1, H, C)
        alpha_src = (h * self.att_src).sum(dim=-1)
        alpha_dst = (h * self.att_dst).sum(dim=-1)
        alpha = alpha_src.index_select(0, src) + alpha_dst.index_select(0, dst)
        alpha = F.leaky_relu(alpha, self.negative_slope)
        index = dst.unsqueeze(-1).expand_as(alpha)
        amax = torch.full((N, H), float("-inf"), dtype=alpha.dtype).scatter_reduce(
            0, index, alpha.detach(), reduce="amax", include_self=True)
        alpha = (alpha - amax.index_select(0, dst)).exp()
        denom = torch.zeros(N, H, dtype=alpha.dtype).index_add_(0, dst, alpha)
        alpha = alpha / (denom.index_select(0, dst) + 1e-16)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        msg = h.index_select(0, src) * alpha.unsqueeze(-1)
        out = torch.zeros(N, H, C, dtype=h.dtype).index_add_(0, dst, msg)
        out = out.view(N, H * C) if self.concat else out.mean(dim=1)
        return out + self.bias


class GATNet(nn.Module):
    def __init__(self, in_dim=8, hidden=8, n_classes=3):
        super().__init__()
        self.conv1 = GATConv(in_dim, hidden, heads=2)
        self.conv2 = GATConv(2 * hidden, n_classes, heads=1, concat=False)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.2, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.2, training=self.training)
        return self.conv2(x, edge_index)


def make_gat_edges(dt):
    model = GATNet().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def train(x, edge_index, y, train_mask):
        model.train()
        optimizer.zero_grad()
        out = model(x, edge_index)
        loss = F.cross_entropy(out[train_mask], y[train_mask])
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(x, edge_index).argmax(dim=-1)
        acc = int((pred[~train_mask] == y[~train_mask]).sum()) / int((~train_mask).sum())
        return float(loss), acc
    return train, lambda: (_state(model), _opt_state(optimizer))


def gat_edge_inputs(i, dt):
    n = 12 + 3 * (i % 2)
    e = 30 + 5 * i
    edge_index = torch.randint(0, n, (2, e))
    return torch.randn(n, 8, dtype=dt), edge_index, torch.randint(0, 3, (n,)), torch.rand(n) < 0.6


class SAGEMean(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin_l = nn.Linear(in_dim, out_dim)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, x, src, dst, n_dst):
        agg = torch.zeros(n_dst, x.size(1), dtype=x.dtype).index_add_(0, dst, x[src])
        deg = torch.bincount(dst, minlength=n_dst).clamp(min=1).unsqueeze(1).to(x.dtype)
        return self.lin_l(agg / deg) + self.lin_r(x[:n_dst])


def to_csr(edge_index, num_nodes):
    row, col = edge_index
    perm = torch.argsort(row * num_nodes + col)
    row, col = row[perm], col[perm]
    deg = torch.bincount(row, minlength=num_nodes)
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(deg, 0)
    return rowptr, col


def sample_neighbors(rowptr, col, nodes, fanout):
    """uniform sampling with replacement of `fanout` neighbours per node from the CSR (nodes without
    neighbours keep none): random offsets into each row, floor(rand * degree)."""
    deg = rowptr[nodes + 1] - rowptr[nodes]
    has = deg > 0
    nodes, deg = nodes[has], deg[has]
    rnd = torch.rand(nodes.numel(), fanout)
    off = (rnd * deg.unsqueeze(1).to(rnd.dtype)).floor().long()
    nbr = col[(rowptr[nodes].unsqueeze(1) + off).view(-1)]
    dst_local = torch.repeat_interleave(torch.nonzero(has).view(-1), fanout)
    return nbr, dst_local


def make_sage_sampling(dt):
    """GraphSAGE mini-batch training on sampled two-hop neighbourhoods: CSR by argsort / bincount / cumsum,
    sampled neighbours relabelled by torch.unique(return_inverse=True), mean aggregation by index_add_."""
    conv1, conv2 = SAGEMean(8, 16).to(dt), SAGEMean(16, 3).to(dt)
    model = nn.ModuleList([conv1, conv2])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def train(x, edge_index, y, batch_nodes, fanouts=(4, 3)):
        rowptr, col = to_csr(edge_index, x.size(0))
        layers, nodes = [], batch_nodes
        for fanout in fanouts:
            nbr, dst_local = sample_neighbors(rowptr, col, nodes, fanout)
            all_nodes, inv = torch.unique(torch.cat([nodes, nbr]), return_inverse=True)
            # keep the targets first: order the union as targets then new neighbours
            is_new = torch.ones(all_nodes.numel(), dtype=torch.bool)
            is_new[inv[:nodes.numel()]] = False
            order = torch.cat([nodes, all_nodes[is_new]])
            remap = torch.full((x.size(0),), -1, dtype=torch.long)
            remap[order] = torch.arange(order.numel())
            layers.append((remap[nbr], dst_local, nodes.numel()))
            nodes = order
        h = x[nodes]
        for conv, (src, dst, n_dst) in zip([conv1, conv2], reversed(layers)):
            h = conv(h, src, dst, n_dst)
            if conv is conv1:
                h = F.relu(h)
        loss = F.cross_entropy(h, y[batch_nodes])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item(), nodes.numel()
    return train, lambda: (_state(model), _opt_state(optimizer))


def sage_inputs(i, dt):
    n = 30 + 4 * i
    return (torch.randn(n, 8, dtype=dt), torch.randint(0, n, (2, 3 * n)), torch.randint(0, 3, (n,)),
            torch.randperm(n)[:6])


class ShiftedSoftplus(nn.Module):
    def forward(self, x):
        return F.softplus(x) - math.log(2.0)


class CFConv(nn.Module):
    def __init__(self, hidden, n_rbf, cutoff):
        super().__init__()
        self.cutoff = cutoff
        self.filter = nn.Sequential(nn.Linear(n_rbf, hidden), ShiftedSoftplus(), nn.Linear(hidden, hidden))
        self.lin1 = nn.Linear(hidden, hidden, bias=False)
        self.lin2 = nn.Sequential(nn.Linear(hidden, hidden), ShiftedSoftplus(), nn.Linear(hidden, hidden))

    def forward(self, h, edge_index, dist, rbf):
        C = 0.5 * (torch.cos(dist * math.pi / self.cutoff) + 1.0)
        W = self.filter(rbf) * C.unsqueeze(-1)
        src, dst = edge_index
        msg = self.lin1(h)[src] * W
        agg = torch.zeros_like(h).index_add_(0, dst, msg)
        return h + self.lin2(agg)


class SchNet(nn.Module):
    def __init__(self, hidden=16, n_rbf=12, cutoff=2.5, n_types=5):
        super().__init__()
        self.cutoff = cutoff
        self.embedding = nn.Embedding(n_types, hidden)
        self.register_buffer("offsets", torch.linspace(0.0, cutoff, n_rbf))
        self.coeff = -0.5 / (cutoff / (n_rbf - 1)) ** 2
        self.interactions = nn.ModuleList([CFConv(hidden, n_rbf, cutoff) for _ in range(2)])
        self.out = nn.Sequential(nn.Linear(hidden, hidden // 2), ShiftedSoftplus(), nn.Linear(hidden // 2, 1))

    def forward(self, z, pos, batch, n_mol):
        d = torch.cdist(pos, pos)
        same = batch.unsqueeze(0) == batch.unsqueeze(1)
        adj = (d < self.cutoff) & same & ~torch.eye(pos.size(0), dtype=torch.bool)
        edge_index = adj.nonzero().t()
        src, dst = edge_index
        dist = (pos[src] - pos[dst]).norm(dim=-1)
        rbf = torch.exp(self.coeff * (dist.unsqueeze(-1) - self.offsets) ** 2)
        h = self.embedding(z)
        for interaction in self.interactions:
            h = interaction(h, edge_index, dist, rbf)
        atom_e = self.out(h).squeeze(-1)
        return torch.zeros(n_mol, dtype=atom_e.dtype).index_add_(0, batch, atom_e)


def make_schnet_forces(dt):
    """energies and forces (-dE/dpos by autograd.grad with create_graph=True) from a radius graph built by
    cdist / nonzero per call, trained on both (the force term backpropagates through the gradient)."""
    model = SchNet().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(z, pos, batch, n_mol, e_ref, f_ref, rho=0.9):
        pos = pos.clone().requires_grad_(True)
        energy = model(z, pos, batch, n_mol)
        forces = -torch.autograd.grad(energy.sum(), pos, create_graph=True)[0]
        loss = (1 - rho) * F.mse_loss(energy, e_ref) + rho * F.mse_loss(forces, f_ref)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item(), energy.detach(), forces.detach()
    return step, lambda: (_state(model), _opt_state(optimizer))


def schnet_inputs(i, dt):
    sizes = [5, 6 + i % 2, 4]
    n = sum(sizes)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return (torch.randint(0, 5, (n,)), torch.randn(n, 3, dtype=dt) * 1.2, batch, len(sizes),
            torch.randn(len(sizes), dtype=dt), torch.randn(n, 3, dtype=dt) * 0.1)


# ------------------------------------------------------------------------------------------------ point clouds
def knn(x, k):
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x ** 2, dim=1, keepdim=True)
    pairwise_distance = -xx - inner - xx.transpose(2, 1)
    return pairwise_distance.topk(k=k, dim=-1)[1]


def get_graph_feature(x, k=4, idx=None):
    """DGCNN's get_graph_feature: neighbours gathered from the flattened (batch * points) table."""
    batch_size, num_points = x.size(0), x.size(2)
    x = x.view(batch_size, -1, num_points)
    if idx is None:
        idx = knn(x, k=k)
    idx_base = torch.arange(0, batch_size).view(-1, 1, 1) * num_points
    idx = (idx + idx_base).view(-1)
    _, num_dims, _ = x.size()
    x = x.transpose(2, 1).contiguous()
    feature = x.view(batch_size * num_points, -1)[idx, :]
    feature = feature.view(batch_size, num_points, k, num_dims)
    x = x.view(batch_size, num_points, 1, num_dims).repeat(1, 1, k, 1)
    return torch.cat((feature - x, x), dim=3).permute(0, 3, 1, 2).contiguous()


class DGCNN(nn.Module):
    def __init__(self, k=4, emb=32, n_classes=4):
        super().__init__()
        self.k = k
        self.conv1 = nn.Sequential(nn.Conv2d(6, 16, 1, bias=False), nn.BatchNorm2d(16), nn.LeakyReLU(0.2))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 16, 1, bias=False), nn.BatchNorm2d(16), nn.LeakyReLU(0.2))
        self.conv5 = nn.Sequential(nn.Conv1d(32, emb, 1, bias=False), nn.BatchNorm1d(emb), nn.LeakyReLU(0.2))
        self.linear1 = nn.Linear(emb * 2, 16, bias=False)
        self.bn6 = nn.BatchNorm1d(16)
        self.dp1 = nn.Dropout(0.5)
        self.linear2 = nn.Linear(16, n_classes)

    def forward(self, x):
        batch_size = x.size(0)
        x = get_graph_feature(x, k=self.k)
        x1 = self.conv1(x).max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x1, k=self.k)
        x2 = self.conv2(x).max(dim=-1, keepdim=False)[0]
        x = self.conv5(torch.cat((x1, x2), dim=1))
        x1 = F.adaptive_max_pool1d(x, 1).view(batch_size, -1)
        x2 = F.adaptive_avg_pool1d(x, 1).view(batch_size, -1)
        x = torch.cat((x1, x2), 1)
        x = F.leaky_relu(self.bn6(self.linear1(x)), negative_slope=0.2)
        return self.linear2(self.dp1(x))


def cal_loss(pred, gold, smoothing=True):
    """DGCNN's cal_loss: label smoothing through a scattered one-hot."""
    gold = gold.contiguous().view(-1)
    if smoothing:
        eps = 0.2
        n_class = pred.size(1)
        one_hot = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
        one_hot = one_hot * (1 - eps) + (1 - one_hot) * eps / (n_class - 1)
        log_prb = F.log_softmax(pred, dim=1)
        return -(one_hot * log_prb).sum(dim=1).mean()
    return F.cross_entropy(pred, gold, reduction="mean")


def make_dgcnn(dt):
    model = DGCNN().to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def train(data, label):
        model.train()
        data = data.permute(0, 2, 1)
        opt.zero_grad()
        logits = model(data)
        loss = cal_loss(logits, label)
        loss.backward()
        opt.step()
        preds = logits.max(dim=1)[1]
        return loss.item(), preds
    return train, lambda: (_state(model), _opt_state(opt))


def dgcnn_inputs(i, dt):
    return torch.randn(4, 16 + 4 * (i % 2), 3, dtype=dt), torch.randint(0, 4, (4,))


def square_distance(src, dst):
    B, N, _ = src.shape
    _, M, _ = dst.shape
    dist = -2 * torch.matmul(src, dst.permute(0, 2, 1))
    dist += torch.sum(src ** 2, -1).view(B, N, 1)
    dist += torch.sum(dst ** 2, -1).view(B, 1, M)
    return dist


def index_points(points, idx):
    B = points.shape[0]
    view_shape = list(idx.shape)
    view_shape[1:] = [1] * (len(view_shape) - 1)
    repeat_shape = list(idx.shape)
    repeat_shape[0] = 1
    batch_indices = torch.arange(B, dtype=torch.long).view(view_shape).repeat(repeat_shape)
    return points[batch_indices, idx, :]


def farthest_point_sample(xyz, npoint):
    B, N, C = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long)
    distance = torch.ones(B, N, dtype=xyz.dtype) * 1e10
    farthest = torch.randint(0, N, (B,), dtype=torch.long)
    batch_indices = torch.arange(B, dtype=torch.long)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        mask = dist < distance
        distance[mask] = dist[mask]
        farthest = torch.max(distance, -1)[1]
    return centroids


def query_ball_point(radius, nsample, xyz, new_xyz):
    B, N, C = xyz.shape
    _, S, _ = new_xyz.shape
    group_idx = torch.arange(N, dtype=torch.long).view(1, 1, N).repeat([B, S, 1])
    sqrdists = square_distance(new_xyz, xyz)
    group_idx[sqrdists > radius ** 2] = N
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, 0].view(B, S, 1).repeat([1, 1, nsample])
    mask = group_idx == N
    group_idx[mask] = group_first[mask]
    return group_idx


class PointNetSetAbstraction(nn.Module):
    def __init__(self, npoint, radius, nsample, in_channel, mlp):
        super().__init__()
        self.npoint, self.radius, self.nsample = npoint, radius, nsample
        self.mlp_convs, self.mlp_bns = nn.ModuleList(), nn.ModuleList()
        last_channel = in_channel
        for out_channel in mlp:
            self.mlp_convs.append(nn.Conv2d(last_channel, out_channel, 1))
            self.mlp_bns.append(nn.BatchNorm2d(out_channel))
            last_channel = out_channel

    def forward(self, xyz, points):
        xyz = xyz.permute(0, 2, 1)
        if points is not None:
            points = points.permute(0, 2, 1)
        B, N, C = xyz.shape
        fps_idx = farthest_point_sample(xyz, self.npoint)
        new_xyz = index_points(xyz, fps_idx)
        idx = query_ball_point(self.radius, self.nsample, xyz, new_xyz)
        grouped_xyz = index_points(xyz, idx)
        grouped_xyz_norm = grouped_xyz - new_xyz.view(B, self.npoint, 1, C)
        if points is not None:
            new_points = torch.cat([grouped_xyz_norm, index_points(points, idx)], dim=-1)
        else:
            new_points = grouped_xyz_norm
        new_points = new_points.permute(0, 3, 2, 1)
        for i, conv in enumerate(self.mlp_convs):
            new_points = F.relu(self.mlp_bns[i](conv(new_points)))
        new_points = torch.max(new_points, 2)[0]
        return new_xyz.permute(0, 2, 1), new_points


class PointNet2(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.sa1 = PointNetSetAbstraction(8, 0.8, 4, 3, [16, 16])
        self.sa2 = PointNetSetAbstraction(4, 1.2, 4, 16 + 3, [32])
        self.fc = nn.Sequential(nn.Linear(32, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.4),
                                nn.Linear(16, n_classes))

    def forward(self, xyz):
        l1_xyz, l1_points = self.sa1(xyz, None)
        l2_xyz, l2_points = self.sa2(l1_xyz, l1_points)
        x = l2_points.max(-1)[0]
        return F.log_softmax(self.fc(x), -1)


def make_pointnet2(dt):
    """PointNet++ (yanx27's Pytorch_Pointnet_Pointnet2): farthest point sampling in a Python loop from a
    random start, ball query by sort, grouping by batched index_points, a training step."""
    model = PointNet2().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-4)

    def train(points, target):
        model.train()
        optimizer.zero_grad()
        pred = model(points.transpose(2, 1))
        loss = F.nll_loss(pred, target.long())
        loss.backward()
        optimizer.step()
        return loss.item(), pred.data.max(1)[1].eq(target.long().data).cpu().sum().item()
    return train, lambda: (_state(model), _opt_state(optimizer))


def pointnet2_inputs(i, dt):
    return torch.randn(4, 24 + 8 * (i % 2), 3, dtype=dt), torch.randint(0, 4, (4,))


def chamfer_distance(x, y):
    d = torch.cdist(x, y) ** 2
    return d.min(dim=2)[0].mean(dim=1) + d.min(dim=1)[0].mean(dim=1)


class FoldingNet(nn.Module):
    def __init__(self, code=16, grid=5):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv1d(3, 32, 1), nn.ReLU(), nn.Conv1d(32, code, 1))
        u = torch.linspace(-0.5, 0.5, grid)
        gx, gy = torch.meshgrid(u, u, indexing="ij")
        self.register_buffer("grid", torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=0))
        self.fold1 = nn.Sequential(nn.Conv1d(code + 2, 32, 1), nn.ReLU(), nn.Conv1d(32, 3, 1))
        self.fold2 = nn.Sequential(nn.Conv1d(code + 3, 32, 1), nn.ReLU(), nn.Conv1d(32, 3, 1))

    def forward(self, pts):
        code = self.encoder(pts.transpose(1, 2)).max(dim=2)[0]
        M = self.grid.shape[1]
        code_rep = code.unsqueeze(2).expand(-1, -1, M)
        grid = self.grid.unsqueeze(0).expand(pts.size(0), -1, -1).to(code.dtype)
        f1 = self.fold1(torch.cat([code_rep, grid], dim=1))
        f2 = self.fold2(torch.cat([code_rep, f1], dim=1))
        return f2.transpose(1, 2)


def make_foldingnet(dt):
    model = FoldingNet().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(pts):
        recon = model(pts)
        loss = chamfer_distance(recon, pts).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    return step, lambda: (_state(model), _opt_state(optimizer))


# ------------------------------------------------------------------------------------------------ recommenders
class DLRM(nn.Module):
    def __init__(self, m_spa=8, ln_emb=(20, 30, 10), ln_bot=(4, 16, 8), top_hidden=16):
        super().__init__()
        self.emb_l = nn.ModuleList([nn.EmbeddingBag(n, m_spa, mode="sum") for n in ln_emb])
        layers = []
        for a, b in zip(ln_bot[:-1], ln_bot[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.bot_l = nn.Sequential(*layers)
        n_f = len(ln_emb) + 1
        self.top_l = nn.Sequential(nn.Linear(m_spa + n_f * (n_f - 1) // 2, top_hidden), nn.ReLU(),
                                   nn.Linear(top_hidden, 1), nn.Sigmoid())

    def apply_emb(self, lS_o, lS_i, lS_w):
        ly = []
        for k, sparse_index_group_batch in enumerate(lS_i):
            E = self.emb_l[k]
            ly.append(E(sparse_index_group_batch, lS_o[k], per_sample_weights=lS_w[k]))
        return ly

    def interact_features(self, x, ly):
        (batch_size, d) = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        _, ni, nj = Z.shape
        li, lj = torch.triu_indices(ni, nj, offset=1)
        Zflat = Z[:, li, lj]
        return torch.cat([x] + [Zflat], dim=1)

    def forward(self, dense_x, lS_o, lS_i, lS_w):
        x = self.bot_l(dense_x)
        ly = self.apply_emb(lS_o, lS_i, lS_w)
        z = self.interact_features(x, ly)
        return self.top_l(z)


def make_dlrm(dt):
    """facebookresearch/dlrm's training step: per-table EmbeddingBag(mode='sum') with offsets and
    per_sample_weights, the dot interaction's upper triangle, BCE on a clamped sigmoid, plain SGD."""
    dlrm = DLRM().to(dt)
    optimizer = torch.optim.SGD(dlrm.parameters(), lr=0.1)
    loss_fn = torch.nn.BCELoss(reduction="mean")
    loss_threshold = 1e-6

    def step(X, lS_o, lS_i, lS_w, T):
        Z = dlrm(X, lS_o, lS_i, lS_w)
        Z = torch.clamp(Z, min=loss_threshold, max=(1.0 - loss_threshold))
        E = loss_fn(Z, T)
        optimizer.zero_grad()
        E.backward()
        optimizer.step()
        A = ((Z.detach() > 0.5) == (T > 0.5)).sum().item()
        return E.detach(), A
    return step, lambda: (_state(dlrm), _opt_state(optimizer))


def _bags(batch, n_rows, max_len, dt):
    lengths = torch.randint(0, max_len + 1, (batch,))
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)[:-1]])
    idx = torch.randint(0, n_rows, (int(lengths.sum()),))
    return offsets, idx, torch.rand(idx.numel(), dtype=dt)


def dlrm_inputs(i, dt):
    B = 8 + 4 * (i % 2)
    bags = [_bags(B, n, 3, dt) for n in (20, 30, 10)]
    return (torch.rand(B, 4, dtype=dt), [b[0] for b in bags], [b[1] for b in bags], [b[2] for b in bags],
            (torch.rand(B, 1) < 0.4).to(dt))


class TwoTower(nn.Module):
    def __init__(self, n_items=40, n_users=20, dim=16):
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim)
        self.history = nn.EmbeddingBag(n_items, dim, mode="mean")
        self.user_mlp = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.item_emb = nn.Embedding(n_items, dim)
        self.item_mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def user(self, user_ids, hist, hist_offsets):
        u = torch.cat([self.user_emb(user_ids), self.history(hist, hist_offsets)], dim=-1)
        return F.normalize(self.user_mlp(u), dim=-1)

    def item(self, item_ids):
        return F.normalize(self.item_mlp(self.item_emb(item_ids)), dim=-1)


def make_two_tower(dt):
    """sampled-softmax retrieval (Yi et al. 2019): in-batch negatives, logits corrected by the log of each
    item's sampling probability (streaming frequency estimates kept in a tensor between calls), duplicates
    of the positive masked, temperature, Adagrad."""
    model = TwoTower().to(dt)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.05)
    state = {"A": torch.zeros(40, dtype=torch.long), "B": torch.ones(40, dtype=dt), "t": 0}
    alpha, temperature = 0.1, 0.05

    def step(user_ids, hist, hist_offsets, item_ids):
        state["t"] += 1
        t = state["t"]
        with torch.no_grad():
            state["B"][item_ids] = (1 - alpha) * state["B"][item_ids] + alpha * (t - state["A"][item_ids]).to(dt)
            state["A"][item_ids] = t
            log_q = torch.log(1.0 / state["B"][item_ids])
        u, v = model.user(user_ids, hist, hist_offsets), model.item(item_ids)
        logits = u @ v.t() / temperature - log_q.unsqueeze(0)
        same = item_ids.unsqueeze(0) == item_ids.unsqueeze(1)
        logits = logits.masked_fill(same & ~torch.eye(len(item_ids), dtype=torch.bool), float("-inf"))
        loss = F.cross_entropy(logits, torch.arange(len(item_ids)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        recall = (logits.topk(3, dim=1).indices == torch.arange(len(item_ids)).unsqueeze(1)).any(1).float().mean()
        return loss.item(), recall.item()
    return step, lambda: (_state(model), _opt_state(optimizer), dict(state))


def two_tower_inputs(i, dt):
    B = 10
    off, hist, _ = _bags(B, 40, 4, dt)
    return torch.randint(0, 20, (B,)), hist, off, torch.randint(0, 15, (B,))


class DeepFM(nn.Module):
    def __init__(self, field_dims=(6, 9, 4, 7), embed_dim=8, mlp_dims=(16, 16), dropout=0.2):
        super().__init__()
        self.register_buffer("offsets", torch.tensor((0, *torch.cumsum(torch.tensor(field_dims), 0)[:-1].tolist())))
        n = sum(field_dims)
        self.fc = nn.Embedding(n, 1)
        self.linear_bias = nn.Parameter(torch.zeros((1,)))
        self.embedding = nn.Embedding(n, embed_dim)
        nn.init.xavier_uniform_(self.embedding.weight.data)
        self.embed_output_dim = len(field_dims) * embed_dim
        layers, d = [], self.embed_output_dim
        for m in mlp_dims:
            layers += [nn.Linear(d, m), nn.BatchNorm1d(m), nn.ReLU(), nn.Dropout(p=dropout)]
            d = m
        layers.append(nn.Linear(d, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x):
        x = x + self.offsets.unsqueeze(0)
        embed_x = self.embedding(x)
        linear = torch.sum(self.fc(x), dim=1) + self.linear_bias
        square_of_sum = torch.sum(embed_x, dim=1) ** 2
        sum_of_square = torch.sum(embed_x ** 2, dim=1)
        fm = 0.5 * torch.sum(square_of_sum - sum_of_square, dim=1, keepdim=True)
        x = linear + fm + self.mlp(embed_x.view(-1, self.embed_output_dim))
        return torch.sigmoid(x.squeeze(1))


def auc_rank(scores, labels):
    """Mann-Whitney AUC by ranks (ties broken by order)."""
    order = torch.argsort(scores)
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(1, len(scores) + 1)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return ((ranks[labels.bool()].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


def make_deepfm(dt):
    """rixwew/pytorch-fm's DeepFM training step (field offsets added to the indices) and an evaluation AUC."""
    model = DeepFM().to(dt)
    criterion = torch.nn.BCELoss()
    optimizer = torch.optim.Adam(params=model.parameters(), lr=1e-3, weight_decay=1e-6)

    def step(fields, target):
        model.train()
        y = model(fields)
        loss = criterion(y, target.to(y.dtype))
        model.zero_grad()
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            auc = auc_rank(model(fields).float(), target)
        return loss.item(), auc
    return step, lambda: (_state(model), _opt_state(optimizer))


def deepfm_inputs(i, dt):
    B = 16
    fields = torch.stack([torch.randint(0, n, (B,)) for n in (6, 9, 4, 7)], dim=1)
    return fields, (torch.rand(B) < 0.5).long()


# ------------------------------------------------------------------------------------------------ sequences
class CRF(nn.Module):
    """pytorch-crf (kmkurn) style: batch_first, masked forward algorithm and Viterbi with a Python backtrace."""
    def __init__(self, num_tags):
        super().__init__()
        self.num_tags = num_tags
        self.start_transitions = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.end_transitions = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags).uniform_(-0.1, 0.1))

    def forward(self, emissions, tags, mask):
        emissions, tags, mask = emissions.transpose(0, 1), tags.transpose(0, 1), mask.transpose(0, 1)
        numerator = self._compute_score(emissions, tags, mask)
        denominator = self._compute_normalizer(emissions, mask)
        return (numerator - denominator).sum() / mask.float().sum()

    def _compute_score(self, emissions, tags, mask):
        seq_length, batch_size = tags.shape
        mask = mask.type_as(emissions)
        score = self.start_transitions[tags[0]]
        score = score + emissions[0, torch.arange(batch_size), tags[0]]
        for i in range(1, seq_length):
            score = score + self.transitions[tags[i - 1], tags[i]] * mask[i]
            score = score + emissions[i, torch.arange(batch_size), tags[i]] * mask[i]
        seq_ends = mask.long().sum(dim=0) - 1
        last_tags = tags[seq_ends, torch.arange(batch_size)]
        return score + self.end_transitions[last_tags]

    def _compute_normalizer(self, emissions, mask):
        seq_length = emissions.size(0)
        score = self.start_transitions + emissions[0]
        for i in range(1, seq_length):
            broadcast_score = score.unsqueeze(2)
            broadcast_emissions = emissions[i].unsqueeze(1)
            next_score = broadcast_score + self.transitions + broadcast_emissions
            next_score = torch.logsumexp(next_score, dim=1)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)
        score = score + self.end_transitions
        return torch.logsumexp(score, dim=1)

    def decode(self, emissions, mask):
        emissions, mask = emissions.transpose(0, 1), mask.transpose(0, 1)
        seq_length, batch_size = mask.shape
        score = self.start_transitions + emissions[0]
        history = []
        for i in range(1, seq_length):
            next_score = score.unsqueeze(2) + self.transitions + emissions[i].unsqueeze(1)
            next_score, indices = next_score.max(dim=1)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)
            history.append(indices)
        score += self.end_transitions
        seq_ends = mask.long().sum(dim=0) - 1
        best_tags_list = []
        for idx in range(batch_size):
            _, best_last_tag = score[idx].max(dim=0)
            best_tags = [best_last_tag.item()]
            for hist in reversed(history[:seq_ends[idx]]):
                best_last_tag = hist[idx][best_tags[-1]]
                best_tags.append(best_last_tag.item())
            best_tags.reverse()
            best_tags_list.append(best_tags)
        return best_tags_list


class BiGRUCRF(nn.Module):
    def __init__(self, vocab=30, emb=12, hidden=12, num_tags=5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=0)
        self.gru = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(2 * hidden, num_tags)
        self.crf = CRF(num_tags)

    def emissions(self, tokens, lengths):
        packed = pack_padded_sequence(self.embedding(tokens), lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
        return self.proj(out)


def make_bigru_crf(dt):
    model = BiGRUCRF().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step(tokens, lengths, tags):
        mask = torch.arange(tokens.size(1)).unsqueeze(0) < lengths.unsqueeze(1)
        model.train()
        em = model.emissions(tokens, lengths)
        loss = -model.crf(em, tags, mask)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        model.eval()
        with torch.no_grad():
            paths = model.crf.decode(model.emissions(tokens, lengths), mask)
        return loss.item(), paths
    return step, lambda: (_state(model), _opt_state(optimizer))


def crf_batch_inputs(i, dt):
    B, T = 4, 7 + i % 2
    lengths = torch.randint(2, T + 1, (B,))
    lengths[0] = T
    tokens = torch.randint(1, 30, (B, T)) * (torch.arange(T) < lengths[:, None])
    return tokens, lengths, torch.randint(0, 5, (B, T))


class RNNModel(nn.Module):
    """pytorch/examples word_language_model's RNNModel (LSTM, tied weights)."""
    def __init__(self, ntoken=40, ninp=16, nhid=16, nlayers=2, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight
        self.nhid, self.nlayers, self.ntoken = nhid, nlayers, ntoken

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def make_lstm_tbptt(dt):
    """word_language_model's train(): the hidden state carried between calls (detached), manual SGD by
    p.data.add_(p.grad, alpha=-lr) after clip_grad_norm_, the learning rate annealed when a loss rises."""
    model = RNNModel().to(dt)
    st = {"hidden": model.init_hidden(4), "lr": 5.0, "best": None}
    criterion = nn.NLLLoss()

    def train_chunk(data, targets):
        model.train()
        hidden = repackage_hidden(st["hidden"])
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-st["lr"])
        st["hidden"] = hidden
        if st["best"] is not None and loss.item() > st["best"]:
            st["lr"] /= 4.0
        else:
            st["best"] = loss.item()
        return loss.item(), math.exp(loss.item())
    return train_chunk, lambda: (_state(model), st["hidden"], st["lr"], st["best"])


def tbptt_inputs(i, dt):
    seq = torch.randint(0, 40, (7, 4))
    return seq[:-1], seq[1:].reshape(-1)


class HMM(nn.Module):
    def __init__(self, K=4, V=6):
        super().__init__()
        self.K, self.V = K, V
        self.register_buffer("log_pi", F.log_softmax(torch.randn(K), 0))
        self.register_buffer("log_A", F.log_softmax(torch.randn(K, K), 1))
        self.register_buffer("log_B", F.log_softmax(torch.randn(K, V), 1))

    @torch.no_grad()
    def em_step(self, obs):
        """one Baum-Welch iteration in log space: forward / backward recursions by logsumexp in Python
        loops over time, expected counts, the parameters rewritten in place."""
        B, T = obs.shape
        emis = self.log_B[:, obs].permute(1, 2, 0)
        alpha = torch.empty(B, T, self.K, dtype=emis.dtype)
        alpha[:, 0] = self.log_pi + emis[:, 0]
        for t in range(1, T):
            alpha[:, t] = torch.logsumexp(alpha[:, t - 1, :, None] + self.log_A, dim=1) + emis[:, t]
        beta = torch.zeros(B, T, self.K, dtype=emis.dtype)
        for t in range(T - 2, -1, -1):
            beta[:, t] = torch.logsumexp(self.log_A + (emis[:, t + 1] + beta[:, t + 1])[:, None, :], dim=2)
        loglik = torch.logsumexp(alpha[:, -1], dim=-1)
        gamma = alpha + beta - loglik[:, None, None]
        xi = (alpha[:, :-1, :, None] + self.log_A + (emis[:, 1:] + beta[:, 1:])[:, :, None, :]
              - loglik[:, None, None, None])
        self.log_pi.copy_(torch.logsumexp(gamma[:, 0], dim=0) - math.log(B))
        log_A = torch.logsumexp(xi, dim=(0, 1))
        self.log_A.copy_(log_A - torch.logsumexp(log_A, dim=1, keepdim=True))
        post = gamma.exp()
        counts = torch.einsum("btk,btv->kv", post, F.one_hot(obs, self.V).to(post.dtype))
        self.log_B.copy_(torch.log(counts + 1e-6) - torch.log(counts.sum(1, keepdim=True) + self.V * 1e-6))
        return loglik.sum().item()


def make_hmm(dt):
    hmm = HMM().to(dt)
    history = []

    def fit(obs, n_iter, tol=1e-3):
        for _ in range(n_iter):
            ll = hmm.em_step(obs)
            if history and abs(ll - history[-1]) < tol:
                history.append(ll)
                break
            history.append(ll)
        return ll
    return fit, lambda: (dict(hmm.named_buffers()), list(history))


def hmm_inputs(i, dt):
    return torch.randint(0, 6, (5, 9 + i)), 3 + i % 2


# ------------------------------------------------------------------------------------------------ time series
class RevIN(nn.Module):
    """reversible instance normalisation (Kim et al. 2022): statistics kept on the module between norm and
    denorm (set as attributes in forward)."""
    def __init__(self, num_features, eps=1e-5, affine=True):
        super().__init__()
        self.num_features, self.eps, self.affine = num_features, eps, affine
        if affine:
            self.affine_weight = nn.Parameter(torch.ones(num_features))
            self.affine_bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x, mode):
        if mode == "norm":
            dim2reduce = tuple(range(1, x.ndim - 1))
            self.mean = torch.mean(x, dim=dim2reduce, keepdim=True).detach()
            self.stdev = torch.sqrt(torch.var(x, dim=dim2reduce, keepdim=True, unbiased=False) + self.eps).detach()
            x = (x - self.mean) / self.stdev
            if self.affine:
                x = x * self.affine_weight + self.affine_bias
            return x
        if self.affine:
            x = (x - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
        return x * self.stdev + self.mean


class GatedResidual(nn.Module):
    def __init__(self, ch, dilation):
        super().__init__()
        self.dilation = dilation
        self.filter = nn.Conv1d(ch, ch, 2, dilation=dilation)
        self.gate = nn.Conv1d(ch, ch, 2, dilation=dilation)
        self.res = nn.Conv1d(ch, ch, 1)
        self.skip = nn.Conv1d(ch, ch, 1)

    def forward(self, x):
        xp = F.pad(x, (self.dilation, 0))
        h = torch.tanh(self.filter(xp)) * torch.sigmoid(self.gate(xp))
        return x + self.res(h), self.skip(h)


class WaveNetForecaster(nn.Module):
    def __init__(self, n_vars=3, ch=16, horizon=4, quantiles=(0.1, 0.5, 0.9)):
        super().__init__()
        self.revin = RevIN(n_vars)
        self.inp = nn.Conv1d(n_vars, ch, 1)
        self.blocks = nn.ModuleList([GatedResidual(ch, d) for d in (1, 2, 4, 8)])
        self.head = nn.Linear(ch, horizon * n_vars * len(quantiles))
        self.horizon, self.n_vars, self.nq = horizon, n_vars, len(quantiles)

    def forward(self, x):
        x = self.revin(x, "norm")
        h = self.inp(x.transpose(1, 2))
        skips = 0
        for block in self.blocks:
            h, s = block(h)
            skips = skips + s
        out = self.head(F.relu(skips)[:, :, -1]).view(-1, self.horizon, self.n_vars, self.nq)
        out = torch.stack([self.revin(out[..., q], "denorm") for q in range(self.nq)], dim=-1)
        return out


def quantile_loss(pred, target, quantiles):
    losses = []
    for i, q in enumerate(quantiles):
        errors = target - pred[..., i]
        losses.append(torch.max((q - 1) * errors, q * errors).unsqueeze(-1))
    return torch.mean(torch.sum(torch.cat(losses, dim=-1), dim=-1))


def make_wavenet_quantile(dt):
    quantiles = (0.1, 0.5, 0.9)
    model = WaveNetForecaster(quantiles=quantiles).to(dt)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(history, future):
        model.train()
        pred = model(history)
        loss = quantile_loss(pred, future, quantiles)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        coverage = ((future >= pred[..., 0]) & (future <= pred[..., 2])).float().mean()
        return loss.item(), coverage.item(), pred.detach()
    return step, lambda: (_state(model), _opt_state(optimizer))


def _series(B, L, n_vars, dt, i):
    t = torch.arange(L, dtype=dt)
    base = torch.sin(t / 3.0 + i)[None, :, None] * torch.linspace(1, 3, n_vars, dtype=dt) + 5.0 * (i + 1)
    return base + 0.2 * torch.randn(B, L, n_vars, dtype=dt)


def wavenet_inputs(i, dt):
    s = _series(4, 28 + 4 * (i % 2), 3, dt, i)
    return s[:, :-4], s[:, -4:]


class NBeatsBlock(nn.Module):
    def __init__(self, backcast, forecast, hidden, basis):
        super().__init__()
        self.backcast_len, self.forecast_len, self.basis = backcast, forecast, basis
        self.fc = nn.Sequential(nn.Linear(backcast, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        if basis == "trend":
            degree = 3
            self.theta = nn.Linear(hidden, 2 * (degree + 1), bias=False)
            tb = torch.arange(backcast, dtype=torch.float32) / backcast
            tf = torch.arange(forecast, dtype=torch.float32) / forecast
            self.register_buffer("back_basis", torch.stack([tb ** p for p in range(degree + 1)]))
            self.register_buffer("fore_basis", torch.stack([tf ** p for p in range(degree + 1)]))
        elif basis == "seasonality":
            harmonics = 2
            tb = torch.arange(backcast, dtype=torch.float32) / backcast
            tf = torch.arange(forecast, dtype=torch.float32) / forecast
            freq = torch.arange(1, harmonics + 1, dtype=torch.float32)[:, None] * 2 * math.pi
            self.register_buffer("back_basis", torch.cat([torch.cos(freq * tb), torch.sin(freq * tb)]))
            self.register_buffer("fore_basis", torch.cat([torch.cos(freq * tf), torch.sin(freq * tf)]))
            self.theta = nn.Linear(hidden, 2 * self.back_basis.shape[0], bias=False)
        else:
            self.theta = nn.Linear(hidden, backcast + forecast)

    def forward(self, x):
        theta = self.theta(self.fc(x))
        if self.basis == "generic":
            return theta[:, :self.backcast_len], theta[:, self.backcast_len:]
        p = self.back_basis.shape[0]
        return theta[:, :p] @ self.back_basis, theta[:, p:] @ self.fore_basis


class NBeats(nn.Module):
    def __init__(self, backcast=16, forecast=4, hidden=32):
        super().__init__()
        self.blocks = nn.ModuleList([NBeatsBlock(backcast, forecast, hidden, b)
                                     for b in ("trend", "seasonality", "generic")])

    def forward(self, x):
        residuals = x.flip(dims=(1,))
        forecast = 0
        for block in self.blocks:
            backcast, block_forecast = block(residuals)
            residuals = residuals - backcast
            forecast = forecast + block_forecast
        return forecast


def smape_loss(forecast, target):
    denom = forecast.abs().detach() + target.abs()
    ratio = torch.where(denom == 0, torch.zeros_like(denom), (forecast - target).abs() / denom)
    return 200 * ratio.mean()


def make_nbeats(dt):
    model = NBeats().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        model.train()
        optimizer.zero_grad()
        forecast = model(x)
        loss = smape_loss(forecast, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return float(loss)
    return step, lambda: (_state(model), _opt_state(optimizer))


def nbeats_inputs(i, dt):
    s = _series(6, 20, 1, dt, i)[..., 0]
    return s[:, :16], s[:, 16:]


class DeepAR(nn.Module):
    def __init__(self, hidden=16, n_cov=2):
        super().__init__()
        self.rnn = nn.LSTM(1 + n_cov, hidden, num_layers=2, batch_first=True)
        self.mu, self.sigma, self.df = nn.Linear(hidden, 1), nn.Linear(hidden, 1), nn.Linear(hidden, 1)

    def distribution(self, h):
        return StudentT(2.0 + F.softplus(self.df(h)).squeeze(-1), self.mu(h).squeeze(-1),
                        F.softplus(self.sigma(h)).squeeze(-1) + 1e-3)


def make_deepar(dt):
    """DeepAR: mean scaling, a StudentT likelihood trained by teacher forcing, then ancestral sampling of
    num_samples paths through the LSTM state (samples fed back in a Python loop) and torch.quantile."""
    model = DeepAR().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(target, covariates, horizon, num_samples=8):
        ctx = target.shape[1] - horizon
        scale = target[:, :ctx].abs().mean(1, keepdim=True) + 1.0
        z = target / scale
        inp = torch.cat([torch.cat([torch.zeros_like(z[:, :1]), z[:, :ctx - 1]], 1).unsqueeze(-1),
                         covariates[:, :ctx]], -1)
        h, state = model.rnn(inp)
        loss = -model.distribution(h).log_prob(z[:, :ctx]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            h, (hn, cn) = model.rnn(inp)
            hn = hn.repeat_interleave(num_samples, 1)
            cn = cn.repeat_interleave(num_samples, 1)
            last = z[:, ctx - 1].repeat_interleave(num_samples, 0)
            cov = covariates.repeat_interleave(num_samples, 0)
            samples = []
            for t in range(horizon):
                x = torch.cat([last[:, None, None], cov[:, ctx + t:ctx + t + 1]], -1)
                out, (hn, cn) = model.rnn(x, (hn, cn))
                last = model.distribution(out[:, -1]).sample()
                samples.append(last)
            paths = torch.stack(samples, 1).view(target.shape[0], num_samples, horizon) * scale.unsqueeze(1)
            q = torch.quantile(paths, torch.tensor([0.1, 0.5, 0.9], dtype=paths.dtype), dim=1)
        return loss.item(), q
    return step, lambda: (_state(model), _opt_state(optimizer))


def deepar_inputs(i, dt):
    B, L = 3, 16 + 2 * (i % 2)
    s = _series(B, L, 1, dt, i)[..., 0]
    cov = torch.stack([torch.sin(torch.arange(L, dtype=dt) / 4), torch.arange(L, dtype=dt) / L], -1)
    return s, cov.expand(B, L, 2).contiguous(), 3 + i % 2


# ------------------------------------------------------------------------------------------------ tabular
def _make_ix_like(input, dim=0):
    d = input.size(dim)
    rho = torch.arange(1, d + 1, device=input.device, dtype=input.dtype)
    view = [1] * input.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


class SparsemaxFunction(torch.autograd.Function):
    """pytorch-tabnet's sparsemax (after entmax): sort, cumsum, support size, threshold; its own backward."""
    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input -= max_val
        tau, supp_size = SparsemaxFunction._threshold_and_support(input, dim=dim)
        output = torch.clamp(input - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0
        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze()
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None

    @staticmethod
    def _threshold_and_support(input, dim=-1):
        input_srt, _ = torch.sort(input, descending=True, dim=dim)
        input_cumsum = input_srt.cumsum(dim) - 1
        rhos = _make_ix_like(input, dim)
        support = rhos * input_srt > input_cumsum
        support_size = support.sum(dim=dim).unsqueeze(dim)
        tau = input_cumsum.gather(dim, support_size - 1)
        tau /= support_size.to(input.dtype)
        return tau, support_size


class GBN(nn.Module):
    """ghost batch norm: one BatchNorm1d over virtual batches (chunks)."""
    def __init__(self, input_dim, virtual_batch_size=8, momentum=0.02):
        super().__init__()
        self.virtual_batch_size = virtual_batch_size
        self.bn = nn.BatchNorm1d(input_dim, momentum=momentum)

    def forward(self, x):
        chunks = x.chunk(int(math.ceil(x.shape[0] / self.virtual_batch_size)), 0)
        return torch.cat([self.bn(x_) for x_ in chunks], dim=0)


class GLUBlock(nn.Module):
    def __init__(self, input_dim, output_dim, fc=None):
        super().__init__()
        self.output_dim = output_dim
        self.fc = fc if fc is not None else nn.Linear(input_dim, 2 * output_dim, bias=False)
        self.bn = GBN(2 * output_dim)

    def forward(self, x):
        x = self.bn(self.fc(x))
        return torch.mul(x[:, :self.output_dim], torch.sigmoid(x[:, self.output_dim:]))


class TabNet(nn.Module):
    def __init__(self, input_dim=10, n_d=8, n_a=8, n_steps=3, gamma=1.3, n_classes=3):
        super().__init__()
        self.n_d, self.n_a, self.n_steps, self.gamma = n_d, n_a, n_steps, gamma
        self.initial_bn = nn.BatchNorm1d(input_dim, momentum=0.01)
        shared = nn.Linear(input_dim, 2 * (n_d + n_a), bias=False)
        self.initial_splitter = GLUBlock(input_dim, n_d + n_a, fc=shared)
        self.feat_transformers = nn.ModuleList([GLUBlock(input_dim, n_d + n_a, fc=shared) for _ in range(n_steps)])
        self.att_fc = nn.ModuleList([nn.Linear(n_a, input_dim, bias=False) for _ in range(n_steps)])
        self.att_bn = nn.ModuleList([GBN(input_dim) for _ in range(n_steps)])
        self.final_mapping = nn.Linear(n_d, n_classes, bias=False)

    def forward(self, x):
        x = self.initial_bn(x)
        prior = torch.ones(x.shape, dtype=x.dtype)
        M_loss = 0
        att = self.initial_splitter(x)[:, self.n_d:]
        steps_output = []
        for step in range(self.n_steps):
            a = self.att_bn[step](self.att_fc[step](att))
            a = torch.mul(a, prior)
            M = SparsemaxFunction.apply(a, -1)
            M_loss += torch.mean(torch.sum(torch.mul(M, torch.log(M + 1e-15)), dim=1))
            prior = torch.mul(self.gamma - M, prior)
            out = self.feat_transformers[step](torch.mul(M, x))
            steps_output.append(F.relu(out[:, :self.n_d]))
            att = out[:, self.n_d:]
        M_loss /= self.n_steps
        return self.final_mapping(torch.sum(torch.stack(steps_output, dim=0), dim=0)), M_loss


def make_tabnet(dt):
    model = TabNet().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    lambda_sparse = 1e-3

    def train_batch(X, y):
        model.train()
        optimizer.zero_grad()
        output, M_loss = model(X)
        loss = F.cross_entropy(output, y) - lambda_sparse * M_loss
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item(), output.argmax(1)
    return train_batch, lambda: (_state(model), _opt_state(optimizer))


def tabnet_inputs(i, dt):
    B = 12 + 4 * (i % 2)
    return torch.randn(B, 10, dtype=dt), torch.randint(0, 3, (B,))


class FeatureTokenizer(nn.Module):
    """rtdl's FT-Transformer tokenizer: a [CLS] weight row, per-feature weights and biases for numbers,
    categorical embeddings indexed through cumulative category offsets."""
    def __init__(self, d_numerical, categories, d_token):
        super().__init__()
        self.register_buffer("category_offsets", torch.tensor([0] + categories[:-1]).cumsum(0))
        self.category_embeddings = nn.Embedding(sum(categories), d_token)
        nn.init.kaiming_uniform_(self.category_embeddings.weight, a=math.sqrt(5))
        self.weight = nn.Parameter(torch.empty(d_numerical + 1, d_token))
        self.bias = nn.Parameter(torch.empty(d_numerical + len(categories), d_token))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.kaiming_uniform_(self.bias, a=math.sqrt(5))

    def forward(self, x_num, x_cat):
        x_num = torch.cat([torch.ones(len(x_num), 1, dtype=x_num.dtype), x_num], dim=1)
        x = self.weight[None] * x_num[:, :, None]
        x = torch.cat([x, self.category_embeddings(x_cat + self.category_offsets[None])], dim=1)
        bias = torch.cat([torch.zeros(1, self.bias.shape[1], dtype=self.bias.dtype), self.bias])
        return x + bias[None]


class FTTransformer(nn.Module):
    def __init__(self, d_num=5, categories=(3, 7, 4), d_token=16):
        super().__init__()
        self.tokenizer = FeatureTokenizer(d_num, list(categories), d_token)
        layer = nn.TransformerEncoderLayer(d_token, 2, 32, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_token)
        self.head = nn.Linear(d_token, 1)

    def forward(self, x_num, x_cat):
        x = self.encoder(self.tokenizer(x_num, x_cat))
        return self.head(F.relu(self.norm(x[:, 0]))).squeeze(-1)


def make_ft_transformer(dt):
    """FT-Transformer regression step: AdamW with a no-weight-decay group (tokenizer, norms, biases) picked
    by parameter names, targets standardised by statistics carried across calls."""
    model = FTTransformer().to(dt)
    no_wd = [p for n, p in model.named_parameters() if "tokenizer" in n or "norm" in n or n.endswith("bias")]
    wd = [p for n, p in model.named_parameters() if not any(p is q for q in no_wd)]
    optimizer = torch.optim.AdamW([{"params": wd}, {"params": no_wd, "weight_decay": 0.0}], lr=1e-3,
                                  weight_decay=1e-5)
    stats = {"n": 0, "mean": 0.0, "m2": 0.0}

    def step(x_num, x_cat, y):
        for v in y.tolist():
            stats["n"] += 1
            d = v - stats["mean"]
            stats["mean"] += d / stats["n"]
            stats["m2"] += d * (v - stats["mean"])
        std = math.sqrt(stats["m2"] / max(stats["n"] - 1, 1)) or 1.0
        model.train()
        pred = model(x_num, x_cat)
        loss = F.mse_loss(pred, (y - stats["mean"]) / std)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    return step, lambda: (_state(model), _opt_state(optimizer), dict(stats))


def ft_inputs(i, dt):
    B = 8
    x_cat = torch.stack([torch.randint(0, n, (B,)) for n in (3, 7, 4)], 1)
    return torch.randn(B, 5, dtype=dt), x_cat, torch.randn(B, dtype=dt) * 3 + i


# ------------------------------------------------------------------------------------------------ physics-informed
def make_pinn_burgers(dt):
    """Raissi et al.'s Burgers PINN: u_t, u_x, u_xx by nested autograd.grad(create_graph=True) on
    collocation points, the PDE residual plus initial / boundary losses, Adam."""
    model = nn.Sequential(nn.Linear(2, 20), nn.Tanh(), nn.Linear(20, 20), nn.Tanh(), nn.Linear(20, 20), nn.Tanh(),
                          nn.Linear(20, 1)).to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    nu = 0.01 / math.pi

    def net_f(x, t):
        u = model(torch.cat([x, t], dim=1))
        u_t = torch.autograd.grad(u, t, grad_outputs=torch.ones_like(u), retain_graph=True, create_graph=True)[0]
        u_x = torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u), retain_graph=True, create_graph=True)[0]
        u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x), retain_graph=True,
                                   create_graph=True)[0]
        return u_t + u * u_x - nu * u_xx

    def step(x_f, t_f, x_u, t_u, u):
        x_f = x_f.clone().requires_grad_(True)
        t_f = t_f.clone().requires_grad_(True)
        u_pred = model(torch.cat([x_u, t_u], dim=1))
        f_pred = net_f(x_f, t_f)
        loss = torch.mean((u - u_pred) ** 2) + torch.mean(f_pred ** 2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    return step, lambda: (_state(model), _opt_state(optimizer))


def pinn_inputs(i, dt):
    nf, nu = 32 + 8 * (i % 2), 12
    x_u = torch.cat([torch.rand(nu // 2, 1) * 2 - 1, torch.randint(0, 2, (nu // 2, 1)) * 2.0 - 1]).to(dt)
    t_u = torch.cat([torch.zeros(nu // 2, 1), torch.rand(nu // 2, 1)]).to(dt)
    u = torch.where(t_u == 0, -torch.sin(math.pi * x_u), torch.zeros_like(x_u))
    return torch.rand(nf, 1, dtype=dt) * 2 - 1, torch.rand(nf, 1, dtype=dt), x_u, t_u, u


class HNN(nn.Module):
    """greydanus/hamiltonian-nn: an MLP with two scalar outputs, the solenoidal field from the gradient of the
    second by autograd.grad(create_graph=True) times the symplectic permutation."""
    def __init__(self, input_dim=2, hidden=32):
        super().__init__()
        self.differentiable_model = nn.Sequential(nn.Linear(input_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                                                  nn.Tanh(), nn.Linear(hidden, 2))
        M = torch.eye(input_dim)
        self.register_buffer("M", torch.cat([M[input_dim // 2:], -M[:input_dim // 2]]))

    def forward(self, x):
        y = self.differentiable_model(x)
        return y.split(1, 1)

    def time_derivative(self, x):
        F1, F2 = self.forward(x)
        conservative_field = torch.zeros_like(x)
        dF2 = torch.autograd.grad(F2.sum(), x, create_graph=True)[0]
        solenoidal_field = dF2 @ self.M.t()
        return conservative_field + solenoidal_field


def make_hnn(dt):
    model = HNN().to(dt)
    optim = torch.optim.Adam(model.parameters(), 1e-3, weight_decay=1e-4)

    def step(x, dxdt, x0, n_steps, h=0.1):
        x = x.clone().requires_grad_(True)
        dxdt_hat = model.time_derivative(x)
        loss = (dxdt - dxdt_hat).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        traj = [x0]
        for _ in range(n_steps):
            y = traj[-1].detach().requires_grad_(True)
            k1 = model.time_derivative(y)
            k2 = model.time_derivative(y + h / 2 * k1)
            traj.append((y + h * k2).detach())
        return loss.item(), torch.stack(traj)
    return step, lambda: (_state(model), _opt_state(optim))


def hnn_inputs(i, dt):
    q, p = torch.randn(16, 1, dtype=dt), torch.randn(16, 1, dtype=dt)
    x = torch.cat([q, p], 1)
    return x, torch.cat([p, -q], 1), torch.randn(3, 2, dtype=dt), 3 + i % 2


# ------------------------------------------------------------------------------------------------ vision
class STNNet(nn.Module):
    """the PyTorch spatial transformer tutorial's network at 20x20."""
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 8, 5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1, self.fc2 = nn.Linear(8 * 2 * 2, 16), nn.Linear(16, 5)
        self.localization = nn.Sequential(nn.Conv2d(1, 4, 7), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
                                          nn.Conv2d(4, 6, 5), nn.MaxPool2d(2, stride=2), nn.ReLU(True))
        self.fc_loc = nn.Sequential(nn.Linear(6, 16), nn.ReLU(True), nn.Linear(16, 3 * 2))
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 6)
        theta = self.fc_loc(xs).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, padding_mode="border", align_corners=False)

    def forward(self, x):
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 32)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def make_stn(dt):
    model = STNNet().to(dt)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def train(data, target):
        model.train()
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        return loss.item()
    return train, lambda: (_state(model), _opt_state(optimizer))


class ASPP(nn.Module):
    def __init__(self, in_ch, out_ch=8, rates=(1, 2, 3)):
        super().__init__()
        self.convs = nn.ModuleList([nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch),
                                                  nn.ReLU())])
        for r in rates[1:]:
            self.convs.append(nn.Sequential(nn.Conv2d(in_ch, out_ch, 3, padding=r, dilation=r, bias=False),
                                            nn.BatchNorm2d(out_ch), nn.ReLU()))
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(in_ch, out_ch, 1, bias=False), nn.ReLU())
        self.project = nn.Sequential(nn.Conv2d(out_ch * (len(rates) + 1), out_ch, 1, bias=False),
                                     nn.BatchNorm2d(out_ch), nn.ReLU(), nn.Dropout(0.1))

    def forward(self, x):
        res = [conv(x) for conv in self.convs]
        res.append(F.interpolate(self.pool(x), size=x.shape[-2:], mode="bilinear", align_corners=False))
        return self.project(torch.cat(res, dim=1))


class DeepLabTiny(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.aspp = ASPP(16)
        self.classifier = nn.Conv2d(8, n_classes, 1)

    def forward(self, x):
        input_shape = x.shape[-2:]
        out = self.classifier(self.aspp(self.backbone(x)))
        return F.interpolate(out, size=input_shape, mode="bilinear", align_corners=True)


def make_deeplab(dt):
    """DeepLabV3 training step (CE with ignore_index=255) and VainF's StreamSegMetrics confusion matrix by
    bincount, carried between calls, mean IoU with nanmean."""
    model = DeepLabTiny().to(dt)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    n_classes = 4
    metrics = {"confusion_matrix": torch.zeros(n_classes, n_classes, dtype=torch.long)}

    def _fast_hist(label_true, label_pred):
        mask = (label_true >= 0) & (label_true < n_classes)
        return torch.bincount(n_classes * label_true[mask] + label_pred[mask],
                              minlength=n_classes ** 2).reshape(n_classes, n_classes)

    def step(images, labels):
        model.train()
        optimizer.zero_grad()
        outputs = model(images)
        loss = F.cross_entropy(outputs, labels, ignore_index=255, reduction="mean")
        loss.backward()
        optimizer.step()
        preds = outputs.detach().max(dim=1)[1]
        for lt, lp in zip(labels, preds):
            metrics["confusion_matrix"] += _fast_hist(lt.flatten(), lp.flatten())
        hist = metrics["confusion_matrix"].double()
        iu = torch.diag(hist) / (hist.sum(dim=1) + hist.sum(dim=0) - torch.diag(hist))
        return loss.item(), torch.nanmean(iu).item()
    return step, lambda: (_state(model), _opt_state(optimizer), dict(metrics))


def deeplab_inputs(i, dt):
    labels = torch.randint(0, 4, (2, 16, 16))
    labels[:, :2] = 255
    return torch.randn(2, 3, 16, 16, dtype=dt), labels


def make_patch_denoise(dt):
    """patch-based denoising: overlapping patches by F.unfold, a per-patch MLP on mean-removed patches, the
    image rebuilt by F.fold divided by the fold of ones (overlap counts); PSNR from the MSE."""
    patch, stride = 4, 2
    model = nn.Sequential(nn.Linear(patch * patch, 24), nn.ReLU(), nn.Linear(24, patch * patch)).to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(noisy, clean):
        B, C, H, W = noisy.shape
        cols = F.unfold(noisy, kernel_size=patch, stride=stride)
        L = cols.shape[-1]
        patches = cols.view(B, C, patch * patch, L).permute(0, 3, 1, 2).reshape(-1, patch * patch)
        mean = patches.mean(dim=1, keepdim=True)
        out = model(patches - mean) + mean
        out = out.view(B, L, C, patch * patch).permute(0, 2, 3, 1).reshape(B, C * patch * patch, L)
        summed = F.fold(out, output_size=(H, W), kernel_size=patch, stride=stride)
        counts = F.fold(torch.ones_like(out), output_size=(H, W), kernel_size=patch, stride=stride)
        recon = summed / counts
        loss = F.mse_loss(recon, clean)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item(), (10 * torch.log10(1.0 / F.mse_loss(recon.detach(), clean))).item()
    return step, lambda: (_state(model), _opt_state(optimizer))


def patch_inputs(i, dt):
    s = 12 + 4 * (i % 2)
    clean = torch.rand(2, 3, s, s, dtype=dt)
    return clean + 0.1 * torch.randn(2, 3, s, s, dtype=dt), clean


# ------------------------------------------------------------------------------------------------ detection
def box_iou(boxes1, boxes2):
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    return inter / (area1[:, None] + area2 - inter)


def generate_anchors(feature_sizes, strides, sizes, aspect_ratios, dtype):
    """torchvision's AnchorGenerator for one image: cell anchors per level shifted over the grid."""
    anchors = []
    for (fh, fw), stride, size in zip(feature_sizes, strides, sizes):
        scales = torch.as_tensor([size], dtype=dtype)
        ratios = torch.as_tensor(aspect_ratios, dtype=dtype)
        h_ratios = torch.sqrt(ratios)
        w_ratios = 1 / h_ratios
        ws = (w_ratios[:, None] * scales[None, :]).view(-1)
        hs = (h_ratios[:, None] * scales[None, :]).view(-1)
        base = torch.stack([-ws, -hs, ws, hs], dim=1) / 2
        shifts_x = torch.arange(0, fw, dtype=torch.int32) * stride
        shifts_y = torch.arange(0, fh, dtype=torch.int32) * stride
        shift_y, shift_x = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
        shift_x, shift_y = shift_x.reshape(-1), shift_y.reshape(-1)
        shifts = torch.stack((shift_x, shift_y, shift_x, shift_y), dim=1)
        anchors.append((shifts.view(-1, 1, 4) + base.view(1, -1, 4)).reshape(-1, 4))
    return torch.cat(anchors)


class Matcher:
    """torchvision.models.detection._utils.Matcher."""
    BELOW_LOW_THRESHOLD, BETWEEN_THRESHOLDS = -1, -2

    def __init__(self, high_threshold, low_threshold, allow_low_quality_matches=False):
        self.high_threshold, self.low_threshold = high_threshold, low_threshold
        self.allow_low_quality_matches = allow_low_quality_matches

    def __call__(self, match_quality_matrix):
        matched_vals, matches = match_quality_matrix.max(dim=0)
        all_matches = matches.clone() if self.allow_low_quality_matches else None
        below_low_threshold = matched_vals < self.low_threshold
        between_thresholds = (matched_vals >= self.low_threshold) & (matched_vals < self.high_threshold)
        matches[below_low_threshold] = self.BELOW_LOW_THRESHOLD
        matches[between_thresholds] = self.BETWEEN_THRESHOLDS
        if self.allow_low_quality_matches:
            highest_quality_foreach_gt, _ = match_quality_matrix.max(dim=1)
            gt_pred_pairs = torch.where(match_quality_matrix == highest_quality_foreach_gt[:, None])
            pred_inds_to_update = gt_pred_pairs[1]
            matches[pred_inds_to_update] = all_matches[pred_inds_to_update]
        return matches


def encode_boxes(reference_boxes, proposals, weights=(1.0, 1.0, 1.0, 1.0)):
    wx, wy, ww, wh = weights
    ex_widths = proposals[:, 2] - proposals[:, 0]
    ex_heights = proposals[:, 3] - proposals[:, 1]
    ex_ctr_x = proposals[:, 0] + 0.5 * ex_widths
    ex_ctr_y = proposals[:, 1] + 0.5 * ex_heights
    gt_widths = reference_boxes[:, 2] - reference_boxes[:, 0]
    gt_heights = reference_boxes[:, 3] - reference_boxes[:, 1]
    gt_ctr_x = reference_boxes[:, 0] + 0.5 * gt_widths
    gt_ctr_y = reference_boxes[:, 1] + 0.5 * gt_heights
    return torch.stack((wx * (gt_ctr_x - ex_ctr_x) / ex_widths, wy * (gt_ctr_y - ex_ctr_y) / ex_heights,
                        ww * torch.log(gt_widths / ex_widths), wh * torch.log(gt_heights / ex_heights)), dim=1)


class RetinaTiny(nn.Module):
    def __init__(self, num_classes=3, num_anchors=3):
        super().__init__()
        self.num_classes = num_classes
        self.c1 = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())
        self.cls_logits = nn.Conv2d(8, num_anchors * num_classes, 3, padding=1)
        self.bbox_reg = nn.Conv2d(8, num_anchors * 4, 3, padding=1)
        prior_probability = 0.01
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior_probability) / prior_probability))

    def forward(self, x):
        f1 = self.c1(x)
        f2 = self.c2(f1)
        cls, reg = [], []
        for f in (f1, f2):
            N, _, H, W = f.shape
            c = self.cls_logits(f).view(N, -1, self.num_classes, H, W).permute(0, 3, 4, 1, 2)
            cls.append(c.reshape(N, -1, self.num_classes))
            r = self.bbox_reg(f).view(N, -1, 4, H, W).permute(0, 3, 4, 1, 2)
            reg.append(r.reshape(N, -1, 4))
        return torch.cat(cls, dim=1), torch.cat(reg, dim=1), [f1.shape[-2:], f2.shape[-2:]]


def make_retinanet(dt):
    """torchvision RetinaNet's compute_loss: anchors per call, the Matcher with low-quality matches over a
    box_iou matrix per image (a Python list of targets of different lengths), sigmoid focal loss on the
    valid anchors, L1 on encoded foreground boxes, both normalised by max(1, #foreground)."""
    model = RetinaTiny().to(dt)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    matcher = Matcher(0.5, 0.4, allow_low_quality_matches=True)

    def step(images, targets):
        cls_logits, bbox_regression, sizes = model(images)
        anchors = generate_anchors(sizes, (4, 8), (8.0, 16.0), (0.5, 1.0, 2.0), dt)
        cls_losses, box_losses = [], []
        for i, t in enumerate(targets):
            matched_idxs = matcher(box_iou(t["boxes"], anchors))
            foreground_idxs = matched_idxs >= 0
            num_foreground = foreground_idxs.sum()
            gt_classes_target = torch.zeros_like(cls_logits[i])
            gt_classes_target[foreground_idxs, t["labels"][matched_idxs[foreground_idxs]]] = 1.0
            valid_idxs = matched_idxs != Matcher.BETWEEN_THRESHOLDS
            cls_losses.append(sigmoid_focal_loss(cls_logits[i][valid_idxs], gt_classes_target[valid_idxs],
                                                 reduction="sum") / max(1, num_foreground))
            target_regression = encode_boxes(t["boxes"][matched_idxs[foreground_idxs]], anchors[foreground_idxs])
            box_losses.append(F.l1_loss(bbox_regression[i][foreground_idxs], target_regression, reduction="sum")
                              / max(1, num_foreground))
        loss = sum(cls_losses) / len(targets) + sum(box_losses) / len(targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return {"classification": float(sum(cls_losses)), "bbox_regression": float(sum(box_losses))}
    return step, lambda: (_state(model), _opt_state(optimizer))


def retina_inputs(i, dt):
    targets = []
    for n in (1 + i % 3, 2):
        xy = torch.rand(n, 2) * 20
        wh = torch.rand(n, 2) * 10 + 4
        targets.append({"boxes": torch.cat([xy, (xy + wh).clamp(max=32)], 1).to(dt),
                        "labels": torch.randint(0, 3, (n,))})
    return torch.randn(2, 3, 32, 32, dtype=dt), targets


def xywh2xyxy(x):
    y = x.clone()
    y[:, 0] = x[:, 0] - x[:, 2] / 2
    y[:, 1] = x[:, 1] - x[:, 3] / 2
    y[:, 2] = x[:, 0] + x[:, 2] / 2
    y[:, 3] = x[:, 1] + x[:, 3] / 2
    return y


def nms_argsort(boxes, scores, iou_threshold):
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        ious = box_iou(boxes[i].unsqueeze(0), boxes[order[1:]])[0]
        order = order[1:][ious <= iou_threshold]
    return torch.stack(keep)


def make_yolo_post(dt):
    """YOLOv5's Detect head in inference (grid from meshgrid, sigmoid offsets, anchor-scaled sizes written
    into slices of the prediction) and non_max_suppression per image: confidence filter, class-offset
    boxes, NMS by an argsort while-loop, max_det."""
    na, nc, stride = 3, 4, 8
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.SiLU(),
                             nn.Conv2d(8, 8, 3, 2, 1), nn.SiLU()).to(dt)
    head = nn.Conv2d(8, na * (5 + nc), 1).to(dt)
    nn.init.normal_(head.weight, std=1.0)
    anchor_grid = torch.tensor([[10, 13], [16, 30], [33, 23]], dtype=dt).view(1, na, 1, 1, 2)

    @torch.no_grad()
    def detect(img, conf_thres=0.25, iou_thres=0.45, max_det=10):
        p = head(backbone(img))
        bs, _, ny, nx = p.shape
        p = p.view(bs, na, 5 + nc, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        yv, xv = torch.meshgrid([torch.arange(ny), torch.arange(nx)], indexing="ij")
        grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).to(dt)
        y = p.sigmoid()
        y[..., 0:2] = (y[..., 0:2] * 2.0 - 0.5 + grid) * stride
        y[..., 2:4] = (y[..., 2:4] * 2) ** 2 * anchor_grid
        prediction = y.view(bs, -1, 5 + nc)
        xc = prediction[..., 4] > conf_thres
        output = [torch.zeros((0, 6), dtype=dt)] * bs
        for xi, x in enumerate(prediction):
            x = x[xc[xi]]
            if not x.shape[0]:
                continue
            x[:, 5:] *= x[:, 4:5]
            box = xywh2xyxy(x[:, :4])
            conf, j = x[:, 5:].max(1, keepdim=True)
            x = torch.cat((box, conf, j.to(dt)), 1)[conf.view(-1) > conf_thres]
            if not x.shape[0]:
                continue
            c = x[:, 5:6] * 4096
            boxes, scores = x[:, :4] + c, x[:, 4]
            i = nms_argsort(boxes, scores, iou_thres)
            output[xi] = x[i[:max_det]]
        return output
    return detect, lambda: None


def make_knn_monitor(dt):
    """DINO's eval_knn on features of an encoder in eval mode: chunks of test images, top-k cosine
    neighbours, a one-hot buffer reshaped by resize_ and filled by scatter_, votes weighted by exp(sim / T)."""
    encoder = nn.Sequential(nn.Linear(12, 24), nn.BatchNorm1d(24), nn.ReLU(), nn.Linear(24, 16)).to(dt).eval()

    @torch.no_grad()
    def knn_classifier(train_x, train_labels, test_x, test_labels, k=5, T=0.07, num_classes=6):
        train_features = F.normalize(encoder(train_x), dim=1)
        test_features = F.normalize(encoder(test_x), dim=1)
        top1, top5, total = 0.0, 0.0, 0
        train_features = train_features.t()
        num_test_images, num_chunks = test_labels.shape[0], 2
        imgs_per_chunk = num_test_images // num_chunks
        retrieval_one_hot = torch.zeros(k, num_classes, dtype=dt)
        for idx in range(0, num_test_images, imgs_per_chunk):
            features = test_features[idx:min((idx + imgs_per_chunk), num_test_images), :]
            targets = test_labels[idx:min((idx + imgs_per_chunk), num_test_images)]
            batch_size = targets.shape[0]
            similarity = torch.mm(features, train_features)
            distances, indices = similarity.topk(k, largest=True, sorted=True)
            candidates = train_labels.view(1, -1).expand(batch_size, -1)
            retrieved_neighbors = torch.gather(candidates, 1, indices)
            retrieval_one_hot.resize_(batch_size * k, num_classes).zero_()
            retrieval_one_hot.scatter_(1, retrieved_neighbors.view(-1, 1), 1)
            distances_transform = distances.clone().div_(T).exp_()
            probs = torch.sum(torch.mul(retrieval_one_hot.view(batch_size, -1, num_classes),
                                        distances_transform.view(batch_size, -1, 1)), 1)
            _, predictions = probs.sort(1, True)
            correct = predictions.eq(targets.data.view(-1, 1))
            top1 = top1 + correct.narrow(1, 0, 1).sum().item()
            top5 = top5 + correct.narrow(1, 0, min(5, k)).sum().item()
            total += targets.size(0)
        return top1 * 100.0 / total, top5 * 100.0 / total
    return knn_classifier, lambda: None


def knn_inputs(i, dt):
    n_test = 10 + 2 * (i % 2)
    return (torch.randn(40, 12, dtype=dt), torch.randint(0, 6, (40,)), torch.randn(n_test, 12, dtype=dt),
            torch.randint(0, 6, (n_test,)))


# ------------------------------------------------------------------------------------------------ the cases
_CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("td3_update", make_td3, td3_inputs, 4, True),
    ("c51_projection", make_c51, c51_inputs, 4, False),
    ("noisy_double_dqn", make_noisy_dqn, noisy_inputs, 4, True),
    ("ppo_gae_minibatch", make_ppo_gae, ppo_gae_inputs, 3, False),
    ("spectral_gate", make_spectral_gate, gate_inputs, 3, False),
    ("mfcc_kws", make_mfcc_kws, kws_inputs, 4, False),
    ("griffin_lim", make_griffinlim, gl_inputs, 3, False),
    ("gat_edge_softmax", make_gat_edges, gat_edge_inputs, 4, True),
    ("sage_csr_sampling", make_sage_sampling, sage_inputs, 4, False),
    ("schnet_forces", make_schnet_forces, schnet_inputs, 4, False),
    ("dgcnn_edgeconv", make_dgcnn, dgcnn_inputs, 4, False),
    ("pointnet2_fps", make_pointnet2, pointnet2_inputs, 4, False),
    ("foldingnet_chamfer", make_foldingnet, lambda i, dt: (torch.randn(3, 20 + 4 * (i % 2), 3, dtype=dt),), 4, False),
    ("dlrm_embeddingbag", make_dlrm, dlrm_inputs, 4, True),
    ("two_tower_logq", make_two_tower, two_tower_inputs, 4, False),
    ("deepfm_auc", make_deepfm, deepfm_inputs, 4, True),
    ("bigru_crf_batched", make_bigru_crf, crf_batch_inputs, 4, False),
    ("lstm_lm_tbptt", make_lstm_tbptt, tbptt_inputs, 5, True),
    ("hmm_baum_welch", make_hmm, hmm_inputs, 3, False),
    ("wavenet_revin_quantile", make_wavenet_quantile, wavenet_inputs, 4, True),
    ("nbeats_smape", make_nbeats, nbeats_inputs, 4, True),
    ("deepar_studentt", make_deepar, deepar_inputs, 3, False),
    ("tabnet_sparsemax", make_tabnet, tabnet_inputs, 4, False),
    ("ft_transformer", make_ft_transformer, ft_inputs, 4, True),
    ("pinn_burgers", make_pinn_burgers, pinn_inputs, 4, False),
    ("hnn_rollout", make_hnn, hnn_inputs, 4, False),
    ("stn_grid_sample", make_stn, lambda i, dt: (torch.randn(4, 1, 20, 20, dtype=dt), torch.randint(0, 5, (4,))),
     4, False),
    ("deeplab_aspp_miou", make_deeplab, deeplab_inputs, 4, False),
    ("unfold_fold_denoise", make_patch_denoise, patch_inputs, 4, True),
    ("retinanet_matcher_focal", make_retinanet, retina_inputs, 4, False),
    ("yolo_decode_nms", make_yolo_post, lambda i, dt: (torch.randn(2, 3, 32 + 8 * (i % 2), 32, dtype=dt),), 4, False),
    ("knn_monitor", make_knn_monitor, knn_inputs, 4, True),
]

CASES = [(name, heldout4.with_rng(make, n), inputs, n, low) for name, make, inputs, n, low in _CASES]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout9.py")
