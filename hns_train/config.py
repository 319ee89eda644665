"""Experiment configuration: one typed tree loaded from YAML, with `key=value` overrides.

A run is described by `RunConfig`:

    name, seed, runs_dir
    game:     preset + any GameConfig field          -> hns_train.envs.make_config
    agent:    network / ppo sections                 -> hns_train.agents.AgentConfig
    pipeline: workers, batching, staleness, reuse    -> PipelineConfig
    pool:     self-play snapshots and opponents      -> hns_train.agents.pool.PoolConfig
    pod:      worlds and PPO passes of a pod         -> PodConfig (pipeline.backend=pod)
    eval:     evaluation matches and replays         -> EvalSettings
    logging:  metrics cadence and wandb              -> LoggingConfig
    stop:     when the run ends                      -> StopConfig
    population: members, searched ranges, league     -> hns_train.agents.population.PopulationConfig

`load_config(path, overrides)` reads a YAML file (which may name a `base:` file to start from),
applies dotted overrides such as `pipeline.n_actors=4` (values parsed as YAML scalars), and
checks every key and type. An unknown key or an ill-typed value raises `ConfigError` naming the
key, where it came from (the file, or "command line" for a problem the overrides bring) and what
is allowed, with the closest allowed key for a misspelt one. Nothing here is executed from the file:
YAML is read with `safe_load`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml

from hns_train import typed_config
from hns_train.agents.config import AgentConfig
from hns_train.agents.pool import PoolConfig
from hns_train.agents.population import PopulationConfig, parse_ranges
from hns_train.atomic_file import atomic_write_bytes, read_yaml
from hns_train.envs import contract
from hns_train.envs.config import GameConfig, make_config
from hns_train.typed_config import (
    AtLeast1,
    Bounds,
    NonNegative,
    NonNegativeInt,
    OneOf,
    Positive,
    Unit,
)

# The folder that holds the package: a source checkout's root, or where it is installed.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# The repository's configs/ in a source checkout; installed, the same files ship inside the
# package (pyproject.toml maps configs/ to hns_train/configs).
_SOURCE_CONFIGS = PACKAGE_ROOT / "configs"
CONFIG_DIR = (
    _SOURCE_CONFIGS
    if (_SOURCE_CONFIGS / "default.yaml").is_file()
    else Path(__file__).resolve().parent / "configs"
)
LAUNCHERS = ("serial", "local", "ray")
BACKENDS = ("c", "pod")
POD_PHYSICS = ("auto", "c", "warp")
WANDB_MODES = ("offline", "online", "disabled")
# Ray's GPU shares: -1 is "auto" (see the fields); its CPU shares are plain numbers >= 0
AutoOrNonNegative = Annotated[float, Bounds(-1)]
COMMAND_LINE = "command line"  # where an override's problem is said to come from


# The Warp actor mode (actors that simulated on MuJoCo Warp and ran the policy themselves)
# was replaced by pods, which do the same and train in the same process.
RETIRED_WARP_ACTORS = (
    "Warp actors were replaced by pods: use pipeline.backend=pod, whose pods "
    "simulate on MuJoCo Warp on a GPU (pipeline.device=cuda, pod.physics=auto or warp) and "
    "train where they simulate"
)


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names key and source."""


