"""The game's rays in one compiled loop over MuJoCo's own per-geom intersection functions.

`mj_ray` tests a ray against every geom: about 22 per ray here, where 8 walls whose bounding
spheres span the room pass its first test, and a step casts 148 rays (4 agents x (30 lidar +
7 sight lines)). `cast` gives the same answers for less: per world it runs `mj_kinematics` on a
scratch MjData (as `mujoco.batch.Batch.ray` does), then for each ray it keeps only the geoms
whose world-aligned bounding box, padded by `PAD` metres, the ray enters, and calls MuJoCo's
`mju_rayGeom` (primitives) or `mj_rayMesh` (the ramp) on those, nearest box first, stopping
once a box starts beyond the nearest hit. A geom it skips cannot be hit, so each ray's result
(distance and geom: the nearest hit, the lowest geom id among equal distances, as `mj_ray`'s
loop in id order keeps) is `mj_ray`'s, bit for bit: the intersections are MuJoCo's own code
(`tests/envs/test_fast_path.py` compares with `Batch.ray`).

It skips the rays whose result nobody reads: every ray of an absent agent (its lidar is zero)
and sight lines outside the agent's vision cone or towards itself or an absent entity (they
cannot see it); their slots read distance -1, geom -1 (a miss).

The MuJoCo functions are called through ctypes from numba-compiled code; models are passed as
their `_address`. `mj_ray`'s exclusions are reproduced in `ray_geoms` (geom group, invisible
geom or material; every ray here includes static geoms) and by `bodyexclude` = the agent.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import NamedTuple

import mujoco
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

PAD = 1e-6  # metres added to every bounding box: far above the rounding of MuJoCo's tests
GEOM_SPHERE, GEOM_BOX, GEOM_MESH = (
    int(mujoco.mjtGeom.mjGEOM_SPHERE),
    int(mujoco.mjtGeom.mjGEOM_BOX),
    int(mujoco.mjtGeom.mjGEOM_MESH),
)
_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}


def _mujoco_functions():
    """Addresses of mj_kinematics, mju_rayGeom and mj_rayMesh in the library the mujoco
    package loaded (an int64 array for `cast`), or None where that library cannot be found
    (then the game uses `Batch.ray`)."""
    here = os.path.dirname(mujoco.__file__)
    found = sorted(glob.glob(os.path.join(here, "libmujoco.so*")))
    found += sorted(glob.glob(os.path.join(here, "libmujoco*.dylib")))
    found += sorted(glob.glob(os.path.join(here, "mujoco.dll")))
    if not found:
        return None
    lib = ctypes.CDLL(found[0])
    names = ("mj_kinematics", "mju_rayGeom", "mj_rayMesh")
    return np.array([ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in names])


# Calls through those addresses, compiled in: numba's ctypes support would either freeze the
# addresses (no cache) or unbox and call through objects per call (hundreds of microseconds).
_VOID = ir.IntType(8).as_pointer()


def _pointer(builder, value):
    return builder.inttoptr(value, _VOID)


@intrinsic
def _kinematics(typingctx, fn, m, d):
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.VoidType(), [_VOID, _VOID])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(f, [_pointer(builder, args[1]), _pointer(builder, args[2])])
        return context.get_dummy_value()

    return types.none(types.int64, types.int64, types.int64), codegen


@intrinsic
def _ray_geom(typingctx, fn, pos, mat, size, pnt, vec, kind):
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.DoubleType(), [_VOID] * 5 + [ir.IntType(32), _VOID])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        ptrs = [_pointer(builder, a) for a in args[1:6]]
        kind = builder.trunc(args[6], ir.IntType(32))
        return builder.call(f, [*ptrs, kind, ir.Constant(_VOID, None)])

    return types.float64(*([types.int64] * 7)), codegen


@intrinsic
def _ray_mesh(typingctx, fn, m, d, geom, pnt, vec):
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.DoubleType(), [_VOID, _VOID, ir.IntType(32), _VOID, _VOID, _VOID])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        geom = builder.trunc(args[3], ir.IntType(32))
        m, d = _pointer(builder, args[1]), _pointer(builder, args[2])
        pnt, vec = _pointer(builder, args[4]), _pointer(builder, args[5])
        return builder.call(f, [m, d, geom, pnt, vec, ir.Constant(_VOID, None)])

    return types.float64(*([types.int64] * 6)), codegen


FUNCTIONS = _mujoco_functions()


def ray_geoms(model: mujoco.MjModel, groups: np.ndarray) -> np.ndarray:
    """(ngeom,) bool: the geoms `mj_ray` tests with geomgroup `groups` and flg_static on (its
    `bodyexclude` aside): visible (alpha of the geom's material, or of the geom without one) and
    in an included group."""
    matid = model.geom_matid
    alpha = model.geom_rgba[:, 3].copy()
    own = matid >= 0
    alpha[own] = model.mat_rgba[matid[own], 3]
    group = np.clip(model.geom_group, 0, mujoco.mjNGROUP - 1)
    return (alpha != 0) & (np.asarray(groups)[group] != 0)


@njit(**_OPTS)
def _slab(lo, hi, v, inv, t0, t1):
    """The interval [t0, t1] of a ray from the origin cut by one axis' slab [lo, hi] (empty:
    t0 > t1); inv = 1 / v (the padding dwarfs its rounding)."""
    if v == 0.0:
        if lo > 0.0 or hi < 0.0:
            return 1.0, -1.0
        return t0, t1
    ta = lo * inv
    tb = hi * inv
    if ta > tb:
        ta, tb = tb, ta
    return (ta if ta > t0 else t0), (tb if tb < t1 else t1)


@njit(**_OPTS)
def _entry(box, k, v, inv, axes):
    """Ray parameter where a ray from the origin along v enters box k (rows: lo x y z, hi x y
    z, relative to the origin) over the first `axes` axes, or -1 for a miss."""
    t0 = 0.0
    t1 = np.inf
    for j in range(axes):
        t0, t1 = _slab(box[k, j], box[k, 3 + j], v[j], inv[j], t0, t1)
        if t0 > t1:
            return -1.0
    return t0


class Scene(NamedTuple):
    """What `cast` reads of the worlds' models, and the scratch MjData its kinematics run on;
    the game fills it once, when it builds its batch."""

    functions: np.ndarray  # `FUNCTIONS`
    model_ptr: np.ndarray  # (W,) each world's MjModel `_address`
    data_ptr: int  # the scratch MjData's `_address`
    data_qpos: np.ndarray  # (nq,) its qpos, geom_xpos (G, 3) and geom_xmat (G, 9)
    geom_xpos: np.ndarray
    geom_xmat: np.ndarray
    qpos: np.ndarray  # (W, nq) the batch's state rows
    geom_type: np.ndarray  # (W, G) of each world's model
    geom_size: np.ndarray  # (W, G, 3)
    ray_ok: np.ndarray  # (W, G) `ray_geoms`
    geom_body: np.ndarray  # (G,) every world's: one build order
    agent_body: np.ndarray  # (A,) the body each agent's rays exclude


class Sight(NamedTuple):
    """The game's rays: their aims, their results and what they mean (lidar, who sees what),
    with the per-episode tables that say which of them anyone reads. Shapes as in
    kernels.py: W worlds, A agents, E entities, L lidar rays, R = L + E rays per agent."""

    L: int
    cos_half_angle: float  # of the vision cone
    lidar_range: float
    agent_present: np.ndarray  # (W, A)
    pair_ok: np.ndarray  # (W, A, E) both present, not the agent itself
    ray_vec: np.ndarray  # (W, A, R, 3) unit directions: the lidar fan, then each entity
    ray_pnt: np.ndarray  # (W, A, R, 3) origins: the agent's centre
    sq_reach: np.ndarray  # (W, A, Ob) squared distance agent -> object centre
    cone: np.ndarray  # (W, A, E) entity inside the agent's vision cone
    dist: np.ndarray  # (W, A * R) `cast`'s results: distance (-1: miss) and geom id
    geomid: np.ndarray
    hit_body: np.ndarray  # (G + 1,) body of each geom, -1 last (geom id -1 reads it)
    target_body: np.ndarray  # (E,) each entity's body
    lidar: np.ndarray  # (W, A, L)
    sees_flat: np.ndarray  # (W * A * E + 1,) who sees which entity, a trailing False


@njit(**_OPTS)
def cast(worlds, scene, sight):
    """Rays of game._cast_rays for `worlds` into sight.dist / sight.geomid (rows in `worlds`
    order, A * R columns: agent a's lidar then its sight lines), after `mj_kinematics` of each
    world on the scratch MjData of `scene`."""
    A = sight.ray_pnt.shape[1]
    R = sight.ray_pnt.shape[2]
    L = sight.L
    G = scene.geom_body.shape[0]
    nq = scene.data_qpos.shape[0]
    lo = np.empty((G, 3))
    hi = np.empty((G, 3))
    cand = np.empty(G, dtype=np.int64)
    start = np.empty(G)
    box = np.empty((G, 6))
    geoms = np.empty(G, dtype=np.int64)
    level = np.empty((5, G), dtype=np.int64)
    n_level = np.zeros(5, dtype=np.int64)
    v = np.empty(3)
    inv = np.empty(3)
    # addresses as int64 (uintp + int64 would promote to float)
    xpos_adr = np.int64(scene.geom_xpos.ctypes.data)
    xmat_adr = np.int64(scene.geom_xmat.ctypes.data)
    size_adr = np.int64(scene.geom_size.ctypes.data)
    pnt_adr = np.int64(sight.ray_pnt.ctypes.data)
    vec_adr = np.int64(sight.ray_vec.ctypes.data)
    for i in range(worlds.shape[0]):
        w = worlds[i]
        for k in range(nq):
            scene.data_qpos[k] = scene.qpos[w, k]
        _kinematics(scene.functions[0], scene.model_ptr[w], scene.data_ptr)
        for g in range(G):  # world-aligned boxes around each geom, padded
            kind = scene.geom_type[w, g]
            for j in range(3):
                if kind == GEOM_SPHERE:
                    half = scene.geom_size[w, g, 0]
                elif kind in (GEOM_BOX, GEOM_MESH):  # a mesh's box: mj_rayMesh's test
                    half = 0.0
                    for c in range(3):
                        half += abs(scene.geom_xmat[g, 3 * j + c]) * scene.geom_size[w, g, c]
                else:
                    half = np.inf  # other shapes: always tested
                lo[g, j] = scene.geom_xpos[g, j] - half - PAD
                hi[g, j] = scene.geom_xpos[g, j] + half + PAD
        for a in range(A):
            base = a * R
            if not sight.agent_present[w, a]:
                for r in range(R):
                    sight.dist[i, base + r] = -1.0
                    sight.geomid[i, base + r] = -1
                continue
            # the geoms this agent's rays may hit, as boxes relative to its centre (where all
            # its rays start); `level[q]`: those spanning its height, all a level ray can enter,
            # whose box reaches quadrant q (0: x > 0, y > 0, then counter-clockwise; 4: every
            # quadrant, for level rays along an axis)
            exclude = scene.agent_body[a]
            n_all = 0
            for q in range(5):
                n_level[q] = 0
            for g in range(G):
                if not scene.ray_ok[w, g] or scene.geom_body[g] == exclude:
                    continue
                for j in range(3):
                    box[n_all, j] = lo[g, j] - sight.ray_pnt[w, a, 0, j]
                    box[n_all, 3 + j] = hi[g, j] - sight.ray_pnt[w, a, 0, j]
                geoms[n_all] = g
                if box[n_all, 2] <= 0.0 and box[n_all, 5] >= 0.0:
                    east, west = box[n_all, 3] >= 0.0, box[n_all, 0] <= 0.0
                    north, south = box[n_all, 4] >= 0.0, box[n_all, 1] <= 0.0
                    for q, ok in enumerate(
                        (east and north, west and north, west and south, east and south, True)
                    ):
                        if ok:
                            level[q, n_level[q]] = n_all
                            n_level[q] += 1
                n_all += 1
            for r in range(R):
                best = -1.0
                best_g = -1
                if r >= L and not (sight.cone[w, a, r - L] and sight.pair_ok[w, a, r - L]):
                    sight.dist[i, base + r] = best
                    sight.geomid[i, base + r] = best_g
                    continue
                for j in range(3):
                    v[j] = sight.ray_vec[w, a, r, j]
                    inv[j] = 1.0 / v[j] if v[j] != 0.0 else 0.0
                n = 0
                if v[2] == 0.0:  # level: x and y slabs of the boxes in its quadrant
                    q = 4
                    if v[0] != 0.0 and v[1] != 0.0:
                        q = (0 if v[1] > 0.0 else 3) if v[0] > 0.0 else (1 if v[1] > 0.0 else 2)
                    for m in range(n_level[q]):
                        k = level[q, m]
                        t = _entry(box, k, v, inv, 2)
                        if t >= 0.0:
                            cand[n] = geoms[k]
                            start[n] = t
                            n += 1
                else:
                    for k in range(n_all):
                        t = _entry(box, k, v, inv, 3)
                        if t >= 0.0:
                            cand[n] = geoms[k]
                            start[n] = t
                            n += 1
                off = 24 * ((w * A + a) * R + r)
                while n > 0:  # nearest box first; none nearer than a hit: done
                    k = 0
                    for c in range(1, n):
                        if start[c] < start[k]:
                            k = c
                    if best >= 0.0 and start[k] > best:
                        break
                    g = cand[k]
                    n -= 1
                    cand[k] = cand[n]
                    start[k] = start[n]
                    if scene.geom_type[w, g] == GEOM_MESH:
                        x = _ray_mesh(
                            scene.functions[2],
                            scene.model_ptr[w],
                            scene.data_ptr,
                            g,
                            pnt_adr + off,
                            vec_adr + off,
                        )
                    else:
                        x = _ray_geom(
                            scene.functions[1],
                            xpos_adr + 24 * g,
                            xmat_adr + 72 * g,
                            size_adr + 24 * (w * G + g),
                            pnt_adr + off,
                            vec_adr + off,
                            np.int64(scene.geom_type[w, g]),
                        )
                    # mj_ray's loop in id order keeps the nearest, the lowest id among equals
                    if x >= 0.0 and (best < 0.0 or x < best or (x == best and g < best_g)):
                        best = x
                        best_g = g
                sight.dist[i, base + r] = best
                sight.geomid[i, base + r] = best_g
