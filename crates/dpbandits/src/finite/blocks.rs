//! Exact block commitments for per-step index policies (UCB1, kl-UCB).
//!
//! A per-step index policy recomputes `argmax_b I_b(t)` every round. When the leader `a` chosen at
//! round `t0` provably keeps the argmax for the next `m` rounds **whatever rewards it receives**
//! (every reward anywhere in the promised range), the policy can commit to `m` rounds at once
//! (`Pull { arm: a, steps: m }`) and the simulator's episode fast path
//! ([`super::simulate_finite`]) draws the block's reward sum exactly
//! ([`super::Environment::pull_sum`]: Binomial for Bernoulli arms). The step loop would have
//! played `a` in each of those rounds on *every* reward sequence, so the two processes have the
//! same law: the block path is exact in distribution, not an approximation.
//!
//! # The argument
//! During the block only the leader is pulled, so for every other arm `b` the statistics
//! `(N_b, mu_b)` are frozen and its index moves only with `t`; for both policies it is
//! non-decreasing in `t`. The leader's index is non-decreasing in its reward sum and (for a fixed
//! sum) in `t`, so the worst case over the block's rewards is every reward at the bottom `lo` of
//! the range, with `t` frozen at `t0` in the leader's exploration term. Write `A(j)` for that
//! worst-case lower bound of the leader's index at round `t0 + j` and `U_b(j)` for an upper bound
//! of `I_b(t0 + j)`. If `A(j) >= U_b(j) + 2 delta` for every `b != a` and `0 <= j < m`, the step
//! loop chooses `a` in each of the `m` rounds: strictly ahead of every other arm, so the tie rule
//! (lowest index) is never invoked inside a block; the first round is the ordinary argmax, ties
//! included. `delta` (relative 1e-12, plus the KL solver's tolerance for kl-UCB) covers the
//! rounding of the step loop's own floating-point index, so its computed argmax is the real one.
//!
//! * **UCB1**, `I_b(t) = mu_b + sqrt(alpha ln t / N_b)`. Leader: `(S + j lo)/(N + j) >= mu - j
//!   (mu - lo)/N` and, `x -> x^{-1/2}` being convex, `sqrt(c0/(N + j)) >= sqrt(c0/N) - j sqrt(c0)
//!   / (2 N^{3/2})` with `c0 = alpha ln t0`: `A(j) >= A(0) - j s_a`. Others: `ln(t0 + j) <= ln t0 +
//!   j/t0` and `sqrt(x + y) <= sqrt(x) + y/(2 sqrt x)` give `U_b(j) <= I_b(t0) + j r_b`,
//!   `r_b = sqrt(alpha / (N_b ln t0)) / (2 t0)`. All four bounds hold for every `j >= 0`, so
//!   `m - 1 = min_b floor((A(0) - I_b(t0) - 2 delta) / (s_a + r_b))`. A finite `lo` is needed:
//!   UCB1 blocks only when the caller promises a range ([`super::Policy::enable_blocks`]).
//! * **kl-UCB**, `I_b(t) = u(mu_b, level(t)/N_b)` with `u(p, d) = max{q : kl(p, q) <= d}`,
//!   increasing in `p` and `d`. Rewards are clamped to `[0, 1]`, so `lo = 0` whatever the range.
//!   Pick a threshold `v` strictly between the leader's index and the best other index; with
//!   `w = v + delta`, `x = v - delta`:
//!   - others: `I_b(t) <= x` iff `kl(mu_b, x) >= level(t)/N_b` (`kl(p, .)` increases on `[p, 1]`),
//!     so every other arm stays below `x` up to the last `t` with `level(t) <= min_b N_b
//!     kl(mu_b, x)`;
//!   - leader: `A(j) >= w` iff `g(N + j) <= level(t0)` with `g(n) = n kl(S/n, w)` (where
//!     `S/n < w`; above `w` it holds trivially). `dg/dn = ln((1 - p)/(1 - w)) > 0` and
//!     `d2g/dn2 = p / (n (1 - p)) > 0`: `g` is increasing and convex, so the condition at the last
//!     round of the block implies it at every round, and a secant root is a valid (conservative)
//!     end point. The result is checked by evaluating `g` at the end point.
//!
//!   The threshold only trades the two lengths; any `v` gives a valid block.
//!
//! # Who cannot use it
//! * **Thompson sampling** (and DP-TS): the choice is random (a fresh posterior draw per round),
//!   so no worst case over rewards fixes the next rounds' arm.
//! * **Sliding-window and discounted policies** (SW-UCB, SW-kl-UCB, D-UCB, SW-KLUCB-CF): the
//!   other arms' statistics change while the leader is played (their pulls leave the window or
//!   are discounted), so their indices are not functions of `t` alone; a bound of their own
//!   would be needed.
//! * **kl-UCB-CF through the LDP wrapper** ([`super::Ldp`]): every reward is privatized by its own
//!   randomized-response coin, and the block sum of bits is a function of the individual rewards
//!   (not of their sum) unless the rewards are known to be binary; the wrapper commits to single
//!   rounds (not done here).
//! * **Private per-step policies** (LDP-UCB, DP-SE, ...): their noise is part of the index.