@dataclass
class PipelineConfig:
    """How the actor / policy / trainer workers are laid out and how samples flow."""

    launcher: Annotated[str, OneOf(LAUNCHERS)] = "local"
    # c: actors step C MuJoCo and ask policy workers over sockets; pod: no actors or policy
    # workers, each of the n_trainers learners simulates, acts and learns on its own device
    # (the `pod` section; hns_train/agents/pod.py), on MuJoCo Warp on a GPU
    backend: str = "c"
    n_actors: AtLeast1 = 2
    envs_per_actor: AtLeast1 = 16  # worlds stepped by one actor
    ring_size: AtLeast1 = 2  # groups per actor: one steps while another waits for actions
    physics_threads: AtLeast1 = 1  # MuJoCo threads per actor
    n_policy_workers: AtLeast1 = 1
    max_inference_batch: AtLeast1 = 4096  # agents per policy forward pass
    chunk_len: AtLeast1 = 80  # steps per sample chunk; must divide the horizon
    batch_chunks: AtLeast1 = 64  # chunks per step; a chunk has one column per learning agent of a
    # group, so samples = batch_chunks x columns x chunk_len (paper: 64,000 x 10 = 640k)
    reuse: AtLeast1 = 4  # times a chunk may be trained on (paper: about 4)
    max_staleness: NonNegativeInt = 4  # drop chunks produced more than this many versions ago
    sample_buffer_chunks: AtLeast1 = 256  # most chunks the trainer holds (the oldest go first)
    checkpoint_every: AtLeast1 = 50  # versions between checkpoints
    checkpoint_every_s: NonNegative = 60.0  # and at most this long apart (0 = versions only): the
    # work a dead trainer loses is bounded in time as well
    keep_checkpoints: AtLeast1 = 3
    heartbeat_s: Positive = 1.0
    heartbeat_timeout_s: Positive = 60.0  # a silent worker is restarted after this long
    restart_trainer: bool = True  # a dead trainer restarts from the newest checkpoint
    max_restarts: NonNegativeInt = 20
    request_timeout_s: NonNegative = 10.0  # an actor re-sends an unanswered request (0 = never)
    stall_timeout_s: NonNegative = 180.0  # a worker that heartbeats without progress this long is
    # restarted (0 = never); see controller.py for what counts as progress per kind
    update_timeout_s: NonNegative = 1800.0  # a learner silent in one PPO update (or one DDP wait
    # for its peers) this long is restarted (0 = never): a hung collective or device call
    controller_timeout_s: NonNegative = 60.0  # a worker that hears nothing from the controller for
    # this long exits (0 = never): the parent watch for workers that are not its children
    max_message_mb: AtLeast1 = 256  # largest message a socket of the run accepts, frames together
    transport: Annotated[str, OneOf(("ipc", "tcp"))] = "ipc"  # (serial always uses inproc)
    # One host (serial, local launchers): actors and policy workers pass inference requests
    # through shared memory, the socket carrying only their address (distributed/shared_rows.py),
    # and CPU trainer ranks sum gradients and moments there (distributed/host_sums.py)
    shared_memory: bool = True
    host: str = "127.0.0.1"
    device: str = "auto"  # policy workers and trainers: auto | cpu | cuda
    torch_threads: AtLeast1 = 1  # per worker process
    discard_samples: bool = False  # benchmarks: the trainer drops chunks (sampler-only speed)
    ray_address: str = ""  # ray launcher: existing cluster address, or empty to start a new one
    # --- several trainers, clusters (distributed/ddp.py, ray_launcher.py, docs/cluster.md)
    # trainer ranks of one policy (DDP); each takes batch_chunks / n_trainers
    n_trainers: AtLeast1 = 1
    # auto: nccl on CUDA, gloo on CPU
    ddp_backend: Annotated[str, OneOf(("auto", "gloo", "nccl"))] = "auto"
    ddp_timeout_s: Positive = 120.0  # longest wait in a trainer collective before the rank gives up
    mixed_precision: bool = True  # bf16 autocast of the trainer's forward pass, on CUDA only
    encrypt: bool = False  # CURVE on one-host runs too (ray and non-loopback tcp always encrypt)
    # a Ray instance this run starts: logical CPUs (0 = all of the host)
    ray_num_cpus: NonNegativeInt = 0
    # Fractions of a CPU/GPU each Ray actor reserves: whole CPUs per actor starve a small cluster.
    ray_actor_cpus: NonNegative = 0.5
    ray_policy_cpus: NonNegative = 0.25
    ray_trainer_cpus: NonNegative = 0.5
    ray_eval_cpus: NonNegative = 0.25
    ray_policy_gpus: AutoOrNonNegative = -1.0  # -1: 0.25 when the cluster has GPUs, else 0
    # -1: 1 when the cluster has GPUs (nccl: one GPU per rank)
    ray_trainer_gpus: AutoOrNonNegative = -1.0


EVAL_OPPONENTS = ("pool", "random", "noop", "scripted_seeker")


@dataclass
class EvalSettings:
    """Evaluation workers (hns_train.distributed.evaluator): the latest policy against opponents."""

    n_workers: NonNegativeInt = 0  # evaluation workers
    worlds: AtLeast1 = 4  # matches per round, played at once
    every_s: NonNegative = 60.0  # seconds between the starts of evaluation rounds
    replay_share: Unit = 0.25  # share of matches recorded as replays
    deterministic: bool = True  # act greedily (no exploration noise)
    render_videos: bool = True  # newest replay of each round to mp4, in a background process
    # A stop waits this long for a video under way and starts none: the replays stay for later.
    stop_render_wait_s: NonNegative = 5.0
    opponents: str = "pool,random,noop,scripted_seeker"  # classes played in turn, comma-separated

    def __post_init__(self) -> None:
        # (each field's range is declared with it; here the opponents' names)
        names = self.opponent_classes()
        bad = [n for n in names if n not in EVAL_OPPONENTS]
        if bad or not names:
            raise ValueError(
                f"opponents={self.opponents!r}: {bad or 'none given'}; allowed (comma-separated): "
                f"{', '.join(EVAL_OPPONENTS)}"
            )

    def opponent_classes(self) -> list[str]:
        return [n.strip() for n in self.opponents.split(",") if n.strip()]


