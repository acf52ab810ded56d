//! Gaussian arms, optionally clipped to a bounded interval.

use super::{EnvConfig, Environment};
use crate::config::{EnvInfo, Setting};
use crate::error::{Error, Result, check};
use crate::rng::SimRng;
use rand_distr::{Distribution, StandardNormal};
use serde::Deserialize;

/// Registry record of the `gaussian` environment.
pub const GAUSSIAN: EnvInfo = EnvInfo {
    kind: "gaussian",
    setting: Setting::FiniteArmed,
    description: "Gaussian arms N(mean, sigma^2), optionally clipped to [lo, hi]; exact Normal episode sums when unclipped",
    source: file!(),
};

/// Configuration: `kind = "gaussian"`, `means = [...]`, `sigma = 1.0`, optional `clip = [lo, hi]`.
///
/// With `clip`, rewards are `clamp(mean + sigma Z, lo, hi)` (a bounded environment, so private
/// policies with boundary `reject` accept it when `[lo, hi]` is inside their boundary). The mean
/// used for regret is then the exact mean of the clipped distribution.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaussianConfig {
    /// Means of the unclipped Gaussians.
    pub means: Vec<f64>,
    /// Common standard deviation.
    #[serde(default = "one")]
    pub sigma: f64,
    /// Optional clipping interval.
    #[serde(default)]
    pub clip: Option<[f64; 2]>,
}

fn one() -> f64 {
    1.0
}

impl GaussianConfig {
    /// Validate.
    pub fn validate(&self) -> Result<()> {
        if self.means.is_empty() {
            return Err(Error::param("means", "[]", "at least one arm (K >= 1)"));
        }
        for (i, &m) in self.means.iter().enumerate() {
            check::finite(&format!("means[{i}]"), m)?;
        }
        check::positive("sigma", self.sigma)?;
        if let Some([lo, hi]) = self.clip
            && !(lo.is_finite() && hi.is_finite() && lo < hi)
        {
            return Err(Error::param(
                "clip",
                format!("[{lo}, {hi}]"),
                "finite [lo, hi] with lo < hi",
            ));
        }
        Ok(())
    }
}

impl EnvConfig for GaussianConfig {
    fn kind(&self) -> &'static str {
        GAUSSIAN.kind
    }
    fn num_arms(&self) -> usize {
        self.means.len()
    }
    fn reward_range(&self) -> (f64, f64) {
        match self.clip {
            Some([lo, hi]) => (lo, hi),
            None => (f64::NEG_INFINITY, f64::INFINITY),
        }
    }
    fn means(&self) -> Vec<f64> {
        self.means.clone()
    }
    fn build(&self, seed: u64) -> Result<Box<dyn Environment>> {
        Ok(Box::new(Gaussian::new(self.clone(), seed)?))
    }
}

/// Gaussian arms with one generator per arm.
#[derive(Debug, Clone)]
pub struct Gaussian {
    cfg: GaussianConfig,
    /// Effective means (of the clipped distribution when clipping).
    means: Vec<f64>,
    best: f64,
    rngs: Vec<SimRng>,
}

impl Gaussian {
    /// Build from a configuration.
    pub fn new(cfg: GaussianConfig, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let means: Vec<f64> = cfg
            .means
            .iter()
            .map(|&m| match cfg.clip {
                Some([lo, hi]) => clipped_normal_mean(m, cfg.sigma, lo, hi),
                None => m,
            })
            .collect();
        let rngs = super::arm_rngs(seed, means.len());
        Ok(Gaussian {
            best: super::best(&means),
            means,
            cfg,
            rngs,
        })
    }
}

