"""Issue 45: nothing silently wrong for a researcher, round two. One test (or more) per numbered
item of the issue, each failing on the code before it: off-policy evaluation that flags a log it
cannot support (1), runs that cannot silently share state (2), saves that say when they do not
reproduce (3), quick looks with Python environments (4), the auditor's inconclusive verdict (5),
rewards outside a kind's range and contextual policies past their horizon (6); then the
friction list. Every statistical check uses fixed seeds (deterministic); the rates are stated
where a check is statistical."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dpbandits
from dpbandits import DpbanditsWarning


# ---------------------------------------------------------------------------------------------
# 1. Off-policy evaluation


def write_log(path, n, logged, recorded, seed, arms_means=(0.2, 0.5, 0.35, 0.6), context=False):
    """A log of a logger uniform over the first `logged` actions, each event recorded with
    propensity `recorded` (the truth is 1/logged), Bernoulli rewards."""
    rng = np.random.default_rng(seed)
    head = "action,reward,propensity" + (",x0" if context else "")
    rows = [head]
    for _ in range(n):
        a = int(rng.integers(logged))
        r = int(rng.random() < arms_means[a])
        rows.append(f"{a},{r},{recorded}" + (f",{rng.random():.6f}" if context else ""))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_ope_flags_propensities_that_are_not_the_loggers(tmp_path):
    # Uniform over 4 actions recorded as 0.5: the mean importance weight is 0.5 (1 expected),
    # the propensities sum to 2; IPS/DR/switch-DR are invalid, SNIPS stays valid.
    log = write_log(tmp_path / "half.csv", 4000, 4, 0.5, seed=1)
    with pytest.warns(DpbanditsWarning, match="mean importance weight"):
        df = dpbandits.replay(log, target=[0.1, 0.2, 0.3, 0.4], arms=4)
    valid = dict(zip(df["estimator"], df["valid"]))
    assert valid == {"replay": True, "ips": False, "snips": True, "dr": False, "dm": True,
                     "switch_dr": False}
    d = df.attrs["diagnostics"]
    assert abs(d["mean_weight"] - 0.5) < 0.03 and d["mean_weight_hi"] < 1.0
    assert d["propensity_sum"] == pytest.approx(2.0) and d["propensities_off"]
    assert 0 < d["ess"] < 4000
    # The correct log: no warning, every estimate valid.
    good = write_log(tmp_path / "good.csv", 4000, 4, 0.25, seed=1)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DpbanditsWarning)
        ok = dpbandits.replay(good, target=[0.1, 0.2, 0.3, 0.4], arms=4)
    assert ok["valid"].all() and ok.attrs["warnings"] == []


def test_ope_refuses_mass_on_never_logged_actions(tmp_path):
    log = write_log(tmp_path / "three.csv", 3000, 3, 1 / 3, seed=2)
    with pytest.warns(DpbanditsWarning, match=r"mass 0.4000 on actions the log never shows \(\[3\]\)"):
        df = dpbandits.replay(log, target=[0.1, 0.2, 0.3, 0.4], arms=4)
    assert not df["valid"].any()
    assert all("never shows" in w for w in df["why_invalid"])
    assert df.attrs["diagnostics"]["never_logged"] == [3]


def test_ope_replays_a_randomised_policy_over_seeds_and_models_the_context(tmp_path):
    log = write_log(tmp_path / "u.csv", 4000, 4, 0.25, seed=3)
    df = dpbandits.replay(log, kind="thompson")
    sp = df.attrs["spread"]
    assert sp["replays"] == 10 and len(sp["values"]) == 10 and sp["sd"] > 0
    assert sp["values"][0] == df["value"][0]
    one = dpbandits.replay(log, kind="thompson", replays=1)
    assert one.attrs["spread"]["replays"] == 1 and list(one["value"]) == list(df["value"])
    with pytest.raises(ValueError, match="replays = 0"):
        dpbandits.replay(log, kind="thompson", replays=0)
    ctx = write_log(tmp_path / "ctx.csv", 600, 4, 0.25, seed=4, context=True)
    c = dpbandits.replay(ctx, target=[0.25] * 4)
    assert "ridge" in c.attrs["reward_model"]
    assert list(c["estimator"]) == ["replay", "ips", "snips", "dr", "dm", "switch_dr"]


def test_python_m_dpbandits_replay(tmp_path):
    log = write_log(tmp_path / "u.csv", 800, 4, 0.25, seed=5)
    out = tmp_path / "r.json"
    p = subprocess.run(
        [sys.executable, "-m", "dpbandits", "replay", "--log", str(log), "--target",
         "0.1,0.2,0.3,0.4", "--json", str(out)],
        capture_output=True, text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "snips" in p.stdout and "effective sample size" in p.stdout
    assert json.loads(out.read_text())["estimates"][0]["estimator"] == "replay"


# ---------------------------------------------------------------------------------------------
# 2. Runs that are not independent

SPEC = {"master_seed": 11, "horizon": 500, "runs": 4,
        "env": {"kind": "bernoulli", "means": [0.7, 0.5, 0.3]}}


class Greedy:
    def __init__(self, arms, rng):
        self.k, self.n, self.s = arms, np.zeros(arms), np.zeros(arms)

    def choose(self):
        return int(np.argmin(self.n)) if self.n.min() == 0 else int(np.argmax(self.s / self.n))

    def observe(self, arm, reward):
        self.n[arm] += 1
        self.s[arm] += reward


def test_a_policy_object_shared_by_runs_is_refused():
    shared = Greedy(3, None)
    with pytest.raises(dpbandits.CellError, match="already returned for an earlier run"):
        dpbandits.run({**SPEC, "policy": [{"policy": lambda arms, rng: shared, "label": "shared"}]})
    res = dpbandits.run({**SPEC, "policy": [{"policy": Greedy, "label": "fresh"}]})
    assert res.errors == {}


def test_identical_environment_streams_are_reported():
    same = lambda seed: dpbandits.Environment("bernoulli", means=[0.7, 0.5, 0.3], master_seed=11)  # noqa: E731
    with pytest.warns(DpbanditsWarning, match="identical environment streams"):
        res = dpbandits.run({**SPEC, "policy": [{"kind": "ucb1"}]}, env=same)
    assert len(res.warnings) == 1 and "runs 0 and 1" in res.warnings[0]
    assert res.manifest["warnings"] == res.warnings
    seeded = lambda seed: dpbandits.Environment("bernoulli", means=[0.7, 0.5, 0.3], seed=seed)  # noqa: E731
    assert dpbandits.run({**SPEC, "policy": [{"kind": "ucb1"}]}, env=seeded).warnings == []


# ---------------------------------------------------------------------------------------------
# 3. save() after a Python environment


class Bern:
    reward_range = (0.0, 1.0)

    def __init__(self, seed, means=(0.7, 0.5, 0.3)):
        self.means = list(means)
        self.rng = np.random.default_rng(seed)

    def pull(self, arm, t):
        return float(self.rng.random() < self.means[arm])


def test_save_marks_a_folder_its_experiment_toml_does_not_reproduce(tmp_path):
    res = dpbandits.run({**SPEC, "policy": [{"kind": "ucb1"}]}, env=Bern)
    assert res.not_reproducing and "Python object" in res.not_reproducing[0]
    res.save(tmp_path / "py")
    text = (tmp_path / "py" / "experiment.toml").read_text()
    assert text.startswith("# NOT REPRODUCING") and "Python object" in text
    manifest = json.loads((tmp_path / "py" / "manifest.json").read_text())
    assert manifest["not_reproducing"] == res.not_reproducing
    assert not (tmp_path / "py" / "run.lock").exists()
    # A registry run reproduces: no marker.
    plain = dpbandits.run({**SPEC, "policy": [{"kind": "ucb1"}]})
    assert plain.not_reproducing == []
    plain.save(tmp_path / "plain")
    assert not (tmp_path / "plain" / "experiment.toml").read_text().startswith("# NOT")
    assert "not_reproducing" not in json.loads((tmp_path / "plain" / "manifest.json").read_text())


# ---------------------------------------------------------------------------------------------
# 4. Quick looks with Python environments


class Swap(Bern):
    """The best arm changes at t = 2500 (or at horizon / 2 when made with a horizon)."""

    calls = 0

    def __init__(self, seed, horizon=None):
        super().__init__(seed, (0.7, 0.3))
        self.change = 2500 if horizon is None else horizon // 2

    def means_at(self, t):
        type(self).calls += 1
        return [0.7, 0.3] if t < self.change else [0.3, 0.7]

    def pull(self, arm, t):
        return float(self.rng.random() < ([0.7, 0.3] if t < self.change else [0.3, 0.7])[arm])


class FixedSwap(Swap):
    def __init__(self, seed):
        super().__init__(seed)


def test_horizon_reaches_factories_and_a_fixed_schedule_is_named():
    spec = {"master_seed": 3, "horizon": 5000, "runs": 2, "policy": [{"kind": "ucb1"}]}
    # A factory that takes the horizon places its change by it: no warning.
    res = dpbandits.run(spec, env=Swap, horizon=1000)
    assert res.warnings == []
    # One that cannot be rescaled is named.
    with pytest.warns(DpbanditsWarning, match="cannot be rescaled"):
        res = dpbandits.run(spec, env=FixedSwap, horizon=1000)
    assert "FixedSwap" in res.warnings[0]
    got = []

    def make(arms, rng, horizon):
        got.append(horizon)
        return Greedy(arms, rng)

    dpbandits.run({**SPEC, "policy": [{"policy": make, "label": "h"}]}, horizon=300)
    assert got == [300] * 4


@pytest.mark.parametrize("kind,params", [("ucb1", {}), ("adac_ucb", {"rho": 1.0})])
def test_means_at_is_asked_at_most_once_per_round(kind, params):
    Swap.calls = 0
    horizon, runs = 3000, 2
    dpbandits.run({"master_seed": 1, "horizon": horizon, "runs": runs,
                   "checkpoints": {"points": 40}, "policy": [{"kind": kind, **params}]}, env=Swap)
    # Per instance: once when it is made (its means at round 0, checked against the first), then
    # at most once per round; the planning instance adds one call.
    assert Swap.calls <= runs * (horizon + 1) + 1, Swap.calls


# ---------------------------------------------------------------------------------------------
# 5. The auditor's inconclusive verdict


class ETC:
    guarantee = {"epsilon": 1.0}
    m = 8

    def __init__(self, arms, rng):
        self.k, self.rng, self.t, self.s, self.best = arms, rng, 0, np.zeros(arms), -1

    def choose(self):
        if self.t < self.m * self.k:
            return self.t % self.k
        if self.best < 0:
            noise = self.rng.laplace(0.0, 1.0 / (self.m * self.guarantee["epsilon"]), self.k)
            self.best = int(np.argmax(self.s / self.m + noise))
        return self.best

    def observe(self, arm, reward):
        if self.t < self.m * self.k:
            self.s[arm] += reward
        self.t += 1


def test_audit_without_power_is_inconclusive(cli, tmp_path):
    # Horizon 16 = the exploration phase of m = 8 on 2 arms: no decision uses a reward.
    with pytest.warns(DpbanditsWarning, match="inconclusive"):
        r = dpbandits.audit(ETC, runs=30, horizon=16)
    assert r["verdict"] == "inconclusive" and "within horizon 16" in r["why_inconclusive"]
    # A design with power still passes (test_research.py: runs=1000, horizon=64).
    out = tmp_path / "a.json"
    p = subprocess.run([str(cli), "audit", "adac_ucb", "--param", "rho=0.5", "--runs", "30",
                        "--threads", "1", "--json", str(out)], capture_output=True, text=True)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "verdict: INCONCLUSIVE" in p.stdout and "raise runs" in p.stdout
    assert json.loads(out.read_text())["verdict"] == "inconclusive"
    q = subprocess.run([sys.executable, "-m", "dpbandits", "audit", "adac_ucb", "--param",
                        "rho=0.5", "--runs", "30"], capture_output=True, text=True)
    assert q.returncode == 4 and "inconclusive:" in q.stdout, q.stdout + q.stderr


# ---------------------------------------------------------------------------------------------
# 6. Rewards outside the kinds' range; contextual policies past their horizon


class Wide:
    """Rewards in [0, 10] and no reward_range declared."""

    def __init__(self, seed):
        self.means = [5.0, 3.5, 2.0]
        self.rng = np.random.default_rng(seed)

    def pull(self, arm, t):
        return float(self.rng.uniform(0, 2 * self.means[arm]))


class WideDeclared(Wide):
    reward_range = (0.0, 10.0)


def test_rewards_outside_the_unit_range_are_reported_once_per_cell():
    with pytest.warns(DpbanditsWarning, match=r"outside \[0, 1\]"):
        res = dpbandits.run({**SPEC, "policy": [{"kind": "ucb1"}, {"kind": "adac_ucb", "rho": 1.0}]},
                            env=Wide)
    assert len(res.warnings) == 2
    assert res.warnings[0].startswith("ucb1: 4 of 4 runs drew rewards outside [0, 1]")
    declared = dpbandits.run({**SPEC, "policy": [{"kind": "ucb1"}]}, env=WideDeclared)
    assert declared.warnings == []


def test_contextual_policy_stops_at_its_horizon():
    p = dpbandits.Policy("oful", dim=2, horizon=3.0, seed=1)
    acts = np.eye(2)
    for _ in range(3):
        i = p.choose(acts)
        p.observe(i, 0.5)
    with pytest.raises(ValueError, match="horizon = 3"):
        p.choose(acts)


# ---------------------------------------------------------------------------------------------
# Friction


def test_friction_one_policy_dict_boundary_list_and_did_you_mean(tmp_path):
    res = dpbandits.run({**SPEC, "policy": {"kind": "ucb1"}})
    assert list(res.summary["kind"].unique()) == ["ucb1"]

    class Claimed(ETC):
        guarantee = {"epsilon": 1.0, "boundary": [0.0, 1.0]}

    r = dpbandits.run({**SPEC, "policy": [{"policy": Claimed, "label": "c"}]})
    assert "claimed by a user policy" in json.dumps(r.manifest)
    with pytest.raises(ValueError, match=r"policy\[0\].label = 'mine': a registry kind takes no label"):
        dpbandits.run({**SPEC, "policy": [{"kind": "ucb1", "label": "mine"}]})
    with pytest.raises(ValueError, match='did you mean "ucb1"'):
        dpbandits.run({**SPEC, "policy": [{"kind": "ucb"}]})
    with pytest.raises(ValueError, match='did you mean "adac_ucb"'):
        dpbandits.audit("adac_uc", params={"rho": 1.0}, runs=20)


def test_friction_save_errors_name_force_true(tmp_path):
    a = dpbandits.run({**SPEC, "policy": [{"kind": "ucb1"}]})
    b = dpbandits.run({**SPEC, "name": "other", "policy": [{"kind": "ucb1"}]})
    a.save(tmp_path / "f")
    with pytest.raises(ValueError) as e:
        b.save(tmp_path / "f")
    assert "force=True" in str(e.value) and "--force" not in str(e.value)
    b.save(tmp_path / "f", force=True)
    assert not (tmp_path / "f" / "run.lock").exists()


def test_friction_service_reward_nan_names_reward():
    from dpbandits.service import Client

    exp = Client("http://127.0.0.1:1", retries=0, timeout=1).experiment("e")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"reward = (nan|inf): expected a finite number"):
            exp.reward(1, bad)
