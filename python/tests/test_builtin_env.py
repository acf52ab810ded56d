"""`dpbandits.Environment`: the built-in environments as Python objects, on the CLI's streams.

The checks are exact (no statistics): the rewards a policy sees inside `run()` are compared one
by one with the object's draws, and the regret of a deterministic policy driven by hand on the
object with the regret `run()` reports for the same run.
"""

import numpy as np
import pytest

import dpbandits

T, RUNS = 400, 3


class Recorder:
    """A deterministic user policy (round robin, then the best empirical mean) that records
    every (arm, t, reward) it observes. Instances register themselves with the generator they
    were given, so the test can tell which run each one played."""

    instances: list = []

    def __init__(self, arms, rng):
        self.k = arms
        self.state = rng.bit_generator.state["state"]["state"]
        self.log = []
        self.n, self.s = np.zeros(arms), np.zeros(arms)
        Recorder.instances.append(self)

    def choose(self):
        t = len(self.log)
        if t < 3 * self.k:
            return t % self.k
        return int(np.argmax(self.s / self.n))

    def observe(self, arm, reward):
        self.log.append((arm, len(self.log), reward))
        self.n[arm] += 1
        self.s[arm] += reward


@pytest.mark.parametrize(
    "env",
    [
        {"kind": "bernoulli", "means": [0.7, 0.5, 0.3]},
        {"kind": "gaussian", "means": [0.2, 0.5, 0.1], "sigma": 0.7},
        {"kind": "piecewise_bernoulli", "means": [[0.8, 0.2], [0.2, 0.8]], "breakpoints": [201]},
    ],
    ids=lambda e: e["kind"],
)
def test_rewards_inside_run_are_the_objects_draws(env):
    spec = {
        "master_seed": 77,
        "horizon": T,
        "runs": RUNS,
        "env": env,
        "policy": [{"policy": Recorder, "label": "rec"}],
    }
    Recorder.instances = []
    dpbandits.run(spec, threads=1)
    assert len(Recorder.instances) == RUNS
    states = [dpbandits.policy_generator(77, "rec", r).bit_generator.state["state"]["state"] for r in range(RUNS)]
    seen = set()
    for inst in Recorder.instances:
        run = states.index(inst.state)
        seen.add(run)
        e = dpbandits.Environment.from_spec(spec, run=run)
        assert e.stationary == (env["kind"] != "piecewise_bernoulli")
        drawn = [e.pull(arm, t) for (arm, t, _r) in inst.log]
        assert len(drawn) == T
        assert drawn == [r for (_a, _t, r) in inst.log], f"run {run}: rewards differ from the CLI's stream"
        # Another run's stream differs (the comparison has power).
        other = dpbandits.Environment.from_spec(spec, run=run + RUNS)
        assert [other.pull(arm, t) for (arm, t, _r) in inst.log] != drawn
    assert seen == set(range(RUNS))


def test_the_object_as_a_python_environment_reproduces_the_file():
    """`env=lambda seed: Environment(..., seed=seed)` gives the summary of the file's [env],
    byte for byte, for per-step and episodic kinds (a stationary built-in object is run on its
    static means, as the file's [env] is)."""
    table = {"kind": "bernoulli", "means": [0.6, 0.5, 0.45]}
    spec = {
        "master_seed": 5,
        "horizon": 3000,
        "runs": 4,
        "env": table,
        "policy": [{"kind": "ucb1"}, {"kind": "kl_ucb"}, {"kind": "dp_ts", "epsilon": 1.0}, {"kind": "adac_ucb", "rho": 1.0}],
    }
    native = dpbandits.run(spec)
    params = {k: v for k, v in table.items() if k != "kind"}
    wrapped = dpbandits.run(spec, env=lambda seed: dpbandits.Environment("bernoulli", seed=seed, **params))
    assert wrapped.summary_csv == native.summary_csv
    # The seed matters: a shifted seed gives another summary.
    shifted = dpbandits.run(spec, env=lambda seed: dpbandits.Environment("bernoulli", seed=seed + 1, **params))
    assert shifted.summary_csv != native.summary_csv


def test_contextual_hand_loop_matches_run():
    """OFUL is deterministic given its rewards: driven by hand on the object's action sets and
    rewards, its regret equals the regret `run()` reports for the same run."""
    spec = {
        "master_seed": 3,
        "horizon": 300,
        "runs": 2,
        "env": {"kind": "contextual_gaussian", "d": 3, "k": 5, "variance": 0.1, "noise_sd": 1.0},
        "policy": [{"kind": "oful"}],
        "checkpoints": {"extra": [300]},
    }
    res = dpbandits.run(spec)
    (regret,) = res.runs.values()
    assert regret is not None
    last = res.columns.index(300)
    for run in range(2):
        env = dpbandits.Environment.from_spec(spec, run=run)
        p = dpbandits.Policy("oful", dim=3, horizon=300)
        total = 0.0
        for t in range(300):
            actions = env.next_round(t)
            i = p.choose(actions)
            assert i is not None
            total += env.best_mean() - env.expected_rewards()[i]
            p.observe(i, env.reward(i))
        assert total == pytest.approx(regret[run, last], rel=1e-12, abs=1e-12)
    other = dpbandits.Environment.from_spec(spec, run=5)
    first = dpbandits.Environment.from_spec(spec, run=0)
    assert not np.array_equal(other.next_round(0), first.next_round(0))


