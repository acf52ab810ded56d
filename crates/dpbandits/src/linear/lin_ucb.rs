//! LinUCB: OFUL on a fixed finite arm set, the non-private optimistic baseline of the linear
//! setting.
//!
//! # Algorithm
//! Abbasi-Yadkori, Pal & Szepesvari (2011), "Improved Algorithms for Linear Stochastic Bandits",
//! Algorithm 1 (OFUL) with the confidence radius of their Theorem 2, on the fixed arm set
//! `{a_1, ..., a_K}` (the setting the GOPE family plays in; "LinUCB" in Lattimore & Szepesvari
//! 2020, Ch. 19). Every round `t`:
//! * `V_t = lambda I + sum_{s<t} a_s a_s^T`, `theta^_t = V_t^{-1} sum_{s<t} a_s r_s`;
//! * `beta_t = sigma sqrt(2 ln(1/delta) + ln(det V_t / lambda^d)) + sqrt(lambda) S`;
//! * play `argmax_a <theta^_t, a> + beta_t ||a||_{V_t^{-1}}` (ties: lowest index).
//!
//! `V_t^{-1}` is kept by Sherman–Morrison rank-one updates and `ln det V_t` by the matrix
//! determinant lemma (`ln det V_{t+1} = ln det V_t + ln(1 + a^T V_t^{-1} a)`), so a round costs
//! `O(K d^2)` and allocates nothing.
//!
//! # Privacy
//! None: the non-private reference (commits to one round at a time, reads every reward).
//!
//! # Parameters
//! `lambda` (> 0, default 1: the regulariser), `delta` (in (0, 1), default 0.001: confidence),
//! `s` (> 0, default 1: bound on `||theta*||`), `sigma` (> 0, default 1: sub-Gaussian constant of
//! the reward noise).

use super::{LinearPolicy, LinearPolicyConfig};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::finite::{Pull, argmax};
use crate::privacy::{PrivacyGuarantee, RewardBoundary, RewardSum};
use crate::protocol::Gate;
use nalgebra::DVector;
use serde::Deserialize;

/// Registry record of `lin_ucb`.
pub const LIN_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "lin_ucb",
    name: "LinUCB (OFUL on a fixed arm set)",
    setting: Setting::Linear,
    reference: "Abbasi-Yadkori, Pal & Szepesvari 2011, Alg. 1 (OFUL), Thm 2 radius; Lattimore & Szepesvari 2020, Ch. 19",
    privacy: "none",
    example: "",
    source: file!(),
    doc: include_str!("lin_ucb.rs"),
    private: false,
    release_keys: crate::config::NO_RELEASE,
};

/// `kind = "lin_ucb"`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinUcbConfig {
    /// Regulariser lambda > 0.
    #[serde(default = "one")]
    pub lambda: f64,
    /// Confidence delta in (0, 1).
    #[serde(default = "default_delta")]
    pub delta: f64,
    /// Bound S on `||theta*||`.
    #[serde(default = "one")]
    pub s: f64,
    /// Sub-Gaussian constant of the reward noise.
    #[serde(default = "one")]
    pub sigma: f64,
}

fn one() -> f64 {
    1.0
}
fn default_delta() -> f64 {
    1e-3
}

impl Default for LinUcbConfig {
    fn default() -> Self {
        LinUcbConfig {
            lambda: 1.0,
            delta: default_delta(),
            s: 1.0,
            sigma: 1.0,
        }
    }
}

impl LinUcbConfig {
    /// Check every parameter.
    ///
    /// # Errors
    /// `lambda`, `s`, `sigma` finite and > 0; `delta` in (0, 1).
    pub fn validate(&self) -> Result<()> {
        check::positive("lambda", self.lambda)?;
        check::open_unit("delta", self.delta)?;
        check::positive("s", self.s)?;
        check::positive("sigma", self.sigma)?;
        Ok(())
    }
}

