"""Loading datasets: JSONL, JSON (a list) or CSV, with errors naming file and line.

Datasets have limits (``DataLimits``: rows, bytes per row, bytes in all), checked while the
file is read: a file over the total is refused before it is read at all, and JSONL and CSV are
read line by line, so a large file is never held in memory as text and as rows at once.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class Limits:
    """The dataset limits of a run (``[limits]`` in the config: see ``engine.config.DataLimits``)."""

    max_rows: int = 10_000
    max_row_bytes: int = 1_000_000
    max_dataset_bytes: int = 20_000_000


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n:,} bytes"


class _Counter:
    """Checks each row against the limits as it is read."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.name, self.limits, self.rows = name, limits, 0

    def row(self, line_no: int, size: int) -> None:
        self.rows += 1
        lim = self.limits
        if self.rows > lim.max_rows:
            raise DatasetError(f"{self.name}: more than {lim.max_rows:,} rows (limits.max_rows); use a sample of the "
                               "data, or raise the limit in [limits]")
        if size > lim.max_row_bytes:
            raise DatasetError(f"{self.name}, line {line_no}: the row is {_mb(size)}, more than limits.max_row_bytes "
                               f"({_mb(lim.max_row_bytes)}); shorten it, or raise the limit in [limits]")


def _jsonl(lines: Iterator[str], count: _Counter) -> list[Any]:
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        count.row(n, len(line.encode("utf-8", "surrogatepass")))
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{count.name}, line {n}: not valid JSON ({exc.msg})") from None
    return rows


def _json(text: str, count: _Counter) -> list[Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{count.name}, line {exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{count.name}: a JSON dataset must be a list of examples, got {type(data).__name__}")
    for i, row in enumerate(data, 1):
        count.row(i, len(json.dumps(row, ensure_ascii=False).encode()))
    return data


def _csv(stream: IO[str], count: _Counter) -> list[Any]:
    reader = csv.DictReader(stream)
    if not reader.fieldnames:
        raise DatasetError(f"{count.name}: the CSV has no header row")
    rows = []
    for row in reader:
        if None in row:
            raise DatasetError(f"{count.name}, line {reader.line_num}: more fields than the header has")
        count.row(reader.line_num, sum(len(str(v).encode()) for v in row.values()))
        rows.append(dict(row))
    return rows


def _parse(stream: IO[str], fmt: str, name: str, limits: Limits) -> list[Any]:
    fmt = fmt.lower().lstrip(".")
    count = _Counter(name, limits)
    if fmt == "jsonl":
        rows = _jsonl(stream, count)
    elif fmt == "json":
        rows = _json(stream.read(), count)
    elif fmt == "csv":
        rows = _csv(stream, count)
    else:
        raise DatasetError(f"{name}: unknown format {fmt!r}; use .jsonl, .json or .csv")
    if not rows:
        raise DatasetError(f"{name}: the dataset is empty")
    return rows


def parse_dataset(text: str, fmt: str, name: str = "dataset", limits: Limits = Limits()) -> list[Any]:
    """Parse dataset text in format ``jsonl`` | ``json`` | ``csv``; raise DatasetError with the line."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_dataset_bytes:
        raise DatasetError(_too_big(name, size, limits))
    return _parse(io.StringIO(text), fmt, name, limits)


def _too_big(name: str, size: int, limits: Limits) -> str:
    return (f"{name} is {_mb(size)}, more than limits.max_dataset_bytes ({_mb(limits.max_dataset_bytes)}); "
            "use a sample of the data, or raise the limit in [limits]")


def read_text_file(path: Path) -> str:
    """A user's file as text: UTF-8, with or without the byte-order mark that spreadsheet
    programs and Windows editors write. OSError when unreadable; ValueError when not UTF-8
    (the message names the file and the byte, never the content)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at position {exc.start}); "
                         "save the file as UTF-8") from None


def load_dataset(path: Path, limits: Limits = Limits()) -> list[Any]:
    """Rows of a dataset file, checked against ``limits`` while it is read."""
    try:
        size = path.stat().st_size
        if size > limits.max_dataset_bytes:
            raise DatasetError(_too_big(str(path), size, limits))
        with path.open(encoding="utf-8-sig", newline="" if path.suffix.lower() == ".csv" else None) as stream:
            return _parse(stream, path.suffix, str(path), limits)
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save the file as UTF-8") from None


def example_key(row: Any, split: str, index: int) -> str:
    """A stable id: the row's own ``id`` field when it has one, else split-index."""
    if isinstance(row, dict) and isinstance(row.get("id"), (str, int)) and str(row["id"]).strip():
        return str(row["id"])
    return f"{split}-{index}"
