"""autotaccl: search communication sketches, synthesize collective algorithms, measure, track and export them.

The Python API in the order a sweep uses it is in ``docs/python.md``. Names are imported on first use
(PEP 562), so ``import autotaccl`` does not load Optuna or MLflow: an MPI job's ranks import
``autotaccl.model`` only. Bad arguments raise :class:`ParameterError` naming the parameter; bad files
:class:`InputError` naming the file and field."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import InfeasibleError, InputError, ParameterError
# ``simulate`` and ``bounds`` share their modules' names: importing ``autotaccl.simulate`` (as synthesis
# does) sets the package attribute to the module, so these two functions are bound here, not lazily.
from .bounds import bounds
from .simulate import simulate

_LAZY = {
    "model.algorithm": ("Algorithm", "Transfer", "VerificationError", "load_algorithm", "save_algorithm", "verify"),
    "model.collectives": ("Collective", "make_collective"),
    "model.hardware": ("HardwareProfile", "load_hardware"),
    "model.topology": ("build_topology",),
    "sizes": ("parse_size", "parse_size_range"),
    "sketch": ("Sketch", "default_sketch", "load_sketch"),
    "synth": ("Loader", "SynthOptions", "SynthResult", "synthesize"),
    "baselines": ("baseline",),
    "formats.msccl": ("LoweringOptions", "check_xml", "lower"),
    "formats.loading": ("loader",),
    "tuning.space": ("SearchSpace", "load_space", "space_from_dict"),
    "tuning.sweep": ("TuneRequest", "tune"),
    "tuning.export": ("export",),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}

__all__ = sorted(["InfeasibleError", "InputError", "ParameterError", "bounds", "simulate", *_HOME])
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from .baselines import baseline
    from .formats.msccl import LoweringOptions, check_xml, lower
    from .model.algorithm import Algorithm, Transfer, VerificationError, load_algorithm, save_algorithm, verify
    from .model.collectives import Collective, make_collective
    from .model.hardware import HardwareProfile, load_hardware
    from .model.topology import build_topology
    from .sizes import parse_size, parse_size_range
    from .sketch import Sketch, default_sketch, load_sketch
    from .synth import SynthOptions, SynthResult, synthesize
    from .tuning.export import export
    from .tuning.space import SearchSpace, load_space, space_from_dict
    from .tuning.sweep import TuneRequest, tune
