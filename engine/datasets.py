"""Loading datasets: JSONL, JSON (a list) or CSV, with errors naming file and line.

Datasets have limits (``DataLimits``: rows, bytes per row, bytes in all), checked while the
file is read: a file over the total is refused before it is read at all, and JSONL and CSV are
read line by line, so a large file is never held in memory as text and as rows at once. A row
nested more than ``MAX_DEPTH`` levels deep is refused (what reads rows later — prompts, pages —
walks them recursively). Only a regular file is opened (``open_regular``): a named pipe would
block the reader for ever, a device never end.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Iterator

MAX_DEPTH = 100  # levels of lists and objects in one row


class DatasetError(ValueError):
    pass


class TooDeep(ValueError):
    """JSON nested deeper than a reader can follow (Python's own parser stops near 1,000 levels)."""


def read_json(text: str) -> Any:
    """``json.loads``, with nesting its parser cannot follow told as ``TooDeep``, not a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep("nested too deeply for a JSON reader (about 1,000 levels of lists and objects)") from None


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """``TooDeep`` when ``value`` nests lists and objects more than ``limit`` levels (walked
    without recursion, so any depth can be told)."""
    todo = [(value, 1)]
    while todo:
        node, depth = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            raise TooDeep(f"nested more than {limit} levels deep; flatten it")
        todo.extend((child, depth + 1) for child in children)


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading, once it is known to be a regular file (OSError when it cannot
    be opened; NotRegularFile, a ValueError, for a folder, a pipe, a device …). The file is opened
    without blocking and then checked, so a named pipe with no writer cannot hang the caller."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((word for test, word in _KINDS if test(mode)), "not a regular file")
            raise NotRegularFile(f"{path}: {kind}, not a regular file; give the path of a file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class NotRegularFile(ValueError):
    """A path that names something other than a regular file."""


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
            row = read_json(line)
            check_depth(row)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{count.name}, line {n}: not valid JSON ({exc.msg})") from None
        except TooDeep as exc:
            raise DatasetError(f"{count.name}, line {n}: the row is {exc}") from None
        rows.append(row)
    return rows


def _json(text: str, count: _Counter) -> list[Any]:
    try:
        data = read_json(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{count.name}, line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except TooDeep as exc:
        raise DatasetError(f"{count.name}: {exc}") from None
    if not isinstance(data, list):
        raise DatasetError(f"{count.name}: a JSON dataset must be a list of examples, got {type(data).__name__}")
    for i, row in enumerate(data, 1):
        try:
            check_depth(row)
        except TooDeep as exc:
            raise DatasetError(f"{count.name}, row {i}: the row is {exc}") from None
        count.row(i, len(json.dumps(row, ensure_ascii=False).encode()))
    return data


def _csv(stream: IO[str], count: _Counter) -> list[Any]:
    # csv's own limit on one field (128 KiB) is raised to the row limit, which is the one that applies
    # (and is told with the line); it only ever grows, since other readers may run in other threads
    csv.field_size_limit(max(csv.field_size_limit(), count.limits.max_row_bytes + 1))
    reader = csv.DictReader(stream)
    rows = []
    try:
        if not reader.fieldnames:
            raise DatasetError(f"{count.name}: the CSV has no header row")
        for row in reader:
            if None in row:
                raise DatasetError(f"{count.name}, line {reader.line_num}: more fields than the header has")
            count.row(reader.line_num, sum(len(str(v).encode()) for v in row.values()))
            rows.append(dict(row))
    except csv.Error as exc:
        line = reader.reader.line_num  # DictReader's own count is only updated after a row was read
        if "field larger than field limit" in str(exc):  # a field longer than any row may be
            raise DatasetError(f"{count.name}, line {line}: a field is longer than limits.max_row_bytes "
                               f"({_mb(count.limits.max_row_bytes)}); shorten it, or raise the limit in [limits]") from None
        raise DatasetError(f"{count.name}, line {line}: not valid CSV ({exc})") from None
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
    (the message names the file and the byte, never the content), and when it is no regular file."""
    with open_regular(path) as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at position {exc.start}); "
                         "save the file as UTF-8") from None


def load_dataset(path: Path, limits: Limits = Limits()) -> list[Any]:
    """Rows of a dataset file, checked against ``limits`` while it is read."""
    try:
        with open_regular(path) as raw:
            size = os.fstat(raw.fileno()).st_size
            if size > limits.max_dataset_bytes:
                raise DatasetError(_too_big(str(path), size, limits))
            newline = "" if path.suffix.lower() == ".csv" else None
            with io.TextIOWrapper(raw, encoding="utf-8-sig", newline=newline) as stream:
                return _parse(stream, path.suffix, str(path), limits)
    except NotRegularFile as exc:
        raise DatasetError(str(exc)) from None
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save the file as UTF-8") from None


def example_key(row: Any, split: str, index: int) -> str:
    """A stable id: the row's own ``id`` field when it has one, else split-index."""
    if isinstance(row, dict) and isinstance(row.get("id"), (str, int)) and str(row["id"]).strip():
        return str(row["id"])
    return f"{split}-{index}"
