"""A sampler that hands its sampling to another one (``inner``)."""
from __future__ import annotations

from optuna.samplers import BaseSampler


class WrappedSampler(BaseSampler):
    """Delegates the random streams to ``self._inner``, which a subclass sets: ``cluster.internals.reseed``
    restarts a sampler's streams through ``_rng`` and ``_random_sampler``, so a wrapper must pass them on."""

    _inner: BaseSampler

    @property
    def inner(self) -> BaseSampler:
        return self._inner

    @property
    def _rng(self):
        return self._inner._rng

    @_rng.setter
    def _rng(self, value) -> None:
        self._inner._rng = value

    @property
    def _random_sampler(self):
        return getattr(self._inner, "_random_sampler", None)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()
