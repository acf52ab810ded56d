//! Fixed-confidence best-arm identification (BAI) under eps-global differential privacy.
//!
//! A BAI algorithm has a sampling rule, a stopping rule and a recommendation; a run reports its
//! stopping time, its recommendation and whether it is wrong ([`BaiOutcome`]). Spec:
//! `dp-bai.md` (Jourdan & Azize 2025 "Optimal BAI under DP"; Azize et al. 2023/2026; Azize thesis).
//!
//! # Layout
//! * this file: the traits [`BaiEnvConfig`] / [`BaiEnvironment`] (problems) and [`BaiConfig`] /
//!   [`BaiEngine`] / [`BaiAlgorithm`] (algorithms);
//! * one file per environment: `bernoulli.rs` (`bai_bernoulli`);
//! * one file per paper algorithm family: `dp_tt.rs` (DP-TT), `adap_tt.rs` (AdaP-TT, AdaP-TT*),
//!   `dp_se.rs` (DP-SE, successive elimination), `eb_tci.rs` (non-private EB-TCI); `top_two.rs` is
//!   the Top Two engine the first three families share;
//! * `divergence.rs` (`d_eps`, its signed versions, transportation costs), `charact.rs`
//!   (characteristic times `T*_KL`, `T*_eps`, `T*_{eps,beta}`, `T*_TV`, validated instances),
//!   `threshold.rs` (stopping thresholds; the delta-correct pair threshold Proposal J is the
//!   default of DP-TT);
//! * `sim.rs`: the run loop ([`simulate_bai`]) and the experiment cell ([`BaiCell`]).
//!
//! # Shape
//! As in the other settings, the algorithm and the environment are separate objects: a
//! [`BaiConfig`] (one `[[algorithm]]` table) is validated, then [`BaiConfig::prepare`]d once per
//! cell into a shared [`BaiEngine`] (thresholds, caches); each run [`BaiEngine::start`]s a
//! [`BaiAlgorithm`] (the run state), and [`simulate_bai`] lets it talk to a [`BaiEnvironment`]
//! through [`BaiStep`] requests of `n` samples of one arm. The environment draws each request's
//! reward sum exactly, so a new algorithm needs no sampling code and every algorithm of an
//! experiment sees the same per-arm reward streams.

mod adap_tt;
mod bernoulli;
mod charact;
mod divergence;
mod dp_se;
mod dp_tt;
mod eb_tci;
mod sim;
mod threshold;
mod top_two;

pub use adap_tt::{ADAP_TT, ADAP_TT_STAR, AdapTtConfig};
pub use bernoulli::{BAI_BERNOULLI, BaiBernoulliConfig, BernoulliArms};
pub use charact::*;
pub use divergence::*;
pub use dp_se::{DP_SE_BAI, DpSeBai, DpSeBaiConfig, DpSeRun};
pub use dp_tt::{DP_TT, DpTtConfig};
pub use eb_tci::{EB_TCI, EbTciConfig};
pub use sim::{BaiCell, OUTCOME_FIELDS, OutcomeRow, run_one, run_seeds, simulate_bai};
pub use threshold::*;
pub use top_two::{
    Challenger, Estimator, Forcing, Leader, StopCost, TopTwo, TopTwoParams, TopTwoRun,
    tracking_block,
};

use crate::error::Result;
use crate::privacy::{PrivacyGuarantee, RewardBoundary, RewardSum};
use crate::protocol::Gate;
use std::fmt::Debug;
use std::sync::Arc;

/// One finished run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BaiOutcome {
    /// Number of samples collected when the stopping rule fired (or the cap).
    pub tau: u64,
    /// Recommended arm.
    pub recommendation: usize,
    /// Whether the recommendation is the best arm.
    pub correct: bool,
    /// Whether the run hit `max_samples` before stopping.
    pub capped: bool,
    /// Number of Laplace draws made (privacy releases with noise).
    pub noise_draws: u64,
    /// Pulls per arm.
    pub pulls: Vec<u64>,
    /// Releases per arm.
    pub releases: Vec<u64>,
}

/// What a BAI algorithm wants next.
///
/// Requests come in batches (`n` samples of one arm) because every algorithm here commits to
/// blocks of pulls whose size depends only on released statistics and counts: the environment can
/// then draw the block's reward sum exactly in one go (e.g. one Binomial), which is what makes
/// runs of `1e10` samples feasible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaiStep {
    /// Collect `n >= 1` fresh rewards of `arm` (the algorithm commits to all `n`, whatever their
    /// values: it may not stop in the middle of a request).
    Sample {
        /// The arm.
        arm: usize,
        /// How many samples (>= 1).
        n: u64,
    },
    /// The stopping rule fired: the run ends with [`BaiAlgorithm::recommendation`].
    Stop,
}

