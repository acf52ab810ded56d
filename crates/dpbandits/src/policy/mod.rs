//! Finite-armed policies.
//!
//! # The `Policy` contract
//! * [`Policy::choose`] returns a [`Pull`]: an arm and the number of consecutive rounds the policy
//!   *commits* to it. Per-step policies commit to 1 round. Episodic policies (AdaC-UCB and its
//!   non-private counterpart) commit to a whole episode, whose length depends only on public data
//!   (spec zcdp §1.8 condition (i), §8 T5). Calling `choose` again in the middle of an episode
//!   returns the same arm with the remaining length, so a plain step-by-step loop works for every
//!   policy.
//! * [`Policy::observe`] feeds one reward of the arm actually played (it may differ from the one
//!   recommended under the interactive protocol of spec zcdp §1.7).
//! * [`Policy::observe_batch`] feeds the *sum* of `n` rewards of one committed arm at once: the
//!   episode fast path of the simulator (O(episodes) per run).
//! * Policies own their generators (policy stream and noise stream, see [`crate::rng`]); hot-path
//!   calls never allocate and never fail. Validation happens in the constructors.
//! * Ties in an argmax go to the **lowest arm index**. That rule is part of the reproducibility
//!   contract.
//!
//! # Adding a policy
//! One file in this folder with a `...Config` struct (serde, `deny_unknown_fields`) implementing
//! [`PolicyConfig`], and the policy implementing [`Policy`]; then one line in
//! [`crate::registry`]. The conformance tests in `tests/conformance.rs` pick it up from the registry.

pub mod adac_ucb;
pub mod adap_ucb;
pub mod d_ucb;
pub mod dp_se;
pub mod dp_ts;
pub mod kl_ucb;
pub mod kl_ucb_cf;
pub mod ldp;
pub mod ldp_ucb;
pub mod sw_ucb;
pub mod thompson;
pub mod ucb1;
mod window;

pub use adac_ucb::{AdaCUcb, AdaCUcbConfig, InitCount};
pub use adap_ucb::{AdaP, AdaPConfig, AdaPIndex};
pub use d_ucb::{DUcb, DUcbConfig};
pub use dp_se::{DpSe, DpSeConfig};
pub use dp_ts::{DpTs, DpTsConfig};
pub use kl_ucb::{KlUcb, KlUcbConfig};
pub use kl_ucb_cf::{CfConfig, CfLearner};
pub use ldp::{Ldp, LdpConfig};
pub use ldp_ucb::{LdpUcb, LdpUcbConfig, LocalMechanism};
pub use sw_ucb::{SwKlUcbConfig, SwUcb, SwUcbConfig};
pub use thompson::{ThompsonConfig, ThompsonSampling};
pub use ucb1::{Ucb1, Ucb1Config};
pub use window::SlidingWindow;

use crate::error::Result;
use crate::privacy::{PrivacyGuarantee, RewardBoundary};
use std::fmt::Debug;

/// An arm and how many consecutive rounds the policy commits to it (>= 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pull {
    /// The arm.
    pub arm: usize,
    /// Committed rounds (>= 1).
    pub steps: u64,
}

/// A finite-armed bandit policy for one run.
pub trait Policy: Send + Debug {
    /// Number of arms.
    fn num_arms(&self) -> usize;

    /// The privacy claim of this policy.
    fn guarantee(&self) -> PrivacyGuarantee;

    /// Choose the next arm; `t` is the number of rounds already played (0-based round index).
    fn choose(&mut self, t: u64) -> Pull;

    /// Observe the reward of one round of `arm`.
    fn observe(&mut self, arm: usize, reward: f64);

    /// Observe the sum of `n` consecutive rewards of `arm`, all inside a commitment returned by
    /// `choose`.
    ///
    /// # Panics
    /// The default implementation accepts only `n == 1`; a policy that commits to more than one
    /// round must override it.
    fn observe_batch(&mut self, arm: usize, n: u64, sum: f64) {
        assert_eq!(
            n, 1,
            "this policy does not commit to episodes; observe rewards one at a time"
        );
        self.observe(arm, sum);
    }

    /// The reward boundary the privacy argument assumes (`None` for non-private policies).
    fn boundary(&self) -> Option<RewardBoundary> {
        self.guarantee().boundary
    }
}

