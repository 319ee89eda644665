"""Reading offline wandb runs back in tests, through wandb's own reader (`run_records`)."""

from __future__ import annotations

from pathlib import Path

from hns_train.distributed.wandb_logger import run_records


def offline_runs(run_dir: str | Path) -> list[Path]:
    """The offline-run directories under `run_dir/wandb`, oldest first."""
    return sorted((Path(run_dir) / "wandb").glob("offline-run-*"))


def _nested(flat: dict) -> dict:
    """wandb prints a media value's fields as `key._type`, `key.path`, ...: one dict per key."""
    out: dict = {}
    for key, value in flat.items():
        head, dot, rest = key.partition(".")
        if dot and not head.startswith("_"):
            out.setdefault(head, {})[rest] = value
        else:
            out[key] = value
    return out


def read_offline_run(path: str | Path) -> dict:
    """Contents of an offline run (its directory or its .wandb file): run id, project, config,
    metric definitions, history rows and the final summary."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("run-*.wandb"))
        if not files:
            raise ValueError(f"{path} holds no run-*.wandb file")
        path = files[0]
    out: dict = {"run_id": None, "project": None, "config": {}, "metrics": [], "history": []}
    summary: dict = {}
    for record in run_records(path):
        kind, body = record.get("type"), record.get(record.get("type"), {})
        if kind == "run":
            out["run_id"], out["project"] = body.get("run_id"), body.get("project")
            out["config"].update(body.get("config", {}).get("update", {}))
        elif kind == "config":
            out["config"].update(body.get("update", {}))
        elif kind == "metric":
            name = body.get("name") or body.get("glob_name")
            out["metrics"].append(
                {"name": name, "glob": "glob_name" in body, "step": body.get("step_metric", "")}
            )
        elif kind == "history":
            out["history"].append(_nested(body.get("item", {})))
        elif kind == "summary":
            summary.update(_nested(body.get("update", {})))
    out["config"].pop("_wandb", None)
    out["summary"] = summary
    return out
