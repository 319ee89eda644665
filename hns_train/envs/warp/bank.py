"""`LayoutBank`: pre-built layouts on the device that Warp worlds reset from without host work.

A world whose episode ends is reset inside the env step by a masked gather: it takes the
layout in a bank slot (every `PER_WORLD_FIELDS` model field, its first qpos, and the game's
per-episode tables: who is present, object half extents, the other-agent order) by torch index
ops over all worlds at once. No Python loop over worlds, no host read, no C model compile on
the step path.

Sizes and refresh (`BankConfig`):
- K = max(W, min(`per_world` x W, `max_slots`)) slots. Slots 0..W-1 hold the worlds' first
  layouts; the rest start as copies of them (a device copy, so building a game costs W host
  compiles, as before) and are replaced by fresh layouts as the bank refreshes.
- Every `refresh_every` env steps, `refresh_slots` slots (round robin over the bank, a batch
  ending early at the bank's end) get new layouts. A daemon thread samples and compiles them
  (its own `ModelCache`: a MuJoCo spec is not shared across threads) into host tensors ahead
  of time (pinned on CUDA), up to `prefetch` batches; the step only queues a ready batch's
  copy into a slice of the bank, without blocking. If the thread is behind, the step waits for
  it, so which layouts a run sees does not depend on thread timing.
- A resetting world draws its slot uniformly from the K slots with a torch generator on the
  device (seeded from the game's seed).

Determinism: with the same seed, device type and sequence of steps, a game replays exactly.
The first episode of world w uses the layout `VectorGame` draws for world w (its own generator
from `world_seeds[w]`). Later episodes differ from `VectorGame`'s: they come from the bank (one
generator spawned from the seed, slots drawn on the device), not from world w's generator.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np
import torch

from hns_train.envs import observations as O
from hns_train.envs.config import GameConfig
from hns_train.envs.layout import Layout, sample_layout
from hns_train.envs.warp.physics import WarpWorlds
from hns_train.envs.world import ModelCache, object_half_extents
from hns_train.typed_config import AtLeast1, check_ranges


@dataclass(frozen=True)
class BankConfig:
    per_world: AtLeast1 = 4  # slots per world, before the cap
    max_slots: AtLeast1 = 16384  # cap on K (quadrant: ~10 KB a slot on the device)
    refresh_slots: AtLeast1 = 32  # slots re-sampled per refresh
    refresh_every: AtLeast1 = 16  # env steps between refreshes (2 host compiles per step)
    prefetch: AtLeast1 = 2  # refresh batches the thread prepares ahead

    def __post_init__(self):
        check_ranges(self, "BankConfig.")

    def slots(self, n_worlds: int) -> int:
        return max(n_worlds, min(self.per_world * n_worlds, self.max_slots))


def layout_entries(
    cfg: GameConfig, worlds: WarpWorlds, layouts: list[Layout], cache: ModelCache
) -> dict[str, np.ndarray]:
    """Host arrays (n, ...) of everything a reset writes for `layouts`: the physics fields and
    first qpos (`WarpWorlds.layout_arrays`) and the game's tables."""
    ap = np.stack([lay.agent_present for lay in layouts])
    return worlds.layout_arrays(layouts, cache) | {
        "agent_present": ap,
        "object_present": np.stack([lay.object_present for lay in layouts]),
        "half": np.stack([object_half_extents(cfg, lay) for lay in layouts]).astype(np.float32),
        "others": O.others_table(ap).astype(np.int64),
    }


class LayoutBank:
    """K layouts of `cfg` as device tensors `entries[name]` (K, ...); see the module docstring."""

    def __init__(
        self,
        cfg: GameConfig,
        worlds: WarpWorlds,
        first: list[Layout],
        seed: np.random.SeedSequence,
        config: BankConfig | None = None,
    ):
        self.cfg, self.worlds = cfg, worlds
        self.config = c = config or BankConfig()
        W, dev = worlds.n_worlds, worlds.torch_device
        if len(first) != W:
            raise ValueError(f"the bank needs one first layout per world ({W}), got {len(first)}")
        self.size = K = c.slots(W)
        host = layout_entries(cfg, worlds, first, worlds.cache)
        copies = np.arange(K) % W  # slots past W start as copies of the first layouts
        self.entries = {k: torch.as_tensor(v[copies]).to(dev) for k, v in host.items()}
        self.layouts: list[Layout] = [first[i] for i in copies]  # host record, for inspection
        bank_seed, draw_seed = seed.spawn(2)
        self._gen = torch.Generator(device=dev)
        self._gen.manual_seed(int(draw_seed.generate_state(1, np.uint64)[0] >> np.uint64(1)))
        self._next_slot = 0  # round-robin refresh position
        self._steps = 0
        self._ready: queue.Queue = queue.Queue(maxsize=c.prefetch)
        self._stop = threading.Event()
        self._rng = np.random.default_rng(bank_seed)
        self._thread: threading.Thread | None = None
        self.refreshes = 0

    def draw(self) -> torch.Tensor:
        """(W,) int64 slots, uniform over the bank, drawn on the device."""
        W = self.worlds.n_worlds
        return torch.randint(self.size, (W,), generator=self._gen, device=self._gen.device)

    def gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """(W, ...) entries of `slots` (W,)."""
        return {k: v[slots] for k, v in self.entries.items()}

    def tick(self) -> None:
        """Count an env step; every `refresh_every` steps write the next refreshed batch."""
        self._steps += 1
        if self._steps % self.config.refresh_every:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._produce, name="layout-bank", daemon=True)
            self._thread.start()
        start, layouts, host = self._ready.get()
        # a slice, and pinned host memory copied without blocking: no stream sync on CUDA
        # (a pageable or indexed host-to-device copy waits for the device to catch up)
        for k, v in host.items():
            self.entries[k][start : start + len(layouts)].copy_(v, non_blocking=True)
        self.layouts[start : start + len(layouts)] = layouts
        self.refreshes += 1

    def _produce(self) -> None:
        """Thread: sample and compile refresh batches in order, slots round robin."""
        cache = ModelCache(self.cfg)
        c, K = self.config, self.size
        pin = self.worlds.torch_device.type == "cuda"
        while not self._stop.is_set():
            start = self._next_slot
            n = min(c.refresh_slots, K - start)  # a batch never wraps: one slice of the bank
            self._next_slot = (start + n) % K
            layouts = [sample_layout(self.cfg, self._rng) for _ in range(n)]
            host = layout_entries(self.cfg, self.worlds, layouts, cache)
            host = {k: torch.from_numpy(v) for k, v in host.items()}
            if pin:
                host = {k: v.pin_memory() for k, v in host.items()}
            item = (start, layouts, host)
            while not self._stop.is_set():
                try:
                    self._ready.put(item, timeout=0.2)
                    break
                except queue.Full:
                    continue

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
