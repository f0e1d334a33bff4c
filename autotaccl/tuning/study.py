"""A sweep's Optuna study: opened only if it is the study this run made, from the space given now.

* **The space it was made from.** A study records the space (``autotaccl.space``: target, topology
  fingerprint, collective, sizes, parameters, fixed knobs). A run with another space is refused with
  one line naming what changed; ``extend`` accepts a space that only grows (more categorical choices,
  wider int/float ranges, more sizes) and rebuilds the study for it, trials kept.
* **Nothing lost silently.** A journal that lost what this run directory knows it held (the study, or
  its setup) is refused, never started again (``sweeps/<study>.json`` is the run directory's record).
* **Idempotent setup.** Everything the driver does once (uid, space record, seeds) is checked on every
  start and finished if an interruption cut it short; the study says ``autotaccl.seeded`` once its seeds
  are all queued.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any

import networkx as nx
import optuna
from optuna.trial import FrozenTrial, TrialState

from .. import faults
from ..cluster.heartbeat import open_storage
from ..errors import InputError
from ..model.topology import fingerprint
from .objective import SweepConfig
from .space import SearchSpace, distribution, parameter_to_dict, sketch_to_params

log = logging.getLogger(__name__)

SPACE = "autotaccl.space"          # study user attr: what the study was made from
UID = "autotaccl.uid"              # study user attr: tells a study from another of the same name (tag on MLflow runs)
SEEDED = "autotaccl.seeded"        # study user attr: every seed is queued
PARENT = "mlflow_parent_run_id"    # study user attr: the sweep's MLflow parent run
BACKUP = ".before-extend"          # the study's copy while --extend rebuilds it


def space_record(space: SearchSpace, collective: str, graph: nx.DiGraph) -> dict[str, Any]:
    """What a study's trials mean: the part of the space a change of which makes old trials another sweep's."""
    return {"target": {"hardware": space.profile.name, "nodes": space.nodes, "topology": fingerprint(graph)},
            "collective": collective, "sizes": list(space.sizes),
            "parameters": {p.name: parameter_to_dict(p) for p in space.parameters}, "fixed": dict(space.fixed)}


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(field, old -> new, whether ``--extend`` may take it) for every difference, in file order."""
    out = []
    for key in ("hardware", "nodes", "topology"):
        if old["target"][key] != new["target"][key]:
            out.append((f"target.{key}" if key != "topology" else "target.hardware (its numbers)",
                        f"{old['target'][key]} -> {new['target'][key]}", False))
    if old["collective"] != new["collective"]:
        out.append(("target.collectives", f"{old['collective']} -> {new['collective']}", False))
    if old["sizes"] != new["sizes"]:
        out.append(("sizes", f"{_short(old['sizes'])} -> {_short(new['sizes'])}", set(old["sizes"]) <= set(new["sizes"])))
    for name in dict.fromkeys([*old["parameters"], *new["parameters"]]):
        a, b = old["parameters"].get(name), new["parameters"].get(name)
        if a is None or b is None:
            out.append((f"parameters.{name}", "added" if a is None else "removed", False))
            continue
        for key in dict.fromkeys([*a, *b]):
            if a.get(key) == b.get(key):
                continue
            grows = {"choices": lambda: all(c in b["choices"] for c in a["choices"]),
                     "low": lambda: b["low"] <= a["low"], "high": lambda: b["high"] >= a["high"]}.get(key)
            out.append((f"parameters.{name}.{key}", f"{a.get(key)} -> {b.get(key)}", bool(grows and grows())))
    for name in dict.fromkeys([*old["fixed"], *new["fixed"]]):
        if old["fixed"].get(name) != new["fixed"].get(name):
            out.append((f"fixed.{name}", f"{old['fixed'].get(name)} -> {new['fixed'].get(name)}", False))
    return out


def _short(sizes: list[int]) -> str:
    from ..sizes import format_size

    return "[" + ",".join(map(format_size, sizes)) + "]"


