"""The Optuna samplers a sweep can use, by name (cheap to import: the CLI lists the names)."""
from __future__ import annotations

import warnings
from typing import Literal, Sequence, get_args

from ..errors import ParameterError

Sampler = Literal["tpe", "banded", "tpe-mv", "random", "bruteforce"]
SAMPLERS: tuple[Sampler, ...] = get_args(Sampler)


def make_sampler(name: Sampler, seed: int | None, sizes: Sequence[int] = ()):
    """The ``optuna.samplers.BaseSampler`` called ``name`` (``banded`` aims each trial at a band of ``sizes``)."""
    import optuna

    if name == "banded":
        from .banded import BandedSampler

        return BandedSampler(sizes, seed=seed)
    if name == "tpe-mv":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=5,
                                              constant_liar=True)

    if name == "tpe":
        # univariate TPE: on enumerable sketch spaces it reached the optimum in fewer distinct evaluations
        # than Optuna 5's multivariate default and than random sampling (benchmarks/search_efficiency.py);
        # constant_liar stays on so concurrent workers avoid each other's running configurations
        return optuna.samplers.TPESampler(seed=seed, multivariate=False, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "bruteforce":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.BruteForceSampler(seed=seed)
    raise ParameterError("sampler", repr(name), f"one of: {', '.join(SAMPLERS)}")
