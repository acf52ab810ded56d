//! The Gaussian mechanism calibrated for rho-zCDP.
//!
//! # Calibration
//! For a statistic with L2-sensitivity `s`, releasing `f(d) + N(0, sigma^2)` with
//! `sigma^2 = s^2 / (2 rho)` is rho-zCDP (Bun & Steinke 2016, Prop. 1.6; Azize & Basu 2024,
//! Thm 18 with `b = 1/(2 rho)`). The privacy map is `rho(s) = s^2 / (2 sigma^2)`.
//!
//! [`GaussianMechanism::for_zcdp`] computes `sigma = s / sqrt(2) / sqrt(rho)` (no intermediate
//! `2 rho` that could overflow) and then moves `sigma` up one ulp at a time, at most
//! [`MAX_ROUNDING_STEPS`] times, until the map evaluated in floating point is `<= rho` (OpenDP's
//! convention of rounding towards more privacy), so the stated budget is never exceeded by
//! rounding. A `(sensitivity, rho)` pair whose noise scale is not a positive finite double is
//! refused.
//!
//! # Released statistics
//! [`NoisyMean`] is the only way a private policy in this crate obtains a mean: it can only be built
//! by [`GaussianMechanism::release_mean`], so "the index is post-processing of released values"
//! holds by construction. Policies cache the released value and never sample it again
//! (spec zcdp §2.5).

use super::{RewardBoundary, RewardSum};

/// The most ulps a calibration moves its noise scale up before giving up (it needs one or two).
pub const MAX_ROUNDING_STEPS: usize = 64;
use crate::error::{Error, Result};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

/// A Gaussian mechanism with a fixed noise scale.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GaussianMechanism {
    sigma: f64,
}

impl GaussianMechanism {
    /// Calibrate for `rho`-zCDP at L2-sensitivity `sensitivity` (`sigma^2 = s^2/(2 rho)`, rounded up).
    /// `rho = inf` gives `sigma = 0` (the non-private limit).
    ///
    /// # Errors
    /// `sensitivity` must be finite and >= 0; `rho` must be > 0 (inf allowed) and not NaN.
    pub fn for_zcdp(sensitivity: f64, rho: f64) -> Result<Self> {
        if !(sensitivity.is_finite() && sensitivity >= 0.0) {
            return Err(Error::param(
                "sensitivity",
                sensitivity,
                "a finite number >= 0",
            ));
        }
        if rho.is_nan() || rho <= 0.0 {
            return Err(Error::param(
                "rho",
                rho,
                "a number > 0 (inf gives the non-private limit)",
            ));
        }
        if rho.is_infinite() || sensitivity == 0.0 {
            return Ok(GaussianMechanism { sigma: 0.0 });
        }
        let mut sigma = sensitivity / std::f64::consts::SQRT_2 / rho.sqrt();
        for _ in 0..MAX_ROUNDING_STEPS {
            if !(sigma.is_finite() && sigma > 0.0) {
                break;
            }
            if zcdp_loss(sensitivity, sigma) <= rho {
                return Ok(GaussianMechanism { sigma });
            }
            sigma = sigma.next_up();
        }
        Err(Error::param(
            "rho",
            rho,
            format!(
                "a budget whose noise scale sensitivity/sqrt(2 rho) (sensitivity {sensitivity}) \
                 is a positive finite number"
            ),
        ))
    }

    /// Build from an explicit standard deviation (for variants whose calibration is computed elsewhere).
    pub fn with_sigma(sigma: f64) -> Result<Self> {
        if !(sigma.is_finite() && sigma >= 0.0) {
            return Err(Error::param("sigma", sigma, "a finite number >= 0"));
        }
        Ok(GaussianMechanism { sigma })
    }

    /// Noise standard deviation.
    pub fn sigma(&self) -> f64 {
        self.sigma
    }

    /// Noise variance.
    pub fn variance(&self) -> f64 {
        self.sigma * self.sigma
    }

    /// Privacy map: the rho-zCDP loss of one release at L2-sensitivity `sensitivity`.
    pub fn zcdp_map(&self, sensitivity: f64) -> f64 {
        zcdp_loss(sensitivity, self.sigma)
    }