// `!(a <= b)` on purpose throughout: a NaN must fail every test (and give a block of 1).
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use super::ArmStats;
use crate::math::kl::{kl_bernoulli, kl_upper_bound, kl_upper_may_reach};
use crate::privacy::{BoundaryMode, MAX_ABS_REWARD, RewardBoundary};

/// The rejecting boundary of a promised reward range (intersected with the numeric boundary), or
/// `None` for an empty or NaN range.
pub(crate) fn promised_boundary((lo, hi): (f64, f64)) -> Option<RewardBoundary> {
    RewardBoundary::new(
        lo.max(-MAX_ABS_REWARD),
        hi.min(MAX_ABS_REWARD),
        BoundaryMode::Reject,
    )
    .ok()
}

/// The longest block any policy commits to (the simulator clamps it to the horizon anyway).
pub(crate) const MAX_BLOCK: u64 = 1 << 40;

/// Relative rounding margin of the comparisons.
const REL: f64 = 1e-12;

/// UCB1 block length for leader `a` chosen at round `t0` (all arms played), with rewards `>= lo`
/// (finite) and exploration constant `alpha`. Returns `m >= 1`. `lt = ln(max(t0, 1))` and
/// `indices[b] = mean_b + sqrt(alpha lt / N_b)` are the policy's own numbers at `t0` (computed
/// as `Ucb1` computes them), passed in so they are not computed twice.
pub(crate) fn ucb1_block(
    stats: &ArmStats,
    a: usize,
    t0: u64,
    alpha: f64,
    lo: f64,
    lt: f64,
    indices: &[f64],
) -> u64 {
    debug_assert_eq!(lt.to_bits(), (t0.max(1) as f64).ln().to_bits());
    if !(lt > 0.0 && lo.is_finite()) || indices.len() != stats.means().len() {
        return 1;
    }
    let c0 = alpha * lt;
    let n = stats.pulls()[a] as f64;
    let mu = stats.means()[a];
    let a0 = mu + (c0 / n).sqrt();
    let s_a = (mu - lo).max(0.0) / n + c0.sqrt() / (2.0 * n * n.sqrt());
    let mut jmax = f64::INFINITY;
    for (b, (&ib, &inv)) in indices.iter().zip(stats.inv_pulls()).enumerate() {
        if b == a {
            continue;
        }
        let delta = REL * (1.0 + a0.abs() + ib.abs());
        let gap = a0 - ib - 2.0 * delta;
        if gap.is_nan() || gap <= 0.0 {
            return 1;
        }
        let r_b = (alpha * inv / lt).sqrt() / (2.0 * t0 as f64);
        jmax = jmax.min(gap / (s_a + r_b));
    }
    to_block(jmax)
}

