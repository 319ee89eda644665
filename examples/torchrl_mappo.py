"""Hide-and-seek trained with TorchRL's multi-agent PPO (MAPPO or IPPO), in one file.

One team learns (by default the seeker team); the other acts uniformly at random, so a
single-team learner has a task. The env is ours as it is: `parallel_env(preset, flatten=True)`
(one float32 vector per agent) under TorchRL's `PettingZooWrapper`, which groups the agents
into "hider" and "seeker". The learning team's policy is a `MultiAgentMLP` shared by its agents
(decentralised: each agent sees its own observation); the critic is a `MultiAgentMLP` that is
centralised for MAPPO (every teammate's observation) and decentralised for IPPO. `GAE`,
`ClipPPOLoss` and a `Collector` do the rest. With one agent per team (`chase`) the two are the
same algorithm; they differ from `quadrant` (2 v 2) on.

Actions are our `MultiDiscrete([11, 11, 11, 2, 2])`: five categorical heads, one distribution
(`MultiCategorical` below: the heads' log-probabilities and entropies add up).
The learning team's observations are normalised (TorchRL's `ObservationNorm`, set from a random
rollout). The defaults are tuned on `chase`, whose reward is immediate (gamma 0.9, lr 1e-3,
8 epochs): measured on 2 busy cores, 20,000 frames take the seeker's in-sight share from 0.38
(random) to 0.65 (docs/third_party.md).

    python examples/torchrl_mappo.py --preset chase --frames 40000 --algo ippo --seed 0

Prints one line per batch (frames, mean reward per step of the learning team, losses, frames/s)
and, at the end, the learning team's share (seekers: in-sight share; hiders: hidden share)
against a random opponent on fresh seeds next to a random team on the same seeds, and their
paired difference with its standard error (`hns_train.eval.flat_policies.team_gain`); then a
last line `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from tensordict.nn import TensorDictModule
from torch import distributions as D
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import ObservationNorm, TransformedEnv
from torchrl.envs.libs.pettingzoo import PettingZooWrapper
from torchrl.modules import MultiAgentMLP, ProbabilisticActor
from torchrl.objectives import ClipPPOLoss, ValueEstimators

import hns_train.envs as hns
from hns_train.eval.flat_policies import FlatPolicyController, parameter_change, team_gain

TEAMS = ("seeker", "hider")


@dataclass
class Args:
    preset: str = "chase"
    algo: str = "mappo"  # "mappo": centralised critic; "ippo": decentralised
    team: str = "seeker"  # the learning team; the other acts at random
    frames: int = 40_000  # env steps collected in all
    seed: int = 0
    frames_per_batch: int = 1_200
    epochs: int = 8
    minibatch_size: int = 400  # env steps per minibatch
    lr: float = 1e-3
    gamma: float = 0.9  # the chase reward is immediate: short credit, less variance
    lmbda: float = 0.95
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.01
    max_grad_norm: float = 1.0
    hidden: int = 128
    depth: int = 2
    norm_steps: int = 2_000  # random steps that set the observation normalisation
    min_obs_std: float = 0.1  # floor of its scale: near-constant inputs stay near zero
    eval_episodes: int = 256
    threads: int = 1  # torch threads: the env is the bottleneck


class MultiCategorical(D.Distribution):
    """Independent categorical heads from one logits vector split by `nvec`."""

    arg_constraints: dict = {}

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...]):
        self.heads = [D.Categorical(logits=x) for x in logits.split(list(nvec), dim=-1)]
        super().__init__(batch_shape=logits.shape[:-1], validate_args=False)

    def sample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        return torch.stack([h.sample(sample_shape) for h in self.heads], dim=-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return sum(h.log_prob(value[..., k]) for k, h in enumerate(self.heads))

    def entropy(self) -> torch.Tensor:
        return sum(h.entropy() for h in self.heads)

    @property
    def mode(self) -> torch.Tensor:
        return torch.stack([h.probs.argmax(-1) for h in self.heads], dim=-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode


def make_env(args: Args, seed: int) -> tuple[TransformedEnv, ObservationNorm]:
    """Our env under TorchRL's wrapper, the learning team's observations normalised by the mean
    and standard deviation of a random rollout (raw inputs span metres, radians and lidar
    ranges: a tanh network learns far slower on them)."""
    base = PettingZooWrapper(hns.parallel_env(args.preset, seed=seed, flatten=True), seed=seed)
    key = (args.team, "observation")
    obs = base.rollout(args.norm_steps, break_when_any_done=False)[key]
    dims = tuple(range(obs.ndim - 1))  # steps and agents
    norm = ObservationNorm(
        loc=obs.mean(dims),
        scale=obs.std(dims).clamp_min(args.min_obs_std),
        in_keys=[key],
        standard_normal=True,
    )
    return TransformedEnv(base, norm), norm


def make_modules(args: Args, env: TransformedEnv):
    """The learning team's actor and critic (TorchRL modules on its group's keys)."""
    team = args.team
    n_agents = len(env.group_map[team])
    obs_dim = env.observation_spec[team, "observation"].shape[-1]
    nvec = tuple(int(n) for n in env.full_action_spec[team, "action"].nvec[0].tolist())
    policy_net = MultiAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=sum(nvec),
        n_agents=n_agents,
        centralised=False,  # each agent acts on its own observation
        share_params=True,
        depth=args.depth,
        num_cells=args.hidden,
        activation_class=nn.Tanh,
    )
    actor = ProbabilisticActor(
        TensorDictModule(policy_net, [(team, "observation")], [(team, "logits")]),
        in_keys={"logits": (team, "logits")},
        out_keys=[(team, "action")],
        spec=env.full_action_spec[team, "action"],
        distribution_class=MultiCategorical,
        distribution_kwargs={"nvec": nvec},
        return_log_prob=True,
    )
    critic_net = MultiAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=1,
        n_agents=n_agents,
        centralised=args.algo == "mappo",
        share_params=True,
        depth=args.depth,
        num_cells=args.hidden,
        activation_class=nn.Tanh,
    )
    critic = TensorDictModule(critic_net, [(team, "observation")], [(team, "state_value")])
    return actor, critic, policy_net, nvec


def random_opponent(env: TransformedEnv, team: str):
    """Writes uniformly random actions for every team but `team`."""
    others = [g for g in env.group_map if g != team]
    specs = {g: env.full_action_spec[g, "action"] for g in others}

    def act(td):
        for g, spec in specs.items():
            td.set((g, "action"), spec.rand())
        return td

    return act


def train(args: Args) -> dict:
    if args.algo not in ("mappo", "ippo"):
        raise ValueError(f"algo must be 'mappo' or 'ippo', got {args.algo!r}")
    if args.team not in TEAMS:
        raise ValueError(f"team must be one of {TEAMS}, got {args.team!r}")
    if not 0 < args.minibatch_size <= args.frames_per_batch <= args.frames:
        raise ValueError(
            f"need 0 < minibatch_size ({args.minibatch_size}) <= frames_per_batch "
            f"({args.frames_per_batch}) <= frames ({args.frames})"
        )
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    env, norm = make_env(args, args.seed)
    actor, critic, policy_net, nvec = make_modules(args, env)
    opponent = random_opponent(env, args.team)

    def policy(td):
        return opponent(actor(td))

    team = args.team
    collector = Collector(
        env,
        policy,
        frames_per_batch=args.frames_per_batch,
        total_frames=args.frames,
        trust_policy=True,
    )
    loss = ClipPPOLoss(
        actor_network=actor,
        critic_network=critic,
        clip_epsilon=args.clip_epsilon,
        entropy_coeff=args.entropy_coef,
        normalize_advantage=True,
    )
    loss.set_keys(
        reward=(team, "reward"),
        action=(team, "action"),
        value=(team, "state_value"),
        done=(team, "done"),
        terminated=(team, "terminated"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=args.gamma, lmbda=args.lmbda)
    optim = torch.optim.Adam(loss.parameters(), lr=args.lr)

    initial = [q.detach().clone() for q in policy_net.parameters()]
    start = time.perf_counter()
    frames, history, last_losses = 0, [], {}
    for batch in collector:
        frames += batch.numel()
        with torch.no_grad():
            loss.value_estimator(
                batch,
                params=loss.critic_network_params,
                target_params=loss.target_critic_network_params,
            )
        flat = batch.reshape(-1)
        for _ in range(args.epochs):
            order = torch.randperm(flat.numel())
            for idx in order.split(args.minibatch_size):
                out = loss(flat[idx])
                total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                optim.zero_grad()
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), args.max_grad_norm)
                optim.step()
        last_losses = {k: float(v.detach()) for k, v in out.items() if k.startswith("loss_")}
        reward = float(batch["next", team, "reward"].mean())
        seconds = time.perf_counter() - start
        history.append({"frames": frames, "reward": round(reward, 4)})
        print(
            f"frames {frames:>8,}  reward/step {reward:+.3f}  "
            + "  ".join(f"{k} {v:+.3f}" for k, v in last_losses.items())
            + f"  {frames / seconds:,.0f} frames/s",
            flush=True,
        )
    collector.shutdown()
    train_seconds = time.perf_counter() - start

    result = {
        "trainer": f"torchrl_{args.algo}",
        "args": asdict(args),
        "frames": frames,
        "train_seconds": round(train_seconds, 1),
        "history": history,
        "losses": last_losses,
        "policy_change": parameter_change(initial, policy_net.parameters()),
    }
    if args.eval_episodes >= 2:
        result["eval"] = evaluate(args, env, norm, policy_net, nvec)
    env.close()
    return result


def evaluate(
    args: Args, env: TransformedEnv, norm: ObservationNorm, policy_net: nn.Module, nvec
) -> dict:
    """The learning team's share against random opponents on fresh seeds, sampled actions."""
    agents = env.base_env.group_map[args.team]
    pz_env = env.base_env._env  # our HideAndSeekParallelEnv
    space = pz_env.dict_observation_space(agents[0])
    generator = torch.Generator().manual_seed(args.seed)

    @torch.no_grad()
    def act(flat: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(flat).reshape(-1, len(agents), flat.shape[-1])
        x = (x - norm.loc) / norm.scale
        logits = policy_net(x).reshape(len(flat), -1)
        heads = logits.split(list(nvec), dim=-1)
        picks = [torch.multinomial(h.softmax(-1), 1, generator=generator) for h in heads]
        return torch.cat(picks, dim=-1).numpy()

    return team_gain(
        pz_env.cfg,
        args.team,
        lambda: FlatPolicyController(act, space, policy_id=f"torchrl_{args.algo}"),
        episodes=args.eval_episodes,
        seed=100_000 + args.seed,  # seeds no training episode used
    )


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in asdict(Args()).items():
        flag = "--" + name.replace("_", "-")
        if name == "algo":
            parser.add_argument(flag, choices=("mappo", "ippo"), default=default)
        elif name == "team":
            parser.add_argument(flag, choices=TEAMS, default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    return Args(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    result = train(args)
    if "eval" in result:
        e = result["eval"]
        print(
            f"{args.team}s' {e['metric']} share over {e['episodes']} fresh episodes against "
            f"random opponents: trained {e['trained']:.3f}, random {e['random']:.3f}, "
            f"difference {e['gain']:+.3f} ± {e['gain_se']:.3f} (standard error); "
            f"load {os.getloadavg()[0]:.2f}"
        )
    print("RESULT " + json.dumps(result))
    return result


if __name__ == "__main__":
    main()
