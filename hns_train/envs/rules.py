"""The rules of hide-and-seek, and the team codes they use.

Over W worlds, A agent slots (hiders first, then seekers), O object slots (boxes, then ramps).
The rules below are implemented once as array code, the tensor functions of `warp/rules.py`
(the Warp game runs them; they run on CPU tensors too); the C game runs them fused into the
compiled loops of `kernels.py`, which tests/envs/test_fast_path.py checks against those
functions step by step. Nothing here calls MuJoCo; the games apply what the rules decide.

Rules (spec §3-4):
- Vision: j is seen by i if j lies in i's 135-degree cone (half-angle 67.5 degrees around the
  front direction, heading - pi/2, measured in the xy-plane) and the ray from i's centre to j's
  centre first hits a geom of j (`ray_hit_body`).
- Eligible object: seen on the previous step and within 0.25 m of the agent's centre, measured
  to the object's oriented bounding box.
- Lock (team rule): an object locked by team T is unlocked by a member of T that is eligible
  and sends lock=0, even when another agent sends lock=1 on the same step (the unlock vetoes
  the lock); it becomes locked if an eligible agent sends lock=1 and it is not being unlocked
  this step. The locker is the lowest-index requesting agent (hiders before seekers; the
  original drew one at random). Lock ownership is cleared on unlock, so an unlocked object has
  no team that could veto a lock. The original never cleared it and started each episode with
  every object owned by agent 0 (a hider), so in range with lock=0 the last locking team (the
  hiders, for an object never locked) vetoed any lock of an unlocked object. That bug is not
  copied (spec §3).
- Grab, decided afresh every step as in the original: an agent sending grab=1 holds the closest
  eligible object, whatever it held before; it holds nothing when none is eligible or it sends
  grab=0. So a held object that stops being eligible (the weld stretched it past the range, or
  it was not seen) is dropped and the closest eligible one is taken instead. Locked objects can
  be grabbed and locking does not release a grab (as in the original): the weld to a frozen
  object pins the agent.
- Reward: hiders +1 if no seeker sees any hider, else -1; seekers the negation. Agents outside
  the out-of-bounds rect get the penalty instead; with `penalise_objects_oob` every agent gets it
  while any box or ramp is outside. All rewards are 0 during preparation and for absent agents.
"""

from __future__ import annotations

NO_TEAM = -1
HIDERS, SEEKERS = 0, 1
