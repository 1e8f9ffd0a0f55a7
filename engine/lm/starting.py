"""The run's LM client, built while the run starts.

Importing litellm takes seconds (17 s was measured on a loaded 2-core machine, once per
process), and a run's first work — the sandbox pool and the seed's evaluation — needs no LM
unless the seed must be written. So ``StartingLM`` builds the ``LMClient`` in a thread of its
own and every use waits for it: the pool starts meanwhile. Since litellm is imported at its
first use (``engine.lm.loading``), building the client no longer imports it: a run whose LM
needs litellm also imports it and loads what its first completion loads (``warm_up``) in that
thread, or a cold ``python -m engine run`` started its first reflection ~5 s after the seed's
evaluation. A long-lived worker also imports it ahead of its first run (``engine.worker``), so
that no run waits for the import at all.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

log = logging.getLogger("refract.lm")


def build_client(warm: bool = False):
    """The LM client; with ``warm``, litellm imported and its first-completion loading done too."""
    from engine.lm.client import LMClient, warm_up

    client = LMClient()
    if warm:
        try:
            warm_up()
        except Exception:  # noqa: BLE001 -- only a head start: the first real call loads the same
            log.warning("warming up the LM client failed", exc_info=True)
    return client


class StartingLM:
    """An ``LMClient`` that is still being built: ``complete``, and any other attribute, wait
    for it. A failure to build it (a broken ``REFRACT_LM_PLUGINS``) is raised at the first use,
    where the run records it."""

    def __init__(self, models: tuple[str, ...] = ()) -> None:
        """``models``: the run's LM models; litellm is warmed unless each is a Python callable
        (which never needs it)."""
        from engine.lm.loading import is_callable_model

        self._client: Future = Future()
        self._warm = any(not is_callable_model(m) for m in models if m)
        threading.Thread(target=self._build, name="lm-client-start", daemon=True).start()

    def _build(self) -> None:
        try:
            self._client.set_result(build_client(self._warm))
        except BaseException as exc:  # handed to the first caller
            self._client.set_exception(exc)

    def client(self):
        return self._client.result()

    def complete(self, *args, **kwargs):
        return self.client().complete(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.client(), name)


_warming: list[threading.Thread] = []


def warm_lm_in_background() -> None:
    """``_warm_lm`` in a thread of its own: a head start that nothing waits for. A daemon, so
    that a worker told to stop leaves at once; but a daemon thread still importing when the
    interpreter shuts down is ended inside the import's native code, and the process aborts
    ("FATAL: exception not rethrown", exit -6, seen in 3 of 30 bad-config runs of ``python -m
    engine run`` on a loaded machine): ``python -m engine`` leaves with ``os._exit`` while
    ``warming()`` (``engine.__main__``)."""
    thread = threading.Thread(target=_warm_lm, daemon=True, name="warm-imports")
    _warming.append(thread)
    thread.start()


def warming() -> bool:
    """True while a thread of ``warm_lm_in_background`` still runs."""
    return any(thread.is_alive() for thread in _warming)


def _warm_lm() -> None:
    """The LM client's imports and litellm's first-completion loading (``warm_up``)."""
    try:
        from engine.lm.client import warm_up

        if threading.main_thread().is_alive():  # else the process is exiting: nothing to warm for
            warm_up()
    except Exception:  # noqa: BLE001 -- only a head start: the first real call loads the same
        if threading.main_thread().is_alive():  # litellm cannot start its threads while exiting
            log.warning("warming up the LM client failed", exc_info=True)
