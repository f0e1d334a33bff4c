"""Sampling a search space: define-by-run through an Optuna trial, or every configuration at once."""
from __future__ import annotations

from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from ... import faults
from .model import Parameter, SearchSpace


def distribution(p: Parameter) -> BaseDistribution:
    """The Optuna distribution ``sample`` suggests ``p`` from."""
    if p.kind == "categorical":
        return CategoricalDistribution(list(p.choices))
    if p.kind == "int":
        return IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
    return FloatDistribution(float(p.low), float(p.high), log=p.log, step=p.step)


def sample(trial, space: SearchSpace) -> dict[str, Any]:
    """Define-by-run: suggest each active parameter in file order; returns fixed knobs + sampled values."""
    values: dict[str, Any] = dict(space.fixed)
    for p in space.parameters:
        if not p.active(values):
            continue
        if p.kind == "categorical":
            values[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        elif p.kind == "int":
            values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
        else:
            values[p.name] = trial.suggest_float(p.name, float(p.low), float(p.high), step=p.step, log=p.log)
        faults.point("trial.sampling")
    return values


def enumerate_space(space: SearchSpace) -> list[dict[str, Any]]:
    """Every configuration of a space without float parameters (conditions respected), fixed knobs excluded."""
    configs: list[dict[str, Any]] = [dict(space.fixed)]
    for p in space.parameters:
        grown = []
        for values in configs:
            if p.active(values):
                grown.extend({**values, p.name: v} for v in p.values())
            else:
                grown.append(values)
        configs = grown
    return [{k: v for k, v in c.items() if k not in space.fixed} for c in configs]