/// A validated policy configuration (one cell of a sweep) that builds a fresh policy per run.
pub trait PolicyConfig: Send + Sync + Debug {
    /// Registry id, equal to the config `kind` (e.g. `adac_ucb`).
    fn kind(&self) -> &'static str;
    /// Numeric parameters that identify this cell (e.g. `[("rho", 0.1)]`), used in labels and
    /// figure axes.
    fn params(&self) -> Vec<(&'static str, f64)>;
    /// The privacy claim of the policies this config builds.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// Build the policy for `k` arms; `seed` is the run's policy seed (policies derive their
    /// policy and noise streams from it).
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>>;
    /// Label `kind(p1=v1,p2=v2)`; used in outputs and to key random streams.
    fn label(&self) -> String {
        let p = self.params();
        if p.is_empty() {
            self.kind().to_string()
        } else {
            let inner: Vec<String> = p.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{}({})", self.kind(), inner.join(","))
        }
    }
}

/// An episode in progress: the arm a policy committed to, the episode's length, and the rewards
/// seen so far. Shared by the episodic policies (AdaC-UCB, AdaP-UCB/KLUCB), whose episodes end
/// exactly when `len` rewards of the committed arm have been observed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Episode {
    /// The committed arm.
    pub arm: usize,
    /// Committed rounds.
    pub len: u64,
    /// Rounds observed so far.
    pub done: u64,
    /// Sum of the (clipped) rewards observed so far.
    pub sum: f64,
}

impl Episode {
    /// A new episode of `len` rounds of `arm`.
    pub fn start(arm: usize, len: u64) -> Self {
        Episode {
            arm,
            len,
            done: 0,
            sum: 0.0,
        }
    }

    /// The commitment still to be played.
    pub fn remaining(&self) -> Pull {
        Pull {
            arm: self.arm,
            steps: self.len - self.done,
        }
    }

    /// Add `n` rewards of `arm` summing to `sum`; returns whether the episode is now complete.
    ///
    /// # Panics
    /// If `arm` is not the committed arm or the episode would run past its length (a caller that
    /// breaks the `Policy` contract).
    pub fn record(&mut self, arm: usize, n: u64, sum: f64) -> bool {
        assert_eq!(
            self.arm, arm,
            "observed arm {arm} inside an episode of arm {}",
            self.arm
        );
        assert!(
            self.done + n <= self.len,
            "observed past the end of the episode"
        );
        self.sum += sum;
        self.done += n;
        self.done == self.len
    }
}

/// Per-arm pull counts and empirical means, with the cached `1/N_a` that index policies need.
/// Updating is O(1) per observation and never allocates.
#[derive(Debug, Clone)]
pub struct ArmStats {
    pulls: Vec<u64>,
    sums: Vec<f64>,
    means: Vec<f64>,
    inv_pulls: Vec<f64>,
}

impl ArmStats {
    /// Statistics of `k` unplayed arms (`1/N = inf`).
    pub fn new(k: usize) -> Self {
        ArmStats {
            pulls: vec![0; k],
            sums: vec![0.0; k],
            means: vec![0.0; k],
            inv_pulls: vec![f64::INFINITY; k],
        }
    }
    /// Number of arms.
    pub fn len(&self) -> usize {
        self.pulls.len()
    }
    /// Whether there are no arms.
    pub fn is_empty(&self) -> bool {
        self.pulls.is_empty()
    }
    /// Add one reward of `arm`.
    #[inline]
    pub fn record(&mut self, arm: usize, reward: f64) {
        self.pulls[arm] += 1;
        self.sums[arm] += reward;
        let n = self.pulls[arm] as f64;
        self.means[arm] = self.sums[arm] / n;
        self.inv_pulls[arm] = 1.0 / n;
    }
    /// The first arm never played, if any (initialisation rounds of index policies).
    #[inline]
    pub fn first_unplayed(&self) -> Option<usize> {
        self.pulls.iter().position(|&n| n == 0)
    }
    /// Pull counts.
    pub fn pulls(&self) -> &[u64] {
        &self.pulls
    }
    /// Empirical means (0 for unplayed arms).
    pub fn means(&self) -> &[f64] {
        &self.means
    }
    /// `1/N_a` (inf for unplayed arms).
    pub fn inv_pulls(&self) -> &[f64] {
        &self.inv_pulls
    }
}

/// Index of the maximum of `values`; ties go to the lowest index. NaN is never chosen over a number.
#[inline]
pub fn argmax(values: impl IntoIterator<Item = f64>) -> usize {
    let mut best = 0;
    let mut best_v = f64::NEG_INFINITY;
    for (i, v) in values.into_iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::{ArmStats, argmax};

    #[test]
    fn arm_stats() {
        let mut s = ArmStats::new(2);
        assert_eq!(s.first_unplayed(), Some(0));
        s.record(0, 1.0);
        s.record(0, 0.0);
        assert_eq!(s.first_unplayed(), Some(1));
        assert_eq!(s.means()[0], 0.5);
        assert_eq!(s.inv_pulls()[0], 0.5);
        assert_eq!(s.pulls(), &[2, 0]);
    }

    #[test]
    fn argmax_lowest_index_on_ties() {
        assert_eq!(argmax([1.0, 3.0, 3.0]), 1);
        assert_eq!(argmax([f64::NAN, 0.0]), 1);
        assert_eq!(argmax([f64::INFINITY, f64::INFINITY]), 0);
    }
}