/// `floor(jmax) + 1`, capped at [`MAX_BLOCK`].
fn to_block(jmax: f64) -> u64 {
    if jmax.is_nan() || jmax < 0.0 {
        1
    } else if jmax >= MAX_BLOCK as f64 {
        MAX_BLOCK
    } else {
        jmax.floor() as u64 + 1
    }
}

/// The kl-UCB exploration level at round `t`, exactly as the policy computes it.
#[inline]
pub(crate) fn kl_level(t: u64, c: f64) -> f64 {
    let lt = (t.max(1) as f64).ln();
    if c > 0.0 && lt > 1.0 {
        lt + c * lt.ln()
    } else {
        lt
    }
}

/// The largest round `t >= t0` with `kl_level(t, c) <= lmax`, or `None` if even `t0` exceeds it.
fn last_round_below(t0: u64, c: f64, lmax: f64) -> Option<u64> {
    if !(kl_level(t0, c) <= lmax) {
        return None;
    }
    let cap = t0.saturating_add(MAX_BLOCK);
    // Solve ln t + c ln ln t = lmax for ln t from below (the left side is concave and increasing
    // in ln t, so Newton steps from below stay below the root).
    let mut lt = if c > 0.0 && lmax > 1.0 {
        (lmax - c * lmax.ln()).max(1.0).min(lmax)
    } else {
        lmax
    };
    if c > 0.0 && lmax > 1.0 {
        for _ in 0..4 {
            let h = lt + c * lt.ln() - lmax;
            let next = lt - h / (1.0 + c / lt);
            if !(next.is_finite() && next >= lt) {
                break;
            }
            lt = next;
        }
    }
    let guess = lt.exp();
    let mut t = if guess >= cap as f64 {
        cap
    } else {
        (guess.floor() as u64).max(t0)
    };
    // Rounding: step back until the level as the policy computes it fits (a few steps at most).
    for _ in 0..64 {
        if kl_level(t, c) <= lmax {
            return Some(t);
        }
        t = t0 + (t - t0) / 2;
    }
    Some(t0)
}

/// The solver tolerance of [`crate::math::kl::kl_upper`] at level `d`, with room for rounding.
#[inline]
fn kl_slack(d: f64) -> f64 {
    2e-12 + 2e-10 * d
}

