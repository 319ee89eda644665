"""The pipeline after SRL: workers that exchange arrays over ZeroMQ, and what starts them.

- `wire.py` (msgpack header + raw array frames, no pickle), `streams.py` (inference, samples,
  parameters, control), `security.py` (CURVE keys for cluster runs), `contract.py`
  (what a received message must be; parameters as arrays), `message_sizes.py` (each
  message's size from the config, checked against the cap at start).
- Workers: `actor.py`, `policy.py`, `trainer.py` and `pod_worker.py` (both hold a `Learner`,
  `learner.py`; + `ddp.py` for several ranks), `evaluator.py`; the shared base and process
  entry point in `worker.py`; the actors' per-episode draws from the pool in `actor.py` (the
  controller codes and snapshot loading are `agents/opponents.py`'s).
- `controller.py` (one per run: workers, heartbeats, counters, logs, stop) and the launchers:
  `launchers.py` (serial, local) and `ray_launcher.py`; `wandb_logger.py`.
"""
