//! The stochastic linear bandit with a fixed finite arm set (spec zcdp §1.2).
//!
//! Reward of arm `a`: `<theta*, a> + sigma Z`, `Z ~ N(0, 1)` (the paper's experiments use
//! `sigma = 1`, §VII). Regret is the pseudo-regret `sum_t Delta_{a_t}`,
//! `Delta_a = max_b <theta*, b - a>`.
//!
//! # Instances
//! `kind = "linear"` takes either explicit `arms = [[..], ..]` (K vectors of one dimension d) or
//! `k` and `d`, in which case the arms are drawn uniformly on the unit sphere `S^{d-1}`; `theta` is
//! given or drawn uniformly on the sphere. Random instances are drawn **once per experiment** from
//! the master seed ([`crate::rng::Stream::Instance`], paths `[0]` for the arms and `[1]` for theta), as the
//! spec proposes (§6 [A]): all runs and all policies face the same instance.
//!
//! # Reward streams
//! Each run owns one generator per arm (`derive_seed(env_seed, Env, [arm])`), so the rewards of an
//! arm do not depend on the policy. A block of `n` pulls of one arm has the exact sum
//! `N(n <theta, a>, n sigma^2)` ([`LinearEnv::pull_sum`], one draw).

use crate::config::{EnvInfo, Setting};
use crate::error::{Error, Result, check};
use crate::rng::SimRng;
use nalgebra::DVector;
use rand_distr::{Distribution, StandardNormal};
use serde::Deserialize;

/// Registry record of the `linear` environment.
pub const LINEAR: EnvInfo = EnvInfo {
    kind: "linear",
    setting: Setting::Linear,
    description: "Linear bandit: K arms in R^d (given, or uniform on the unit sphere), reward <theta, a> + N(0, sigma^2); exact Normal block sums",
    source: file!(),
};

/// `[env]` with `kind = "linear"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearConfig {
    /// Explicit arm vectors (all of one dimension).
    #[serde(default)]
    pub arms: Option<Vec<Vec<f64>>>,
    /// Number of random arms on the unit sphere (when `arms` is not given).
    #[serde(default)]
    pub k: Option<usize>,
    /// Dimension of random arms / theta (when `arms` is not given).
    #[serde(default)]
    pub d: Option<usize>,
    /// The parameter theta*; drawn uniformly on the unit sphere when absent.
    #[serde(default)]
    pub theta: Option<Vec<f64>>,
    /// Standard deviation of the Gaussian reward noise (default 1).
    #[serde(default = "one")]
    pub sigma: f64,
    /// Draw the random parts of the instance (arms and/or theta not given) afresh for every run
    /// instead of once per experiment (default false, the spec's proposal §6 \[A\]).
    #[serde(default)]
    pub redraw_per_run: bool,
    /// The once-per-experiment instance, drawn by [`super::LinearEnvConfig::instantiate`].
    #[serde(skip)]
    pub resolved: Option<std::sync::Arc<LinearInstance>>,
}

fn one() -> f64 {
    1.0
}

impl LinearConfig {
    /// Check every field (everything that does not need the master seed).
    pub fn validate(&self) -> Result<()> {
        check::positive("sigma", self.sigma)?;
        let d = match (&self.arms, self.k, self.d) {
            (Some(arms), k, d) => {
                if arms.is_empty() {
                    return Err(Error::param("arms", "[]", "at least one arm vector"));
                }
                let d0 = arms[0].len();
                if d0 == 0 {
                    return Err(Error::param(
                        "arms[0]",
                        "[]",
                        "a vector of dimension d >= 1",
                    ));
                }
                for (i, a) in arms.iter().enumerate() {
                    if a.len() != d0 {
                        return Err(Error::param(
                            format!("arms[{i}]"),
                            format!("{a:?}"),
                            format!(
                                "a vector of dimension {d0} like arms[0] (arms of mixed dimension)"
                            ),
                        ));
                    }
                    for (j, &x) in a.iter().enumerate() {
                        check::finite(&format!("arms[{i}][{j}]"), x)?;
                    }
                }
                if let Some(k) = k
                    && k != arms.len()
                {
                    return Err(Error::param(
                        "k",
                        k,
                        format!("the number of listed arms ({}) or no k", arms.len()),
                    ));
                }
                if let Some(d) = d
                    && d != d0
                {
                    return Err(Error::param(
                        "d",
                        d,
                        format!("the dimension of the listed arms ({d0}) or no d"),
                    ));
                }
                d0
            }
            (None, k, d) => {
                let k = k.ok_or_else(|| {
                    Error::param(
                        "k",
                        "(missing)",
                        "the number of random arms (or give `arms = [[..], ..]`)",
                    )
                })?;
                let d = d.ok_or_else(|| {
                    Error::param(
                        "d",
                        "(missing)",
                        "the dimension of the random arms (or give `arms`)",
                    )
                })?;
                check::at_least("k", k as u64, 1)?;
                check::at_least("d", d as u64, 1)?;
                d
            }
        };
        if let Some(theta) = &self.theta {
            if theta.len() != d {
                return Err(Error::param(
                    "theta",
                    format!("{theta:?}"),
                    format!("a vector of dimension d = {d} (the arms' dimension)"),
                ));
            }
            for (j, &x) in theta.iter().enumerate() {
                check::finite(&format!("theta[{j}]"), x)?;
            }
        }
        Ok(())
    }