/// kl-UCB block length for leader `a` (computed index `ua`) chosen at round `t0` (all arms played),
/// level parameter `c`. Rewards are clamped to `[0, 1]`, so the leader's worst reward is 0.
pub(crate) fn kl_ucb_block(stats: &ArmStats, a: usize, t0: u64, c: f64, ua: f64) -> u64 {
    let k = stats.len();
    if k == 1 {
        return MAX_BLOCK;
    }
    let level0 = kl_level(t0, c);
    let means = stats.means();
    let inv = stats.inv_pulls();
    // The best other index: start from the arm with the largest cheap bound, then solve only the
    // arms that may beat it (as in the policy's argmax).
    let bounds = |b: usize| kl_upper_bound(means[b], level0 * inv[b]);
    let Some(first) = (0..k)
        .filter(|&b| b != a)
        .max_by(|&x, &y| bounds(x).total_cmp(&bounds(y)))
    else {
        return MAX_BLOCK;
    };
    let (mut ub, b2) = (
        crate::math::kl::kl_upper(means[first], level0 * inv[first]),
        first,
    );
    for b in 0..k {
        if b == a || b == first {
            continue;
        }
        let d = level0 * inv[b];
        if kl_upper_bound(means[b], d) <= ub || !kl_upper_may_reach(means[b], d, ub) {
            continue;
        }
        ub = ub.max(crate::math::kl::kl_upper(means[b], d));
    }
    if !(ua - ub > 4.0 * REL) || ua >= 1.0 {
        return 1;
    }
    // Threshold: balance the leader's worst-case decline against the others' rise.
    let n = stats.pulls()[a] as f64;
    let pa = means[a];
    let rate_a = (pa + (ua - pa) / 2.0) / n;
    let rate_b = (ub - means[b2]) / (2.0 * level0.max(1e-300) * t0 as f64);
    let lambda = (rate_b / (rate_a + rate_b)).clamp(0.01, 0.5);
    let v = ub + lambda * (ua - ub);
    let delta = REL + 2.0 * f64::EPSILON;
    let (w, x) = (v + delta, v - delta);
    if !(x > ub && w < ua) {
        return 1;
    }
    // Others: the last round at which every other index stays below x.
    let mut lmax = f64::INFINITY;
    for b in 0..k {
        if b == a {
            continue;
        }
        let p = means[b];
        if p >= x {
            return 1;
        }
        // Skip the logarithms when the variance bound kl(p, x) >= (x - p)^2 / (2 V), V the
        // largest y (1 - y) on [p, x], already puts this arm's limit above the current one.
        let var = if x <= 0.5 {
            x * (1.0 - x)
        } else if p >= 0.5 {
            p * (1.0 - p)
        } else {
            0.25
        };
        let lb = (x - p) * (x - p) / (2.0 * var) * (1.0 - 1e-9);
        if ((lb - 2e-12) / (1.0 + 2e-10)) / inv[b] * (1.0 - REL) >= lmax {
            continue;
        }
        let kb = kl_bernoulli(p, x);
        // kl(mu_b, x) >= d_b + slack(d_b), d_b = level * inv_b (rounded: relative REL).
        // kl_slack is increasing in d, so require d_b <= (kb - 2e-12) / (1 + 2e-10).
        let dmax = (kb - 2e-12) / (1.0 + 2e-10);
        lmax = lmax.min(dmax / inv[b] * (1.0 - REL));
    }
    let Some(t_last) = last_round_below(t0, c, lmax) else {
        return 1;
    };
    let m_others = t_last - t0 + 1;
    // Leader: the last n with g(n) = n kl(S/n, w) <= level0 (with the solver's slack).
    let s = stats.sums()[a];
    let l0 = level0 * (1.0 - REL) - kl_slack(level0 / n) * n;
    let g = |nn: f64| {
        let p = s / nn;
        if p >= w { 0.0 } else { nn * kl_bernoulli(p, w) }
    };
    // Start where S/n drops below w (g = 0 up to there).
    let n0 = if pa >= w { (s / w).max(n) } else { n };
    let g0 = g(n0);
    if !(g0 <= l0) {
        // Only the rounds where S/n >= w are safe.
        let m_leader = if pa >= w {
            to_block((n0 - n).floor() - 1.0)
        } else {
            1
        };
        return m_leader.min(m_others);
    }
    let slope = ((1.0 - s / n0) / (1.0 - w)).ln();
    let mut n_end = if slope > 0.0 {
        n0 + (l0 - g0) / slope
    } else {
        f64::INFINITY
    };
    if !(n_end.is_finite()) || n_end > n + MAX_BLOCK as f64 {
        n_end = n + MAX_BLOCK as f64;
    }
    let g1 = g(n_end);
    if !(g1 <= l0) {
        // Convex g: the secant's root lies below g's.
        n_end = n0 + (l0 - g0) * (n_end - n0) / (g1 - g0);
    }
    let mut n_end = n_end.floor();
    // Verify (rounding) and shrink until it holds.
    let mut tries = 0;
    while !(g(n_end) <= l0) {
        n_end = n0 + ((n_end - n0) / 2.0).floor();
        tries += 1;
        if tries > 60 {
            return 1;
        }
    }
    let m_leader = to_block(n_end - n);
    m_leader.min(m_others).max(1)
}
