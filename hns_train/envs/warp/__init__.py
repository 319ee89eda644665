"""The hide-and-seek game on MuJoCo Warp: many worlds per device, state kept in device arrays.

- `physics.WarpWorlds`: one Warp model and data for N worlds of a config, per-world layouts
  written into per-world model fields at reset (no recompile), stepping (a CUDA graph on a
  GPU), rays; `PhysicsConfig` its buffer sizes and solver settings.
- `bank.LayoutBank`: pre-built layouts on the device that worlds reset from by masked gathers,
  refreshed from a host thread.
- `game.WarpGame`: the game's rules, observations, rewards, statistics and auto-reset as tensor
  code on those arrays, with `VectorGame`'s observation dictionary, action layout and step
  contract, worlds ending their episodes independently and no host sync inside a step;
  `rules.py` holds the rules of envs/rules.py as tensor code (the one implementation the C
  game's compiled loops are checked against); the episode statistics are envs/stats.py's,
  kept in device tensors.
- Pods train on it (`pipeline.backend=pod pod.physics=warp`, agents/pod.py).

Needs the optional extra `warp` (`mujoco-warp==4.0.0`, which brings `warp-lang`); importing
this package without it works, building a `WarpWorlds` says what to install.
"""
