"""hns_train: OpenAI's hide-and-seek on current MuJoCo, trained by a scalable self-play pipeline.

- `hns_train.envs`: the game (MjSpec worlds, rules, observations) and its PettingZoo interfaces.
- `hns_train.agents`: the entity-attention + LSTM policy, PPO, checkpoints, the policy pool.
- `hns_train.distributed`: actor / policy / trainer / eval workers, controller, launchers.
- `hns_train.eval`: replays, ratings, emergent phases, baselines, `python -m hns_train.eval`.
- `python -m hns_train.train`: the main job.
"""
