"""Content-addressed disk cache of LM answers.

The key is the SHA-256 of everything that determines an answer: model, api_base, messages,
sampling parameters and the sample index (so that the K proposals of one parent are K different
entries). API keys are never part of the key or the value.

Storage: a plain ``diskcache_community.Cache`` (not ``FanoutCache``, which dropped writes under
contention when tried on this machine) with ``JSONDisk``: values are JSON, so opening a cache directory never
unpickles anything (CVE-2025-69872). The directory is created with mode 0700.

What this cache does NOT guarantee:
- Freshness: an entry never expires; a provider that changes its model behind the same name keeps
  answering from the cache until ``clear()``.
- Exactly-once calls: two threads or processes that miss at the same moment both call the LM and
  both store (the last write wins; both answers are valid, only one is remembered).
- Durability: a crash during a write may lose that entry (never corrupt another one); a missing
  entry only costs a new call. Entries are written by a thread of their own, after the answer
  went back to its caller (``put`` returns at once; ``get`` in the same process sees the entry at
  once); the process writes what is left at exit (``atexit``), unless it leaves by ``os._exit``.
- Determinism of providers: a hit replays one earlier answer; it does not make the LM deterministic.
- Confidentiality of prompts: messages and answers are stored in clear text on local disk, guarded
  only by the directory's permissions.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import threading
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from diskcache_community import Cache, JSONDisk

# Stored entries carry this version; bump it when the value layout changes so old entries miss.
_FORMAT = 1


def cache_key(
    *,
    model: str,
    api_base: str | None,
    messages: list[dict],
    params: dict[str, Any],
    sample_index: int,
) -> str:
    """SHA-256 hex digest of the canonical JSON of the request (keys sorted, no whitespace)."""
    doc = {
        "v": _FORMAT,
        "model": model,
        "api_base": api_base or "",
        "messages": messages,
        "params": params,
        "sample_index": sample_index,
    }
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class LMCache:
    """Thread- and process-safe get/put of JSON dicts by request key.

    ``get`` returns ``None`` on a miss, and also when the cache cannot be read (an unreadable
    cache degrades to "no cache", it never fails the LM call). ``put`` silently skips values that
    are not JSON-serialisable dicts and errors of the underlying store, for the same reason.
    """

    def __init__(self, directory: Path, size_limit_bytes: int = 2**30) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        # mkdir's mode is masked by the umask and ignored for an existing directory: enforce it.
        os.chmod(self.directory, 0o700)
        self._cache = Cache(str(self.directory), disk=JSONDisk, size_limit=size_limit_bytes)
        # Writing an entry took 10 ms and more when the answers of a wide step arrived together
        # (the store's SQLite writers sleep when they meet), between each answer and its child's
        # minibatch test: entries are written by a thread of their own, in the order put. That
        # thread ends when nothing is left to write, and closes its connection to the store: a
        # thread that waited for more kept this cache, its connection and its file descriptors
        # alive for good (7 a cache: a test process ran out of them).
        self._pending: dict[str, dict] = {}
        self._queued: deque[str] = deque()
        self._lock = threading.Lock()
        self._written = threading.Condition(self._lock)
        self._writing = False
        # The store opens an SQLite connection for every thread that reads it: a wide step's
        # reflections, each in a thread of its own, spent 8 ms each on that before their requests
        # were sent. One reader thread keeps its connection, opened now, before the first call;
        # it ends with the cache (``close``, or when the cache is collected: the executor's thread
        # holds it only weakly).
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lm-cache-reader")
        self._reader.submit(self._read, "")

    def get(self, key: str) -> dict | None:
        with self._lock:
            pending = self._pending.get(key)
        if pending is not None:
            return pending
        return self._reader.submit(self._read, key).result()

    def _read(self, key: str) -> dict | None:
        try:
            value = self._cache.get(key)
        except Exception:  # corrupt entry or locked database: behave as a miss
            return None
        return value if isinstance(value, dict) and value.get("v") == _FORMAT else None

    def put(self, key: str, value: dict) -> None:
        try:
            entry = json.loads(json.dumps({**value, "v": _FORMAT}))  # what the store keeps, and keeps JSON
        except (TypeError, ValueError):
            return
        with self._lock:
            self._pending[key] = entry
            self._queued.append(key)
            start, self._writing = not self._writing, True
        if start:
            _UNWRITTEN.add(self)
            threading.Thread(target=self._write_queued, daemon=True, name="lm-cache-writer").start()

    def _write_queued(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._queued:
                        self._writing = False
                        self._written.notify_all()
                        return
                    key = self._queued.popleft()
                    entry = self._pending.get(key)
                try:
                    if entry is not None:
                        self._cache.set(key, entry)
                except Exception:  # a cache that cannot store must not fail a paid-for answer
                    pass
                finally:
                    with self._lock:  # a key put twice is queued twice: its first write took it
                        if entry is not None and self._pending.get(key) is entry:
                            del self._pending[key]
        finally:
            self._cache.close()  # this thread's connection (the store keeps one per thread)

    def flush(self) -> None:
        """Wait until every entry put is written."""
        with self._lock:
            self._written.wait_for(lambda: not self._writing)

    def clear(self) -> int:
        """Remove every entry; returns how many were removed."""
        self.flush()
        return self._cache.clear()

    def __len__(self) -> int:
        self.flush()
        return len(self._cache)

    def close(self) -> None:
        self.flush()
        self._reader.submit(self._cache.close).result()  # the reader thread's connection
        self._reader.shutdown()
        self._cache.close()


# Caches with entries put in this process: what is left unwritten is written at exit (weakly
# held, so that a cache no longer used is collected with its connections).
_UNWRITTEN: "weakref.WeakSet[LMCache]" = weakref.WeakSet()


@atexit.register
def flush_unwritten() -> None:
    """Write what every cache of this process still holds unwritten: at exit, and by
    ``engine.__main__`` before it leaves with ``os._exit`` (which runs no exit hooks)."""
    for cache in list(_UNWRITTEN):
        cache.flush()
