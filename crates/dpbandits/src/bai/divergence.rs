//! The private divergence `d_eps`, its signed versions and the transportation costs of
//! fixed-confidence BAI (spec dp-bai §2.2–2.3).
//!
//! `d_eps(p, q) = inf_r { eps |p - r| + kl(r, q) }` (Jourdan & Azize 2025, poster definition).
//! For Bernoulli the closed form is (spec §2.2, verified numerically in the tests):
//! `d+_eps(p, q) = 0` if `q <= p`, `kl(p, q)` if `p < q <= u_eps(p)`, and
//! `-ln(1 - q (1 - e^-eps)) - eps p` beyond, with `u_eps(p) = p / (p + (1 - p) e^-eps)`;
//! `d-_eps(p, q) = d+_eps(1 - p, 1 - q)`. `eps = inf` gives the Bernoulli KL.
//!
//! # Solver for `W_eps`
//! `W_eps(m_a, m_b; w_a, w_b) = inf_x { w_a d-_eps(m_a, x) + w_b d+_eps(m_b, x) }` is 0 when
//! `m_a <= m_b`; otherwise the objective is convex on `[m_b, m_a]` with a continuous,
//! non-decreasing derivative. Two closed-form fast paths (both arms in the KL regime, both in the
//! TV regime) are tried first; otherwise bisection on the derivative until the bracket is below
//! `1e-15` (at most 64 halvings). The result is finite, `>= 0`, never NaN for finite inputs.

use crate::math::kl::kl_bernoulli;

/// Bernoulli KL with `q` kept inside `(0, 1)` (used only where `q` is strictly between `p` and a
/// breakpoint, so the clamp only guards rounding).
#[inline]
fn kl(p: f64, q: f64) -> f64 {
    kl_bernoulli(p, q.clamp(1e-300, 1.0 - 1e-16))
}

/// Upper breakpoint `u_eps(p) = p e^eps / (p (e^eps - 1) + 1)` (where the log-odds ratio reaches eps).
#[inline]
pub fn upper_break(p: f64, eps: f64) -> f64 {
    if eps.is_infinite() {
        return if p > 0.0 { 1.0 } else { 0.0 };
    }
    let e = (-eps).exp();
    p / (p + (1.0 - p) * e)
}

/// Lower breakpoint `l_eps(p) = 1 - u_eps(1 - p)`.
#[inline]
pub fn lower_break(p: f64, eps: f64) -> f64 {
    1.0 - upper_break(1.0 - p, eps)
}

/// `d+_eps(p, q)`: cost of moving *up* from `p` to `q` (0 when `q <= p`).
#[inline]
pub fn d_plus(p: f64, q: f64, eps: f64) -> f64 {
    if q <= p {
        return 0.0;
    }
    if eps.is_infinite() || q <= upper_break(p, eps) {
        return kl(p, q);
    }
    let c = -(-eps).exp_m1();
    (-(-q * c).ln_1p() - eps * p).max(0.0)
}

/// `d-_eps(p, q)`: cost of moving *down* from `p` to `q` (0 when `q >= p`).
#[inline]
pub fn d_minus(p: f64, q: f64, eps: f64) -> f64 {
    d_plus(1.0 - p, 1.0 - q, eps)
}

/// `d_eps(p, q) = d+ + d-` (one of them is 0).
#[inline]
pub fn d_eps(p: f64, q: f64, eps: f64) -> f64 {
    d_plus(p, q, eps) + d_minus(p, q, eps)
}

/// `d/dq d+_eps(p, q)`.
#[inline]
pub fn d_plus_dq(p: f64, q: f64, eps: f64) -> f64 {
    if q <= p {
        return 0.0;
    }
    if eps.is_infinite() || q <= upper_break(p, eps) {
        let q = q.clamp(1e-300, 1.0 - 1e-16);
        return (q - p) / (q * (1.0 - q));
    }
    let c = -(-eps).exp_m1();
    c / (1.0 - q * c)
}

/// `d/dq d-_eps(p, q)` (<= 0).
#[inline]
pub fn d_minus_dq(p: f64, q: f64, eps: f64) -> f64 {
    -d_plus_dq(1.0 - p, 1.0 - q, eps)
}

