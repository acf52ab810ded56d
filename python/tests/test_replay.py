"""dpbandits.replay: the same numbers as `dpbandits replay` (docs/offline.md), on the Open
Bandit Dataset sample's uniform-random log (fetched by scripts/fetch-obd) and a CSV log."""

import json
import os
import subprocess

import pytest

import dpbandits


@pytest.fixture(scope="session")
def obd(root):
    """The OBD sample's folder: $DPBANDITS_OBD (scripts/test sets it), else scripts/fetch-obd.
    Skipped (loudly) only when the fetch fails and DPBANDITS_OFFLINE=1."""
    d = os.environ.get("DPBANDITS_OBD")
    if d:
        return d
    p = subprocess.run([str(root / "scripts" / "fetch-obd")], capture_output=True, text=True)
    if p.returncode == 0:
        return p.stdout.strip()
    if os.environ.get("DPBANDITS_OFFLINE") == "1":
        pytest.skip(f"!!! OBD sample unavailable (DPBANDITS_OFFLINE=1): {p.stderr}")
    raise RuntimeError(f"scripts/fetch-obd failed (DPBANDITS_OFFLINE=1 skips): {p.stderr}")


def cli_report(cli, tmp_path, args):
    out = tmp_path / "r.json"
    subprocess.run([str(cli), "replay", *args, "--json", str(out)], check=True, capture_output=True)
    return json.loads(out.read_text())


def same(df, report):
    est = report["estimates"]
    assert list(df["estimator"]) == [e["estimator"] for e in est]
    for col in ("value", "lo", "hi", "events"):
        assert list(df[col]) == [e[col] for e in est], col
    for k in ("events", "accepted", "matched", "rejection", "p_min", "policy", "actions"):
        assert df.attrs[k] == report[k], k


@pytest.mark.parametrize(
    "kind,params,cli_params",
    [("ucb1", {}, []), ("adac_ucb", {"rho": 1.0}, ["--param", "rho=1.0"])],
)
def test_replay_obd_matches_cli(cli, tmp_path, obd, kind, params, cli_params):
    men = os.path.join(obd, "random", "men")
    df = dpbandits.replay(men, format="obd", kind=kind, params=params, seed=3)
    report = cli_report(
        cli, tmp_path, ["--log", men, "--format", "obd", "--kind", kind, *cli_params, "--seed", "3"]
    )
    same(df, report)
    assert df.attrs["events"] == 10000 and df.attrs["actions"] == 34


def test_replay_csv_target_and_errors(cli, tmp_path):
    log = tmp_path / "log.csv"
    rows = ["action,reward,propensity,x0"] + [
        f"{i % 3},{int(i % 4 == 0)},{1 / 3},{(i % 5) / 5}" for i in range(900)
    ]
    log.write_text("\n".join(rows) + "\n")
    df = dpbandits.replay(log, target=[0.2, 0.3, 0.5])
    same(df, cli_report(cli, tmp_path, ["--log", str(log), "--target", "0.2,0.3,0.5"]))
    # A contextual kind on the features (dimension 3 actions x 1 feature).
    ctx = dpbandits.replay(log, kind="oful")
    same(ctx, cli_report(cli, tmp_path, ["--log", str(log), "--kind", "oful"]))
    with pytest.raises(ValueError, match="propensity"):
        bad = tmp_path / "bad.csv"
        bad.write_text("action,reward,propensity\n0,1,2\n")
        dpbandits.replay(bad, kind="ucb1")
    with pytest.raises(ValueError, match="format"):
        dpbandits.replay(log, format="parquet", kind="ucb1")
