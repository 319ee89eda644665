"""World layout: walls, rooms, doors and object placement on the 30 x 30 grid (pure numpy).

A `Layout` is everything random about one episode's world, drawn from a `numpy.random.Generator`:
which agents and boxes exist, box shapes, wall segments, and initial poses. `world.py` turns it
into MuJoCo; nothing here knows about MuJoCo.

Conventions and choices (spec §1-2):
- Grid: `grid_cells` x `grid_cells` cells of `cell` metres, cell (i, j) spans
  [i*cell, (i+1)*cell] x [j*cell, (j+1)*cell]. A wall runs along a line of cell centres, so the
  outer walls sit on lines 0 and 29 (x = 0.1 and 5.9 m, matching the quadrant out-of-bounds rect).
- Every wall is split into at most two segments by its door (a `door_width` gap whose centre is
  uniform along the wall, at least one wall thickness from either end). Segments are stored in a
  fixed number of slots per preset so that every world of a preset compiles to the same MuJoCo
  sizes (see world.py); unused slots are marked absent.
- Quadrant: the room spans lines x=15..29, y=0..15; each of its two inner walls has a door, except
  that with probability `p_one_wall_doorless` one randomly chosen inner wall has none.
- Random walls: 1-4 rooms by recursive axis-aligned splits of a random room along a random axis,
  each side at least `min_room_cells`; one door per inner wall; outer walls kept with
  probability `p_outer_walls`.
- Tri (sequential lock; the original's 'var_tri'): a first inner wall across the whole arena on
  cell line int(grid_cells * u), u uniform in `tri_split`, along x or y with probability 1/2
  each; a second one, on its own such line, from the first wall to the outer wall on one side
  (each side with probability 1/2): a big room and two small ones, without doors unless
  `tri_doors`. Ramp k is placed in room k % 3 (big room first), its lower-left cell uniform in the
  room's cell ranges as the original's `tri_placement` draws it; everything else is uniform.
- Placement: rejection sampling of a footprint's lower-left cell on an occupancy grid (agent 2x2,
  cube 3x3, elongated 9x1 or 1x9, ramp 3x3; boundary cells and wall cells excluded, door cells
  free). `place_tries` tries per object, then the whole layout is drawn again.
- Positions are object centres (not the original's lower-corner joint coordinates).
- Elongated boxes: their number is drawn from [low, min(high, n_boxes)], then how many of them
  lie along x is uniform in 0..that number (the original's draw), the rest along y.
- Construction tasks (construction.py): a static cylinder (`cfg.cylinder`) is placed first, so
  every object avoids it: diameter uniform in `cylinder_diameter`, footprint ceil(d / cell)
  cells drawn as the original's `uniform_placement_middle(cylinder_area_fraction)`, the centre
  at the footprint's centre. Construction sites (`cfg.max_sites` > 0, count uniform in
  `n_sites`) are placed last, the same way with `site_area_fraction`, each on free cells; they
  only mark cells, nothing collides with them. Configs without either draw nothing more.
- Counting (the object_counting task, counting.py): walls "counting" are the outer walls and two
  screen walls on the line y = `counting.screen_y`, from the outer walls to a `counting.window`
  gap centred on x = floor_size / 2; placement "counting" pins the one agent at
  (floor_size / 2, `counting.agent_y`) facing +y and stands the n boxes in a row on
  y = `counting.row_y`, centred on the same x, `counting.spacing` apart (`counting_row`).
- Agents start with a uniform yaw; ramps with a yaw that is a multiple of 90 degrees (so they
  stay inside their footprint); boxes axis-aligned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hns_train.envs.config import GameConfig

# Box kinds in Layout.box_kind
ABSENT, CUBE, LONG_X, LONG_Y = 0, 1, 2, 3
MAX_REBUILDS = 200


@dataclass
class Layout:
    wall_pos: np.ndarray  # (n_wall_slots, 3) centre of each wall box
    wall_half: np.ndarray  # (n_wall_slots, 3) half sizes
    wall_present: np.ndarray  # (n_wall_slots,) bool
    n_hiders: int
    n_seekers: int
    agent_present: np.ndarray  # (max_agents,) bool; slots: hiders first, then seekers
    agent_xy: np.ndarray  # (max_agents, 2)
    agent_yaw: np.ndarray  # (max_agents,)
    box_kind: np.ndarray  # (max_boxes,) ABSENT / CUBE / LONG_X / LONG_Y
    box_xy: np.ndarray  # (max_boxes, 2)
    ramp_xy: np.ndarray  # (n_ramps, 2)
    ramp_yaw: np.ndarray  # (n_ramps,)
    occupancy: np.ndarray  # (grid, grid) bool, walls and placed objects
    # construction tasks (empty / zero radius where the config has none)
    site_xy: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # (max_sites, 2)
    site_present: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    cylinder_xy: np.ndarray = field(default_factory=lambda: np.zeros(2))  # centre
    cylinder_radius: float = 0.0  # 0: no cylinder

    @property
    def object_present(self) -> np.ndarray:
        """(max_boxes + n_ramps,) bool: the boxes drawn this episode, then every ramp."""
        return np.concatenate([self.box_kind != ABSENT, np.ones(len(self.ramp_xy), dtype=bool)])

    def structure_key(self) -> tuple:
        """What the compiled MuJoCo model depends on besides poses (for model caching)."""
        walls = np.round(np.where(self.wall_present[:, None], self.wall_pos, 0.0), 6)
        halves = np.round(np.where(self.wall_present[:, None], self.wall_half, 0.0), 6)
        key = (
            walls.tobytes(),
            halves.tobytes(),
            self.agent_present.tobytes(),
            self.box_kind.tobytes(),
        )
        if len(self.site_present) or self.cylinder_radius:  # static geoms placed per layout
            sites = np.where(self.site_present[:, None], self.site_xy, 0.0)
            cylinder = (*self.cylinder_xy, self.cylinder_radius)
            key += (np.round(sites, 6).tobytes(), np.round(cylinder, 6).tobytes())
        return key


def n_wall_slots(cfg: GameConfig) -> int:
    slots = {"quadrant": 2, "random": cfg.n_rooms[1] - 1, "tri": 2, "none": 0, "counting": 1}
    inner = slots[cfg.walls]
    return 4 + 2 * inner


FACING_Y = np.pi  # the yaw that faces +y (an agent's front is (sin yaw, -cos yaw))


def counting_row(cfg: GameConfig, n: int) -> np.ndarray:
    """(n,) x of the counting boxes' start row, left to right, centred on the floor."""
    return cfg.floor_size / 2 + (np.arange(n) - (n - 1) / 2) * cfg.counting.spacing