@dataclass
class LoggingConfig:
    every_s: Positive = 10.0  # seconds between metrics records
    wandb: Annotated[str, OneOf(WANDB_MODES)] = "offline"
    project: str = "hns_train"
    group: str = ""  # wandb group (a population's members share their population's name)
    progress: bool = True  # tqdm progress bar


@dataclass
class StopConfig:
    """The run stops at the first limit reached (0 = no limit)."""

    versions: NonNegativeInt = 0
    frames: NonNegativeInt = 0
    # the run's wall-clock time from its controller's start, start-up included; a resumed run
    # (or population) counts on from where it stopped, as its records' hours do
    minutes: NonNegative = 0.0


@dataclass
class PodConfig:
    """`pipeline.backend=pod`: each learner (rank of `pipeline.n_trainers`) is a pod that
    simulates its own worlds, acts, stores rollouts of `pipeline.chunk_len` steps on
    `pipeline.device` and runs PPO on them there (hns_train/agents/pod.py) with `agent.ppo`: a
    rollout is trained on as it comes (the pipeline's `reuse` does not apply), so a pod's passes
    are `agent.ppo.epochs` x `agent.ppo.minibatches` (configs/quadrant_pod.yaml: 2 x 2)."""

    worlds: AtLeast1 = 64  # worlds each pod simulates (thousands on a GPU)
    # auto: MuJoCo Warp on CUDA, the C game on a CPU
    physics: Annotated[str, OneOf(POD_PHYSICS)] = "auto"
    opponent_slots: AtLeast1 = 4  # pool snapshots held on the device as ready models
    # Snapshots a pod keeps read (state dicts, 6.4 MB each with the paper's network) besides its
    # slots. Every rank holds its own, so pool.snapshot_cache's 64 (a policy worker's, which
    # builds a model per load) would grow each rank by 0.4 GiB over a run; a pod's draw only
    # copies weights into a slot, and a re-read comes from the page cache the ranks share.
    snapshot_cache: AtLeast1 = 8
    # torch and MuJoCo threads of a CPU pod (0: this host's cores / pods). More cores: more pods
    # (pipeline.n_trainers) rather than threads; torch's OpenMP threads spin while they wait, and
    # on a busy machine two of them in one pod made an update 7x slower than one (measured).
    threads: NonNegativeInt = 1


@dataclass
class RunConfig:
    name: str = "default"  # the run's folder inside runs_dir (not empty, no '..', not absolute)
    # worlds, layouts and draws of every worker; the initial networks and a pod's sampled actions
    # (learner.py); a pod run on the serial launcher repeats itself exactly
    seed: NonNegativeInt = 0
    runs_dir: str = "runs"
    game: dict[str, Any] = field(default_factory=lambda: {"preset": "quadrant"})
    agent: AgentConfig = field(default_factory=AgentConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    pod: PodConfig = field(default_factory=PodConfig)
    eval: EvalSettings = field(default_factory=EvalSettings)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_dir) / self.name

    def game_config(self) -> GameConfig:
        return make_config(**self.game)  # `preset` among the keys, else make_config's default

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def check(self, source: str = "config") -> RunConfig:
        """Cross-field rules; raises ConfigError naming the keys."""
        p = self.pipeline
        try:
            game = self.game_config()
        except ValueError as err:
            raise ConfigError(f"{source}: game: {err}") from None
        problems = []
        if p.backend == "warp":
            problems.append(f"pipeline.backend='warp' is retired: {RETIRED_WARP_ACTORS}")
        elif p.backend not in BACKENDS:
            problems.append(f"pipeline.backend={p.backend!r} is not one of {BACKENDS}")
        if game.task != "hide_and_seek" and p.backend == "pod" and self.pod.physics == "warp":
            problems.append(
                f"game task {game.task!r}: the Warp game (pod.physics 'warp') plays "
                "hide-and-seek only; tasks run on the C game: pipeline.backend 'c', or 'pod' "
                "with pod.physics 'c' or 'auto' (docs/extending.md)"
            )
        problems += _cluster_problems(p)
        problems += _range_problems(self)
        problems += _population_problems(self)
        if p.envs_per_actor % max(p.ring_size, 1):
            problems.append(
                f"pipeline.envs_per_actor={p.envs_per_actor} must be a multiple of "
                f"pipeline.ring_size={p.ring_size}"
            )
        if game.horizon % max(p.chunk_len, 1):
            problems.append(
                f"pipeline.chunk_len={p.chunk_len} must divide the game horizon "
                f"{game.horizon} (chunks are aligned with episodes)"
            )
        if p.chunk_len % self.agent.ppo.bptt_len:
            problems.append(
                f"pipeline.chunk_len={p.chunk_len} must be a multiple of "
                f"agent.ppo.bptt_len={self.agent.ppo.bptt_len}"
            )
        try:  # the network's action heads against the game's contract (envs/contract.py)
            move_bins = self.agent.network.move_bins
            contract.check_network_settings(game, move_bins, "agent.network.move_bins")
        except ValueError as err:
            problems.append(str(err))
        if problems:
            raise ConfigError(f"{source}: " + "; ".join(problems))
        return self