    /// Release `value + N(0, sigma^2)`.
    #[inline]
    pub fn release(&self, value: f64, rng: &mut (impl Rng + ?Sized)) -> f64 {
        let out = if self.sigma == 0.0 {
            value
        } else {
            let z: f64 = StandardNormal.sample(rng);
            value + self.sigma * z
        };
        super::tap::record(super::tap::Family::Gaussian, out);
        out
    }

    /// Release the mean of the rewards of `sum` (a [`RewardSum`]: every reward already admitted
    /// by a boundary, so the mean's L2-sensitivity is `(hi - lo)/n` by construction).
    ///
    /// # Errors
    /// A sum of no rewards (its mean is undefined), or a sum whose rewards are not inside
    /// `boundary` (the range this mechanism's calibration assumed).
    pub fn release_mean(
        &self,
        sum: &RewardSum,
        boundary: &RewardBoundary,
        rng: &mut (impl Rng + ?Sized),
    ) -> Result<NoisyMean> {
        let n = sum.releasable(boundary)?;
        let mean = sum.sum() / n as f64;
        Ok(NoisyMean {
            value: self.release(mean, rng),
            samples: n,
            sigma: self.sigma,
        })
    }
}

/// `s^2 / (2 sigma^2)`, with `0/0 = 0` and `s/0 = inf`.
fn zcdp_loss(sensitivity: f64, sigma: f64) -> f64 {
    if sensitivity == 0.0 {
        0.0
    } else if sigma == 0.0 {
        f64::INFINITY
    } else {
        let r = sensitivity / sigma;
        // (r/2) r equals r^2/2 exactly (halving is exact) and does not overflow for r < 2^512.
        (0.5 * r) * r
    }
}

/// A released (noisy) mean. Constructed only by a mechanism; policies cache it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NoisyMean {
    value: f64,
    samples: u64,
    sigma: f64,
}

impl NoisyMean {
    /// The exact mean of `n` rewards summing to `sum`, with no noise and no clipping: the
    /// `rho = inf` limit used by non-private counterparts (which have no privacy boundary).
    pub(crate) fn non_private(sum: f64, n: u64) -> Self {
        NoisyMean {
            value: sum / n as f64,
            samples: n,
            sigma: 0.0,
        }
    }

    /// A value released by another mechanism of this module (the deployment path of
    /// [`super::NoiseSource`]), with its sample count and noise scale at the mean level.
    pub(crate) fn released(value: f64, samples: u64, sigma: f64) -> Self {
        NoisyMean {
            value,
            samples,
            sigma,
        }
    }