def sample_layout(cfg: GameConfig, rng: np.random.Generator) -> Layout:
    """Draw a complete layout; redraws walls and placement until every object fits."""
    n_hiders = int(rng.integers(cfg.n_hiders[0], cfg.n_hiders[1] + 1))
    n_seekers = int(rng.integers(cfg.n_seekers[0], cfg.n_seekers[1] + 1))
    n_boxes = int(rng.integers(cfg.n_boxes[0], cfg.n_boxes[1] + 1))
    box_kind = np.full(cfg.max_boxes, ABSENT, dtype=np.int32)
    box_kind[:n_boxes] = CUBE
    if n_boxes:
        lo, hi = cfg.n_elongated[0], min(cfg.n_elongated[1], n_boxes)
        n_long = int(rng.integers(min(lo, hi), hi + 1))
        which = rng.choice(n_boxes, size=n_long, replace=False)
        # as the original: the number of x-aligned ones is uniform in 0..n_long
        n_x = int(rng.integers(n_long + 1))
        box_kind[which] = np.where(np.arange(n_long) < n_x, LONG_X, LONG_Y)
    # construction draws (none for other configs, so their random streams are unchanged)
    n_sites = int(rng.integers(cfg.n_sites[0], cfg.n_sites[1] + 1)) if cfg.max_sites else 0
    diameter = float(rng.uniform(*cfg.cylinder_diameter)) if cfg.cylinder else 0.0
    for _ in range(MAX_REBUILDS):
        walls = _sample_walls(cfg, rng)
        try:
            if cfg.placement == "counting":
                parts = _place_counting(cfg, walls, n_hiders, n_seekers, box_kind)
            else:
                parts = _place_objects(
                    cfg, rng, walls, n_hiders, n_seekers, box_kind, n_sites, diameter
                )
        except _Crowded:
            continue
        return Layout(
            wall_pos=walls.pos,
            wall_half=walls.half,
            wall_present=walls.present,
            n_hiders=n_hiders,
            n_seekers=n_seekers,
            box_kind=box_kind,
            **parts,
        )
    raise RuntimeError(
        f"could not place every object in {MAX_REBUILDS} layouts for preset {cfg.preset!r}; "
        "the arena is too crowded for the configured object counts"
    )


# ----------------------------------------------------------------------
# Walls


