"""Experiments from Python: the same numbers as the CLI, DataFrames, saving, progress."""

import filecmp
import subprocess

import numpy as np
import pandas as pd
import pytest

import dpbandits

RUNS, HORIZON = 3, 20_000


@pytest.fixture(scope="module")
def fig4a(root):
    return dpbandits.run(root / "experiments" / "fig4a.toml", runs=RUNS, horizon=HORIZON, threads=2)


def test_fig4a_reduced_equals_the_cli(fig4a, cli, root, tmp_path):
    out = tmp_path / "cli"
    subprocess.run(
        [cli, "run", root / "experiments" / "fig4a.toml", "--runs", str(RUNS), "--horizon",
         str(HORIZON), "--out", out, "--quiet", "--threads", "1"],
        check=True,
        capture_output=True,
    )
    cli_csv = (out / "summary.csv").read_text()
    # Byte for byte: the table is built by one library function.
    assert fig4a.summary_csv == cli_csv
    ours, theirs = fig4a.summary, pd.read_csv(out / "summary.csv")
    pd.testing.assert_frame_equal(ours, theirs)
    # The same folder as the CLI's.
    saved = tmp_path / "py"
    fig4a.save(saved)
    for f in ["summary.csv", "manifest.json", "journal.bin", "regret.svg"]:
        assert filecmp.cmp(saved / f, out / f, shallow=False), f


def test_summary_is_tidy(fig4a):
    s = fig4a.summary
    assert {"label", "kind", "rho", "t", "mean", "q05", "q95", "runs", "status"} <= set(s.columns)
    assert "params" not in s.columns
    assert s["rho"].dtype == np.float64
    # The non-private baseline has no rho: empty (NaN in pandas), not a packed string.
    base = s[s["kind"] == "adaptive_ucb"]
    assert base["rho"].isna().all() and (base["status"] == "ok").all()
    priv = s[(s["kind"] == "adac_ucb") & (s["rho"] == 0.5)]
    assert len(priv) == len(fig4a.columns)  # one row per checkpoint
    assert (s["runs"] == RUNS).all()
    assert np.isfinite(s[["mean", "std", "q05", "q50", "q95"]].to_numpy()).all()


def test_runs_are_arrays_matching_the_summary(fig4a):
    runs = fig4a.runs
    s = fig4a.summary
    assert len(runs) == s["label"].nunique() == 13
    for label, a in runs.items():
        assert a.shape == (RUNS, len(fig4a.columns))
        mean = s[s["label"] == label]["mean"].to_numpy()
        np.testing.assert_allclose(a.mean(axis=0), mean, rtol=1e-12, atol=1e-9)
        assert (np.diff(a, axis=1) >= -1e-9).all()  # cumulative regret grows
    m = fig4a.manifest
    assert m["runs"] == RUNS and m["horizon"] == HORIZON and m["experiment"] == "fig4a"


def test_threads_do_not_change_results(small_spec):
    a = dpbandits.run(small_spec, threads=1)
    b = dpbandits.run(small_spec, threads=2)
    assert a.summary_csv == b.summary_csv
    for k in a.runs:
        assert a.runs[k].tobytes() == b.runs[k].tobytes()


def test_progress_is_reported(small_spec):
    seen = []
    small_spec["runs"] = 20
    dpbandits.run(small_spec, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (60, 60)
    assert all(d <= t for d, t in seen)


def test_bad_specs_raise_value_error_naming_the_field(small_spec):
    with pytest.raises(ValueError, match="runs"):
        dpbandits.run(small_spec, runs=0)
    with pytest.raises(ValueError, match="horizon"):
        dpbandits.run(small_spec, horizon=0)
    small_spec["policy"][1]["rho"] = [-1.0]
    with pytest.raises(ValueError, match="rho"):
        dpbandits.run(small_spec)
    with pytest.raises(ValueError, match="threads"):
        dpbandits.run({**small_spec, "policy": [{"kind": "ucb1"}]}, threads=0)
    with pytest.raises(TypeError, match="spec"):
        dpbandits.run(42)


def test_bai_summary_has_no_unexplained_nan(root):
    spec = {
        "name": "py_bai",
        "master_seed": 3,
        "horizon": 50,  # a tiny cap: every run hits it
        "runs": 4,
        "env": {"kind": "bai_bernoulli", "means": [0.6, 0.5, 0.4], "delta": 0.05},
        "policy": [{"kind": "eb_tci"}, {"kind": "dp_tt", "epsilon": 1.0}],
    }
    res = dpbandits.run(spec)
    s = res.summary
    assert list(s["kind"]) == ["eb_tci", "dp_tt"]
    assert (s["capped"] == 4).all()
    assert s["error_rate"].isna().all()
    assert s["status"].str.contains("every run hit the sample cap").all()
    assert "nan" not in res.summary_csv.lower()
    # The non-private algorithm reports epsilon = inf, with the status saying why.
    assert s["epsilon"].iloc[0] == np.inf and s["epsilon"].iloc[1] == 1.0
    assert "epsilon=inf" in s["status"].iloc[0] and "epsilon" not in s["status"].iloc[1]