def test_linear_and_bai_objects():
    lin = dpbandits.Environment("linear", k=6, d=2, sigma=1.0, master_seed=9, run=1)
    assert lin.setting == "linear" and lin.arms.shape == (6, 2) and lin.dim == 2
    assert lin.num_arms == 6 and len(lin.means) == 6
    # Same master seed: same instance (arms drawn from the master seed) for every run.
    assert np.array_equal(lin.arms, dpbandits.Environment("linear", k=6, d=2, sigma=1.0, master_seed=9, run=4).arms)
    bai = dpbandits.Environment("bai_bernoulli", means=[0.9, 0.5, 0.4], delta=0.05)
    assert bai.best_arm == 0 and bai.delta == 0.05 and bai.means == [0.9, 0.5, 0.4]
    s = bai.pull_sum(0, 10_000)
    assert 8800 <= s <= 9200  # Binomial(10000, 0.9): sd 30, 6.7 sd either side (false failure ~1e-11)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: dpbandits.Environment("nope"), 'kind = "nope"'),
        (lambda: dpbandits.Environment("bernoulli", means=[0.5, 2.0]), "means[1] = 2"),
        (lambda: dpbandits.Environment("bernoulli", means=[0.5, 0.4], run=-1), "run = -1"),
        (
            lambda: dpbandits.Environment("piecewise_bernoulli", means=[[0.1, 0.2], [0.2, 0.1]], breakpoints=[10]),
            "pass horizon=T",
        ),
        (lambda: dpbandits.Environment("bernoulli", means=[0.5, 0.4]).pull(2, 0), "arm = 2"),
        (lambda: dpbandits.Environment("bernoulli", means=[0.5, 0.4]).pull_sum(0, 5), "pull_sum(arm, t, n)"),
        (lambda: dpbandits.Environment("bai_bernoulli", means=[0.9, 0.5], delta=0.1).pull(0, 0), "pull_sum(arm, n)"),
        (
            lambda: dpbandits.Environment("contextual_gaussian", d=2, k=3, variance=0.1, noise_sd=1.0).reward(0),
            "next_round(t) first",
        ),
    ],
)
def test_bad_input_names_the_field(call, message):
    with pytest.raises((ValueError, TypeError), match=None) as info:
        call()
    assert message in str(info.value)


def test_contextual_rounds_go_forward():
    env = dpbandits.Environment("contextual_gaussian", d=2, k=3, variance=0.1, noise_sd=1.0)
    env.next_round(0)
    with pytest.raises(ValueError, match="t = 0: expected t > 0"):
        env.next_round(0)


def test_every_registry_environment_builds_from_its_listing():
    """`environments()` lists every [env] kind; each one listed in docs/python.md's example
    files builds as an object (the others need files or tables this test does not have)."""
    envs = {e["kind"]: e for e in dpbandits.environments()}
    assert {"bernoulli", "gaussian", "piecewise_bernoulli", "linear", "contextual_gaussian", "bai_bernoulli"} <= set(envs)
    assert all(e["setting"] in {"finite_armed", "linear", "contextual", "bai"} and e["description"] for e in envs.values())
    for kind, params in {
        "bernoulli": {"means": [0.5, 0.4]},
        "gaussian": {"means": [0.5, 0.4]},
        "beta": {"means": [0.5, 0.4]},
        "linear": {"k": 3, "d": 2},
        "contextual_gaussian": {"d": 2, "k": 3},
        "bai_bernoulli": {"means": [0.5, 0.4], "delta": 0.1},
    }.items():
        e = dpbandits.Environment(kind, **params)
        assert e.kind == kind and e.setting == envs[kind]["setting"]


def test_policy_report_from_released_statistics():
    env = dpbandits.Environment("bernoulli", means=[0.3, 0.7], master_seed=2)
    p = dpbandits.Policy("adac_ucb", arms=2, rho=1.0, seed=3)
    for t in range(500):
        arm = p.choose()
        assert arm is not None
        p.observe(arm, env.pull(arm, t))
    r = p.report(0.9)
    assert r["kind"] == "adac_ucb" and r["level"] == 0.9 and r["rounds"] == 500
    for e in r["estimates"]:
        # Estimates and intervals stay in the outcome range [0, 1] (issue 43: clamped and
        # intersected), so an estimate may sit on an end of its interval.
        assert 0.0 <= e["low"] <= e["estimate"] <= e["high"] <= 1.0 and e["low"] < e["high"]
    assert dpbandits.Policy("ucb1", arms=2).report()["estimates"] is None
    with pytest.raises(ValueError, match="level"):
        p.report(1.5)
