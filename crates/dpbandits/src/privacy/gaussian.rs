//! The Gaussian mechanism calibrated for rho-zCDP.
//!
//! # Calibration
//! For a statistic with L2-sensitivity `s`, releasing `f(d) + N(0, sigma^2)` with
//! `sigma^2 = s^2 / (2 rho)` is rho-zCDP (Bun & Steinke 2016, Prop. 1.6; Azize & Basu 2024,
//! Thm 18 with `b = 1/(2 rho)`). The privacy map is `rho(s) = s^2 / (2 sigma^2)`.
//!
//! [`GaussianMechanism::for_zcdp`] computes `sigma = s / sqrt(2 rho)` and then moves `sigma` up
//! one ulp at a time until the map evaluated in floating point is `<= rho` (OpenDP's convention of
//! rounding towards more privacy), so the stated budget is never exceeded by rounding.
//!
//! # Released statistics
//! [`NoisyMean`] is the only way a private policy in this crate obtains a mean: it can only be built
//! by [`GaussianMechanism::release_mean`], so "the index is post-processing of released values"
//! holds by construction. Policies cache the released value and never sample it again
//! (spec zcdp §2.5).

use super::RewardBoundary;
use crate::error::{Error, Result};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

/// A Gaussian mechanism with a fixed noise scale.
#[derive(Debug, Clone, Copy, PartialEq)]
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
        let mut sigma = sensitivity / (2.0 * rho).sqrt();
        while zcdp_loss(sensitivity, sigma) > rho {
            sigma = sigma.next_up();
        }
        Ok(GaussianMechanism { sigma })
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
        if self.sigma == 0.0 {
            return value;
        }
        let z: f64 = StandardNormal.sample(rng);
        value + self.sigma * z
    }

    /// Release the mean of `n` rewards whose (already clipped) sum is `sum`, under `boundary`.
    /// The sum is clipped again to `[n lo, n hi]`, so the sensitivity `(hi - lo)/n` holds whatever
    /// the caller passed.
    pub fn release_mean(
        &self,
        sum: f64,
        n: u64,
        boundary: &RewardBoundary,
        rng: &mut (impl Rng + ?Sized),
    ) -> NoisyMean {
        debug_assert!(n > 0);
        let mean = boundary.clip_sum(sum, n) / n as f64;
        NoisyMean {
            value: self.release(mean, rng),
            samples: n,
            sigma: self.sigma,
        }
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
        r * r / 2.0
    }
}

/// A released (noisy) mean. Constructed only by a mechanism; policies cache it.
#[derive(Debug, Clone, Copy, PartialEq)]
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

    #[test]
    fn release_mean_clips_the_sum() {
        let m = GaussianMechanism::for_zcdp(1.0, f64::INFINITY).unwrap();
        let b = RewardBoundary::unit(BoundaryMode::Clip);
        let mut rng = stream_rng(1, Stream::Noise, &[]);
        assert_eq!(m.release_mean(7.0, 4, &b, &mut rng).value(), 1.0);
        assert_eq!(m.release_mean(2.0, 4, &b, &mut rng).value(), 0.5);
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
