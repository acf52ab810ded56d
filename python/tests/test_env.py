"""Python environments (`pull`, optional `pull_sum`) against the built-in Bernoulli."""

import numpy as np
import pytest

import dpbandits

MEANS = [0.7, 0.5, 0.3]
RUNS, HORIZON = 100, 2000


class Bernoulli:
    """A Bernoulli bandit in Python, with the batched `pull_sum` the episode fast path uses."""

    reward_range = (0.0, 1.0)

    def __init__(self, means, seed):
        self.means = list(means)
        self.rng = np.random.default_rng(seed)

    def pull(self, arm, t):
        return float(self.rng.random() < self.means[arm])

    def pull_sum(self, arm, t, n):
        return float(self.rng.binomial(n, self.means[arm]))


class BernoulliNoSum(Bernoulli):
    pull_sum = None  # hide the batched draw: the run loop falls back to `pull`

    def __getattribute__(self, name):
        if name == "pull_sum":
            raise AttributeError(name)
        return super().__getattribute__(name)


class Swapped(Bernoulli):
    """Declares MEANS but pays the reversed means: must be detected (the test can fail)."""

    def pull(self, arm, t):
        return float(self.rng.random() < self.means[::-1][arm])

    def pull_sum(self, arm, t, n):
        return float(self.rng.binomial(n, self.means[::-1][arm]))


def spec(kind, **params):
    return {
        "name": f"py_env_{kind}",
        "master_seed": 5,
        "horizon": HORIZON,
        "runs": RUNS,
        "checkpoints": {"points": 5},
        "env": {"kind": "bernoulli", "means": MEANS},
        "policy": [{"kind": kind, **params}],
    }


def final_regret(res):
    (a,) = res.runs.values()
    return a[:, -1]


def z(a, b):
    """Welch statistic of the difference of two means."""
    se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    return (a.mean() - b.mean()) / se


# |z| < 4: a false failure (two independent samples of the same regret distribution giving
# |z| >= 4) has probability about 6e-5 per comparison (normal approximation, 100 runs each), so
# below 3e-4 for the four comparisons here; seeds are fixed, so the outcome is reproducible.
Z_MAX = 4.0


@pytest.mark.parametrize("kind,params", [("adac_ucb", {"rho": 1.0}), ("ucb1", {})])
def test_python_env_matches_builtin_bernoulli(kind, params):
    builtin = final_regret(dpbandits.run(spec(kind, **params)))
    with_sum = final_regret(
        dpbandits.run(spec(kind, **params), env=lambda seed: Bernoulli(MEANS, seed))
    )
    no_sum = final_regret(
        dpbandits.run(spec(kind, **params), env=lambda seed: BernoulliNoSum(MEANS, seed))
    )
    assert builtin.mean() > 0
    assert abs(z(with_sum, builtin)) < Z_MAX, (with_sum.mean(), builtin.mean())
    assert abs(z(no_sum, builtin)) < Z_MAX, (no_sum.mean(), builtin.mean())
    # Power: a wrong environment is told apart.
    wrong = final_regret(dpbandits.run(spec(kind, **params), env=lambda s: Swapped(MEANS, s)))
    assert abs(z(wrong, builtin)) > Z_MAX


def test_pull_sum_is_used_by_the_episode_fast_path():
    calls = {"pull": 0, "pull_sum": 0}

    class Counting(Bernoulli):
        def pull(self, arm, t):
            calls["pull"] += 1
            return super().pull(arm, t)

        def pull_sum(self, arm, t, n):
            calls["pull_sum"] += 1
            return super().pull_sum(arm, t, n)

    s = spec("adac_ucb", rho=1.0)
    s["runs"] = 2
    dpbandits.run(s, env=lambda seed: Counting(MEANS, seed))
    # Single rounds (e.g. the first pull of each arm) use pull; episodes one pull_sum each.
    assert calls["pull_sum"] > 0
    assert calls["pull"] + calls["pull_sum"] < 2 * HORIZON / 10, calls


def test_one_shared_env_object_is_deterministic():
    s = spec("ucb1")
    s["runs"] = 3
    a = dpbandits.run(s, env=Bernoulli(MEANS, 1), threads=2)
    b = dpbandits.run(s, env=Bernoulli(MEANS, 1), threads=2)
    assert a.summary_csv == b.summary_csv


def test_env_errors_are_raised():
    class Broken(Bernoulli):
        def pull(self, arm, t):
            raise RuntimeError("sensor offline")

    s = spec("ucb1")
    s["runs"] = 1
    with pytest.raises(RuntimeError, match="sensor offline"):
        dpbandits.run(s, env=Broken(MEANS, 0))
    with pytest.raises(ValueError, match="env"):
        dpbandits.run(s, env=object())

    class NoMeans:
        def pull(self, arm, t):
            return 0.0

    with pytest.raises(ValueError, match="means"):
        dpbandits.run(s, env=NoMeans())


def test_a_broken_reward_range_promise_fails_the_run():
    """`reward_range` lets the run loop trust `pull_sum` inside a private boundary; an
    environment that breaks the promise must fail loudly, not void the guarantee silently."""

    class Liar(Bernoulli):
        def pull_sum(self, arm, t, n):
            return 5.0 * n  # rewards of 5 from a declared range of [0, 1]

        def pull(self, arm, t):
            return 5.0

    s = spec("adac_ucb", rho=1.0)
    s["runs"] = 1
    with pytest.raises(ValueError, match="reward_range"):
        dpbandits.run(s, env=Liar(MEANS, 0))