    /// The released value.
    pub fn value(&self) -> f64 {
        self.value
    }
    /// How many rewards it summarises.
    pub fn samples(&self) -> u64 {
        self.samples
    }
    /// The noise standard deviation it was released with.
    pub fn sigma(&self) -> f64 {
        self.sigma
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::BoundaryMode;
    use crate::rng::{Stream, stream_rng};
    use proptest::prelude::*;

    /// Spec zcdp §8 T1: mean of n rewards in [0,1], s = 1/n, sigma^2 = 1/(2 rho n^2);
    /// rho = 0.5, n = 4 gives 1/(2 * 0.5 * 16) = 0.0625.
    #[test]
    fn calibration_matches_spec_t1() {
        let m = GaussianMechanism::for_zcdp(1.0 / 4.0, 0.5).unwrap();
        assert!((m.variance() - 0.0625).abs() < 1e-15);
        assert!(m.zcdp_map(0.25) <= 0.5);
        // OFUL: sensitivity 2, per coordinate 2/rho (spec T1).
        let m = GaussianMechanism::for_zcdp(2.0, 0.1).unwrap();
        assert!((m.variance() - 2.0 / 0.1).abs() < 1e-9);
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(GaussianMechanism::for_zcdp(1.0, 0.0).is_err());
        assert!(GaussianMechanism::for_zcdp(1.0, -1.0).is_err());
        let e = GaussianMechanism::for_zcdp(1.0, f64::NAN)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rho") && e.contains("NaN"), "{e}");
        assert!(GaussianMechanism::for_zcdp(-1.0, 1.0).is_err());
        assert!(GaussianMechanism::for_zcdp(f64::INFINITY, 1.0).is_err());
        assert_eq!(
            GaussianMechanism::for_zcdp(1.0, f64::INFINITY)
                .unwrap()
                .sigma(),
            0.0
        );
        assert_eq!(
            GaussianMechanism::for_zcdp(0.0, 1.0).unwrap().zcdp_map(0.0),
            0.0
        );
    }

    /// Empirical variance of released noise matches the calibration (chi-square bound with
    /// 200k samples; |ratio - 1| > 0.02 has probability < 1e-9 under the null).
    #[test]
    fn noise_has_calibrated_variance() {
        let m = GaussianMechanism::for_zcdp(0.5, 0.3).unwrap();
        let mut rng = stream_rng(7, Stream::Noise, &[]);
        let n = 200_000;
        let mut s2 = 0.0;
        for _ in 0..n {
            let z = m.release(0.0, &mut rng);
            s2 += z * z;
        }
        let ratio = s2 / n as f64 / m.variance();
        assert!((ratio - 1.0).abs() < 0.02, "ratio {ratio}");
    }

    /// C3: the sum-based API takes only boundary-built sums: one out-of-range reward moves the
    /// release by at most (hi - lo)/n, and a sum of no rewards or of a wider range is refused.
    #[test]
    fn release_mean_takes_boundary_built_sums() {
        let m = GaussianMechanism::for_zcdp(1.0, f64::INFINITY).unwrap();
        let b = RewardBoundary::unit(BoundaryMode::Clip);
        let mut rng = stream_rng(1, Stream::Noise, &[]);
        let zeros = b.sum_of([0.0; 100]).unwrap();
        let mut one_huge = [0.0; 100];
        one_huge[0] = 1e6;
        let huge = b.sum_of(one_huge).unwrap();
        let r0 = m.release_mean(&zeros, &b, &mut rng).unwrap().value();
        let r1 = m.release_mean(&huge, &b, &mut rng).unwrap().value();
        assert_eq!(r0, 0.0);
        assert!((r1 - r0 - 0.01).abs() < 1e-15, "{r1}");
        assert!(m.release_mean(&b.empty_sum(), &b, &mut rng).is_err());
        let wide = RewardBoundary::new(0.0, 2.0, BoundaryMode::Clip).unwrap();
        let e = m.release_mean(&wide.sum_of([2.0]).unwrap(), &b, &mut rng);
        assert!(matches!(e, Err(Error::Protocol(_))), "{e:?}");
    }

    /// C1 / M1: extreme budgets end at once, with an error or a finite calibration.
    #[test]
    fn extreme_budgets_end_with_a_finite_scale_or_an_error() {
        for rho in [1e308, 9e307] {
            let m = GaussianMechanism::for_zcdp(1.0, rho).unwrap();
            assert!(m.sigma() > 0.0 && m.sigma().is_finite() && m.zcdp_map(1.0) <= rho);
        }
        // 2 rho overflows in the privacy map: refused rather than looping (C1 hung here).
        if let Ok(m) = GaussianMechanism::for_zcdp(1.0, f64::MAX) {
            assert!(m.zcdp_map(1.0) <= f64::MAX);
        }
        assert!(GaussianMechanism::for_zcdp(1e300, 1e-300).is_err());
        assert!(GaussianMechanism::for_zcdp(f64::MIN_POSITIVE, f64::MAX).is_err());
    }

    proptest! {
        /// Conservative rounding: the realised loss never exceeds the target budget.
        #[test]
        fn calibrated_loss_never_above_budget(s in 1e-6f64..1e3, rho in 1e-6f64..10.0) {
            let m = GaussianMechanism::for_zcdp(s, rho).unwrap();
            prop_assert!(m.zcdp_map(s) <= rho);
            // and it is tight: within a few ulps of the target.
            prop_assert!(m.zcdp_map(s) >= rho * (1.0 - 1e-12));
        }
    }
}