@dataclass
class _Walls:
    pos: np.ndarray
    half: np.ndarray
    present: np.ndarray
    occupancy: np.ndarray
    room: tuple[int, int, int, int] | None  # quadrant room (x0, y0, x1, y1) in cell lines
    # tri rooms: (x_start, x_stop, y_start, y_stop) ranges of an object's lower-left cell, stops
    # exclusive and less the footprint (the original's tri_placement draw)
    tri_rooms: list[tuple[int, int, int, int]] | None = None


def _sample_walls(cfg: GameConfig, rng: np.random.Generator) -> _Walls:
    g = cfg.grid_cells
    slots = n_wall_slots(cfg)
    walls = _Walls(
        pos=np.zeros((slots, 3)),
        half=np.zeros((slots, 3)),
        present=np.zeros(slots, dtype=bool),
        occupancy=np.zeros((g, g), dtype=bool),
        room=None,
    )
    if rng.random() < cfg.p_outer_walls:
        for k, (axis, line) in enumerate([(0, 0), (0, g - 1), (1, 0), (1, g - 1)]):
            _add_segment(cfg, walls, k, axis, line, 0, g - 1, cfg.outer_wall_height)
    slot = 4
    if cfg.walls == "quadrant":
        rx, ry = cfg.room_cells
        walls.room = (rx, 0, g - 1, ry)
        inner = [(0, rx, 0, ry), (1, ry, rx, g - 1)]  # (axis, line, start, end)
        doorless = int(rng.integers(2)) if rng.random() < cfg.p_one_wall_doorless else -1
        for k, (axis, line, a, b) in enumerate(inner):
            slot = _add_wall(cfg, rng, walls, slot, axis, line, a, b, door=k != doorless)
    elif cfg.walls == "tri":
        _tri_walls(cfg, rng, walls, slot)
    elif cfg.walls == "counting":
        c, t, h = cfg.cell, cfg.wall_thickness, cfg.inner_wall_height
        # from the outer walls' centre lines (cell lines 0 and g - 1) to the window
        ends = ((0.5 * c, (cfg.floor_size - cfg.counting.window) / 2),
                ((cfg.floor_size + cfg.counting.window) / 2, (g - 0.5) * c))  # fmt: skip
        for k, (lo, hi) in enumerate(ends):
            walls.pos[slot + k] = ((lo + hi) / 2, cfg.counting.screen_y, h / 2)
            walls.half[slot + k] = ((hi - lo) / 2, t / 2, h / 2)
            walls.present[slot + k] = True
    elif cfg.walls == "random":
        rooms = [(0, 0, g - 1, g - 1)]
        target = int(rng.integers(cfg.n_rooms[0], cfg.n_rooms[1] + 1))
        m = cfg.min_room_cells
        while len(rooms) < target:
            options = [
                (r, axis)
                for r, (x0, y0, x1, y1) in enumerate(rooms)
                for axis, (lo, hi) in enumerate([(x0, x1), (y0, y1)])
                if hi - lo >= 2 * m
            ]
            if not options:
                break
            r, axis = options[int(rng.integers(len(options)))]
            x0, y0, x1, y1 = rooms.pop(r)
            if axis == 0:
                s = int(rng.integers(x0 + m, x1 - m + 1))
                slot = _add_wall(cfg, rng, walls, slot, 0, s, y0, y1, door=True)
                rooms += [(x0, y0, s, y1), (s, y0, x1, y1)]
            else:
                s = int(rng.integers(y0 + m, y1 - m + 1))
                slot = _add_wall(cfg, rng, walls, slot, 1, s, x0, x1, door=True)
                rooms += [(x0, y0, x1, s), (x0, s, x1, y1)]
    return walls


def _tri_walls(cfg, rng, walls: _Walls, slot: int) -> None:
    """The three rooms of the tri layout (module docstring) into `walls` and `walls.tri_rooms`."""
    g = cfg.grid_cells
    first, second = (int(g * rng.uniform(*cfg.tri_split)) for _ in range(2))
    axis = 0 if rng.random() < 0.5 else 1  # 0: the first wall on an x line (vertical)
    high = rng.random() >= 0.5  # the second wall on the first one's high side
    slot = _add_wall(cfg, rng, walls, slot, axis, first, 0, g - 1, door=cfg.tri_doors)
    a, b = (first, g - 1) if high else (0, first)
    _add_wall(cfg, rng, walls, slot, 1 - axis, second, a, b, door=cfg.tri_doors)
    # cell ranges: along the first wall's normal, then along the other axis
    low_side, high_side = (1, first - 1), (first + 1, g - 1)
    small_side, big_side = (high_side, low_side) if high else (low_side, high_side)
    rooms = [
        (big_side, (1, g - 1)),
        (small_side, (1, second - 1)),
        (small_side, (second + 1, g - 1)),
    ]
    walls.tri_rooms = [(*n, *o) if axis == 0 else (*o, *n) for n, o in rooms]