    /// Resolve the instance: explicit vectors, or draws from the master seed.
    pub fn instance(&self, master_seed: u64) -> Result<LinearInstance> {
        self.instance_at(master_seed, &[])
    }

    /// The instance of run `run` when `redraw_per_run` (paths `[0, run]`, `[1, run]` of the
    /// instance stream), else the experiment's single instance.
    pub fn instance_for_run(&self, master_seed: u64, run: u64) -> Result<LinearInstance> {
        if self.redraw_per_run {
            self.instance_at(master_seed, &[run])
        } else {
            self.instance(master_seed)
        }
    }

    fn instance_at(&self, master_seed: u64, run: &[u64]) -> Result<LinearInstance> {
        self.validate()?;
        let path = |i: u64| -> Vec<u64> { std::iter::once(i).chain(run.iter().copied()).collect() };
        let arms: Vec<Vec<f64>> = match &self.arms {
            Some(a) => a.clone(),
            None => {
                let (k, d) = (self.k.unwrap_or(0), self.d.unwrap_or(0));
                let mut rng =
                    crate::rng::instance_rng(master_seed, &path(crate::rng::instance::LINEAR_ARMS));
                (0..k).map(|_| unit_sphere(d, &mut rng)).collect()
            }
        };
        let d = arms[0].len();
        let theta = match &self.theta {
            Some(t) => t.clone(),
            None => unit_sphere(
                d,
                &mut crate::rng::instance_rng(
                    master_seed,
                    &path(crate::rng::instance::LINEAR_THETA),
                ),
            ),
        };
        LinearInstance::new(arms, theta, self.sigma)
    }
}

impl super::LinearEnvConfig for LinearConfig {
    fn kind(&self) -> &'static str {
        LINEAR.kind
    }
    fn instantiate(&mut self, master_seed: u64) -> Result<()> {
        self.resolved = Some(std::sync::Arc::new(self.instance(master_seed)?));
        Ok(())
    }
    fn build(&self, master_seed: u64, run: u64) -> Result<super::LinearRun> {
        let inst = match (&self.resolved, self.redraw_per_run) {
            (Some(i), false) => i.clone(),
            _ => std::sync::Arc::new(self.instance_for_run(master_seed, run)?),
        };
        let env = LinearEnv {
            rngs: (0..inst.arms.len())
                .map(|a| crate::rng::arm_rng(LinearInstance::run_seed(master_seed, run), a))
                .collect(),
            instance: inst.clone(),
        };
        Ok((inst.arms.clone(), Box::new(env)))
    }
    fn describe(&self) -> serde_json::Value {
        let Some(instance) = &self.resolved else {
            return serde_json::Value::Null;
        };
        let arms: Vec<Vec<f64>> = instance
            .arms()
            .iter()
            .map(|a| a.iter().copied().collect())
            .collect();
        serde_json::json!({
            "kind": "linear",
            "arms": instance.num_arms(),
            "dim": instance.dim(),
            "sigma": instance.sigma(),
            "arm_vectors": arms,
            "theta": instance.theta().iter().copied().collect::<Vec<_>>(),
            "means": instance.means(),
            "gaps": instance.gaps(),
            "reward_range": [f64::NEG_INFINITY.to_string(), f64::INFINITY.to_string()],
            "redraw_per_run": self.redraw_per_run,
            "instance_note": if self.redraw_per_run { "random arms/theta are redrawn for every run (paths [0, r], [1, r]); the vectors shown are the once-per-experiment draw, not used" } else { "one instance for all runs and policies" },
            "seed_derivation": format!(
                "random arms: derive_seed(master_seed, Instance, [{}]); random theta: derive_seed(master_seed, Instance, [{}]) (drawn once per experiment); {}",
                crate::rng::instance::LINEAR_ARMS,
                crate::rng::instance::LINEAR_THETA,
                crate::rng::describe(&[crate::rng::ENV_RUN, crate::rng::ENV_ARM])
            ),
        })
    }
}

