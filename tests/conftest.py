"""Shared fixtures: where the real sample files live, cached topology graphs, small profile files."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from autotaccl.model.hardware import load_hardware, profile_from_dict
from autotaccl.model.topology import build_topology
from support import SHARED, TACCL_TOPO


# A small valid profile: 4 GPUs, one link between every pair, one NIC for all of them.
SMALL_PROFILE = {
    "name": "small",
    "description": "4 GPUs, all pairs linked, one NIC",
    "gpus_per_node": 4,
    "link_classes": {"nvlink": {"alpha_us": 0.7, "bandwidth_GBps": 25.0},
                     "pcie": {"alpha_us": 0.5, "bandwidth_GBps": 16.0},
                     "ib": {"alpha_us": 2.6, "bandwidth_GBps": 12.5}},
    "links": {"class": "nvlink", "pattern": "fully-connected"},
    "nics": [{"class": "ib", "via": "pcie", "gpus": [0, 1, 2, 3]}],
}


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    assert SHARED.is_dir(), f"the shared sample data is missing at {SHARED}"
    return SHARED


@pytest.fixture(scope="session")
def taccl_topo_dir(shared_dir: Path) -> Path:
    return TACCL_TOPO


@pytest.fixture(scope="session")
def topo():
    """``topo("ndv2", 2)``: the topology graph of a shipped profile (or a profile dict), built once per session."""
    cache: dict = {}

    def get(profile, nodes: int = 1):
        key = (profile if isinstance(profile, str) else repr(profile), nodes)
        if key not in cache:
            hw = load_hardware(profile) if isinstance(profile, str) else profile_from_dict(profile, "<test>")
            cache[key] = build_topology(hw, nodes)
        return cache[key]

    return get


@pytest.fixture
def small_profile() -> dict:
    """A fresh, mutable copy of :data:`SMALL_PROFILE`."""
    return copy.deepcopy(SMALL_PROFILE)


@pytest.fixture
def write_yaml(tmp_path: Path):
    """``write_yaml(data, "name.yaml")`` -> the path of a real YAML file holding ``data`` (or raw text)."""
    def write(data, name: str = "profile.yaml") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path

    return write


KINDS = ("mpi", "postgres", "browser")


def pytest_collection_modifyitems(items) -> None:
    """A test that asks for the PostgreSQL fixture is a postgres test; mpi, postgres and browser tests are slow.

    Under pytest-xdist the mpi tests run one at a time (MPICH ranks poll: two 4-rank jobs on two cores
    starve each other into their time-outs), and so do the postgres ones (they share one database, whose
    Optuna schema one of them creates)."""
    for item in items:
        if "postgres" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
        if any(item.get_closest_marker(kind) for kind in KINDS):
            item.add_marker(pytest.mark.slow)
        group = next((kind for kind in ("mpi", "postgres") if item.get_closest_marker(kind)), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
