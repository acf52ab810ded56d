//! The Laplace mechanism calibrated for pure epsilon-DP.
//!
//! # Calibration
//! For a statistic with L1-sensitivity `s`, releasing `f(d) + Lap(b)` with `b = s / epsilon` is
//! epsilon-DP (Dwork, McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Thm 3.6). Its privacy map is
//! `epsilon(s) = s / b`; as zCDP it is `epsilon^2 / 2`-zCDP (Bun & Steinke 2016, Prop. 1.4).
//!
//! [`LaplaceMechanism::for_pure_dp`] rounds `b` up (one ulp at a time, a bounded number of times)
//! until the map evaluated in floating point is `<= epsilon`, and refuses a pair whose scale is not
//! a positive finite double (`for_pure_dp(f64::MAX, 0.5)`).
//!
//! # Security
//! [`sample_standard_laplace`] is an inverse-CDF sampler on one uniform double: its support is
//! bounded (about +-37) and its values fall on a grid whose gaps leak (Mironov 2012). It is
//! **simulation-grade**.

use super::{RewardBoundary, RewardSum};
use crate::error::{Error, Result};
use rand::{Rng, RngExt};

/// A Laplace mechanism with a fixed scale `b`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LaplaceMechanism {
    scale: f64,
}

impl LaplaceMechanism {
    /// Calibrate for `epsilon`-DP at L1-sensitivity `sensitivity` (`b = s/epsilon`, rounded up).
    /// `epsilon = inf` gives `b = 0` (the non-private limit).
    ///
    /// # Errors
    /// `sensitivity` finite and >= 0; `epsilon` > 0 (inf allowed), not NaN.
    pub fn for_pure_dp(sensitivity: f64, epsilon: f64) -> Result<Self> {
        if !(sensitivity.is_finite() && sensitivity >= 0.0) {
            return Err(Error::param(
                "sensitivity",
                sensitivity,
                "a finite number >= 0",
            ));
        }
        if epsilon.is_nan() || epsilon <= 0.0 {
            return Err(Error::param(
                "epsilon",
                epsilon,
                "a number > 0 (inf gives the non-private limit)",
            ));
        }
        if epsilon.is_infinite() || sensitivity == 0.0 {
            return Ok(LaplaceMechanism { scale: 0.0 });
        }
        let mut scale = sensitivity / epsilon;
        for _ in 0..super::gaussian::MAX_ROUNDING_STEPS {
            if !(scale.is_finite() && scale > 0.0) {
                break;
            }
            if sensitivity / scale <= epsilon {
                return Ok(LaplaceMechanism { scale });
            }
            scale = scale.next_up();
        }
        Err(Error::param(
            "epsilon",
            epsilon,
            format!(
                "a budget whose noise scale sensitivity/epsilon (sensitivity {sensitivity}) is a \
                 positive finite number"
            ),
        ))
    }

    /// Build from an explicit scale `b >= 0`.
    pub fn with_scale(scale: f64) -> Result<Self> {
        if !(scale.is_finite() && scale >= 0.0) {
            return Err(Error::param("scale", scale, "a finite number >= 0"));
        }
        Ok(LaplaceMechanism { scale })
    }

    /// The scale `b`.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Privacy map: the pure-DP loss at L1-sensitivity `sensitivity`.
    pub fn epsilon_map(&self, sensitivity: f64) -> f64 {
        if sensitivity == 0.0 {
            0.0
        } else if self.scale == 0.0 {
            f64::INFINITY
        } else {
            sensitivity / self.scale
        }
    }

    /// The same release seen as zCDP: `epsilon^2 / 2` (Bun & Steinke 2016, Prop. 1.4).
    pub fn zcdp_map(&self, sensitivity: f64) -> f64 {
        let e = self.epsilon_map(sensitivity);
        e * e / 2.0
    }