/// A uniform draw on the unit sphere `S^{d-1}` (normalised standard Gaussian vector).
pub fn unit_sphere(d: usize, rng: &mut SimRng) -> Vec<f64> {
    loop {
        let v: Vec<f64> = (0..d).map(|_| StandardNormal.sample(rng)).collect();
        let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if n > 1e-12 {
            return v.into_iter().map(|x| x / n).collect();
        }
    }
}

/// A resolved linear bandit instance: arms, theta*, noise level, means and gaps.
#[derive(Debug, Clone)]
pub struct LinearInstance {
    arms: Vec<DVector<f64>>,
    theta: DVector<f64>,
    sigma: f64,
    means: Vec<f64>,
    gaps: Vec<f64>,
    best: f64,
}

impl LinearInstance {
    /// An instance from explicit vectors.
    ///
    /// # Errors
    /// Empty arm set, `d = 0`, arms of mixed dimension, non-finite entries, `theta` of another
    /// dimension, `sigma <= 0`.
    pub fn new(arms: Vec<Vec<f64>>, theta: Vec<f64>, sigma: f64) -> Result<Self> {
        LinearConfig {
            arms: Some(arms.clone()),
            k: None,
            d: None,
            theta: Some(theta.clone()),
            sigma,
            redraw_per_run: false,
            resolved: None,
        }
        .validate()?;
        let arms: Vec<DVector<f64>> = arms.iter().map(|a| DVector::from_vec(a.clone())).collect();
        let theta = DVector::from_vec(theta);
        let means: Vec<f64> = arms.iter().map(|a| a.dot(&theta)).collect();
        let best = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let gaps = means.iter().map(|m| best - m).collect();
        Ok(LinearInstance {
            arms,
            theta,
            sigma,
            means,
            gaps,
            best,
        })
    }

    /// The arms.
    pub fn arms(&self) -> &[DVector<f64>] {
        &self.arms
    }
    /// theta*.
    pub fn theta(&self) -> &DVector<f64> {
        &self.theta
    }
    /// Number of arms K.
    pub fn num_arms(&self) -> usize {
        self.arms.len()
    }
    /// Dimension d.
    pub fn dim(&self) -> usize {
        self.theta.len()
    }
    /// Reward noise standard deviation.
    pub fn sigma(&self) -> f64 {
        self.sigma
    }
    /// `<theta*, a>` per arm.
    pub fn means(&self) -> &[f64] {
        &self.means
    }
    /// `Delta_a` per arm.
    pub fn gaps(&self) -> &[f64] {
        &self.gaps
    }
    /// The environment of one run.
    pub fn env(&self, seed: u64) -> LinearEnv {
        LinearEnv {
            instance: std::sync::Arc::new(self.clone()),
            rngs: (0..self.arms.len())
                .map(|a| crate::rng::arm_rng(seed, a))
                .collect(),
        }
    }
    /// The seed of environment run `run` (common to every policy of an experiment).
    pub fn run_seed(master_seed: u64, run: u64) -> u64 {
        crate::rng::env_run_seed(master_seed, run)
    }
}

/// One run of a linear bandit: one generator per arm.
#[derive(Debug)]
pub struct LinearEnv {
    instance: std::sync::Arc<LinearInstance>,
    rngs: Vec<SimRng>,
}