def _add_wall(cfg, rng, walls: _Walls, slot: int, axis: int, line: int, a: int, b: int, door):
    """An inner wall on cell line `line` from cell a to b (along the other axis), with a door."""
    if not door:
        _add_segment(cfg, walls, slot, axis, line, a, b, cfg.inner_wall_height)
        return slot + 2
    c = cfg.cell
    start, end = (a + 0.5) * c, (b + 0.5) * c
    margin = cfg.door_width / 2 + cfg.wall_thickness
    centre = rng.uniform(start + margin, end - margin)
    lo, hi = centre - cfg.door_width / 2, centre + cfg.door_width / 2
    _add_segment(cfg, walls, slot, axis, line, a, b, cfg.inner_wall_height, span=(start, lo))
    _add_segment(cfg, walls, slot + 1, axis, line, a, b, cfg.inner_wall_height, span=(hi, end))
    return slot + 2


def _isclose(x: float, y: float) -> bool:
    # np.isclose's test (rtol 1e-5, atol 1e-8) on Python floats: np.isclose costs ~50 us a call
    return abs(x - y) <= 1e-8 + 1e-5 * abs(y)


def _add_segment(cfg, walls: _Walls, slot, axis, line, a, b, height, span=None):
    """Wall box on line `line` (axis 0: constant x; 1: constant y) covering `span` metres."""
    c, t = cfg.cell, cfg.wall_thickness
    lo, hi = span if span is not None else ((a + 0.5) * c, (b + 0.5) * c)
    # Segments ending at a wall end reach half a thickness further, closing the corner.
    lo -= t / 2 if _isclose(lo, (a + 0.5) * c) else 0.0
    hi += t / 2 if _isclose(hi, (b + 0.5) * c) else 0.0
    # (across the wall, along it): x then y for axis 0, the other way round for axis 1
    order = slice(None, None, 1 - 2 * axis)
    walls.pos[slot] = (*((line + 0.5) * c, (lo + hi) / 2)[order], height / 2)
    walls.half[slot] = (*(t / 2, (hi - lo) / 2)[order], height / 2)
    walls.present[slot] = True
    centres = (np.arange(a, b + 1) + 0.5) * c
    rows = np.arange(a, b + 1)[(centres >= lo - c / 2) & (centres <= hi + c / 2)]
    walls.occupancy[(line, rows)[order]] = True


# ----------------------------------------------------------------------
# Placement


def middle_range(g: int, n: int, fraction: float) -> tuple[int, int]:
    """[low, high) of a footprint's first cell for `n` cells in the middle `fraction` of a grid
    of `g` (the original's `uniform_placement_middle`, its int truncations included)."""
    lo = int((g - n) * (1 - fraction) / 2 + fraction)
    hi = int((g - n) * (1 + fraction) / 2 - fraction)
    return lo, max(hi, lo + 1)


class _Crowded(Exception):
    """An object found no free footprint in `place_tries` tries: the layout is drawn again."""


