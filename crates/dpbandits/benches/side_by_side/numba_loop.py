"""The numba side of side_by_side.sh: one run of a straightforward @njit bandit loop.

usage: python numba_loop.py POLICY K T [repeats]   (POLICY: ucb1, kl_ucb, thompson)

Bernoulli arms with means evenly spaced from 0.75 down to 0.25 (as dpbandits' one_run example).
The JIT compile is excluded (one warm-up call with T = 1000 first). Prints the median wall time
of `repeats` runs in seconds and the final pseudo-regret of the last run.
"""
import math
import sys
import time

import numpy as np
from numba import njit


@njit(cache=False)
def kl(p, q):
    r = 0.0
    if p > 0.0:
        r += p * math.log(p / q)
    if p < 1.0:
        r += (1.0 - p) * math.log((1.0 - p) / (1.0 - q))
    return max(r, 0.0)


@njit(cache=False)
def kl_upper(p, d):
    if d <= 0.0 or p >= 1.0:
        return p
    if p <= 0.0:
        return 1.0 - math.exp(-d)
    q = min(p + math.sqrt(d / 2.0), 1.0 - 1e-15)
    if kl(p, q) <= d:
        return q
    for _ in range(50):
        f = kl(p, q) - d
        if f <= max(1e-12, 1e-10 * d):
            break
        df = (q - p) / (q * (1.0 - q))
        nxt = q - f / df
        if nxt >= q or nxt <= p:
            break
        q = nxt
    return q


@njit(cache=False)
def run(policy, means, T, seed):
    np.random.seed(seed)
    K = means.shape[0]
    n = np.zeros(K)
    s = np.zeros(K)
    best = means.max()
    regret = 0.0
    for t in range(T):
        if t < K:
            a = t
        elif policy == 0:  # UCB1
            c = 2.0 * math.log(t)
            a, bv = 0, -1.0
            for i in range(K):
                v = s[i] / n[i] + math.sqrt(c / n[i])
                if v > bv:
                    a, bv = i, v
        elif policy == 1:  # kl-UCB, c = 0
            lt = math.log(t)
            a, bv = 0, -1.0
            for i in range(K):
                v = kl_upper(s[i] / n[i], lt / n[i])
                if v > bv:
                    a, bv = i, v
        else:  # Thompson sampling, Beta(1, 1) priors
            a, bv = 0, -1.0
            for i in range(K):
                v = np.random.beta(s[i] + 1.0, n[i] - s[i] + 1.0)
                if v > bv:
                    a, bv = i, v
        r = 1.0 if np.random.random() < means[a] else 0.0
        n[a] += 1.0
        s[a] += r
        regret += best - means[a]
    return regret


def main():
    policy = {"ucb1": 0, "kl_ucb": 1, "thompson": 2}[sys.argv[1]]
    K, T = int(sys.argv[2]), int(float(sys.argv[3]))
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    means = np.array([0.75 - 0.5 * i / (K - 1) for i in range(K)])
    run(policy, means, 1000, 0)  # JIT compile, excluded
    times, reg = [], 0.0
    for r in range(repeats):
        t0 = time.perf_counter()
        reg = run(policy, means, T, r + 1)
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"{sys.argv[1]} {K} {T} numba {times[len(times) // 2]:.6f} {reg:.1f}")


if __name__ == "__main__":
    main()