def open_study(storage: str, name: str, space: SearchSpace, collective: str, graph: nx.DiGraph, sampler,
               heartbeat: float, extend: bool = False, known: SweepConfig | None = None) -> optuna.Study:
    """The study ``name`` in ``storage``, created if new, checked against ``space`` and this run directory's
    record of it (``known``: the config its last sweep saved). Call under the storage's prepare lock."""
    backend = open_storage(storage, heartbeat)
    names = _names(backend)
    record = space_record(space, collective, graph)
    if name + BACKUP in names:              # an --extend was cut short: finish it (or undo it: the old space)
        _check(space, name, _study(backend, name + BACKUP, sampler).user_attrs.get(SPACE, record), record, extend)
        _rebuild(backend, name, record, space, sampler)
        names.add(name)
    if name not in names:
        if known is not None and known.storage == storage:
            raise InputError(_where(storage), f"study {name}", f"the study this run directory's sweep was made in "
                             f"(sweeps/{name}.json); it is gone: the journal was truncated, replaced or deleted. "
                             f"Restore it, or start afresh with a new --study or --out")
        study = optuna.create_study(study_name=name, storage=backend, direction="minimize", sampler=sampler)
        study.set_user_attr(SPACE, record)
        study.set_user_attr(UID, uuid.uuid4().hex)
        faults.point("setup.study")
    study = _study(backend, name, sampler)
    attrs = study.user_attrs
    if known is not None and known.storage == storage and attrs.get(PARENT) != known.parent_run_id:
        raise InputError(_where(storage), f"study {name}", f"the setup this run directory's sweep recorded (parent "
                         f"run {known.parent_run_id}); the journal lost it (truncated or replaced). Restore it, "
                         f"or start afresh with a new --study or --out")
    if SPACE not in attrs:                  # created, then interrupted before anything else
        study.set_user_attr(SPACE, record)
    elif attrs[SPACE] != record:
        _check(space, name, attrs[SPACE], record, extend)
        if all(field == "sizes" for field, _, _ in changes(attrs[SPACE], record)):
            study.set_user_attr(SPACE, record)     # trials keep their results at the sizes they were run at
        else:
            _rebuild(backend, name, record, space, sampler)
            study = _study(backend, name, sampler)
    if UID not in study.user_attrs:
        study.set_user_attr(UID, uuid.uuid4().hex)
    return study


def _names(backend) -> set[str]:
    return {s.study_name for s in optuna.get_all_study_summaries(backend, include_best_trial=False)}


def _study(backend, name: str, sampler) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=backend, sampler=sampler)


def _where(storage: str) -> str:
    return storage.split("@")[-1] if "://" in storage else storage     # no password in the message


def _check(space: SearchSpace, name: str, old: dict, new: dict, extend: bool) -> None:
    """Refuse a space the study was not made from (unless ``extend`` and it only grows): one line, exit 2."""
    found = changes(old, new)
    blocking = [c for c in found if not (extend and c[2])]
    if not blocking:
        return
    field, what, growable = blocking[0]
    hint = ("or add it to this study with --extend" if growable else
            "--extend only takes added choices, wider ranges and added sizes")
    raise InputError(space.source, field, f"what study {name} was made from ({what}): start a new study (--study "
                                          f"NAME), {hint}")


def seed(study: optuna.Study, space: SearchSpace, graph: nx.DiGraph, collective: str) -> None:
    """Queue the default sketch and the space's seeds (each once, whatever ran before)."""
    if study.user_attrs.get(SEEDED):
        return
    from ..sketch import default_sketch

    seeds = [dict(s) for s in space.seeds]
    default = sketch_to_params(space, default_sketch(graph, collective))
    if default:
        seeds.insert(0, default)
    for params in seeds:
        study.enqueue_trial(params, skip_if_exists=True)
        faults.point("setup.seed")
    study.set_user_attr(SEEDED, True)


def _rebuild(backend, name: str, record: dict, space: SearchSpace, sampler) -> None:
    """Make study ``name`` over for a grown space, trials and attributes kept (Optuna cannot change a
    categorical's choices in place): copy it to ``name.before-extend``, delete it, create it again with the
    new distributions, delete the copy. The copy is complete before the original goes, so a rerun
    finishes a rebuild cut short at any point."""
    backup = name + BACKUP
    if backup not in _names(backend):
        running = [t.number for t in _study(backend, name, sampler).get_trials(deepcopy=False,
                                                                              states=(TrialState.RUNNING,))]
        if running:
            raise InputError(space.source, "parameters", f"a study no worker is running trials of, to extend it "
                             f"(trials {running} are running: stop every worker first)")
        optuna.copy_study(from_study_name=name, from_storage=backend, to_storage=backend, to_study_name=backup)
    if name in _names(backend):
        optuna.delete_study(study_name=name, storage=backend)
    old = _study(backend, backup, sampler)
    new = optuna.create_study(study_name=name, storage=backend, direction="minimize", sampler=sampler)
    for key, value in old.user_attrs.items():
        new.set_user_attr(key, value)
    new.set_user_attr(SPACE, record)
    new.set_user_attr(SEEDED, False)        # seeds of added choices get queued
    dists = {p.name: distribution(p) for p in space.parameters}
    new.add_trials([_regrown(t, dists) for t in old.get_trials(deepcopy=False)])
    optuna.delete_study(study_name=backup, storage=backend)
    log.warning("study %s rebuilt for the extended space (%d trials kept)", name, len(new.trials))


def _regrown(trial: FrozenTrial, dists: dict) -> FrozenTrial:
    """``trial`` with the grown space's distributions (its values lie in them)."""
    return FrozenTrial(number=trial.number, state=trial.state, value=None, values=trial.values,
                       datetime_start=trial.datetime_start, datetime_complete=trial.datetime_complete,
                       params=trial.params, distributions={k: dists.get(k, d) for k, d in trial.distributions.items()},
                       user_attrs=trial.user_attrs, system_attrs=trial.system_attrs,
                       intermediate_values=trial.intermediate_values, trial_id=0)
