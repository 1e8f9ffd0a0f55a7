"""Loading datasets: JSONL, JSON (a list) or CSV, with errors naming file and line."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any


class DatasetError(ValueError):
    pass


def parse_dataset(text: str, fmt: str, name: str = "dataset") -> list[Any]:
    """Parse dataset text in format ``jsonl`` | ``json`` | ``csv``; raise DatasetError with the line."""
    fmt = fmt.lower().lstrip(".")
    rows: list[Any] = []
    if fmt == "jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{name}, line {n}: not valid JSON ({exc.msg})") from None
    elif fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{name}, line {exc.lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, list):
            raise DatasetError(f"{name}: a JSON dataset must be a list of examples, got {type(data).__name__}")
        rows = data
    elif fmt == "csv":
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames:
            raise DatasetError(f"{name}: the CSV has no header row")
        for row in reader:
            if None in row:
                raise DatasetError(f"{name}, line {reader.line_num}: more fields than the header has")
            rows.append(dict(row))
    else:
        raise DatasetError(f"{name}: unknown format {fmt!r}; use .jsonl, .json or .csv")
    if not rows:
        raise DatasetError(f"{name}: the dataset is empty")
    return rows


def read_text_file(path: Path) -> str:
    """A user's file as text: UTF-8, with or without the byte-order mark that spreadsheet
    programs and Windows editors write. OSError when unreadable; ValueError when not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at position {exc.start}); "
                         "save the file as UTF-8") from None


def load_dataset(path: Path) -> list[Any]:
    try:
        text = read_text_file(path)
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise DatasetError(str(exc)) from None
    return parse_dataset(text, path.suffix, name=str(path))


def example_key(row: Any, split: str, index: int) -> str:
    """A stable id: the row's own ``id`` field when it has one, else split-index."""
    if isinstance(row, dict) and isinstance(row.get("id"), (str, int)) and str(row["id"]).strip():
        return str(row["id"])
    return f"{split}-{index}"