    /// Release the mean of the rewards of `sum` plus `Lap(b)`: a [`RewardSum`] was built by a
    /// boundary, so the mean's L1-sensitivity is `(hi - lo)/n` by construction.
    ///
    /// # Errors
    /// A sum of no rewards, or one whose rewards are not inside `boundary`.
    pub fn release_mean(
        &self,
        sum: &RewardSum,
        boundary: &RewardBoundary,
        rng: &mut (impl Rng + ?Sized),
    ) -> Result<f64> {
        let n = sum.releasable(boundary)?;
        Ok(self.release(sum.sum() / n as f64, rng))
    }

    /// Release `value + Lap(b)` (inverse-CDF sampling from one uniform).
    #[inline]
    pub fn release(&self, value: f64, rng: &mut (impl Rng + ?Sized)) -> f64 {
        let out = if self.scale == 0.0 {
            value
        } else {
            value + self.scale * sample_standard_laplace(rng)
        };
        super::tap::record(super::tap::Family::Laplace, out);
        out
    }
}

/// A standard Laplace(0, 1) draw: `-sign(u) ln(1 - 2|u|)` for `u` uniform on (-1/2, 1/2).
#[inline]
pub fn sample_standard_laplace(rng: &mut (impl Rng + ?Sized)) -> f64 {
    // u in (-0.5, 0.5]: random::<f64>() is in [0, 1).
    let u: f64 = 0.5 - rng.random::<f64>();
    let a = (1.0 - 2.0 * u.abs()).max(f64::MIN_POSITIVE);
    -u.signum() * a.ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Stream, stream_rng};
    use proptest::prelude::*;

    /// M1: infinite scales are refused.
    #[test]
    fn infinite_scales_are_refused() {
        assert!(LaplaceMechanism::for_pure_dp(f64::MAX, 0.5).is_err());
        assert!(LaplaceMechanism::for_pure_dp(1.0, 5e-324).is_err());
        let m = LaplaceMechanism::for_pure_dp(1.0, f64::MAX).unwrap();
        assert!(m.scale() > 0.0 && m.epsilon_map(1.0) <= f64::MAX);
    }

    #[test]
    fn calibration_and_errors() {
        let m = LaplaceMechanism::for_pure_dp(1.0, 0.5).unwrap();
        assert!((m.scale() - 2.0).abs() < 1e-15);
        assert!(m.epsilon_map(1.0) <= 0.5);
        assert!((m.zcdp_map(1.0) - 0.125).abs() < 1e-15);
        assert!(LaplaceMechanism::for_pure_dp(1.0, 0.0).is_err());
        assert!(LaplaceMechanism::for_pure_dp(1.0, f64::NAN).is_err());
        assert!(LaplaceMechanism::for_pure_dp(-1.0, 1.0).is_err());
        assert_eq!(
            LaplaceMechanism::for_pure_dp(1.0, f64::INFINITY)
                .unwrap()
                .scale(),
            0.0
        );
    }

    /// Moments of the sampler: mean 0, E|X| = b, Var = 2 b^2 (200k draws; the tolerances are
    /// > 6 standard errors, false-failure rate < 1e-8).
    #[test]
    fn sampler_moments() {
        let m = LaplaceMechanism::for_pure_dp(1.0, 1.0).unwrap();
        let mut rng = stream_rng(11, Stream::Noise, &[]);
        let n = 200_000;
        let (mut s, mut a, mut s2) = (0.0, 0.0, 0.0);
        for _ in 0..n {
            let z = m.release(0.0, &mut rng);
            s += z;
            a += z.abs();
            s2 += z * z;
        }
        let n = n as f64;
        assert!((s / n).abs() < 0.02);
        assert!((a / n - 1.0).abs() < 0.015);
        assert!((s2 / n - 2.0).abs() < 0.06);
    }

    proptest! {
        #[test]
        fn calibrated_loss_never_above_budget(s in 1e-6f64..1e3, eps in 1e-6f64..20.0) {
            let m = LaplaceMechanism::for_pure_dp(s, eps).unwrap();
            prop_assert!(m.epsilon_map(s) <= eps);
            prop_assert!(m.zcdp_map(s) <= eps * eps / 2.0);
        }
    }
}
