"""Watching and judging runs: `python -m hns_train.eval` (cli.py dispatches its commands).

- Replays: `replay.py` (format, saving, loading), `recorder.py` (recording, scripted play),
  `record.py` (the `record` command), `video.py` (mp4/gif/png), `html.py`.
- Matches and ratings: `matches.py`, `policies.py` (policies from a file or a name),
  `ratings.py` (openskill), `play.py` (the `play` command), `runview.py`.
- Progress against the paper: `phases.py` (emergent phases), `baselines.py` + `baselines.yaml`
  (Rapid and SRL), `compare.py`.
"""