impl Environment for Gaussian {
    fn reward_range(&self) -> (f64, f64) {
        self.cfg.reward_range()
    }
    fn num_arms(&self) -> usize {
        self.means.len()
    }
    fn mean(&self, arm: usize, _t: u64) -> f64 {
        self.means[arm]
    }
    fn best_mean(&self, _t: u64) -> f64 {
        self.best
    }
    #[inline]
    fn pull(&mut self, arm: usize, _t: u64) -> f64 {
        let z: f64 = StandardNormal.sample(&mut self.rngs[arm]);
        let r = self.cfg.means[arm] + self.cfg.sigma * z;
        match self.cfg.clip {
            Some([lo, hi]) => r.clamp(lo, hi),
            None => r,
        }
    }
    /// Exact: Normal(n mu, n sigma^2) without clipping; `n` draws with clipping.
    fn pull_sum(&mut self, arm: usize, t: u64, n: u64) -> f64 {
        if self.cfg.clip.is_some() {
            return (0..n).map(|i| self.pull(arm, t + i)).sum();
        }
        let z: f64 = StandardNormal.sample(&mut self.rngs[arm]);
        let nf = n as f64;
        nf * self.cfg.means[arm] + self.cfg.sigma * nf.sqrt() * z
    }
}

/// Mean of `clamp(X, lo, hi)` for `X ~ N(m, s^2)`.
pub(crate) fn clipped_normal_mean(m: f64, s: f64, lo: f64, hi: f64) -> f64 {
    let a = (lo - m) / s;
    let b = (hi - m) / s;
    let (pa, pb) = (phi_cdf(a), phi_cdf(b));
    // E[X; a < Z < b] = m (pb - pa) + s (phi(a) - phi(b))
    lo * pa + hi * (1.0 - pb) + m * (pb - pa) + s * (phi_pdf(a) - phi_pdf(b))
}

fn phi_pdf(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Standard normal CDF via [`erfc`].
pub(crate) fn phi_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Complementary error function, relative error < 1e-15 (Numerical Recipes 3rd ed., `Erf::erfccheb`).
pub(crate) fn erfc(x: f64) -> f64 {
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    #[allow(clippy::excessive_precision)] // published coefficients, kept verbatim
    const COF: [f64; 28] = [
        -1.3026537197817094,
        6.419_697_923_564_902e-1,
        1.9476473204185836e-2,
        -9.561514786808631e-3,
        -9.46595344482036e-4,
        3.66839497852761e-4,
        4.2523324806907e-5,
        -2.0278578112534e-5,
        -1.624290004647e-6,
        1.303655835580e-6,
        1.5626441722e-8,
        -8.5238095915e-8,
        6.529054439e-9,
        5.059343495e-9,
        -9.91364156e-10,
        -2.27365122e-10,
        9.6467911e-11,
        2.394038e-12,
        -6.886027e-12,
        8.94487e-13,
        3.13092e-13,
        -1.12708e-13,
        3.81e-16,
        7.106e-15,
        -1.523e-15,
        -9.4e-17,
        1.21e-16,
        -2.8e-17,
    ];
    let t = 2.0 / (2.0 + x);
    let ty = 4.0 * t - 2.0;
    let (mut d, mut dd) = (0.0f64, 0.0f64);
    for &c in COF[1..].iter().rev() {
        let tmp = d;
        d = ty * d - dd + c;
        dd = tmp;
    }
    t * (-x * x + 0.5 * (COF[0] + ty * d) - dd).exp()
}

impl crate::config::Config for GaussianConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        GaussianConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_reference_values() {
        assert!((erfc(0.0) - 1.0).abs() < 1e-15);
        assert!((erfc(1.0) - 0.157_299_207_050_285_13).abs() < 1e-15);
        assert!((erfc(-1.0) - 1.842_700_792_949_715).abs() < 1e-15);
        assert!((phi_cdf(1.959_963_984_540_054) - 0.975).abs() < 1e-12);
    }

    #[test]
    fn clipped_mean_limits() {
        assert!((clipped_normal_mean(0.5, 1e-6, 0.0, 1.0) - 0.5).abs() < 1e-9);
        assert!((clipped_normal_mean(0.5, 1.0, -50.0, 50.0) - 0.5).abs() < 1e-12);
        // symmetric clipping keeps the mean
        assert!((clipped_normal_mean(0.5, 1.0, 0.0, 1.0) - 0.5).abs() < 1e-12);
    }
}