impl LinearPolicyConfig for LinUcbConfig {
    fn kind(&self) -> &'static str {
        LIN_UCB.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let d = LinUcbConfig::default();
        [
            ("lambda", self.lambda, d.lambda),
            ("delta", self.delta, d.delta),
            ("s", self.s, d.s),
            ("sigma", self.sigma, d.sigma),
        ]
        .into_iter()
        .filter(|&(_, v, def)| v != def)
        .map(|(k, v, _)| (k, v))
        .collect()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "simulation_path": "step by step (one exact reward draw per round)",
            "lambda": self.lambda, "delta": self.delta, "s": self.s, "sigma": self.sigma,
        })
    }
    fn build(&self, arms: &[DVector<f64>], _seed: u64) -> Result<Box<dyn LinearPolicy>> {
        Ok(Box::new(LinUcb::new(arms, *self)?))
    }
}

/// One run of LinUCB.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinUcb {
    cfg: LinUcbConfig,
    d: usize,
    /// Arm vectors, row-major `K x d`.
    arms: Vec<f64>,
    /// `V^{-1}`, row-major `d x d`.
    vinv: Vec<f64>,
    /// `sum a_s r_s`.
    b: Vec<f64>,
    /// `theta^ = V^{-1} b`.
    theta: Vec<f64>,
    /// `ln det V - d ln lambda`.
    log_det_ratio: f64,
    /// Scratch: `V^{-1} a` of the last played arm.
    u: Vec<f64>,
    /// Scratch: indices of the arms.
    index: Vec<f64>,
    gate: Gate,
}

impl LinUcb {
    /// A fresh run on `arms` (K >= 1 vectors of one dimension d >= 1, finite coordinates).
    ///
    /// # Errors
    /// Invalid parameters, no arm, mixed dimensions, non-finite coordinates.
    pub fn new(arms: &[DVector<f64>], cfg: LinUcbConfig) -> Result<Self> {
        cfg.validate()?;
        let d = arms.first().map_or(0, |a| a.len());
        if arms.is_empty() || d == 0 {
            return Err(Error::param(
                "arms",
                "[]",
                "at least one arm of dimension d >= 1",
            ));
        }
        let mut flat = Vec::with_capacity(arms.len() * d);
        for (i, a) in arms.iter().enumerate() {
            if a.len() != d {
                return Err(Error::param(
                    format!("arms[{i}]"),
                    format!("(dimension {})", a.len()),
                    format!("dimension {d} like arms[0]"),
                ));
            }
            for (j, &x) in a.iter().enumerate() {
                check::finite(&format!("arms[{i}][{j}]"), x)?;
                flat.push(x);
            }
        }
        let mut vinv = vec![0.0; d * d];
        for i in 0..d {
            vinv[i * d + i] = 1.0 / cfg.lambda;
        }
        check::arms("K", arms.len())?;
        Ok(LinUcb {
            gate: Gate::new(RewardBoundary::numeric()),
            cfg,
            d,
            index: vec![0.0; arms.len()],
            arms: flat,
            vinv,
            b: vec![0.0; d],
            theta: vec![0.0; d],
            log_det_ratio: 0.0,
            u: vec![0.0; d],
        })
    }

    /// The confidence radius `beta_t` of the current round.
    pub fn radius(&self) -> f64 {
        let c = &self.cfg;
        c.sigma * (2.0 * (1.0 / c.delta).ln() + self.log_det_ratio).sqrt() + c.lambda.sqrt() * c.s
    }

    /// The current estimate `theta^`.
    pub fn theta(&self) -> &[f64] {
        &self.theta
    }

    fn arm(&self, i: usize) -> &[f64] {
        &self.arms[i * self.d..(i + 1) * self.d]
    }

    /// `a^T V^{-1} a`.
    fn quad(&self, i: usize) -> f64 {
        let (d, a) = (self.d, self.arm(i));
        let mut q = 0.0;
        for r in 0..d {
            let row = &self.vinv[r * d..(r + 1) * d];
            q += a[r] * row.iter().zip(a).map(|(v, x)| v * x).sum::<f64>();
        }
        q
    }
}

impl LinearPolicy for LinUcb {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::Linear, LIN_UCB.kind, self)
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    fn choose(&mut self, _t: u64) -> Result<Pull> {
        if let Some(c) = self.gate.open() {
            return Ok(Pull {
                arm: c.arm,
                steps: c.left,
            });
        }
        let beta = self.radius();
        for i in 0..self.index.len() {
            let mean: f64 = self
                .arm(i)
                .iter()
                .zip(&self.theta)
                .map(|(a, t)| a * t)
                .sum();
            self.index[i] = mean + beta * self.quad(i).max(0.0).sqrt();
        }
        let arm = argmax(self.index.iter().copied());
        self.gate.commit(arm, 1);
        Ok(Pull { arm, steps: 1 })
    }
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        let n = sum.n();
        let sum = self.gate.admit_sum(arm, sum)?;
        self.update(arm, n, sum);
        Ok(())
    }
}