/// A validated fixed-confidence BAI problem (one `[env]` table): the arms' distributions, for
/// the characteristic times and the lower bound, and the risk `delta` every algorithm of the
/// experiment is asked to meet.
pub trait BaiEnvConfig: Send + Sync + Debug {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// The instance (Bernoulli means, unique best arm).
    fn instance(&self) -> &BaiInstance;
    /// The risk delta in (0, 1).
    fn delta(&self) -> f64;
    /// The environment of one run; `env_seed` is the run's environment seed
    /// ([`crate::rng::env_run_seed`]).
    fn build(&self, env_seed: u64) -> Box<dyn BaiEnvironment>;
    /// Facts for the manifest.
    fn describe(&self) -> serde_json::Value;
}

/// A fixed-confidence BAI environment for one run (one file per environment, e.g.
/// [`BernoulliArms`]).
///
/// Separate from the algorithm so that every algorithm faces the same data (common random
/// numbers: the environment's streams depend on the run, never on the algorithm) and so that a
/// new algorithm needs no sampling code of its own.
pub trait BaiEnvironment: Send + Debug {
    /// Number of arms `K`.
    fn num_arms(&self) -> usize;
    /// The best arm (ground truth, used only to score the recommendation).
    fn best_arm(&self) -> usize;
    /// Sum of `n` fresh rewards of `arm` (exact, e.g. one Binomial draw for Bernoulli).
    fn pull_sum(&mut self, arm: usize, n: u64) -> f64;
    /// An interval containing every reward (sums are drawn whole, so it must lie inside the
    /// algorithm's boundary). Default: unbounded.
    fn reward_range(&self) -> (f64, f64) {
        (f64::NEG_INFINITY, f64::INFINITY)
    }
}

/// One run of a BAI algorithm (sampling rule + stopping rule + recommendation).
///
/// Driven by [`simulate_bai`]: `next`, then (for a `Sample`) exactly one `observe` with the
/// requested arm, the number of samples actually collected (fewer than requested only when the
/// run hits its sample cap) and their reward sum. Privacy: an implementation may read the sums
/// it is given only through its privacy mechanism; every decision (`next`, `recommendation`) must
/// be a function of released statistics, counts and its own randomness.
pub trait BaiAlgorithm: Send + Debug {
    /// Number of arms `K`.
    fn num_arms(&self) -> usize;
    /// `t` = samples collected so far. Return `Sample { arm, n }` (`n >= 1`; the algorithm commits
    /// to `n` samples of `arm` whatever their values) or `Stop`.
    fn next(&mut self, t: u64) -> BaiStep;
    /// The sum of the rewards requested by the last `Sample` (`sum.n()` may be smaller than
    /// requested when the sample cap truncates the request; the run then ends). Calling `next`
    /// again before observing returns what is left of the request.
    ///
    /// # Errors
    /// [`crate::protocol`]: another arm, no open request, more samples than requested, or a sum
    /// built by a boundary wider than [`BaiAlgorithm::boundary`]; the run is then unchanged.
    fn observe(&mut self, arm: usize, sum: &RewardSum) -> Result<()>;
    /// The boundary every reward passes (`[0, 1]`, the Bernoulli model of the setting).
    fn boundary(&self) -> RewardBoundary;
    /// Current recommendation (used at `Stop` and when the run hits the sample cap).
    fn recommendation(&self) -> usize;
    /// Privacy releases with noise so far (Laplace draws).
    fn noise_draws(&self) -> u64;
    /// Releases per arm so far.
    fn releases(&self) -> Vec<u64>;
    /// Each arm's latest released mean with its noise law, for a report from released
    /// statistics only ([`crate::report`]); `None` for an algorithm that keeps none (the
    /// default).
    fn released_estimates(&self) -> Option<crate::report::Released> {
        None
    }
    /// The risk `delta` of the fixed-confidence guarantee (the stopping rule recommends a wrong
    /// arm with probability at most `delta`), when the algorithm knows it.
    fn risk(&self) -> Option<f64> {
        None
    }
    /// Save the run's complete state (counts, released statistics, pending sums, generators,
    /// the requests still to serve) for a bit-identical restore ([`crate::snapshot`]; restore
    /// with `registry::restore_bai`). The shared engine is stored as its parameters and rebuilt.
    /// Sensitive data: it holds unreleased reward sums and the noise generator's state.
    ///
    /// # Errors
    /// [`crate::error::Error::Snapshot`] if the state cannot be captured; the default refuses.
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        Err(crate::snapshot::unsupported(&format!("{self:?}")))
    }
}

