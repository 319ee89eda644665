"""Append-only JSON-lines logs (`metrics.jsonl`, `lineage.jsonl`, `population.jsonl`) that
survive damage.

A line can be cut short by a full disk or by a process killed in the middle of a write. Such a
line must cost that one record, never the run: a later resume, view or comparison reads on.

- `append_record(path, record)` writes one whole line with one `write` call; a file that does
  not end in a newline (the last writer was cut off) is ended first, so the half line never
  swallows the next record.
- `read_records(path)` returns the JSON objects in file order and notes on every line it
  skipped; `read_logged(path)` does the same and says once, in the log, how many lines of that
  file it skipped and where the first was.
- `read_new(path, offset)` is for a reader that follows a file another process appends to: the
  records of the whole lines after byte `offset`, and where the next call starts.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def json_number(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy and torch scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def append_record(path: str | os.PathLike, record: Mapping[str, Any]) -> None:
    """Append `record` as one line; a file left without its final newline is ended first."""
    line = (json.dumps(dict(record), default=json_number) + "\n").encode()
    # 0666 less the umask, as open() and atomic_file give a new file
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        while written < len(line):  # a short write (a signal, a nearly full disk): the rest
            written += os.write(fd, line[written:])
    finally:
        os.close(fd)


def read_records(path: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON objects of a JSONL file in order, and one note per line that was skipped: a
    line cut short (a writer killed mid-line, a full disk) or anything else that is not a JSON
    object. A missing or unreadable file gives no records and a note saying so."""
    path = Path(path)
    if not path.is_file():
        return [], [f"{path.name}: missing"]
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return [], [f"{path.name}: unreadable ({e.strerror or e})"]
    return _parse(lines, path.name)


def read_new(path: str | Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The records of the whole lines from byte `offset` on, and the offset after the last of
    them, where the next call starts: a line still being written is read by that call. A
    damaged line is skipped; a missing file has nothing new."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records, _ = _parse(data[:end].decode(errors="replace").splitlines(), Path(path).name)
    return records, offset + end


def _parse(lines: list[str], name: str) -> tuple[list[dict[str, Any]], list[str]]:
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):
                notes.append(f"{name}: last line (line {n}) cut short; skipped")
                continue
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            notes.append(f"{name}:{n} is not a JSON object; skipped")
    return records, notes


def read_logged(path: str | Path) -> list[dict[str, Any]]:
    """`read_records` for a reader that goes on (a resume, a comparison): the skipped lines are
    counted and said once, as one warning naming the file."""
    if not Path(path).is_file():
        return []
    records, notes = read_records(path)
    if notes:
        log.warning(
            "%s: %d damaged line%s skipped (first: %s)",
            path,
            len(notes),
            "" if len(notes) == 1 else "s",
            notes[0],
        )
    return records