impl LinUcb {
    /// `n` rank-one updates with arm `arm` and the rewards' sum.
    fn update(&mut self, arm: usize, n: u64, sum: f64) {
        // One reward per round; a batch of n pulls of one arm is n identical rank-one updates
        // with the rewards' sum (exact for the estimate: V and b only see a a^T n and a sum).
        let d = self.d;
        for _ in 0..n {
            let q = self.quad(arm);
            for r in 0..d {
                let row = &self.vinv[r * d..(r + 1) * d];
                self.u[r] = row.iter().zip(self.arm(arm)).map(|(v, x)| v * x).sum();
            }
            let denom = 1.0 + q;
            for r in 0..d {
                for c in 0..d {
                    self.vinv[r * d + c] -= self.u[r] * self.u[c] / denom;
                }
            }
            self.log_det_ratio += denom.ln();
        }
        for j in 0..d {
            self.b[j] += self.arms[arm * d + j] * sum;
        }
        for r in 0..d {
            let row = &self.vinv[r * d..(r + 1) * d];
            self.theta[r] = row.iter().zip(&self.b).map(|(v, x)| v * x).sum();
        }
    }
}

impl crate::config::Config for LinUcbConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        LinUcbConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arms(v: &[&[f64]]) -> Vec<DVector<f64>> {
        v.iter().map(|a| DVector::from_vec(a.to_vec())).collect()
    }

    /// Sherman–Morrison and the determinant lemma agree with a direct computation.
    #[test]
    fn rank_one_updates_match_direct_inverse() {
        let a = arms(&[&[1.0, 0.0], &[0.6, 0.8], &[0.0, 1.0]]);
        let mut p = LinUcb::new(&a, LinUcbConfig::default()).unwrap();
        let plays = [(0usize, 0.9), (1, 0.4), (1, 0.7), (2, -0.2), (0, 1.1)];
        let mut v = nalgebra::DMatrix::<f64>::identity(2, 2);
        let mut b = DVector::<f64>::zeros(2);
        for &(i, r) in &plays {
            p.update(i, 1, r);
            v += &a[i] * a[i].transpose();
            b += &a[i] * r;
        }
        let vinv = v.clone().try_inverse().unwrap();
        let theta = &vinv * &b;
        for j in 0..2 {
            assert!((p.theta()[j] - theta[j]).abs() < 1e-12);
        }
        assert!((p.log_det_ratio - v.determinant().ln()).abs() < 1e-12);
    }

    /// On an easy instance it concentrates on the best arm.
    #[test]
    fn finds_the_best_arm() {
        let inst = super::super::LinearInstance::new(
            vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.7, 0.7]],
            vec![1.0, 0.2],
            0.5,
        )
        .unwrap();
        let mut env = inst.env(3);
        let mut p = LinUcb::new(inst.arms(), LinUcbConfig::default()).unwrap();
        let mut pulls = [0u64; 3];
        for t in 0..5000 {
            let a = p.choose(t).unwrap().arm;
            let r = env.pull(a);
            p.observe_batch(a, &p.boundary().drawn_sum(r, 1)).unwrap();
            pulls[a] += 1;
        }
        assert!(pulls[0] > 4000, "{pulls:?}");
    }

    #[test]
    fn bad_input_names_the_field() {
        let a = arms(&[&[1.0, 0.0]]);
        let c = LinUcbConfig {
            lambda: 0.0,
            ..LinUcbConfig::default()
        };
        assert!(
            LinUcb::new(&a, c)
                .unwrap_err()
                .to_string()
                .contains("lambda")
        );
        let c = LinUcbConfig {
            delta: 1.0,
            ..LinUcbConfig::default()
        };
        assert!(
            LinUcb::new(&a, c)
                .unwrap_err()
                .to_string()
                .contains("delta")
        );
        let bad = arms(&[&[1.0, f64::NAN]]);
        let e = LinUcb::new(&bad, LinUcbConfig::default()).unwrap_err();
        assert!(e.to_string().contains("arms[0][1]"), "{e}");
    }
}