def flat_settings(cfg: RunConfig) -> dict[str, Any]:
    """Every setting of `cfg` by its dotted key ("agent.ppo.lr": 3e-4, ...)."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[prefix + key] = value

    walk(cfg.to_dict(), "")
    return out


def _population_problems(cfg: RunConfig) -> list[str]:
    """The searched ranges name numeric settings; a population is not itself a member."""
    p = cfg.population
    try:
        parse_ranges(p.ranges, flat_settings(cfg))
    except ValueError as err:
        return [str(err)]
    bad = [k for k in p.ranges if k.startswith(("population.", "name", "runs_dir", "seed"))]
    if bad:
        return [f"population.ranges: {bad} cannot be searched (they name the run itself)"]
    return []


def _range_problems(cfg: RunConfig) -> list[str]:
    """Every numeric field against its bounds, then the rules between fields."""
    out = typed_config.range_problems(cfg)
    p = cfg.pipeline
    if p.heartbeat_timeout_s <= p.heartbeat_s:
        out.append(
            f"pipeline.heartbeat_timeout_s={p.heartbeat_timeout_s} must be greater than "
            f"pipeline.heartbeat_s={p.heartbeat_s}"
        )
    # a pod makes its own batch (pod.worlds x chunk_len per rank): the chunk settings are unused
    if p.backend != "pod" and p.batch_chunks >= 1 and p.n_trainers >= 1:
        share = p.batch_chunks // p.n_trainers
        if p.sample_buffer_chunks < share:
            out.append(
                f"pipeline.sample_buffer_chunks={p.sample_buffer_chunks} must be >= the chunks "
                f"of one step per trainer ({share}), or no step could ever start"
            )
    return out


def _cluster_problems(p: PipelineConfig) -> list[str]:
    """Rules of the several-trainer and Ray fields (their ranges are declared with them)."""
    out = []
    # (< 1: its range); pods do not take chunks: each rank's batch is its own rollout
    if p.backend != "pod" and p.n_trainers >= 1 and p.batch_chunks % p.n_trainers:
        out.append(
            f"pipeline.batch_chunks={p.batch_chunks} must be a multiple of "
            f"pipeline.n_trainers={p.n_trainers} (each trainer takes an equal share)"
        )
    if p.n_trainers > 1 and p.launcher == "serial":
        out.append("pipeline.n_trainers > 1 needs launcher local or ray (one process per rank)")
    for kind in ("policy", "trainer"):
        gpus = getattr(p, f"ray_{kind}_gpus")
        if -1 < gpus < 0:  # below -1 and non-finite: its range
            out.append(f"pipeline.ray_{kind}_gpus must be -1 (auto) or >= 0, got {gpus}")
    return out


# ----------------------------------------------------------------------------- loading


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """RunConfig from a YAML file (default: configs/default.yaml) plus `key=value` overrides."""
    path = find_config(path) if path is not None else CONFIG_DIR / "default.yaml"
    data = _read_yaml(path)
    base = _build(data, str(path))
    cfg = base
    for item in overrides or []:
        cfg = apply_override(cfg, item)
    if not overrides:
        return cfg.check(str(path))
    try:
        return cfg.check(COMMAND_LINE)
    except ConfigError:
        base.check(str(path))  # a file that is wrong on its own is blamed, not the command line
        raise


def config_from_dict(data: dict[str, Any], source: str = "config") -> RunConfig:
    return _build(data, source).check(source)


def save_config(cfg: RunConfig, path: Path) -> None:
    atomic_write_bytes(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False).encode())


def apply_override(cfg: RunConfig, item: str) -> RunConfig:
    """`section.key=value` on the command line; the value is parsed as a YAML scalar."""
    if "=" not in item:
        raise ConfigError(f"{COMMAND_LINE}: override {item!r} must look like section.key=value")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"{COMMAND_LINE}: cannot parse the value of {key!r}: {err}") from None
    nested = value
    for part in reversed(key.split(".")):  # "a.b=1": {"a": {"b": 1}}
        nested = {part: nested}
    merged = _merge(cfg.to_dict(), nested)
    return _build(merged, COMMAND_LINE)


def find_config(path: str | Path) -> Path:
    """`path` if it exists, else the shipped config it names (`chase`, `chase.yaml`,
    `configs/chase.yaml`, `configs/transfer/shelter.yaml`), so the shipped configs work from any
    folder after `pip install`, also as the `base:` of a user's own YAML."""
    path = Path(path)
    if path.exists() or path.is_absolute() or ".." in path.parts:
        return path
    rel = Path(*path.parts[1:]) if path.parts[:1] == ("configs",) else path
    for name in (rel, rel.with_name(f"{rel.name}.yaml")):
        if (CONFIG_DIR / name).is_file():
            return CONFIG_DIR / name
    return path


