"""The LM answer cache's writer thread (storage.lm_cache)."""

from __future__ import annotations

import threading

from storage.lm_cache import LMCache


def test_a_key_put_again_before_it_is_written_is_written_once_without_an_error(tmp_path, monkeypatch):
    # Each put queues its key; when a key is put twice before the writer reaches it, the first
    # write stores the later answer and the second finds nothing pending: it raised KeyError in
    # the writer thread (seen in the CI log), which then never said it was done: flush, and the
    # process's exit with it, waited for good.
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    cache = LMCache(tmp_path / "cache")
    try:
        for i in range(200):
            cache.put("same", {"text": f"answer {i}"})
            cache.put(f"other {i}", {"text": "x"})
        flushing = threading.Thread(target=cache.flush, daemon=True)
        flushing.start()
        flushing.join(timeout=30)
        assert failures == [] and not flushing.is_alive()
        assert cache.get("same")["text"] == "answer 199"
        assert len(cache) == 201
    finally:
        if not failures:
            cache.close()