/// `next` through an algorithm's [`Gate`]: what is left of the open request while one is open,
/// else `step`'s decision, a `Sample` being committed. The `next` of every BAI algorithm here.
#[inline]
pub fn gated_next<A: ?Sized>(
    alg: &mut A,
    gate: fn(&mut A) -> &mut Gate,
    step: impl FnOnce(&mut A) -> BaiStep,
) -> BaiStep {
    if let Some(c) = gate(alg).open() {
        return BaiStep::Sample {
            arm: c.arm,
            n: c.left,
        };
    }
    let s = step(alg);
    if let BaiStep::Sample { arm, n } = s {
        gate(alg).commit(arm, n);
    }
    s
}

/// What all runs of one configuration share (precomputed thresholds, caches), built once per
/// cell by [`BaiConfig::prepare`] and shared by the parallel runs through an `Arc`.
pub trait BaiEngine: Send + Sync + Debug {
    /// A fresh run; `seed` is the run's policy seed: tie-breaks from
    /// [`crate::rng::policy_rng`]`(seed)`, privacy noise from [`crate::rng::noise_rng`]`(seed)`.
    fn start(self: Arc<Self>, seed: u64) -> Box<dyn BaiAlgorithm>;
}

/// A validated BAI configuration (one `[[algorithm]]` table, one cell), object-safe.
pub trait BaiConfig: Send + Sync + Debug {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// Label with every parameter (e.g.
    /// `dp_tt(eps=0.1,threshold=joint,eta=1,beta=0.5,lazy=0.01,fe=privacy_scaled*16)`); it keys
    /// the run's policy seed, so changing it changes the run's streams.
    fn label(&self) -> String;
    /// The privacy budget (`inf` for non-private algorithms).
    fn epsilon(&self) -> f64;
    /// Name of the stopping threshold / rule (the `threshold` column of `summary.csv`).
    fn threshold_name(&self) -> &'static str;
    /// Whether the stopping rule is proved delta-correct.
    fn threshold_proved(&self) -> bool;
    /// The privacy claim.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// Facts for the manifest (e.g. `{"lazy_challenger": 0.01}`), default `Null`.
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Precompute for `k` arms and risk `delta`.
    ///
    /// # Errors
    /// Invalid parameters or `(k, delta)`, naming the field.
    fn prepare(&self, k: usize, delta: f64) -> Result<Arc<dyn BaiEngine>>;
}

/// A configuration of a Top Two kind (DP-TT, AdaP-TT, AdaP-TT*, EB-TCI): what differs between
/// the kinds (record, label, engine parameters, the kind's checks, the mechanism text). Its
/// [`BaiConfig`] is the one impl below, from the engine parameters: budget, threshold name and
/// proof, the pure-DP guarantee on the noise path of the parameters, the manifest facts and the
/// engine.
pub trait TopTwoConfig: Send + Sync + Debug {
    /// The kind's registry record.
    fn top_two_info(&self) -> &'static crate::config::AlgorithmInfo;
    /// The label (every parameter; it keys the run's policy seed).
    fn top_two_label(&self) -> String;
    /// The engine parameters.
    fn top_two_params(&self) -> TopTwoParams;
    /// The kind's own checks (the thresholds it accepts, ...), run again before an engine is
    /// prepared.
    ///
    /// # Errors
    /// Naming the field.
    fn top_two_check(&self) -> Result<()>;
    /// The mechanism text of the simulation path and of the deployment path (see
    /// `pure_dp_guarantee_noise`); unused for an infinite budget (non-private).
    fn top_two_mechanism(&self) -> (&'static str, &'static str);
    /// Facts for the manifest (default: the lazy challenger and the threshold's note).
    fn top_two_describe(&self) -> serde_json::Value {
        let p = self.top_two_params();
        describe_top_two(p.lazy, p.threshold)
    }
}

