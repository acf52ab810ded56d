"""Shared fixtures of the Python tests (run by scripts/test; see docs/python.md)."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli_path() -> pathlib.Path:
    """The CLI binary `cargo test --workspace` built (scripts/test runs it first), or
    $DPBANDITS_CLI."""
    p = os.environ.get("DPBANDITS_CLI")
    if p:
        return pathlib.Path(p)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "dpbandits"


@pytest.fixture(scope="session")
def cli():
    p = cli_path()
    if not p.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "dpbandits-cli"], cwd=ROOT, check=True)
    assert p.exists(), f"{p}: the dpbandits CLI binary (cargo build -p dpbandits-cli)"
    return p


@pytest.fixture(scope="session")
def root():
    return ROOT


# A small finite-armed experiment (two cells, a sweep axis, a contextual-free setting) used by the
# executor tests: cheap, several jobs, results that differ by job.
SMALL = {
    "name": "py_small",
    "master_seed": 7,
    "horizon": 2000,
    "runs": 6,
    "checkpoints": {"points": 12},
    "env": {"kind": "bernoulli", "means": [0.7, 0.5, 0.3]},
    "policy": [
        {"kind": "ucb1"},
        {"kind": "adac_ucb", "rho": [0.5, 2.0]},
    ],
}


@pytest.fixture
def small_spec():
    import copy

    return copy.deepcopy(SMALL)