def shipped_configs() -> list[str]:
    """The names `--config` takes for the shipped configs (`chase`, `transfer/shelter`)."""
    names = [p.relative_to(CONFIG_DIR).with_suffix("") for p in CONFIG_DIR.rglob("*.yaml")]
    return sorted(n.as_posix() for n in names)


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    if not path.is_file():
        shipped = ", ".join(shipped_configs())
        what = "is a folder, not a YAML file" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {path} {what} (shipped configs: {shipped})")
    data = read_yaml(path, ConfigError) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: base={base!r} must name a YAML file (e.g. base: quadrant.yaml)")
    base_path = (path.parent / base).resolve()
    if not base_path.is_file() and Path(base).parent == Path("."):
        base_path = find_config(base).resolve()  # a shipped config
    if base_path in seen:
        raise ConfigError(f"{path}: base {base!r} includes itself")
    if not base_path.is_file():  # said with the file that names it
        raise ConfigError(
            f"{path}: base {base!r}: no such file beside it or among the shipped "
            f"configs ({', '.join(shipped_configs())})"
        )
    return _merge(_read_yaml(base_path, (*seen, path.resolve())), data)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# Keys that settings of earlier versions had: (section, key) -> (the value every saved config of
# those versions holds unless a user changed it, the setting whose value makes it harmless too
# (or None), what replaces it). Checkpoints keep their run's whole config, so such a config
# still loads.
_RETIRED_KEYS: dict[tuple[str, str], tuple[Any, tuple[str, ...] | None, str]] = {
    ("pipeline", "warp_device"): ("auto", None, RETIRED_WARP_ACTORS),
    ("pipeline", "warp_stagger"): (False, None, RETIRED_WARP_ACTORS),
    **{
        ("pod", name): (
            2,
            ("agent", "ppo", name),
            f"a pod trains with agent.ppo's passes: set agent.ppo.{name} instead",
        )
        for name in ("epochs", "minibatches")
    },
}


def _without_retired(data: Any, source: str) -> Any:
    """`data` without the retired keys that change nothing (their old default, or the value of
    the setting that replaced them); ConfigError for one that would."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for (section, key), (default, same_as, instead) in _RETIRED_KEYS.items():
        node = out.get(section)
        if not isinstance(node, dict) or key not in node:
            continue
        value = node[key]
        if value != default and (same_as is None or value != _lookup(data, same_as)):
            raise ConfigError(f"{source}: {section}.{key}={value!r} is retired: {instead}")
        out[section] = {k: v for k, v in node.items() if k != key}
    return out


def _lookup(data: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _build(data: Any, source: str) -> RunConfig:
    """The shared loader (`typed_config`), its errors prefixed with where the data came from."""
    data = _without_retired(data, source)
    try:
        return typed_config.from_dict(RunConfig, data)
    except typed_config.FieldError as err:
        raise ConfigError(f"{source}: {err}") from None
