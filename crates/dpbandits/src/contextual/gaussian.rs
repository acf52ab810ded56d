//! The paper's contextual generator: every round `k` fresh actions i.i.d.
//! `N((1/sqrt d, ..., 1/sqrt d), variance * I_d)`, theta* uniform on the unit sphere, Gaussian reward
//! noise (Azize & Basu 2024, Sec. VII; spec zcdp §6, contextual row: d = 3, K = 10, variance 1/10,
//! noise N(0, 1)).
//!
//! # Streams
//! * theta*: drawn **once per experiment** from `Stream::Instance` of the master seed (spec §6 [A]:
//!   the instance is not redrawn per run), unless given explicitly.
//! * actions of run `r`: `Stream::Context`, path `[0, r]`;
//! * reward noise of run `r`: `Stream::Env`, path `[0, r]` (one `eta_t` per round, shared by all
//!   actions and policies: common random numbers).
//!
//! # Privacy boundary
//! Gaussian actions and rewards are unbounded, so they violate Assumption 1 (`||a|| <= 1`,
//! `|r| <= 1`) that the privacy proof of AdaC-OFUL needs (spec §4.5, §6 fidelity note). The paper
//! does not clip. `unit_ball = true` projects every action onto the unit ball (`a / max(1, ||a||)`),
//! which makes Assumption 1 hold for actions; rewards are clipped by the policy
//! (`mode = "guaranteed"`, see [`super::oful`]).

use super::lanes::{LANE_GROUP, ReferenceScan, ReferenceScanner};
use super::{ActionLanes, ActionSet, ContextualEnvConfig, ContextualEnvironment, LaneSource};
use crate::config::{EnvInfo, Setting};
use crate::error::{Error, Result, check};
use crate::math::normal::{ZigguratTable, standard_normal};
use crate::rng::SimRngWords;
use rand_distr::{Distribution, StandardNormal};
use serde::Deserialize;
use serde_json::json;

/// Registry record of the `contextual_gaussian` environment.
pub const CONTEXTUAL_GAUSSIAN: EnvInfo = EnvInfo {
    kind: "contextual_gaussian",
    setting: Setting::Contextual,
    description: "the paper's contexts: every round k fresh actions i.i.d. N(mean 1, variance I_d), theta* on the unit sphere, Gaussian reward noise",
    source: file!(),
};

/// `kind = "contextual_gaussian"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextualGaussianConfig {
    /// Dimension (default 3).
    #[serde(default = "three")]
    pub d: usize,
    /// Actions per round (default 10).
    #[serde(default = "ten")]
    pub k: usize,
    /// Mean of every coordinate of an action (default `1/sqrt(d)`).
    #[serde(default)]
    pub mean: Option<f64>,
    /// Variance of every coordinate (default 0.1).
    #[serde(default = "tenth")]
    pub variance: f64,
    /// Standard deviation of the Gaussian reward noise (default 1).
    #[serde(default = "one")]
    pub noise_sd: f64,
    /// theta*, length `d` (default: uniform on the unit sphere, from the master seed).
    #[serde(default)]
    pub theta: Option<Vec<f64>>,
    /// Project every action onto the unit ball (Assumption 1). Default false (the paper).
    #[serde(default)]
    pub unit_ball: bool,
    #[serde(skip)]
    theta_star: Vec<f64>,
}

fn three() -> usize {
    3
}
fn ten() -> usize {
    10
}
fn tenth() -> f64 {
    0.1
}
fn one() -> f64 {
    1.0
}