impl<T: TopTwoConfig> BaiConfig for T {
    fn kind(&self) -> &'static str {
        self.top_two_info().kind
    }
    fn label(&self) -> String {
        self.top_two_label()
    }
    fn epsilon(&self) -> f64 {
        self.top_two_params().epsilon
    }
    fn threshold_name(&self) -> &'static str {
        self.top_two_params().threshold.name()
    }
    fn threshold_proved(&self) -> bool {
        self.top_two_params().threshold.proved()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        let p = self.top_two_params();
        let (simulation, deployment) = self.top_two_mechanism();
        pure_dp_guarantee_noise(p.epsilon, simulation, deployment, p.noise, p.grid_bits)
    }
    fn describe(&self) -> serde_json::Value {
        self.top_two_describe()
    }
    fn prepare(&self, k: usize, delta: f64) -> Result<Arc<dyn BaiEngine>> {
        self.top_two_check()?;
        Ok(Arc::new(TopTwo::new(self.top_two_params(), k, delta)?))
    }
}

pub(crate) fn fmt_num(x: f64) -> String {
    if x.is_infinite() {
        "inf".into()
    } else {
        format!("{x}")
    }
}

/// Default forcing scale `c` of the private Top Two algorithms (DP-TT, AdaP-TT, AdaP-TT*): forced
/// exploration `N_a < sqrt(16 t / min(1, eps)) - K/2`. Chosen from `c in {1, 4, 16}` on the two
/// paper instances (docs/bai.md, "forcing scale"): it shortens DP-TT's stopping-time tail at
/// eps <= 0.005 and changes AdaP-TT by less than 3%; the cost is at most `4 K sqrt(t / eps)`
/// forced samples. EB-TCI keeps Garivier–Kaufmann's `sqrt(t)`.
pub const PRIVATE_FORCING_SCALE: f64 = 16.0;

/// Label part of a forcing rule: its name, with `*c` when the scale is not 1.
pub(crate) fn forcing_label(f: Forcing, scale: f64) -> String {
    if scale == 1.0 {
        f.name().into()
    } else {
        format!("{}*{}", f.name(), scale)
    }
}

/// The cell facts of a private Top Two configuration: its lazy-challenger parameter and, for the
/// authors' thresholds `paper` and `heuristic`, a `threshold_note` on their delta-correctness
/// (absent for the other thresholds, whose manifests are unchanged).
pub(crate) fn describe_top_two(lazy: f64, threshold: ThresholdKind) -> serde_json::Value {
    let mut v = serde_json::json!({ "lazy_challenger": lazy });
    if let Some(note) = threshold.note() {
        v["threshold_note"] = note.into();
    }
    v
}

/// [`pure_dp_guarantee`] with the noise path of the configuration: `deployment` replaces the
/// mechanism text by `deployment` (the discrete release, with `k = grid_bits`) and says
/// deployment-grade.
pub(crate) fn pure_dp_guarantee_noise(
    epsilon: f64,
    simulation: &str,
    deployment: &str,
    noise: crate::privacy::NoiseKind,
    grid_bits: u32,
) -> PrivacyGuarantee {
    use crate::privacy::{NoiseGrade, NoiseKind};
    match noise {
        NoiseKind::Simulation => pure_dp_guarantee(epsilon, simulation),
        NoiseKind::Deployment => {
            let mut g = pure_dp_guarantee(
                epsilon,
                &format!(
                    "discrete Laplace (geometric) mechanism (Ghosh, Roughgarden & Sundararajan 2009; sampler: Canonne, Kamath & Steinke 2020, Alg. 2) {} (k = {grid_bits}, lowered only for a release of more than 2^(53-k) rewards); noise from ChaCha20 seeded by the operating system: outputs are not reproducible",
                    deployment.replace("2^k", &format!("2^{grid_bits}"))
                ),
            );
            if !g.noise.eq(&NoiseGrade::NotApplicable) {
                g.noise = NoiseGrade::Deployment;
            }
            g
        }
    }
}

pub(crate) fn pure_dp_guarantee(epsilon: f64, mechanism: &str) -> PrivacyGuarantee {
    use crate::privacy::{BoundaryMode, Budget, RewardBoundary, TrustModel};
    if epsilon.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    PrivacyGuarantee {
        notion: "eps-global DP for BAI (pure, central; output = stopping time, recommendation and action sequence; Azize et al. 2023 Def. 2, Jourdan & Azize 2025)".into(),
        model: TrustModel::Central,
        adjacency: "reward tables differing in one row (one user's potential rewards)".into(),
        budget: Budget::PureDp { epsilon },
        mechanism: mechanism.into(),
        boundary: Some(RewardBoundary::new(0.0, 1.0, BoundaryMode::Clip).expect("valid range")),
        noise: crate::privacy::NoiseGrade::Simulation,
    }
}
