"""Per-step cost of `choose` + `observe` from Python, against the Rust loop and against
SMPyBandits and MABWiser on the same instance (docs/perf.md, "Python binding").

    target/benchvenv/bin/python python/bench/overhead.py [--steps 200000]

Instance: 5 Bernoulli arms with means 0.75 .. 0.25 (Figure 4(a)); rewards are drawn up front
with numpy (a `T x K` table), so every loop pays only its own decision and update. The Rust
loop is `dpbandits.run` of one run with `simulation = "steps"` (one reward at a time, rewards
drawn in Rust), timed end to end. Each measurement is the best of `--repeat` repetitions.
Optional libraries that are not installed are reported as such.
"""

import argparse
import time

import numpy as np

import dpbandits

MEANS = [0.75, 0.625, 0.5, 0.375, 0.25]
K = len(MEANS)


def best_of(repeat, f):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = f()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def rewards(steps, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.random((steps, K)) < np.array(MEANS)).astype(float).tolist()


def dpb_python(kind, params, steps):
    table = rewards(steps)

    def go():
        p = dpbandits.Policy(kind, arms=K, seed=1, **params)
        choose, observe = p.choose, p.observe
        for t in range(steps):
            a = choose()
            observe(a, table[t][a])
        return steps

    return go


def dpb_rust(kind, params, steps):
    spec = {
        "name": "bench",
        "master_seed": 1,
        "horizon": steps,
        "runs": 1,
        "simulation": "steps",
        "checkpoints": {"points": 2},
        "env": {"kind": "bernoulli", "means": MEANS},
        "policy": [{"kind": kind, **params}],
    }

    def go():
        dpbandits.run(spec, threads=1)
        return steps

    return go


class ConstEnv:
    """The cheapest Python environment: measures the Rust -> Python callback itself."""

    reward_range = (0.0, 1.0)

    def __init__(self):
        self.means = MEANS
        self.calls = 0

    def pull(self, arm, t):
        self.calls += 1
        return 0.5


class ConstEnvSum(ConstEnv):
    def pull_sum(self, arm, t, n):
        self.calls += 1
        return 0.5 * n


def env_cost(kind, params, horizon, runs, with_sum, repeat):
    """ns per callback: (time with a Python environment - time with the built-in Bernoulli) /
    number of callbacks, same spec (the policy's own work cancels out)."""
    spec = {
        "name": "bench_env",
        "master_seed": 1,
        "horizon": horizon,
        "runs": runs,
        "simulation": "episodes" if with_sum else "steps",
        "checkpoints": {"points": 2},
        "env": {"kind": "bernoulli", "means": MEANS},
        "policy": [{"kind": kind, **params}],
    }
    calls = []

    def py():
        env = ConstEnvSum() if with_sum else ConstEnv()
        dpbandits.run(spec, env=env, threads=1)
        calls.append(env.calls)
        return 1

    def builtin():
        dpbandits.run(spec, threads=1)
        return 1

    t_py = best_of(repeat, py)
    t_rust = best_of(repeat, builtin)
    return (t_py - t_rust) / calls[-1], calls[-1]


def empty_loop(steps):
    table = rewards(steps)

    def go():
        a = 0
        for t in range(steps):
            a = (a + int(table[t][a])) % K
        return steps

    return go


def smpybandits(steps):
    from SMPyBandits.Policies import UCB

    table = rewards(steps)

    def go():
        p = UCB(K)
        p.startGame()
        for t in range(steps):
            a = p.choice()
            p.getReward(a, table[t][a])
        return steps

    return go


def mabwiser(steps):
    from mabwiser.mab import MAB, LearningPolicy

    table = rewards(steps)

    def go():
        m = MAB(arms=list(range(K)), learning_policy=LearningPolicy.UCB1(alpha=1.0), seed=1)
        m.fit(decisions=list(range(K)), rewards=[table[0][a] for a in range(K)])
        for t in range(steps):
            a = m.predict()
            m.partial_fit([a], [table[t][a]])
        return steps

    return go


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--slow-steps", type=int, default=5_000, help="steps for MABWiser")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rows = []

    def add(name, f, steps):
        try:
            ns = best_of(a.repeat, f(steps) if callable(f) else f) * 1e9
            rows.append((name, steps, f"{ns:,.0f}"))
        except ImportError as e:
            rows.append((name, steps, f"not installed ({e.name})"))

    add("python loop alone (table lookup, no policy)", empty_loop, a.steps)
    add("dpbandits ucb1: Rust loop (run, simulation=steps)", lambda n: dpb_rust("ucb1", {}, n), a.steps)
    add("dpbandits ucb1: Python choose+observe", lambda n: dpb_python("ucb1", {}, n), a.steps)
    add("dpbandits adac_ucb rho=1: Rust loop", lambda n: dpb_rust("adac_ucb", {"rho": 1.0}, n), a.steps)
    add("dpbandits adac_ucb rho=1: Python choose+observe",
        lambda n: dpb_python("adac_ucb", {"rho": 1.0}, n), a.steps)
    add("SMPyBandits UCB: choice+getReward", smpybandits, a.steps)
    for name, args in [
        ("Python env pull(arm, t): ucb1, steps", ("ucb1", {}, a.steps, 1, False)),
        ("Python env pull_sum(arm, t, n): adac_ucb, episodes",
         ("adac_ucb", {"rho": 1.0}, 100_000, 200, True)),
    ]:
        ns, calls = env_cost(*args, a.repeat)
        rows.append((name + " [ns per call]", calls, f"{ns * 1e9:,.0f}"))
    add("MABWiser UCB1: predict+partial_fit", mabwiser, a.slow_steps)
    w = max(len(r[0]) for r in rows)
    print(f"{'loop':<{w}}  {'steps':>8}  ns/step (ns/call for the env rows)")
    for name, steps, ns in rows:
        print(f"{name:<{w}}  {steps:>8}  {ns}")


if __name__ == "__main__":
    main()
