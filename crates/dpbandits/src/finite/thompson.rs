//! Thompson sampling with Beta priors, for Bernoulli and [0, 1]-bounded rewards.
//!
//! # Algorithm
//! Agrawal & Goyal (2012), "Analysis of Thompson Sampling for the multi-armed bandit problem",
//! Algorithm 1 (Beta(1, 1) priors) and Algorithm 2 (general rewards in [0, 1]: the "Bernoulli trick"
//! replaces a reward `r` by a Bernoulli(r) draw before the conjugate update). Each round, sample
//! `theta_a ~ Beta(S_a + 1, F_a + 1)` and play `argmax theta_a`.
//!
//! # Privacy
//! None: a non-private baseline. Its randomness comes from the policy stream.
//!
//! # Parameters
//! None (Beta(1, 1) priors).

use super::{Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Result, check};
use crate::privacy::PrivacyGuarantee;
use crate::privacy::RewardBoundary;
use crate::protocol::Gate;
use crate::rng::SimRng;
use rand::RngExt;
use rand_distr::{Beta, Distribution};
use serde::Deserialize;

/// Registry record of `thompson`.
pub const THOMPSON: AlgorithmInfo = AlgorithmInfo {
    kind: "thompson",
    name: "Thompson sampling (Beta-Bernoulli)",
    setting: Setting::FiniteArmed,
    reference: "Agrawal & Goyal 2012, Alg. 1-2 (Bernoulli trick for [0,1] rewards)",
    privacy: "none",
    example: "",
    source: file!(),
    doc: include_str!("thompson.rs"),
};

/// `kind = "thompson"` (no parameters).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThompsonConfig {}

impl PolicyConfig for ThompsonConfig {
    fn kind(&self) -> &'static str {
        THOMPSON.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![]
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        Ok(Box::new(ThompsonSampling::new(k, seed)?))
    }
}

/// Beta-Bernoulli Thompson sampling state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThompsonSampling {
    gate: Gate,
    successes: Vec<f64>,
    failures: Vec<f64>,
    rng: SimRng,
}

impl ThompsonSampling {
    /// Thompson sampling on `k >= 1` arms with its own stream derived from `seed`.
    pub fn new(k: usize, seed: u64) -> Result<Self> {
        check::arms("K", k)?;
        Ok(ThompsonSampling {
            gate: Gate::new(RewardBoundary::numeric()),
            successes: vec![0.0; k],
            failures: vec![0.0; k],
            rng: crate::rng::policy_rng(seed),
        })
    }
}

impl Policy for ThompsonSampling {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, THOMPSON.kind, self)
    }
    fn num_arms(&self) -> usize {
        self.successes.len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let reward = self.gate.admit(arm, reward)?;
        let r = reward.clamp(0.0, 1.0);
        // Bernoulli trick (Agrawal & Goyal 2012, Alg. 2); rewards already in {0, 1} need no draw.
        let success = if r == 1.0 {
            true
        } else if r == 0.0 {
            false
        } else {
            self.rng.random::<f64>() < r
        };
        if success {
            self.successes[arm] += 1.0;
        } else {
            self.failures[arm] += 1.0;
        }
        Ok(())
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
}
impl ThompsonSampling {
    /// The algorithm's choice when no commitment is open.
    fn decide(&mut self, _t: u64) -> Pull {
        let rng = &mut self.rng;
        let arm = argmax(self.successes.iter().zip(&self.failures).map(|(&s, &f)| {
            // Both shape parameters are >= 1, so Beta::new cannot fail.
            Beta::new(s + 1.0, f + 1.0)
                .expect("shapes >= 1")
                .sample(rng)
        }));
        Pull { arm, steps: 1 }
    }
}

impl crate::config::Config for ThompsonConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        Ok(())
    }
}