/// Transportation cost `W_eps(m_a, m_b; w_a, w_b)` (spec §2.3): the GLR statistic of "a is better
/// than b" with weights `w`. `eps = inf` is the Bernoulli KL GLR. Means outside `[0, 1]` are clipped.
pub fn w_eps(ma: f64, mb: f64, wa: f64, wb: f64, eps: f64) -> f64 {
    let ma = ma.clamp(0.0, 1.0);
    let mb = mb.clamp(0.0, 1.0);
    if ma <= mb || wa <= 0.0 || wb <= 0.0 {
        return 0.0;
    }
    let f = |x: f64| wa * d_minus(ma, x, eps) + wb * d_plus(mb, x, eps);
    // Fast path 1: both in the KL regime.
    let x = (wa * ma + wb * mb) / (wa + wb);
    if eps.is_infinite() || (lower_break(ma, eps) <= x && x <= upper_break(mb, eps)) {
        return (wa * kl(ma, x) + wb * kl(mb, x)).max(0.0);
    }
    // Fast path 2: both in the TV regime.
    let c = -(-eps).exp_m1();
    let x = (wa - wb * (1.0 - c)) / (c * (wa + wb));
    if x >= mb && x <= ma && x < lower_break(ma, eps) && x > upper_break(mb, eps) {
        return f(x).max(0.0);
    }
    // Bisection on the derivative (exp(-eps) hoisted out of the loop). The objective is flat at
    // its minimiser, so a bracket of relative width 1e-11 gives the value to ~1e-20 relative.
    let (ua, ub) = (upper_break(1.0 - ma, eps), upper_break(mb, eps));
    let dplus = |p: f64, q: f64, u: f64| -> f64 {
        if q <= p {
            0.0
        } else if q <= u {
            let q = q.clamp(1e-300, 1.0 - 1e-16);
            (q - p) / (q * (1.0 - q))
        } else {
            c / (1.0 - q * c)
        }
    };
    let (mut lo, mut hi) = (mb, ma);
    let tol = 1e-11 * (ma - mb);
    for _ in 0..64 {
        if hi - lo <= tol {
            break;
        }
        let mid = 0.5 * (lo + hi);
        let g = -wa * dplus(1.0 - ma, 1.0 - mid, ua) + wb * dplus(mb, mid, ub);
        if g > 0.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    f(0.5 * (lo + hi)).max(0.0)
}

/// Sub-Gaussian constant used for Bernoulli by AdaP-TT (spec §4, sigma = 1/2).
pub const SIGMA: f64 = 0.5;

/// Gaussian transportation cost `(m_a - m_b)_+^2 / (2 sigma^2 (1/w_a + 1/w_b))` (AdaP-TT, spec §4.3).
#[inline]
pub fn w_gauss(ma: f64, mb: f64, wa: f64, wb: f64) -> f64 {
    let d = (ma - mb).max(0.0);
    d * d / (2.0 * SIGMA * SIGMA * (1.0 / wa + 1.0 / wb))
}

/// Private Gaussian cost `(m_a - m_b)_+ min(3 eps, (m_a - m_b)_+) / (2 sigma^2 (1/w_a + 1/w_b))`
/// (AdaP-TT*, spec §4.4).
#[inline]
pub fn w_gauss_star(ma: f64, mb: f64, wa: f64, wb: f64, eps: f64) -> f64 {
    let d = (ma - mb).max(0.0);
    d * d.min(3.0 * eps) / (2.0 * SIGMA * SIGMA * (1.0 / wa + 1.0 / wb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Stream, stream_rng};
    use rand::RngExt;

    /// Brute force `inf_r { eps |p - r| + kl(r, q) }`: the objective is convex in r, so a ternary
    /// search over [0, 1] converges to the minimum.
    fn brute(p: f64, q: f64, eps: f64) -> f64 {
        let g = |r: f64| eps * (p - r).abs() + kl_bernoulli(r, q);
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..300 {
            let m1 = lo + (hi - lo) / 3.0;
            let m2 = hi - (hi - lo) / 3.0;
            if g(m1) <= g(m2) {
                hi = m2;
            } else {
                lo = m1;
            }
        }
        g(0.5 * (lo + hi)).min(g(0.0)).min(g(1.0))
    }

    /// Spec §6.1.1: closed form vs numerical minimisation over 20 000 random triples.
    #[test]
    fn closed_form_matches_numerical_minimisation() {
        let mut rng = stream_rng(5, Stream::Instance, &[]);
        let mut worst = 0.0f64;
        for _ in 0..20_000 {
            let p: f64 = rng.random_range(0.001..0.999);
            let q: f64 = rng.random_range(0.001..0.999);
            let eps = 10f64.powf(rng.random_range(-3.0..2.5));
            let a = d_eps(p, q, eps);
            let b = brute(p, q, eps);
            worst = worst.max((a - b).abs() / (1e-12 + b.abs()).max(1e-3));
            assert!(a.is_finite() && a >= 0.0);
            assert!(a <= kl_bernoulli(p, q) + 1e-12 && a <= eps * (p - q).abs() + 1e-12);
        }
        assert!(worst < 1e-8, "worst relative error {worst}");
    }

    #[test]
    fn limits_symmetry_and_continuity() {
        for &(p, q) in &[(0.3, 0.8), (0.9, 0.5), (0.05, 0.06), (0.5, 0.99)] {
            assert!((d_eps(p, q, 1e6) - kl_bernoulli(p, q)).abs() < 1e-9);
            assert!((d_eps(p, q, 1e-6) / 1e-6 - (p - q).abs()).abs() < 1e-4);
            assert!((d_minus(p, q, 0.7) - d_plus(1.0 - p, 1.0 - q, 0.7)).abs() < 1e-15);
            let mut prev = 0.0;
            for e in [0.01, 0.1, 1.0, 10.0] {
                let d = d_eps(p, q, e);
                assert!(d + 1e-15 >= prev);
                prev = d;
            }
        }
        // Value and derivative continuous at the breakpoint.
        for &(p, eps) in &[(0.3, 0.5), (0.7, 2.0), (0.01, 0.1)] {
            let u = upper_break(p, eps);
            let (a, b) = (u - 1e-9, u + 1e-9);
            assert!((d_plus(p, a, eps) - d_plus(p, b, eps)).abs() < 1e-7);
            assert!((d_plus_dq(p, a, eps) - d_plus_dq(p, b, eps)).abs() < 1e-6);
            let l = lower_break(p, eps);
            assert!((d_minus_dq(p, l - 1e-9, eps) - d_minus_dq(p, l + 1e-9, eps)).abs() < 1e-6);
        }
        assert!(d_plus(0.0, 0.5, 1.0).is_finite());
        assert!((d_plus(0.0, 0.5, 1.0) + (1.0 - 0.5 * (1.0 - (-1.0f64).exp())).ln()).abs() < 1e-14);
    }

    /// Spec §6.1.4: W matches a dense grid search, is 0 iff m_a <= m_b, homogeneous of degree 1,
    /// and equals the KL GLR for eps = inf.
    #[test]
    fn transportation_cost() {
        let mut rng = stream_rng(6, Stream::Instance, &[]);
        for _ in 0..2_000 {
            let ma: f64 = rng.random_range(0.0..1.0);
            let mb: f64 = rng.random_range(0.0..1.0);
            let wa: f64 = rng.random_range(0.1..100.0);
            let wb: f64 = rng.random_range(0.1..100.0);
            let eps = 10f64.powf(rng.random_range(-3.0..2.0));
            let w = w_eps(ma, mb, wa, wb, eps);
            if ma <= mb {
                assert_eq!(w, 0.0);
                continue;
            }
            assert!(w > 0.0);
            let mut best = f64::INFINITY;
            for i in 0..=4000 {
                let x = mb + (ma - mb) * i as f64 / 4000.0;
                best = best.min(wa * d_minus(ma, x, eps) + wb * d_plus(mb, x, eps));
            }
            assert!(w <= best + 1e-9 * best.max(1.0), "{w} > {best}");
            assert!(best - w <= 1e-4 * best.max(1e-6), "{w} vs grid {best}");
            let w3 = w_eps(ma, mb, 3.0 * wa, 3.0 * wb, eps);
            assert!((w3 - 3.0 * w).abs() <= 1e-9 * w3.max(1e-12));
        }
        let (ma, mb, wa, wb) = (0.8, 0.4, 3.0, 5.0);
        let x = (wa * ma + wb * mb) / (wa + wb);
        let glr = wa * kl_bernoulli(ma, x) + wb * kl_bernoulli(mb, x);
        assert!((w_eps(ma, mb, wa, wb, f64::INFINITY) - glr).abs() < 1e-12);
    }
}
