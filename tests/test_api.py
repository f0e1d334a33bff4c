"""The Python API (``import autotaccl``): the names it offers, cheap to import, and library errors that name
their parameters, which the CLI shows as the flags that set them."""
from __future__ import annotations

import subprocess
import sys

import pytest

import autotaccl
from autotaccl.cli import main
from autotaccl.errors import ParameterError

# what issue 13 asks ``import autotaccl`` to give
API = ("synthesize", "SynthOptions", "simulate", "bounds", "baseline", "verify", "lower", "load_hardware",
       "build_topology", "load_sketch", "load_space", "tune", "TuneRequest", "export")


def test_import_autotaccl_loads_neither_optuna_nor_mlflow():
    """MPI ranks import autotaccl.model: they must not pay for the tuning stack."""
    code = ("import sys, autotaccl, autotaccl.model.algorithm, autotaccl.model.topology; "
            "print(sorted(m for m in ('optuna', 'mlflow', 'pandas', 'highspy', 'scipy', 'matplotlib') "
            "if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_every_public_name_resolves():
    assert set(API) <= set(autotaccl.__all__) <= set(dir(autotaccl))
    for name in autotaccl.__all__:
        assert getattr(autotaccl, name) is not None, name
    with pytest.raises(AttributeError):
        autotaccl.no_such_name


def test_functions_named_like_their_modules_stay_functions():
    import autotaccl.bounds  # noqa: F401  (what synthesis and the tuning layer import)
    import autotaccl.simulate  # noqa: F401

    assert autotaccl.simulate is sys.modules["autotaccl.simulate"].simulate
    assert autotaccl.bounds is sys.modules["autotaccl.bounds"].bounds


def _cli_error(argv, capsys) -> str:
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def _topo_2000():
    return autotaccl.build_topology(autotaccl.load_hardware("ndv2"), 2000)


def _channels():
    graph = autotaccl.build_topology(autotaccl.load_hardware("ring"))
    return autotaccl.baseline(graph, "allgather", "ring", channels=65)


CASES = [   # (library call, its parameter, the same mistake on the command line, the flag it names)
    (lambda tmp: autotaccl.TuneRequest(space="demo", trials=0), "TuneRequest.trials",
     ["tune", "--space", "demo", "--trials", "0", "--out", "{tmp}/run"], "--trials"),
    (lambda tmp: autotaccl.TuneRequest(space="demo", heartbeat=0.5), "TuneRequest.heartbeat",
     ["tune", "--space", "demo", "--heartbeat", "0.5", "--out", "{tmp}/run"], "--heartbeat"),
    (lambda tmp: autotaccl.tune(autotaccl.TuneRequest(space="demo", out=str(tmp / "run")), ["alltoall"]),
     "collectives", ["tune", "--space", "demo", "--collective", "alltoall", "--out", "{tmp}/run"], "--collective"),
    (lambda tmp: autotaccl.SynthOptions(time_limit=-1.0), "SynthOptions.time_limit",
     ["synth", "--hardware", "ring", "--collective", "allgather", "--time-limit=-1"], "--time-limit"),
    (lambda tmp: _topo_2000(), "nodes", ["topo", "show", "--hardware", "ndv2", "--nodes", "2000"], "--nodes"),
    (lambda tmp: _channels(), "channels",
     ["baseline", "--hardware", "ring", "--collective", "allgather", "--algorithm", "ring", "--channels", "65",
      "-o", "{tmp}/a.json"], "--channels"),
]


@pytest.mark.parametrize("call, parameter, argv, flag", CASES, ids=[c[1] for c in CASES])
def test_library_errors_name_parameters_and_the_cli_names_its_flags(call, parameter, argv, flag, tmp_path, capsys):
    with pytest.raises(ParameterError) as err:
        call(tmp_path)
    assert err.value.parameter == parameter
    line = _cli_error([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert line == f"autotaccl: error: {flag}: {err.value.field}: {err.value.expected}"
    assert not (tmp_path / "run").exists()          # checked before anything was created


def test_every_library_parameter_a_command_passes_on_has_its_flag():
    """The one mapping: argparse's dest -> option, plus the parameters named otherwise than their dest."""
    from autotaccl.cli import build_parser, flags

    parser = build_parser()
    tune = next(a for a in parser._actions if a.dest == "command").choices["tune"]
    names = flags(tune)
    assert {k: names[k] for k in ("trials", "collectives", "synth_time_limit", "out", "heartbeat")} == \
        {"trials": "--trials", "collectives": "--collective", "synth_time_limit": "--synth-time-limit",
         "out": "--out", "heartbeat": "--heartbeat"}
    assert ParameterError("TuneRequest.margin", "20.0", "a fraction").for_flags(names).source == "--margin"
    assert ParameterError("other", "x", "y").for_flags(names).source == "other"      # no flag: its own name
