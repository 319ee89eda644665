"""Per-world layouts of the Warp game (envs/warp/physics.py), checked against the C models.

`PER_WORLD_FIELDS` must hold every MjModel array that differs between layouts and that MuJoCo
Warp can give a per-world leading dimension; the arrays that differ but cannot be per-world
must be ones the template handles (collision bits and groups: every slot present) or ones Warp
never reads during a step. These checks compile C models only, no Warp kernels: they guard
against a change to world.py that a layout would otherwise silently lose on the Warp side.
"""

import dataclasses

import numpy as np
import pytest

pytest.importorskip("mujoco_warp")

from mujoco_warp._src import types as warp_types  # noqa: E402
from mujoco_warp._src import warp_util  # noqa: E402

from hns_train.envs.config import make_config  # noqa: E402
from hns_train.envs.layout import sample_layout  # noqa: E402
from hns_train.envs.warp.physics import PER_WORLD_FIELDS, full_layout  # noqa: E402
from hns_train.envs.world import ModelCache, build_spec  # noqa: E402

# differ between layouts, not per-world in Warp, and why that is fine
TEMPLATE_FIELDS = {"geom_contype", "geom_conaffinity", "geom_group"}  # every slot present
UNUSED_BY_WARP_STEP = {
    "body_contype",  # derived from the geoms; Warp's kernels do not read it
    "body_conaffinity",
    "bvh_aabb",  # the C static BVH
    "bvh_nodeid",
    "dof_M0",  # only set_const reads these in Warp
    "dof_length",
}


def _differing_fields(preset: str, n: int = 20) -> set[str]:
    cfg = make_config(preset)
    cache, rng = ModelCache(cfg, capacity=0), np.random.default_rng(0)
    models = [cache.model_for(sample_layout(cfg, rng)) for _ in range(n)]
    out = set()
    for name in dir(models[0]):
        first = getattr(models[0], name)
        if name.startswith("_") or not isinstance(first, np.ndarray):
            continue
        if any(not np.array_equal(getattr(m, name), first) for m in models[1:]):
            out.add(name)
    return out


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls", "chase"])
def test_every_field_a_layout_changes_is_per_world_or_handled(preset):
    batchable = {
        f.name
        for f in dataclasses.fields(warp_types.Model)
        if warp_util.is_array_spec(f.type) and getattr(f.type, "shape", ())[:1] == ("*",)
    }
    differ = _differing_fields(preset)
    assert not (differ & batchable) - set(PER_WORLD_FIELDS)
    assert not differ - batchable - TEMPLATE_FIELDS - UNUSED_BY_WARP_STEP
    if preset != "chase":
        assert {"geom_size", "geom_pos"} <= differ  # the check sees layouts change


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls"])
def test_the_template_collides_and_shows_every_slot(preset):
    cfg = make_config(preset)
    template = build_spec(cfg, full_layout(cfg)).compile()
    cache, rng = ModelCache(cfg, capacity=0), np.random.default_rng(1)
    for _ in range(10):
        m = cache.model_for(sample_layout(cfg, rng))
        solid = m.geom_group == 0  # present in this layout
        for name in TEMPLATE_FIELDS:
            np.testing.assert_array_equal(getattr(template, name)[solid], getattr(m, name)[solid])
    assert (template.geom_group != 3).all()  # nothing hidden
