"""Layouts (spec §1-2): walls, rooms, doors, object counts and placement rules of each preset.

Each test draws a few hundred layouts (pure numpy, no MuJoCo) and checks every one of them, or the
frequency of a random choice within bounds that a correct sampler misses with probability < 1e-6.
"""

import numpy as np
import pytest

from hns_train.envs.config import make_config
from hns_train.envs.layout import ABSENT, CUBE, LONG_X, LONG_Y, sample_layout

N = 400
DOOR = 0.7


def _layouts(preset, seed=0, n=N):
    cfg = make_config(preset)
    rng = np.random.default_rng(seed)
    return cfg, [sample_layout(cfg, rng) for _ in range(n)]


def _segments(layout, slots):
    """(axis, across, lo, hi) of the present wall boxes in `slots` (axis 0: constant x)."""
    out = []
    for k in slots:
        if layout.wall_present[k]:
            pos, half = layout.wall_pos[k], layout.wall_half[k]
            axis = 0 if half[0] < half[1] else 1
            along = pos[1 - axis]
            out.append((axis, pos[axis], along - half[1 - axis], along + half[1 - axis]))
    return out


def _inner_walls(layout):
    """Per inner wall (slots 4 + 2i and 5 + 2i hold its two sides of the door): its segments."""
    n = len(layout.wall_present)
    walls = [_segments(layout, (k, k + 1)) for k in range(4, n, 2)]
    return [w for w in walls if w]


def _door_gap(wall):
    """The gap between a wall's two segments (both on one line), or None without a door."""
    if len(wall) == 1:
        return None
    (a0, x0, lo0, hi0), (a1, x1, lo1, hi1) = sorted(wall, key=lambda s: s[2])
    assert a0 == a1 and x0 == pytest.approx(x1)
    return lo1 - hi0


def _binomial_ok(count, n, p):
    sd = np.sqrt(n * p * (1 - p))
    return abs(count - n * p) < 5 * sd


def test_quadrant_walls_room_and_doors():
    cfg, layouts = _layouts("quadrant")
    doorless = 0
    for lay in layouts:
        outer = _segments(lay, range(4))
        assert sorted((a, round(x, 6)) for a, x, _, _ in outer) == [
            (0, 0.1),
            (0, 5.9),
            (1, 0.1),
            (1, 5.9),
        ]
        assert np.all(lay.wall_half[:4, 2] == 2.0)  # 4 m tall
        inner = _segments(lay, range(4, 8))
        assert np.all(lay.wall_half[4:][lay.wall_present[4:], 2] == 0.25)  # 0.5 m tall
        assert np.allclose(np.sort(lay.wall_half[lay.wall_present][:, :2], axis=1)[:, 0], 0.05)
        # inner walls on the cell lines x = 15 (y 0..15) and y = 15 (x 15..29): the room
        spans = {(a, round(x, 6)): [] for a, x, _, _ in inner}
        for a, x, lo, hi in inner:
            spans[(a, round(x, 6))] += [lo, hi]
        assert set(spans) == {(0, 3.1), (1, 3.1)}
        assert min(spans[(0, 3.1)]) == pytest.approx(0.05) and max(
            spans[(0, 3.1)]
        ) == pytest.approx(3.15)
        assert min(spans[(1, 3.1)]) == pytest.approx(3.05) and max(
            spans[(1, 3.1)]
        ) == pytest.approx(5.95)
        gaps = [_door_gap(w) for w in _inner_walls(lay)]
        assert len(gaps) == 2
        assert all(g == pytest.approx(DOOR) for g in gaps if g is not None)
        assert gaps.count(None) <= 1
        doorless += gaps.count(None)
    assert _binomial_ok(doorless, N, cfg.p_one_wall_doorless)


def test_quadrant_placement_boxes_in_the_room_seekers_outside_it():
    cfg, layouts = _layouts("quadrant", seed=1)
    hiders_in_room_quadrant = 0
    for lay in layouts:
        assert (lay.box_kind == CUBE).sum() == 2 and len(lay.ramp_xy) == 1
        half = 0.25  # cube half size: the footprint lies strictly inside the room
        for x, y in lay.box_xy:
            assert 3.1 < x - half < x + half < 5.9 and 0.1 < y - half < y + half < 3.1
        hiders = lay.agent_xy[: cfg.max_hiders][lay.agent_present[: cfg.max_hiders]]
        seekers = lay.agent_xy[cfg.max_hiders :][lay.agent_present[cfg.max_hiders :]]
        assert len(hiders) == 2 and len(seekers) == 2
        for x, y in seekers:  # in one of the other three quadrants
            assert x + 0.2 < 3.1 or y - 0.2 > 3.1
        hiders_in_room_quadrant += int(((hiders[:, 0] > 3.1) & (hiders[:, 1] < 3.1)).any())
    assert hiders_in_room_quadrant > 0  # hiders are placed anywhere


def test_randomwalls_rooms_doors_outer_walls_and_boxes():
    cfg, layouts = _layouts("randomwalls", seed=2)
    rooms, outer, n_boxes, one_axis = np.zeros(5, int), 0, set(), 0
    for lay in layouts:
        outer_present = lay.wall_present[:4]
        assert outer_present.all() or not outer_present.any()
        outer += bool(outer_present.all())
        gaps = [_door_gap(w) for w in _inner_walls(lay)]
        assert all(g == pytest.approx(DOOR) for g in gaps)  # one door per inner wall
        rooms[len(gaps) + 1] += 1  # one inner wall per split
        n = int((lay.box_kind != ABSENT).sum())
        n_long = int(np.isin(lay.box_kind, (LONG_X, LONG_Y)).sum())
        assert 3 <= n <= 9 and 3 <= n_long <= min(9, n)
        assert np.all(lay.box_kind[:n] != ABSENT) and np.all(lay.box_kind[n:] == ABSENT)
        n_boxes.add(n)
        n_x = int((lay.box_kind == LONG_X).sum())
        one_axis += n_x in (0, n_long)
        assert len(lay.ramp_xy) == 2
        # teammates start within 3 cells of their team's first agent (footprint corners)
        for team in (slice(0, cfg.max_hiders), slice(cfg.max_hiders, None)):
            xy = lay.agent_xy[team][lay.agent_present[team]]
            assert np.all(np.abs(xy - xy[0]) <= 3 * cfg.cell + 1e-9)
    assert _binomial_ok(outer, N, 0.5)
    assert all(rooms[k] > N / 8 for k in (1, 2, 3, 4))  # 1-4 rooms, uniform
    assert n_boxes == set(range(3, 10))
    # the number along x is uniform in 0..n_long (the original's draw), so all elongated boxes
    # share one axis in 2 / (n_long + 1) of the layouts: about 0.3 here, not the 2 / 2**n_long
    # (about 0.06) of independent coin flips
    assert 0.2 * N < one_axis < 0.45 * N
