//! Bernoulli Kullback-Leibler divergence and its confidence bounds.
//!
//! `kl(p, q) = p ln(p/q) + (1-p) ln((1-p)/(1-q))`, with `0 ln 0 = 0`.
//! The upper confidence bound `u(p, d) = max{q in [p, 1] : kl(p, q) <= d}` is the kl-UCB index
//! (Garivier & Cappe 2011, Eq. 2 with `d = (ln t + c ln ln t)/N`).
//!
//! # Solver
//! On `[p, 1)`, `q -> kl(p, q)` is increasing and convex, so Newton's method started from a point
//! *above* the root converges monotonically from above: every iterate is a valid (conservative)
//! upper bound, which is the safe side for an optimistic index. The start is Pinsker's bound
//! `p + sqrt(d/2)` (since `kl(p, q) >= 2 (q - p)^2`), capped below 1. Closed forms handle `p = 0`
//! (`u = 1 - e^{-d}`) and `p = 1` (`u = 1`). The result is always finite, in `[p, 1]`, and never NaN
//! for finite `d >= 0`; `d = inf` gives 1.

/// Bernoulli KL divergence, `+inf` when `q` is 0 or 1 and `p` differs.
#[inline]
pub fn kl_bernoulli(p: f64, q: f64) -> f64 {
    let mut r = 0.0;
    if p > 0.0 {
        r += p * (p / q).ln();
    }
    if p < 1.0 {
        r += (1.0 - p) * ((1.0 - p) / (1.0 - q)).ln();
    }
    r.max(0.0)
}

/// `max{q in [p, 1] : kl(p, q) <= d}` (kl-UCB upper bound).
pub fn kl_upper(p: f64, d: f64) -> f64 {
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
    if d.is_nan() || d >= f64::MAX {
        return 1.0;
    }
    if d <= 0.0 || p >= 1.0 {
        return p;
    }
    if p <= 0.0 {
        return -(-d).exp_m1(); // 1 - e^{-d}
    }
    let mut q = (p + (d / 2.0).sqrt()).min(1.0 - 1e-15);
    if kl_bernoulli(p, q) <= d {
        return q.max(p);
    }
    for _ in 0..50 {
        let f = kl_bernoulli(p, q) - d;
        // Relative tolerance: the index is compared with other indices, not reported.
        if f <= 1e-12f64.max(1e-10 * d) {
            break;
        }
        let df = (q - p) / (q * (1.0 - q));
        let next = q - f / df;
        // NaN-safe: stop unless next is a number strictly between p and q.
        if next.is_nan() || next >= q || next <= p {
            break;
        }
        q = next;
    }
    q.clamp(p, 1.0)
}

/// A cheap upper bound on [`kl_upper`]`(p, d)` (no logarithm), never below the solver's result:
/// the variance form of Pinsker's inequality, `kl(p, q) >= (q - p)^2 / (2 V)` with `V` the largest
/// `x (1 - x)` on `[p, q]`. For `p >= 1/2`, `V = p (1 - p)`: `u <= p + sqrt(2 p (1 - p) d)`. For
/// `p < 1/2`, if the root `r` of `(q - p)^2 = 2 d q (1 - q)` is below 1/2 then `u <= r` (else
/// `kl(p, 1/2) > d`, so `u < 1/2` and `V = u (1 - u)`); otherwise Pinsker's `p + sqrt(d / 2)`. Much
/// tighter than Pinsker's bound for means far from 1/2, which is what pruning an argmax needs. The
/// bound is taken at `d` plus the solver's tolerance, so it also covers where the solver stops.
#[inline]
pub fn kl_upper_bound(p: f64, d: f64) -> f64 {
    if !(d >= 0.0 && (0.0..=1.0).contains(&p)) {
        return f64::INFINITY;
    }
    // The solver stops within its tolerance above the root: bound the root at d + tolerance.
    let d = d * (1.0 + 4e-10) + 4e-12;
    let pinsker = p + (d / 2.0).sqrt();
    let b = if p >= 0.5 {
        p + (2.0 * p * (1.0 - p) * d).sqrt()
    } else {
        let e = 1.0 + 2.0 * d;
        let h = p + d;
        let r = (h + (h * h - e * p * p).max(0.0).sqrt()) / e;
        if r < 0.5 { r } else { pinsker }
    };
    // Relative slack for rounding, and the solver's own cap below 1.
    (b.min(pinsker) * (1.0 + 1e-12) + 1e-15).min(1.0)
}

/// Whether the solved index [`kl_upper`]`(p, d)` may be `>= q`. `false` only when
/// `kl(p, q) >= d + 2e-12 + 2e-10 d` with `p < q < 1`: the solver stops at a point whose KL is
/// within `max(1e-12, 1e-10 d)` of `d` (or below `d`), and `kl(p, .)` increases on `[p, 1]`, so its
/// result lies below `q`. (Prunes an argmax of kl-UCB indices: `finite/kl_ucb.rs` and the block
/// commitments of `finite/blocks.rs`.)
#[inline]
pub(crate) fn kl_upper_may_reach(p: f64, d: f64, q: f64) -> bool {
    !(p < q && q < 1.0 && p > 0.0 && kl_bernoulli(p, q) >= d * (1.0 + 2e-10) + 2e-12)
}

/// `min{q in [0, p] : kl(p, q) <= d}` (lower confidence bound), by symmetry of the Bernoulli KL.
pub fn kl_lower(p: f64, d: f64) -> f64 {
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
    1.0 - kl_upper(1.0 - p, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert!((kl_bernoulli(0.5, 0.5)).abs() < 1e-15);
        assert!((kl_bernoulli(0.5, 0.25) - 0.143_841_036_225_890_5).abs() < 1e-12);
        assert_eq!(kl_bernoulli(0.5, 1.0), f64::INFINITY);
        assert_eq!(kl_upper(0.3, 0.0), 0.3);
        assert_eq!(kl_upper(1.0, 5.0), 1.0);
        assert!((kl_upper(0.0, 1.0) - (1.0 - (-1.0f64).exp())).abs() < 1e-15);
        assert_eq!(kl_upper(0.5, f64::INFINITY), 1.0);
        let u = kl_upper(0.5, 0.143_841_036_225_890_5);
        assert!((u - 0.75).abs() < 1e-6, "{u}");
        let l = kl_lower(0.5, 0.143_841_036_225_890_5);
        assert!((l - 0.25).abs() < 1e-6, "{l}");
    }

    proptest! {
        /// The cheap bound is above the solved index.
        #[test]
        fn cheap_bound_is_above_the_index(p in 0.0f64..=1.0, d in 0.0f64..30.0) {
            let u = kl_upper(p, d);
            let b = kl_upper_bound(p, d);
            prop_assert!(b >= u, "p={p} d={d} u={u} b={b}");
        }

        /// The bound is a conservative root: in [p, 1], kl(p, u) >= d - tol (not below the root),
        /// and only slightly above it.
        #[test]
        fn upper_bound_is_root(p in 0.0f64..1.0, d in 1e-8f64..20.0) {
            let u = kl_upper(p, d);
            prop_assert!(u.is_finite() && u >= p && u <= 1.0);
            if u < 1.0 - 1e-9 {
                prop_assert!((kl_bernoulli(p, u) - d).abs() < 1e-6 * d.max(1.0), "p={p} d={d} u={u}");
            }
        }
    }
}
