"""The run's LM client, built while the run starts.

Importing litellm takes seconds (17 s was measured on a loaded 2-core machine, once per
process), and a run's first work — the sandbox pool and the seed's evaluation — needs no LM
unless the seed must be written. So ``StartingLM`` builds the ``LMClient`` in a thread of its
own and every use waits for it: the pool starts meanwhile. A long-lived worker also imports it
ahead of its first run (``engine.worker``), so that no run waits for the import at all.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future


def build_client():
    from engine.lm.client import LMClient

    return LMClient()


class StartingLM:
    """An ``LMClient`` that is still being built: ``complete``, and any other attribute, wait
    for it. A failure to build it (a broken ``REFRACT_LM_PLUGINS``) is raised at the first use,
    where the run records it."""

    def __init__(self) -> None:
        self._client: Future = Future()
        threading.Thread(target=self._build, name="lm-client-start", daemon=True).start()

    def _build(self) -> None:
        try:
            self._client.set_result(build_client())
        except BaseException as exc:  # handed to the first caller
            self._client.set_exception(exc)

    def client(self):
        return self._client.result()

    def complete(self, *args, **kwargs):
        return self.client().complete(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.client(), name)
