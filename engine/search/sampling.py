"""Epoch-shuffled minibatches: every training example gets attention once per epoch."""

from __future__ import annotations

import random


class EpochSampler:
    """Minibatch n is a slice of the shuffled training set of its epoch. Deterministic in
    (seed, n), so a resumed step draws the same minibatch. When the minibatch size does not
    divide the set, the epoch's last minibatch is filled up with the epoch's first examples,
    so every example is in at least one minibatch of every epoch."""

    def __init__(self, keys: list[str], size: int, seed: int) -> None:
        self.keys = list(keys)
        self.size = max(1, min(size, len(self.keys)))
        self.seed = seed
        self.per_epoch = max(1, -(-len(self.keys) // self.size))  # ceil

    def _order(self, epoch: int) -> list[str]:
        order = list(self.keys)
        random.Random(f"{self.seed}:epoch:{epoch}").shuffle(order)
        return order

    def batch(self, n: int) -> list[str]:
        epoch, slot = divmod(n, self.per_epoch)
        order = self._order(epoch)
        order += order[: self.per_epoch * self.size - len(order)]
        return order[slot * self.size:(slot + 1) * self.size]