/// Check a dimension and a theta vector; shared by the contextual environments.
pub(crate) fn check_dim(d: usize) -> Result<()> {
    if d == 0 || d > super::MAX_DIM_DYN {
        return Err(Error::param(
            "d",
            d,
            format!(
                "an integer in 1..={} (feature dimension)",
                super::MAX_DIM_DYN
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_theta(theta: &[f64], d: usize) -> Result<()> {
    if theta.len() != d {
        return Err(Error::param(
            "theta",
            format!("a list of {} numbers", theta.len()),
            format!("exactly d = {d} numbers"),
        ));
    }
    for (j, &x) in theta.iter().enumerate() {
        check::finite(&format!("theta[{j}]"), x)?;
    }
    Ok(())
}

/// A unit vector uniform on the sphere `S^{d-1}`, drawn from the instance stream.
pub(crate) fn uniform_sphere(master_seed: u64, d: usize) -> Vec<f64> {
    let mut rng = crate::rng::instance_rng(master_seed, &[crate::rng::instance::CONTEXTUAL_THETA]);
    loop {
        let v: Vec<f64> = (0..d).map(|_| StandardNormal.sample(&mut rng)).collect();
        let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if n > 1e-12 {
            return v.into_iter().map(|x| x / n).collect();
        }
    }
}

impl ContextualGaussianConfig {
    /// The paper's instance: d = 3, K = 10, mean 1/sqrt(3), variance 0.1, noise N(0, 1).
    pub fn paper() -> Self {
        ContextualGaussianConfig {
            d: 3,
            k: 10,
            mean: None,
            variance: 0.1,
            noise_sd: 1.0,
            theta: None,
            unit_ball: false,
            theta_star: vec![],
        }
    }

    /// Check every field.
    pub fn validate(&self) -> Result<()> {
        check_dim(self.d)?;
        check::at_least("k", self.k as u64, 1)?;
        if let Some(m) = self.mean {
            check::finite("mean", m)?;
        }
        check::positive("variance", self.variance)?;
        if !(self.noise_sd.is_finite() && self.noise_sd >= 0.0) {
            return Err(Error::param(
                "noise_sd",
                self.noise_sd,
                "a finite number >= 0",
            ));
        }
        if let Some(t) = &self.theta {
            check_theta(t, self.d)?;
        }
        Ok(())
    }

    fn coord_mean(&self) -> f64 {
        self.mean.unwrap_or(1.0 / (self.d as f64).sqrt())
    }
}

impl ContextualEnvConfig for ContextualGaussianConfig {
    fn kind(&self) -> &'static str {
        CONTEXTUAL_GAUSSIAN.kind
    }
    fn dim(&self) -> usize {
        self.d
    }
    fn max_actions(&self) -> usize {
        self.k
    }
    fn instantiate(&mut self, master_seed: u64) -> Result<()> {
        self.validate()?;
        self.theta_star = match &self.theta {
            Some(t) => t.clone(),
            None => uniform_sphere(master_seed, self.d),
        };
        Ok(())
    }
    fn theta(&self) -> &[f64] {
        &self.theta_star
    }
    fn build(&self, master_seed: u64, run: u64) -> Result<Box<dyn ContextualEnvironment>> {
        if self.theta_star.len() != self.d {
            return Err(Error::Config(
                "contextual_gaussian: instantiate() must be called before build()".into(),
            ));
        }
        Ok(Box::new(ContextualGaussian {
            d: self.d,
            k: self.k,
            mean: self.coord_mean(),
            sd: self.variance.sqrt(),
            noise_sd: self.noise_sd,
            unit_ball: self.unit_ball,
            theta: self.theta_star.clone(),
            contexts: SimRngWords::of(&crate::rng::context_rng(master_seed, run)),
            rewards: SimRngWords::of(&crate::rng::context_reward_rng(master_seed, run)),
            features: vec![0.0; self.k * self.d],
            means: vec![0.0; self.k],
            lanes: empty_lanes(self.d, self.k),
            scan: None,
            normals: ZigguratTable::get(),
            ratios: vec![std::cell::Cell::new(f64::NAN); self.k],
            best: 0.0,
            eta: 0.0,
        }))
    }
    fn action_norm_bound(&self) -> Option<f64> {
        self.unit_ball.then_some(1.0)
    }
    fn describe(&self) -> serde_json::Value {
        json!({
            "kind": self.kind(),
            "d": self.d,
            "k": self.k,
            "action_distribution": format!("N({} * 1, {} I_d) i.i.d., fresh every round", self.coord_mean(), self.variance),
            "unit_ball": self.unit_ball,
            "reward_noise": format!("N(0, {}^2), one draw per round shared by all actions (common random numbers)", self.noise_sd),
            "theta_star": self.theta_star,
            "theta_source": if self.theta.is_some() { "given" } else { "uniform on the unit sphere: derive_seed(master_seed, Instance, [0]) (rng::instance::CONTEXTUAL_THETA)" },
            "seed_derivation": crate::rng::describe(&[crate::rng::CONTEXT_RUN, crate::rng::CONTEXT_REWARD_RUN]),
        })
    }
}

/// The running generator of one run.
#[derive(Debug, Clone)]
pub struct ContextualGaussian {
    d: usize,
    k: usize,
    mean: f64,
    sd: f64,
    noise_sd: f64,
    unit_ball: bool,
    theta: Vec<f64>,
    /// The actions' generator (`rng::context_rng`), as plain words for the draw loop.
    contexts: SimRngWords,
    /// The reward noise's generator (`rng::context_reward_rng`), as plain words.
    rewards: SimRngWords,
    features: Vec<f64>,
    means: Vec<f64>,
    /// The round's actions by lane groups (`lanes::fill_lanes`; padding lanes NaN, squared
    /// norm 0) and the scan of their reference along theta* (`None` before the first round).
    lanes: Vec<f64>,
    scan: Option<ReferenceScan>,
    /// The inlined ziggurat's table (`None`: plain `StandardNormal`; the same draws either way).
    normals: Option<&'static ZigguratTable>,
    /// Room for the reference's per-action ratios (`ActionLanes::ratios`).
    ratios: Vec<std::cell::Cell<f64>>,
    best: f64,
    eta: f64,
}

/// A lane buffer for `k` actions of dimension `d` with every lane a padding lane.
fn empty_lanes(d: usize, k: usize) -> Vec<f64> {
    let mut lanes = vec![f64::NAN; k.div_ceil(LANE_GROUP) * (d + 1) * LANE_GROUP];
    for group in lanes.chunks_exact_mut((d + 1) * LANE_GROUP) {
        group[d * LANE_GROUP..].fill(0.0);
    }
    lanes
}

impl ContextualEnvironment for ContextualGaussian {
    fn dim(&self) -> usize {
        self.d
    }
    #[inline]
    fn next_round(&mut self, _t: u64) {
        // The generator in a local (kept in registers, not re-stored per draw): the same draws.
        let mut contexts = self.contexts;
        let (mean, sd) = (self.mean, self.sd);
        match self.normals {
            Some(table) => {
                for x in self.features.iter_mut() {
                    *x = mean + sd * standard_normal(table, &mut contexts);
                }
            }
            None => {
                for x in self.features.iter_mut() {
                    let z: f64 = StandardNormal.sample(&mut contexts);
                    *x = mean + sd * z;
                }
            }
        }
        self.contexts = contexts;
        // A literal `d` per arm: the inlined loops get constant bounds.
        let (f, m, th, ub, l) = (
            &mut self.features[..],
            &mut self.means[..],
            &self.theta[..],
            self.unit_ball,
            &mut self.lanes[..],
        );
        let (best, scan) = match self.d {
            1 => means_and_best(1, f, m, th, ub, l),
            2 => means_and_best(2, f, m, th, ub, l),
            3 => means_and_best(3, f, m, th, ub, l),
            4 => means_and_best(4, f, m, th, ub, l),
            5 => means_and_best(5, f, m, th, ub, l),
            d => means_and_best(d, f, m, th, ub, l),
        };
        self.best = best;
        self.scan = Some(scan);
        let z: f64 = match self.normals {
            Some(table) => standard_normal(table, &mut self.rewards),
            None => StandardNormal.sample(&mut self.rewards),
        };
        self.eta = self.noise_sd * z;
    }
    fn actions(&self) -> ActionSet<'_> {
        ActionSet {
            d: self.d,
            k: self.k,
            features: &self.features,
        }
    }
    fn means(&self) -> &[f64] {
        &self.means
    }
    fn best_mean(&self) -> f64 {
        self.best
    }
    fn noise(&self) -> f64 {
        self.eta
    }
    fn fast_path(&self) -> Option<&dyn LaneSource> {
        Some(self)
    }
}

/// The run loop's fast path (`lanes.rs`): `theta*`, and the lanes built while drawing the round.
impl LaneSource for ContextualGaussian {
    fn reference_theta(&self) -> Option<&[f64]> {
        Some(&self.theta)
    }
    fn lanes(&self) -> Option<ActionLanes<'_>> {
        let scan = self.scan?;
        Some(ActionLanes::with_scan(
            self.d,
            &self.lanes,
            &self.means,
            &self.theta,
            scan,
            &self.ratios,
        ))
    }
}

/// Project the actions (rows of `d` in `features`) onto the unit ball if `unit_ball`, write
/// `means[i] = <theta, a_i>` (summed in order from `-0.0`, as `Iterator::sum`) and return the
/// largest mean; in the same pass, write the actions into `lanes` as
/// `ActionLanes::transpose` does (coordinates and squared norms summed in order from
/// `0.0`) and scan the means as the values of the round's reference along `theta`
/// (`ReferenceScan`: first maximiser, largest other value, largest and total squared norm).
#[inline(always)]
fn means_and_best(
    d: usize,
    features: &mut [f64],
    means: &mut [f64],
    theta: &[f64],
    unit_ball: bool,
    lanes: &mut [f64],
) -> (f64, ReferenceScan) {
    const G: usize = LANE_GROUP;
    let size = (d + 1) * G;
    let theta = &theta[..d];
    let mut best = f64::NEG_INFINITY;
    let mut scanner = ReferenceScanner::new();
    for (i, (a, m)) in features
        .chunks_exact_mut(d)
        .zip(means.iter_mut())
        .enumerate()
    {
        if unit_ball {
            let mut n2 = -0.0;
            for &x in a.iter() {
                n2 += x * x;
            }
            let n = f64::sqrt(n2);
            if n > 1.0 {
                a.iter_mut().for_each(|x| *x /= n);
            }
        }
        let mut s = -0.0;
        for (x, t) in a.iter().zip(theta) {
            s += x * t;
        }
        *m = s;
        best = best.max(s);
        let (group, l) = (&mut lanes[(i / G) * size..(i / G + 1) * size], i % G);
        let mut n2 = 0.0;
        for (j, &x) in a.iter().enumerate() {
            group[j * G + l] = x;
            n2 += x * x;
        }
        group[d * G + l] = n2;
        scanner.push(i, s, n2);
    }
    (best, scanner.finish(d, theta, means.len()))
}

impl crate::config::Config for ContextualGaussianConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        ContextualGaussianConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lanes the environment keeps are the run loop's own: the same lane groups bit for
    /// bit, the means as values, the same reference (first maximiser, gap, largest norm, slope
    /// ratios), with and without the unit-ball projection.
    #[test]
    fn kept_lanes_are_the_transpose() {
        for unit_ball in [false, true] {
            for (d, k) in [(3, 10), (1, 1), (2, 5), (5, 9)] {
                let mut cfg = ContextualGaussianConfig::paper();
                (cfg.d, cfg.k, cfg.unit_ball) = (d, k, unit_ball);
                cfg.instantiate(7).unwrap();
                let mut env = cfg.build(7, 3).unwrap();
                let mut buf = Vec::new();
                for t in 0..500 {
                    env.next_round(t);
                    let fast = env.fast_path().expect("a fast path");
                    let kept = fast.lanes().expect("kept lanes");
                    let theta = fast.reference_theta().unwrap().to_vec();
                    let actions = env.actions();
                    let built = ActionLanes::transpose_with_reference(&actions, &mut buf, &theta);
                    let same = |a: &[f64], b: &[f64]| {
                        a.len() == b.len()
                            && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
                    };
                    assert!(same(kept.groups, built.groups), "d {d} k {k} round {t}");
                    assert!(same(kept.values, env.means()));
                    // Means are summed from -0.0, the run loop's values from 0.0: equal.
                    assert!(kept.values.iter().zip(built.values).all(|(x, y)| x == y));
                    let a = kept.reference.as_ref().unwrap();
                    let b = built.reference.as_ref().unwrap();
                    assert_eq!((a.best, a.gap, a.max_norm), (b.best, b.gap, b.max_norm));
                    assert_eq!(kept.ratio2().to_bits(), built.ratio2().to_bits());
                    let bits = |l: &ActionLanes<'_>| -> Vec<u64> {
                        l.ratios().iter().map(|q| q.get().to_bits()).collect()
                    };
                    assert_eq!(bits(&kept), bits(&built));
                }
            }
        }
    }
}
