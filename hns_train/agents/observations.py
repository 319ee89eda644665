"""The observation layout as the networks consume it, and its validation.

Observations are dicts of float arrays whose keys, shapes and masks are the env's contract
(`hns_train/envs/contract.py`, whose docstring draws them, spec §5): per entity kind, feature
rows, a visible mask (what the policy may use) and an exists mask (what the omniscient value
function uses). Masks are 0/1 and are never normalised.

An `ObsLayout` is built from a description of those shapes (a dict key -> shape, or a gymnasium
`Dict` space), never hard-coded. An entity type whose count is 0, or whose keys are absent,
simply does not exist for the network (the `chase` preset has no boxes or ramps; only the
blueprint task has construction sites). `lidar` is optional the same way. Unknown keys are an
error, so a drifting env contract fails loudly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hns_train.envs.contract import (
    ALL_ENTITY_KEYS,
    LIDAR_KEY,
    SELF_KEY,
    EntityKeys,
    is_mask_key,
)

# agents, boxes, ramps, then the optional sites: the env's contract (hns_train/envs/contract.py)
KNOWN_KEYS = frozenset(
    [SELF_KEY, LIDAR_KEY]
    + [k for e in ALL_ENTITY_KEYS for k in (e.key, e.visible_mask, e.exists_mask)]
)


@dataclass(frozen=True)
class EntitySlot:
    """One entity type present in a layout: `count` rows of `dim` features."""

    kind: EntityKeys
    count: int
    dim: int


@dataclass(frozen=True)
class ObsLayout:
    """Shapes of one agent's observation, as the networks consume it."""

    self_dim: int
    lidar_rays: int  # 0 = no lidar
    entities: tuple[EntitySlot, ...]  # only types with count > 0, in ALL_ENTITY_KEYS order
    shapes: dict[str, tuple[int, ...]]  # every key the layout needs, shapes without batch dims

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Any]) -> ObsLayout:
        """Build from {key: shape} or a gymnasium `Dict` space (anything with `.spaces`)."""
        if hasattr(shapes, "spaces"):
            shapes = shapes.spaces
        shapes = {k: tuple(int(n) for n in getattr(v, "shape", v)) for k, v in shapes.items()}
        unknown = set(shapes) - KNOWN_KEYS
        if unknown:
            raise ValueError(
                f"unknown observation keys {sorted(unknown)}; known keys: {sorted(KNOWN_KEYS)}"
            )
        if SELF_KEY not in shapes or len(shapes[SELF_KEY]) != 1:
            raise ValueError(
                f"'{SELF_KEY}' with shape (D,) is required, got {shapes.get(SELF_KEY)}"
            )
        lidar = shapes.get(LIDAR_KEY, (0,))
        if len(lidar) != 1:
            raise ValueError(f"'{LIDAR_KEY}' must have shape (R,), got {lidar}")

        needed = {SELF_KEY: shapes[SELF_KEY]}
        if lidar[0] > 0:
            needed[LIDAR_KEY] = lidar
        slots = []
        for kind in ALL_ENTITY_KEYS:
            present = [k for k in (kind.key, kind.visible_mask, kind.exists_mask) if k in shapes]
            if not present:
                continue
            if len(present) != 3:
                raise ValueError(
                    f"entity type '{kind.name}' needs all of {kind.key}, {kind.visible_mask}, "
                    f"{kind.exists_mask}; got only {present}"
                )
            rows = shapes[kind.key]
            if len(rows) != 2:
                raise ValueError(f"'{kind.key}' must have shape (N, D), got {rows}")
            for mask in (kind.visible_mask, kind.exists_mask):
                if shapes[mask] != rows[:1]:
                    raise ValueError(f"'{mask}' must have shape {rows[:1]} to match '{kind.key}'")
            if rows[0] == 0:
                continue
            slots.append(EntitySlot(kind, rows[0], rows[1]))
            for k in (kind.key, kind.visible_mask, kind.exists_mask):
                needed[k] = shapes[k]
        return cls(shapes[SELF_KEY][0], lidar[0], tuple(slots), needed)

    @property
    def feature_keys(self) -> list[str]:
        """Keys that are normalised (everything that is not a mask)."""
        return [k for k in self.shapes if not is_mask_key(k)]

    def check(self, obs: Mapping[str, Any], batch_ndim: int) -> tuple[int, ...]:
        """Raise ValueError unless `obs` matches the layout; return the common batch shape.

        Keys of entity types with zero rows may be present (with 0 rows) or absent.
        """
        missing = [k for k in self.shapes if k not in obs]
        if missing:
            raise ValueError(
                f"observation is missing keys {missing}; expected {sorted(self.shapes)}"
            )
        extra = [k for k in obs if k not in self.shapes and not _is_empty_known(k, obs[k])]
        if extra:
            raise ValueError(f"unexpected observation keys {extra}; expected {sorted(self.shapes)}")
        batch: tuple[int, ...] | None = None
        for key, shape in self.shapes.items():
            got = _shape(obs[key])
            if len(got) != batch_ndim + len(shape) or got[batch_ndim:] != shape:
                raise ValueError(
                    f"observation '{key}' has shape {got}; expected {batch_ndim} batch dim(s) "
                    f"followed by {shape}"
                )
            if batch is None:
                batch = got[:batch_ndim]
            elif got[:batch_ndim] != batch:
                raise ValueError(
                    f"observation '{key}' has batch shape {got[:batch_ndim]}, "
                    f"but earlier keys have {batch}"
                )
        assert batch is not None
        return batch


def _is_empty_known(key: str, value: Any) -> bool:
    """An entity-type key the layout dropped because it has zero rows."""
    return key in KNOWN_KEYS and key != SELF_KEY and 0 in _shape(value)


def _shape(value: Any) -> tuple[int, ...]:
    """Shape of an array or a tensor on any device (np.shape would copy a GPU tensor to host)."""
    shape = getattr(value, "shape", None)
    return tuple(int(n) for n in shape) if shape is not None else tuple(np.shape(value))
