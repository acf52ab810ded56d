//! Discounted UCB (D-UCB): a non-private baseline for piecewise-stationary bandits.
//!
//! # Algorithm
//! Garivier & Moulines (2008/2011), "On Upper-Confidence Bound Policies for Non-Stationary Bandit
//! Problems", Sec. 3 (spec ldp §5.2): with discount `gamma`,
//! `N_t(gamma, a) = sum_s gamma^(t-s) 1{a_s = a}`, `Xbar_t(gamma, a)` the discounted mean and
//! `n_t(gamma) = sum_a N_t(gamma, a)`, play `argmax_a Xbar + 2B sqrt(xi ln n_t / N_t(gamma, a))`.
//! Theory: `gamma = 1 - (4B)^-1 sqrt(Upsilon_T / T)`, `xi > 1/2`.
//!
//! O(1) update per step: each arm stores its discounted count and sum as of its last pull and the
//! round of that pull; they are brought up to date with one `gamma^gap` when needed (SMPyBandits'
//! trick). An arm whose discounted count has underflowed to 0 (or was never pulled) has index
//! `+inf`.
//!
//! # Privacy
//! None: a non-private reference (raw rewards clipped to [0, 1], NaN -> 0).
//!
//! # Parameters
//! `gamma` in (0, 1), `b > 0` (default 1), `xi > 0` (default 0.6).

use super::{Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Result, check};
use crate::privacy::PrivacyGuarantee;
use crate::privacy::RewardBoundary;
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `d_ucb`.
pub const D_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "d_ucb",
    name: "Discounted UCB (D-UCB)",
    setting: Setting::FiniteArmed,
    reference: "Garivier & Moulines 2011, Sec. 3 (discounted UCB)",
    privacy: "none",
    example: "gamma = 0.999",
    source: file!(),
    doc: include_str!("d_ucb.rs"),
    private: false,
    release_keys: crate::config::NO_RELEASE,
};

/// `kind = "d_ucb"`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DUcbConfig {
    /// Discount factor in (0, 1).
    pub gamma: f64,
    /// Reward bound `B` (default 1).
    #[serde(default = "one")]
    pub b: f64,
    /// Exploration constant `xi` (default 0.6).
    #[serde(default = "xi")]
    pub xi: f64,
}

fn one() -> f64 {
    1.0
}
fn xi() -> f64 {
    0.6
}

impl DUcbConfig {
    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::open_unit("gamma", self.gamma)?;
        check::positive("b", self.b)?;
        check::positive("xi", self.xi)?;
        Ok(())
    }
}

impl PolicyConfig for DUcbConfig {
    fn kind(&self) -> &'static str {
        D_UCB.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![("gamma", self.gamma)];
        if self.b != 1.0 {
            p.push(("b", self.b));
        }
        if self.xi != 0.6 {
            p.push(("xi", self.xi));
        }
        p
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn build(&self, k: usize, _seed: u64) -> Result<Box<dyn Policy>> {
        check::arms("K", k)?;
        self.validate()?;
        Ok(Box::new(DUcb {
            gate: Gate::new(RewardBoundary::numeric()),
            cfg: self.clone(),
            n: vec![0.0; k],
            s: vec![0.0; k],
            last: vec![0; k],
            t: 0,
        }))
    }
}

/// D-UCB state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DUcb {
    gate: Gate,
    cfg: DUcbConfig,
    /// Discounted count of each arm as of the end of round `last[a]`.
    n: Vec<f64>,
    /// Discounted reward sum, same convention.
    s: Vec<f64>,
    last: Vec<u64>,
    t: u64,
}

impl DUcb {
    /// Discounted counts `N_{t-1}(gamma, a)` as seen when choosing round `t`.
    pub fn discounted_counts(&self, t: u64) -> impl Iterator<Item = f64> + '_ {
        let g = self.cfg.gamma;
        self.n.iter().zip(&self.last).map(move |(&n, &l)| {
            if n == 0.0 {
                0.0
            } else {
                n * g.powf((t - 1 - l) as f64)
            }
        })
    }
}

impl Policy for DUcb {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, D_UCB.kind, self)
    }
    fn num_arms(&self) -> usize {
        self.n.len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let reward = self.gate.admit(arm, reward)?;
        let r = if reward.is_nan() {
            0.0
        } else {
            reward.clamp(0.0, 1.0)
        };
        let t = self.t;
        let decay = if self.n[arm] == 0.0 {
            0.0
        } else {
            self.cfg.gamma.powf((t - self.last[arm]) as f64)
        };
        self.n[arm] = self.n[arm] * decay + 1.0;
        self.s[arm] = self.s[arm] * decay + r;
        self.last[arm] = t;
        Ok(())
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
}
impl DUcb {
    /// The algorithm's choice when no commitment is open.
    fn decide(&mut self, t: u64) -> Pull {
        self.t = t;
        if let Some(a) = self.n.iter().position(|&n| n == 0.0) {
            return Pull { arm: a, steps: 1 };
        }
        let total: f64 = self.discounted_counts(t).sum();
        let ln_n = total.max(1.0).ln();
        let (b, xi) = (self.cfg.b, self.cfg.xi);
        let arm = argmax(
            self.discounted_counts(t)
                .zip(self.n.iter().zip(&self.s))
                .map(|(nt, (&n, &s))| {
                    if nt <= 0.0 {
                        f64::INFINITY
                    } else {
                        // the discounted mean is unchanged by discounting: s / n
                        s / n + 2.0 * b * (xi * ln_n / nt).sqrt()
                    }
                }),
        );
        Pull { arm, steps: 1 }
    }
}

impl crate::config::Config for DUcbConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        DUcbConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The O(1) lazy statistics equal the direct sums `sum_s gamma^(t-1-s)`.
    #[test]
    fn lazy_discounting_matches_direct_sum() {
        let cfg = DUcbConfig {
            gamma: 0.97,
            b: 1.0,
            xi: 0.6,
        };
        let mut p = DUcb {
            gate: Gate::new(RewardBoundary::numeric()),
            cfg: cfg.clone(),
            n: vec![0.0; 3],
            s: vec![0.0; 3],
            last: vec![0; 3],
            t: 0,
        };
        let mut hist = vec![];
        for t in 0..300u64 {
            let a = p.choose(t).arm;
            let r = ((t * 7) % 3 == 0) as u8 as f64;
            p.observe(a, r).unwrap();
            hist.push((a, r));
            let now = t + 1;
            let direct: Vec<f64> = (0..3)
                .map(|arm| {
                    hist.iter()
                        .enumerate()
                        .filter(|(_, h)| h.0 == arm)
                        .map(|(s, _)| cfg.gamma.powf((now - 1 - s as u64) as f64))
                        .sum()
                })
                .collect();
            for (x, y) in p.discounted_counts(now).zip(&direct) {
                assert!((x - y).abs() < 1e-9 * y.max(1.0), "{x} vs {y}");
            }
        }
        let bad = DUcbConfig { gamma: 1.0, ..cfg };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .starts_with("gamma = 1")
        );
    }
}
