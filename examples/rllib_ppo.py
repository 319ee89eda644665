"""Hide-and-seek trained with RLlib's multi-agent PPO (new API stack), in one file.

One team learns (by default the seeker team) with RLlib's default PPO `RLModule` (an MLP policy
and value network shared by the team's agents); the other team is mapped to RLlib's
`RandomRLModule` and is not trained, so a single-team learner has a task. The env is ours as it
is: `parallel_env(preset, flatten=True)` under RLlib's `ParallelPettingZooEnv`; our
`MultiDiscrete([11, 11, 11, 2, 2])` actions get RLlib's multi-categorical distribution.
Sampling runs in this process (`num_env_runners=0`) on `--envs` copies of the env, the learner
too (`num_learners=0`): the sizes of a 2-core machine.
The PPO settings are those of examples/torchrl_mappo.py (tuned on `chase`); observations go in
raw (RLlib's default module has no normaliser).

    python examples/rllib_ppo.py --preset chase --frames 40000 --seed 0

Needs RLlib's dependencies: `pip install -e '.[third_party]'` (docs/third_party.md says why
that extra lists them rather than `ray[rllib]`, which pins an older gymnasium).

Prints one line per training iteration (env steps, mean episode return of the learning team,
losses, env steps/s) and, at the end, the learning team's share (seekers: in-sight share;
hiders: hidden share) against a random opponent on fresh seeds next to a random team on the same
seeds, and their paired difference with its standard error
(`hns_train.eval.flat_policies.team_gain`); then a last line `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

import hns_train.envs as hns
from hns_train.eval.flat_policies import FlatPolicyController, parameter_change, team_gain

TEAMS = ("seeker", "hider")
ENV_NAME = "hide_and_seek_flat"


@dataclass
class Args:
    preset: str = "chase"
    team: str = "seeker"  # the learning team; the other acts at random
    frames: int = 40_000  # env steps collected in all
    seed: int = 0
    frames_per_batch: int = 1_200  # env steps per training iteration
    envs: int = 4  # env copies stepped by the (local) env runner
    epochs: int = 8
    minibatch_size: int = 400  # agent steps per minibatch
    lr: float = 1e-3
    gamma: float = 0.9  # the chase reward is immediate: short credit, less variance
    lmbda: float = 0.95
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.01
    hidden: int = 128
    depth: int = 2
    eval_episodes: int = 256
    threads: int = 1


def env_creator(config: dict):
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    return ParallelPettingZooEnv(
        hns.parallel_env(config["preset"], seed=config.get("seed"), flatten=True)
    )


def build(args: Args):
    """The RLlib `Algorithm`: PPO, module "learner" for `args.team`, "random" for the rest."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.examples.rl_modules.classes.random_rlm import RandomRLModule
    from ray.tune.registry import register_env

    register_env(ENV_NAME, env_creator)
    team = args.team

    def policy_mapping_fn(agent_id, episode, **kwargs):
        return "learner" if agent_id.startswith(team) else "random"

    hidden = [args.hidden] * args.depth
    config = (
        PPOConfig()
        .environment(ENV_NAME, env_config={"preset": args.preset, "seed": args.seed})
        .framework("torch")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=args.envs)
        .learners(num_learners=0)
        .multi_agent(
            policies={"learner", "random"},
            policy_mapping_fn=policy_mapping_fn,
            policies_to_train=["learner"],
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    "learner": RLModuleSpec(
                        model_config=DefaultModelConfig(
                            fcnet_hiddens=hidden,
                            fcnet_activation="tanh",
                            vf_share_layers=False,
                        )
                    ),
                    "random": RLModuleSpec(module_class=RandomRLModule),
                }
            )
        )
        .training(
            train_batch_size_per_learner=args.frames_per_batch,
            minibatch_size=args.minibatch_size,
            num_epochs=args.epochs,
            lr=args.lr,
            gamma=args.gamma,
            lambda_=args.lmbda,
            clip_param=args.clip_epsilon,
            entropy_coeff=args.entropy_coef,
        )
        .debugging(seed=args.seed)
    )
    return config.build_algo()


def train(args: Args) -> dict:
    import ray

    if args.team not in TEAMS:
        raise ValueError(f"team must be one of {TEAMS}, got {args.team!r}")
    if not 0 < args.minibatch_size <= args.frames_per_batch <= args.frames:
        raise ValueError(
            f"need 0 < minibatch_size ({args.minibatch_size}) <= frames_per_batch "
            f"({args.frames_per_batch}) <= frames ({args.frames})"
        )
    torch.set_num_threads(args.threads)
    # a Ray of its own: without an address, ray.init joins any cluster running here
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        ignore_reinit_error=True,
    )
    algo = build(args)
    initial = [q.detach().clone() for q in algo.get_module("learner").parameters()]
    start = time.perf_counter()
    frames, history, losses = 0, [], {}
    try:
        while frames < args.frames:
            out = algo.train()
            frames = int(out["env_runners"]["num_env_steps_sampled_lifetime"])
            learner = out["learners"]["learner"]
            losses = {
                k: float(learner[k]) for k in ("policy_loss", "vf_loss", "entropy") if k in learner
            }
            returns = out["env_runners"].get("module_episode_returns_mean", {})
            ret = float(returns.get("learner", float("nan")))
            seconds = time.perf_counter() - start
            history.append({"frames": frames, "return": round(ret, 3)})
            print(
                f"frames {frames:>8,}  return {ret:+7.2f}  "
                + "  ".join(f"{k} {v:+.3f}" for k, v in losses.items())
                + f"  {frames / seconds:,.0f} frames/s",
                flush=True,
            )
        train_seconds = time.perf_counter() - start
        module = algo.get_module("learner")
        result = {
            "trainer": "rllib_ppo",
            "args": asdict(args),
            "frames": frames,
            "train_seconds": round(train_seconds, 1),
            "history": history,
            "losses": losses,
            "policy_change": parameter_change(initial, module.parameters()),
        }
        if args.eval_episodes >= 2:
            result["eval"] = evaluate(args, module)
    finally:
        algo.stop()
        ray.shutdown()
    return result


def evaluate(args: Args, module) -> dict:
    """The learning team's share against random opponents on fresh seeds, sampled actions."""
    from ray.rllib.core.columns import Columns

    env = hns.parallel_env(args.preset, flatten=True)
    space = env.dict_observation_space(f"{args.team}_0")
    dist_cls = module.get_inference_action_dist_cls()
    torch.manual_seed(args.seed)

    @torch.no_grad()
    def act(flat: np.ndarray) -> np.ndarray:
        out = module.forward_inference({Columns.OBS: torch.as_tensor(flat)})
        dist = dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS])
        return dist.sample().numpy()

    return team_gain(
        env.cfg,
        args.team,
        lambda: FlatPolicyController(act, space, policy_id="rllib_ppo"),
        episodes=args.eval_episodes,
        seed=100_000 + args.seed,  # seeds no training episode used
    )


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in asdict(Args()).items():
        flag = "--" + name.replace("_", "-")
        if name == "team":
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
