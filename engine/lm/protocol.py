"""What the engine needs of an LM client (``LM``), without importing one: ``engine.lm.client.LMClient``
is the implementation; tests and the Python API may hand the run context another of the same shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:
    from engine.config import LMConfig
    from engine.lm.client import AttemptJournal, LMResult


class LM(Protocol):
    def complete(self, cfg: "LMConfig", messages: list[dict], *, sample_index: int = 0,
                 temperature: Optional[float] = None, max_tokens: Optional[int] = None,
                 stop: Optional[list[str]] = None, use_cache: bool = True,
                 journal: Optional["AttemptJournal"] = None, cancel=None) -> "LMResult":
        """One chat completion: never raises for an LM failure (``LMResult.error`` says it)."""
        ...
