"""The Optuna samplers a sweep can use, by name (cheap to import: the CLI lists the names)."""
from __future__ import annotations

import warnings
from typing import Any, Literal, Mapping, Sequence, get_args

from ..errors import ParameterError

Sampler = Literal["lean", "tpe", "banded", "tpe-mv", "random", "bruteforce"]
SAMPLERS: tuple[Sampler, ...] = get_args(Sampler)


def make_sampler(name: Sampler, seed: int | None, sizes: Sequence[int] = (), fixed: Mapping[str, Any] | None = None):
    """The ``optuna.samplers.BaseSampler`` called ``name`` (``banded`` aims each trial at a band of ``sizes``;
    ``lean`` aims each trial at one size, on the knobs the trial's engine reads only, the space's ``fixed``
    knobs telling the engine when it is not sampled). How they compare: ``benchmarks/search_efficiency.py``."""
    import optuna

    if name == "lean":
        from .banded import BandedSampler
        from .lean import LeanSampler

        # each trial aims at one size in turn, after 3 start-up trials (selectable: in the replays of
        # benchmarks/search_efficiency.py it is not ahead of random by trials)
        return LeanSampler(BandedSampler(sizes, count=len(sizes), seed=seed, n_startup_trials=3), fixed)

    if name == "banded":
        from .banded import BandedSampler

        return BandedSampler(sizes, seed=seed)
    if name == "tpe-mv":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=5,
                                              constant_liar=True)

    if name == "tpe":
        # univariate TPE; constant_liar so concurrent workers avoid each other's running
        # configurations
        return optuna.samplers.TPESampler(seed=seed, multivariate=False, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "bruteforce":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.BruteForceSampler(seed=seed)
    raise ParameterError("sampler", repr(name), f"one of: {', '.join(SAMPLERS)}")