/// The linear environment is a finite-armed environment whose means are `<theta*, a>`; the
/// linear run loop ([`super::simulate_linear`]) drives it through this trait.
impl crate::finite::Environment for LinearEnv {
    fn num_arms(&self) -> usize {
        self.instance.arms.len()
    }
    fn mean(&self, arm: usize, _t: u64) -> f64 {
        self.instance.means[arm]
    }
    fn best_mean(&self, _t: u64) -> f64 {
        self.instance.best
    }
    fn pull(&mut self, arm: usize, _t: u64) -> f64 {
        LinearEnv::pull(self, arm)
    }
    fn pull_sum(&mut self, arm: usize, _t: u64, n: u64) -> f64 {
        LinearEnv::pull_sum(self, arm, n)
    }
    fn regret(&self, arm: usize, _t: u64, n: u64) -> f64 {
        LinearEnv::regret(self, arm, n)
    }
}

impl LinearEnv {
    /// One reward of `arm`.
    #[inline]
    pub fn pull(&mut self, arm: usize) -> f64 {
        let z: f64 = StandardNormal.sample(&mut self.rngs[arm]);
        self.instance.means[arm] + self.instance.sigma * z
    }

    /// The exact sum of `n` rewards of `arm`: `N(n mu_a, n sigma^2)`, one draw.
    #[inline]
    pub fn pull_sum(&mut self, arm: usize, n: u64) -> f64 {
        let z: f64 = StandardNormal.sample(&mut self.rngs[arm]);
        let n = n as f64;
        n * self.instance.means[arm] + self.instance.sigma * n.sqrt() * z
    }

    /// Pseudo-regret of `n` pulls of `arm`.
    #[inline]
    pub fn regret(&self, arm: usize, n: u64) -> f64 {
        self.instance.gaps[arm] * n as f64
    }
}

impl crate::config::Config for LinearConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        LinearConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(s: &str) -> LinearConfig {
        toml::from_str(s).unwrap()
    }

    /// Bad input names the field and the value (issue 3, "Done when" 4).
    #[test]
    fn bad_input_is_a_clear_error() {
        let cases = [
            ("arms = [[1.0, 0.0], [1.0]]", "arms[1]"),
            ("arms = [[1.0, nan]]", "arms[0][1] = NaN"),
            ("arms = [[1.0, inf]]", "arms[0][1] = inf"),
            ("arms = [[]]", "arms[0]"),
            ("arms = []", "arms = []"),
            ("k = 3\nd = 0", "d = 0"),
            ("k = 0\nd = 2", "k = 0"),
            ("d = 2", "k = (missing)"),
            ("arms = [[1.0, 0.0]]\ntheta = [1.0]", "theta = [1.0]"),
            ("k = 2\nd = 2\nsigma = -1.0", "sigma = -1"),
            ("arms = [[1.0]]\nk = 2", "k = 2"),
        ];
        for (text, want) in cases {
            let e = cfg(text).validate().unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(e.contains("expected"), "{e}");
        }
    }

    #[test]
    fn random_instance_is_on_the_sphere_and_reproducible() {
        let c = cfg("k = 10\nd = 3");
        let a = c.instance(5).unwrap();
        let b = c.instance(5).unwrap();
        assert_eq!(a.arms(), b.arms());
        assert_eq!(a.theta(), b.theta());
        for x in a.arms() {
            assert!((x.norm() - 1.0).abs() < 1e-12);
        }
        assert!((a.theta().norm() - 1.0).abs() < 1e-12);
        assert_ne!(c.instance(6).unwrap().theta(), a.theta());
        let best = a.gaps().iter().copied().fold(f64::INFINITY, f64::min);
        assert_eq!(best, 0.0);
    }

    /// The block sum is N(n mu, n sigma^2): mean and variance of 20k draws (4.5-sigma bounds,
    /// false-failure rate < 1e-5).
    #[test]
    fn block_sums_have_the_right_law() {
        let inst = LinearInstance::new(vec![vec![0.3, 0.4]], vec![1.0, 0.5], 2.0).unwrap();
        let mut env = inst.env(11);
        let (n, reps) = (50u64, 20_000);
        let mu = 50.0 * 0.5;
        let var = 50.0 * 4.0;
        let xs: Vec<f64> = (0..reps).map(|_| env.pull_sum(0, n)).collect();
        let m = xs.iter().sum::<f64>() / reps as f64;
        let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (reps - 1) as f64;
        assert!((m - mu).abs() < 4.5 * (var / reps as f64).sqrt(), "{m}");
        assert!(
            (v / var - 1.0).abs() < 4.5 * (2.0 / reps as f64).sqrt(),
            "{v}"
        );
    }
}