def _place_objects(
    cfg, rng, walls: _Walls, n_hiders, n_seekers, box_kind, n_sites=0, diameter=0.0
) -> dict:
    """The drawn poses and occupancy of a layout on `walls` (the `Layout` fields besides the
    walls, team sizes and box kinds); raises `_Crowded` when something does not fit."""
    occ = walls.occupancy.copy()
    g = cfg.grid_cells
    quadrant = cfg.placement == "quadrant" and walls.room is not None
    room = walls.room

    def in_room(i, j, w, h):  # footprint strictly inside the quadrant room
        x0, y0, x1, y1 = room
        return i > x0 and j > y0 and i + w - 1 < x1 and j + h - 1 < y1

    def outside_room_quadrant(i, j, w, h):
        x0, _, _, y1 = room
        return i + w - 1 < x0 or j > y1

    def place(w, h, ok=None, near=None, region=None):
        for _ in range(cfg.place_tries):
            if region is not None:
                x0, x1, y0, y1 = region
                i, j = rng.integers(x0, x1 - w), rng.integers(y0, y1 - h)
            elif near is None:
                i, j = rng.integers(1, g - 1 - w + 1), rng.integers(1, g - 1 - h + 1)
            else:
                s = cfg.teammate_spread_cells
                i = rng.integers(max(1, near[0] - s), min(g - 1 - w, near[0] + s) + 1)
                j = rng.integers(max(1, near[1] - s), min(g - 1 - h, near[1] + s) + 1)
            if occ[i : i + w, j : j + h].any() or (ok is not None and not ok(i, j, w, h)):
                continue
            occ[i : i + w, j : j + h] = True
            return int(i), int(j)
        raise _Crowded

    def place_middle(n, fraction):  # n x n cells in the middle of the grid
        lo, hi = middle_range(g, n, fraction)
        return place(n, n, region=(lo, hi + n, lo, hi + n))

    def centre(ij, w, h):
        return np.array([(ij[0] + w / 2) * cfg.cell, (ij[1] + h / 2) * cfg.cell])

    cylinder_xy = np.zeros(2)
    if diameter:
        n = math.ceil(diameter / cfg.cell - 1e-9)
        cylinder_xy = centre(place_middle(n, cfg.cylinder_area_fraction), n, n)

    box_xy = np.zeros((cfg.max_boxes, 2))
    for k, kind in enumerate(box_kind):
        if kind == ABSENT:
            continue
        w, h = {
            CUBE: (cfg.box_cells, cfg.box_cells),
            LONG_X: cfg.elongated_cells,
            LONG_Y: cfg.elongated_cells[::-1],
        }[int(kind)]
        box_xy[k] = centre(place(w, h, in_room if quadrant else None), w, h)

    ramp_xy = np.zeros((cfg.n_ramps, 2))
    for k in range(cfg.n_ramps):
        tri_room = walls.tri_rooms[k % 3] if walls.tri_rooms is not None else None
        ij = place(cfg.ramp_cells, cfg.ramp_cells, region=tri_room)
        ramp_xy[k] = centre(ij, cfg.ramp_cells, cfg.ramp_cells)

    a = cfg.agent_cells
    agent_xy = np.zeros((cfg.max_agents, 2))
    present = np.zeros(cfg.max_agents, dtype=bool)
    teams = [(0, n_hiders, None), (cfg.max_hiders, n_seekers, outside_room_quadrant)]
    for first_slot, count, rule in teams:
        first = None
        for k in range(count):
            spread = cfg.teammate_spread_cells >= 0 and first is not None
            ij = place(a, a, rule if quadrant else None, near=first if spread else None)
            first = first or ij
            agent_xy[first_slot + k] = centre(ij, a, a)
            present[first_slot + k] = True

    site_xy = np.zeros((cfg.max_sites, 2))
    for k in range(n_sites):
        ij = place_middle(cfg.site_cells, cfg.site_area_fraction)
        site_xy[k] = centre(ij, cfg.site_cells, cfg.site_cells)

    return dict(
        agent_present=present,
        agent_xy=agent_xy,
        agent_yaw=rng.uniform(0, 2 * np.pi, cfg.max_agents),
        box_xy=box_xy,
        ramp_xy=ramp_xy,
        ramp_yaw=rng.integers(0, 4, cfg.n_ramps) * (np.pi / 2),
        occupancy=occ,
        site_xy=site_xy,
        site_present=np.arange(cfg.max_sites) < n_sites,
        cylinder_xy=cylinder_xy,
        cylinder_radius=diameter / 2,
    )


def _place_counting(cfg, walls: _Walls, n_hiders, n_seekers, box_kind) -> dict:
    """The counting scene: fixed poses, nothing random but the number of boxes (one agent and
    cubes only: GameConfig checks that the config draws no more)."""
    present = np.zeros(cfg.max_agents, dtype=bool)
    present[0 if n_hiders else cfg.max_hiders] = True
    agent_xy = np.zeros((cfg.max_agents, 2))
    agent_xy[present] = (cfg.floor_size / 2, cfg.counting.agent_y)
    n = int((box_kind == CUBE).sum())
    box_xy = np.zeros((cfg.max_boxes, 2))
    box_xy[:n, 0] = counting_row(cfg, n)
    box_xy[:n, 1] = cfg.counting.row_y
    return dict(
        agent_present=present,
        agent_xy=agent_xy,
        agent_yaw=np.full(cfg.max_agents, FACING_Y),
        box_xy=box_xy,
        ramp_xy=np.zeros((0, 2)),
        ramp_yaw=np.zeros(0),
        occupancy=walls.occupancy,
    )
