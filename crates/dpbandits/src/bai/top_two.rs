//! The Top Two engine shared by DP-TT, AdaP-TT, AdaP-TT* and EB-TCI: one simulation loop with
//! pluggable estimator, leader, challenger, stopping cost and threshold.
//!
//! # Semantics (one run)
//! 1. Pull every arm once; each arm makes its first release.
//! 2. After every release: recommendation `a_hat` (argmax of the released means, ties uniformly at
//!    random from the policy stream), leader, and the GLR stopping rule on the *released* statistics
//!    (the stopping statistic depends only on released means and frozen counts, so evaluating it
//!    only after a release is equivalent to evaluating it every round; spec §3.4).
//! 3. Otherwise each round: challenger from the current counts, deterministic beta-tracking per
//!    leader (pull the leader `B` iff `N^lead_B <= beta (L_B + 1)`), pull, and release an arm when its
//!    count reaches its next boundary.
//!
//! # Fast path (why it is exact)
//! * **Rewards arrive in batches and wait for their release.** Decisions never read unreleased
//!   rewards, so the run asks the environment for whole blocks (`Sample { arm, n }`, answered
//!   with one exact reward sum, e.g. one `Binomial(n, mu_a)`) and keeps the sums collected since
//!   an arm's last release in `pending[a]`. At the release, `pending[a]` is the sum of the `m`
//!   fresh rewards since the previous one: the same law as summing `m` Bernoulli draws (rewards
//!   are i.i.d. and independent of the decisions that chose to collect them). Tested against a
//!   naive step-by-step simulator in `tests/suite/bai.rs` (two-sample KS test).
//! * **Split between engine and run.** [`TopTwo`] (parameters, thresholds, `OnceLock` caches) is
//!   the [`BaiEngine`] shared by all runs of a cell; [`TopTwoRun`] is one run's state. A tracking
//!   block of `m` rounds giving `lb` pulls to the leader `b` becomes the requests `(b, lb)` and
//!   `(c, m - lb)` (zero counts skipped), served in turn before anything new is decided.
//! * **Leader and tracking in bulk.** Between releases the leader is frozen; the number of leader
//!   pulls in the next `m` rounds has a closed form ([`tracking_block`], tested against the loop).
//! * **Lazy challenger (`lazy = theta`).** With `theta = 0` (the default) the challenger is
//!   recomputed every round: the paper's algorithm. With `theta > 0` it is recomputed after every
//!   release and at least every `max(1, floor(theta t))` rounds. This is a (documented) variant:
//!   it changes only which challenger gets each of a block of pulls, never the privacy argument or
//!   the delta-correctness of a threshold proved for any sampling rule (threshold `r`). Its
//!   stopping-time distribution is compared with `theta = 0` in `tests/suite/bai.rs` (KS test). The
//!   experiments use `theta = 0.01` (recorded in every output label).
//! * **Cap.** The run loop ([`super::simulate_bai`]) truncates the request that reaches
//!   `max_samples`; the run then drops its outstanding requests, makes its decision if a release
//!   happened (it may still stop) and otherwise ends with `capped = true` (reported, never
//!   silent).

use super::divergence::{w_eps, w_gauss, w_gauss_star};
use super::threshold::{self, ThresholdKind};
use super::{BaiAlgorithm, BaiEngine, BaiStep};
use crate::error::{Error, Result, check};
use crate::privacy::{
    BoundaryMode, DEFAULT_GRID_BITS, LaplaceMechanism, NoiseKind, NoiseSource, RewardBoundary,
    RewardSum,
};
use crate::protocol::Gate;
use crate::rng::{self, SimRng};
use rand::RngExt;
use std::sync::{Arc, OnceLock};

/// How released means are built.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Estimator {
    /// DP-TT: cumulative noisy sum, one `Lap(1/eps)` per phase increment, phases on the
    /// de-duplicated grid `ceil((1 + eta)^j)` (no forgetting).
    Cumulative {
        /// Geometric grid parameter eta > 0.
        eta: f64,
    },
    /// AdaP-TT: doubling phases (sizes 1, 1, 2, 4, ...), each released mean uses only its phase:
    /// phase mean + `Lap(1/(eps n_phase))` (forgetting).
    Forgetting,
    /// Non-private: exact empirical mean, released after every sample.
    Exact,
}

/// Leader rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Leader {
    /// Empirical best (the recommendation).
    EmpiricalBest,
    /// AdaP-TT private UCB `mu_a + sqrt(k_a / N~_a) + k_a / (eps N~_a)` (ties: lowest index).
    PrivateUcb,
}

/// Challenger rule (current counts `N`; ties: lowest index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Challenger {
    /// TCI: `argmin W_eps(m_B, m_a; N_B, N_a) + ln N_a` on clipped means.
    Tci,
    /// AdaP-TT: `argmin (mu_B - mu_a) / sqrt(1/N_B + 1/N_a)` (signed).
    SignedGauss,
    /// AdaP-TT*: `argmin W^{G,eps}_{B,a}`, ties towards the smaller signed score.
    GaussStar,
}

/// Stopping cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StopCost {
    /// `W_eps` on clipped means (DP-TT; `eps = inf`: KL GLR for EB-TCI).
    DEps,
    /// Gaussian `W^G`, sigma = 1/2 (AdaP-TT).
    Gauss,
    /// `W^{G,eps}` (AdaP-TT*).
    GaussStar,
    /// Gaussian cost with sigma = 1 (DP-BAI code heuristic).
    GaussUnit,
}

/// All parameters of one Top Two algorithm.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TopTwoParams {
    /// Privacy budget (`inf` = non-private).
    pub epsilon: f64,
    /// Leader target beta in (0, 1).
    pub beta: f64,
    /// Estimator.
    pub estimator: Estimator,
    /// Leader rule.
    pub leader: Leader,
    /// Challenger rule.
    pub challenger: Challenger,
    /// Stopping cost.
    pub cost: StopCost,
    /// Threshold.
    pub threshold: ThresholdKind,
    /// Lazy challenger parameter theta >= 0 (0 = every round).
    pub lazy: f64,
    /// Forced exploration before the Top Two rule (see [`Forcing`]).
    pub forced: Forcing,
    /// Scale `c > 0` of the forced-exploration rule (1 = the rules as named).
    pub forcing_scale: f64,
    /// Noise path of the releases (`simulation` unless a private configuration asks for
    /// `deployment`; absent from simulation snapshots, so their bytes are unchanged).
    #[serde(default, skip_serializing_if = "is_simulation")]
    pub noise: NoiseKind,
    /// Deployment grid `2^-grid_bits` (absent from simulation snapshots).
    #[serde(default = "default_grid_bits", skip_serializing_if = "is_default_grid")]
    pub grid_bits: u32,
}

fn is_simulation(k: &NoiseKind) -> bool {
    *k == NoiseKind::Simulation
}
fn default_grid_bits() -> u32 {
    DEFAULT_GRID_BITS
}
fn is_default_grid(b: &u32) -> bool {
    *b == DEFAULT_GRID_BITS
}

/// Forced exploration: pull the least-pulled arm while `N_a < f(t) - K/2`, before the Top Two rule.
///
/// Needed when suboptimal arms tie (both paper instances do; the authors' rebuttal says forced
/// exploration is what removes the distinct-means assumption). It reads counts only, so it is
/// post-processing for privacy and leaves every threshold's delta-correctness intact (they hold
/// for any sampling rule).
///
/// Why the privacy-scaled default: at high privacy an arm whose released sum carries a large
/// negative Laplace sum `Z / eps` is seen as worse by a margin `D` with `eps N D ~ |Z|`, so its TCI
/// challenger score `W_eps + ln N` exceeds the others' by about `|Z|`: without forcing it is
/// revisited only after ~`e^|Z|` rounds (runs of 1e10 samples at eps = 0.001, docs/bai.md). To
/// dilute the noise the arm needs `N ~ |Z| / (eps Delta)` samples; `sqrt(t / eps)` forcing gives
/// them by `t ~ |Z|^2 / (c eps Delta^2)`, which scales like the sample complexity (`1/eps`), while
/// Garivier–Kaufmann's `sqrt(t)` needs `t ~ |Z|^2 / (eps^2 Delta^2)`. For `eps >= 1` both agree.
///
/// The scale `c` (`forcing_scale`: default 16 for the private algorithms,
/// [`super::PRIVATE_FORCING_SCALE`], and 1 for EB-TCI) is a free constant of this o(t) rule (any `c` keeps
/// it o(t)); a larger `c` shortens the escape of a stuck arm but forces more samples on easy arms
/// (at most `K sqrt(c t / eps)` in total). docs/bai.md records the sensitivity to `c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Forcing {
    /// No forced exploration (the literal algorithm; can take ~1e12 samples on tied instances).
    None,
    /// `f(t) = sqrt(c t)` (Garivier & Kaufmann 2016 with `c = 1`).
    SqrtT,
    /// `f(t) = sqrt(c t / min(1, eps))` (default).
    #[default]
    PrivacyScaled,
}

impl Forcing {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Forcing::None => "none",
            Forcing::SqrtT => "sqrt_t",
            Forcing::PrivacyScaled => "privacy_scaled",
        }
    }

    /// `f(t) - K/2` for budget `eps` and forcing scale `c` (`-inf` for `None`).
    pub fn target(self, t: u64, eps: f64, k: usize, scale: f64) -> f64 {
        let f = match self {
            Forcing::None => return f64::NEG_INFINITY,
            Forcing::SqrtT => (scale * t as f64).sqrt(),
            Forcing::PrivacyScaled => (scale * t as f64 / eps.min(1.0)).sqrt(),
        };
        f - k as f64 / 2.0
    }
}

impl<'de> serde::Deserialize<'de> for Forcing {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            B(bool),
            S(String),
        }
        let expected = "expected true (= \"privacy_scaled\"), false (= \"none\"), \"none\", \"sqrt_t\" or \"privacy_scaled\"";
        match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom(format!("forced_exploration: {expected}")))?
        {
            Raw::B(true) => Ok(Forcing::PrivacyScaled),
            Raw::B(false) => Ok(Forcing::None),
            Raw::S(s) => match s.as_str() {
                "none" => Ok(Forcing::None),
                "sqrt_t" => Ok(Forcing::SqrtT),
                "privacy_scaled" => Ok(Forcing::PrivacyScaled),
                _ => Err(serde::de::Error::custom(format!(
                    "forced_exploration = \"{s}\": {expected}"
                ))),
            },
        }
    }
}

/// Number of leader pulls in the next `m` rounds of beta-tracking for a leader with `l` rounds as
/// leader and `nl` pulls as leader so far (rule: pull iff `nl <= beta (l + 1)`).
pub fn tracking_block(mut l: u64, mut nl: u64, beta: f64, mut m: u64) -> u64 {
    let f = |x: u64| (beta * x as f64).floor() as u64;
    let mut b = 0;
    // Transient (at most a few rounds: the per-arm state is steady after the first round).
    while m > 0 && nl != f(l) + 1 {
        if (nl as f64) <= beta * (l + 1) as f64 {
            nl += 1;
            b += 1;
        }
        l += 1;
        m -= 1;
    }
    // Steady state: nl = floor(beta l) + 1 is invariant, so the count after m rounds is explicit.
    b + f(l + m) - f(l)
}

/// A ready-to-run Top Two algorithm (parameters plus precomputed thresholds for `K`, `delta`):
/// the [`BaiEngine`] shared by all runs of a cell; each run is a [`TopTwoRun`].
#[derive(Debug)]
pub struct TopTwo {
    p: TopTwoParams,
    k: usize,
    delta: f64,
    grid: Vec<u64>,
    r_table: Vec<f64>,
    /// Proposal J pair thresholds keyed by (j_a, j_b) < JOINT_DIM; computed once, shared by runs.
    joint: Vec<OnceLock<f64>>,
    /// `eps * scale` of the Laplace mechanism (>= 1 by the upward rounding).
    rho: f64,
    /// Thesis thresholds keyed by (log2 w_a, log2 w_b[, branch]); computed once, shared by runs.
    thesis: Vec<OnceLock<f64>>,
}

const THESIS_DIM: usize = 65;
const JOINT_DIM: usize = 64;

impl TopTwo {
    /// Validate parameters and precompute thresholds.
    ///
    /// # Errors
    /// eps > 0 (not NaN), beta and delta in (0, 1), eta > 0 finite, lazy in [0, 1), K >= 2.
    pub fn new(p: TopTwoParams, k: usize, delta: f64) -> Result<TopTwo> {
        check::budget("epsilon", p.epsilon)?;
        check::open_unit("beta", p.beta)?;
        check::open_unit("delta", delta)?;
        if !(p.lazy >= 0.0 && p.lazy < 1.0) {
            return Err(Error::param(
                "lazy",
                p.lazy,
                "a number in [0, 1) (0 = every round)",
            ));
        }
        if k < 2 {
            return Err(Error::param("K", k, "at least two arms"));
        }
        check::positive("forcing_scale", p.forcing_scale)?;
        let mut grid = vec![];
        match p.estimator {
            Estimator::Cumulative { eta } => {
                check::positive("eta", eta)?;
                let mut j = 0i32;
                loop {
                    let v = (1.0 + eta).powi(j).ceil();
                    if v > 4.0e18 || j > 100_000 {
                        break;
                    }
                    let v = v as u64;
                    if grid.last() != Some(&v) {
                        grid.push(v);
                    }
                    j += 1;
                }
            }
            Estimator::Forgetting => {
                let mut v = 1u64;
                while v < (1u64 << 62) {
                    grid.push(v);
                    v *= 2;
                }
            }
            Estimator::Exact => {}
        }
        let noisy = p.epsilon.is_finite();
        let r_table = if p.threshold == ThresholdKind::R && !grid.is_empty() {
            (0..=grid.len())
                .map(|j| {
                    threshold::r_threshold(
                        j.max(1) as u64,
                        if noisy { j as u64 } else { 0 },
                        k,
                        delta,
                    )
                })
                .collect()
        } else {
            vec![]
        };
        if p.threshold == ThresholdKind::Joint && grid.is_empty() {
            return Err(Error::param(
                "threshold",
                "\"joint\"",
                "an algorithm with released noisy sums on a grid (dp_tt)",
            ));
        }
        let thesis = (0..2 * THESIS_DIM * THESIS_DIM)
            .map(|_| OnceLock::new())
            .collect();
        let joint = if p.threshold == ThresholdKind::Joint {
            (0..JOINT_DIM * JOINT_DIM)
                .map(|_| OnceLock::new())
                .collect()
        } else {
            vec![]
        };
        let lap = LaplaceMechanism::for_pure_dp(1.0, p.epsilon)?;
        let scale = lap.scale();
        let rho = if p.epsilon.is_finite() {
            (p.epsilon * scale).max(1.0)
        } else {
            1.0
        };
        Ok(TopTwo {
            p,
            k,
            delta,
            grid,
            r_table,
            joint,
            rho,
            thesis,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &TopTwoParams {
        &self.p
    }

    fn boundary_after(&self, releases: u64, n: u64) -> u64 {
        match self.p.estimator {
            Estimator::Exact => n + 1,
            _ => self
                .grid
                .get(releases as usize)
                .copied()
                .unwrap_or(u64::MAX),
        }
    }

    fn thesis_cached(&self, wa: f64, wb: f64, branch: usize, f: impl FnOnce() -> f64) -> f64 {
        let (ja, jb) = (wa.log2().round(), wb.log2().round());
        if wa == ja.exp2()
            && wb == jb.exp2()
            && (ja as usize) < THESIS_DIM
            && (jb as usize) < THESIS_DIM
        {
            let i = (branch * THESIS_DIM + ja as usize) * THESIS_DIM + jb as usize;
            *self.thesis[i].get_or_init(f)
        } else {
            f()
        }
    }

    /// Per-pair threshold. `j*`: release index, `w*`: released weights, `n`: total samples.
    fn pair_threshold(&self, ja: u64, wa: f64, jb: u64, wb: f64, gap: f64, n: u64) -> f64 {
        let (d, k, eps) = (self.delta, self.k, self.p.epsilon);
        match self.p.threshold {
            ThresholdKind::R => {
                if self.p.estimator == Estimator::Exact {
                    threshold::r_threshold(wa as u64, 0, k, d)
                        + threshold::r_threshold(wb as u64, 0, k, d)
                } else {
                    let c = |j: u64| self.r_table[(j as usize).min(self.r_table.len() - 1)];
                    c(ja) + c(jb)
                }
            }
            ThresholdKind::Joint => {
                let draws = |j: u64| if eps.is_finite() { j } else { 0 };
                let f = || {
                    threshold::joint_threshold(
                        threshold::JointArm {
                            j: ja,
                            n: wa,
                            draws: draws(ja),
                        },
                        threshold::JointArm {
                            j: jb,
                            n: wb,
                            draws: draws(jb),
                        },
                        eps,
                        self.rho,
                        k,
                        d,
                    )
                };
                // On the grid (the only way DP-TT releases) the counts are functions of j.
                let on_grid = |j: u64, w: f64| {
                    j >= 1 && self.grid.get(j as usize - 1).map(|&g| g as f64) == Some(w)
                };
                if (ja as usize) < JOINT_DIM
                    && (jb as usize) < JOINT_DIM
                    && on_grid(ja, wa)
                    && on_grid(jb, wb)
                {
                    *self.joint[ja as usize * JOINT_DIM + jb as usize].get_or_init(f)
                } else {
                    f()
                }
            }
            ThresholdKind::HHalf => threshold::h_half(wa, d) + threshold::h_half(wb, d),
            ThresholdKind::HArm => threshold::h_arm(wa, d) + threshold::h_arm(wb, d),
            ThresholdKind::Eb => threshold::eb_pair(n as f64, d),
            ThresholdKind::Code23 => threshold::code23(wa, wb, d, eps),
            ThresholdKind::Paper => threshold::dp_c(wa, wb, k, ja.max(jb).max(1), d, eps),
            ThresholdKind::Heuristic => threshold::emp_c(wa, wb, d, eps),
            ThresholdKind::Thesis => match self.p.cost {
                StopCost::GaussStar => {
                    let branch = usize::from(gap.max(0.0) >= 3.0 * eps);
                    self.thesis_cached(wa, wb, branch, || threshold::c_star(wa, wb, gap, d, k, eps))
                }
                _ => self.thesis_cached(wa, wb, 0, || threshold::c_g_eps(wa, wb, d, k, eps)),
            },
        }
    }

    fn cost(&self, ma: f64, mb: f64, wa: f64, wb: f64) -> f64 {
        match self.p.cost {
            StopCost::DEps => w_eps(
                ma.clamp(0.0, 1.0),
                mb.clamp(0.0, 1.0),
                wa,
                wb,
                self.p.epsilon,
            ),
            StopCost::Gauss => w_gauss(ma, mb, wa, wb),
            StopCost::GaussStar => w_gauss_star(ma, mb, wa, wb, self.p.epsilon),
            StopCost::GaussUnit => 0.25 * w_gauss(ma, mb, wa, wb),
        }
    }

    /// Number of consecutive rounds, from round `t`, in which the per-round forcing rule pulls
    /// `u` (the first arm of minimal count, below target at `t`): `u` stays the first argmin
    /// while `n_u + i < n_v` for `v < u` and `n_u + i <= n_v` for `v > u`, and stays below target
    /// while `n_u + i < g(t + i)`; `n_u + i - g(t + i)` is convex in `i` (g is concave), so the
    /// first failure is found by doubling and bisection. Tested against the loop.
    pub(crate) fn forced_run(&self, u: usize, n: &[u64], t: u64) -> u64 {
        let mut m1 = u64::MAX;
        for (v, &nv) in n.iter().enumerate() {
            if v != u {
                let room = if v < u { nv - n[u] - 1 } else { nv - n[u] };
                m1 = m1.min(room + 1);
            }
        }
        let (eps, k, c) = (self.p.epsilon, self.k, self.p.forcing_scale);
        let below = |i: u64| ((n[u] + i) as f64) < self.p.forced.target(t + i, eps, k, c);
        // below(0) holds; find the first i with !below(i), capped at m1.
        let mut hi = 1u64;
        while hi < m1 && below(hi) {
            hi = hi.saturating_mul(2);
        }
        if hi >= m1 && below(m1.min(hi)) {
            return m1;
        }
        let mut lo = hi / 2; // below(lo) holds (lo = 0 or a doubling step that held)
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if below(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        hi.min(m1)
    }

    fn challenger(&self, b: usize, mu: &[f64], n: &[u64], clip: bool) -> usize {
        let mut best = usize::MAX;
        let mut best_key = (f64::INFINITY, f64::INFINITY);
        for a in 0..self.k {
            if a == b {
                continue;
            }
            let (nb, na) = (n[b] as f64, n[a] as f64);
            let signed = (mu[b] - mu[a]) / (1.0 / nb + 1.0 / na).sqrt();
            let key = match self.p.challenger {
                Challenger::Tci => {
                    let (mb, ma) = if clip {
                        (mu[b].clamp(0.0, 1.0), mu[a].clamp(0.0, 1.0))
                    } else {
                        (mu[b], mu[a])
                    };
                    (w_eps(mb, ma, nb, na, self.p.epsilon) + na.ln(), 0.0)
                }
                Challenger::SignedGauss => (signed, 0.0),
                Challenger::GaussStar => {
                    (w_gauss_star(mu[b], mu[a], nb, na, self.p.epsilon), signed)
                }
            };
            if best == usize::MAX || key < best_key {
                best = a;
                best_key = key;
            }
        }
        best
    }
}

impl BaiEngine for TopTwo {
    fn start(self: Arc<Self>, seed: u64) -> Box<dyn BaiAlgorithm> {
        Box::new(TopTwoRun::new(self, seed))
    }
}

/// One run of a Top Two algorithm: the per-arm state, the run's generators and the requests
/// still to be served.
///
/// Life cycle: every arm is sampled once (each makes its first release); then, after every
/// release, a *decision* (recommendation with random tie-break, stopping rule, leader); between
/// decisions, *steps*: a forced block or a tracking block, each turned into one or two
/// [`BaiStep::Sample`] requests that are served in turn before anything new is decided. Rewards
/// arrive as sums per request and wait in `pending` until the arm's next release, so no decision
/// can read an unreleased reward.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopTwoRun {
    gate: Gate,
    /// Snapshots store the engine's parameters; the restore rebuilds it.
    #[serde(with = "engine_snap")]
    engine: Arc<TopTwo>,
    /// Pulls per arm.
    n: Vec<u64>,
    /// Pulls at the last release.
    n_rel: Vec<u64>,
    /// Releases per arm.
    rel: Vec<u64>,
    /// Count at which the arm's next release happens.
    next_b: Vec<u64>,
    /// Released (noisy) cumulative sums (cumulative and exact estimators).
    sum: Vec<f64>,
    /// Released means.
    mu: Vec<f64>,
    /// Released weights (counts behind `mu`).
    w: Vec<f64>,
    /// Rounds as leader, per arm (beta-tracking).
    lead_l: Vec<u64>,
    /// Pulls as leader, per arm.
    lead_n: Vec<u64>,
    /// Reward sums collected since the arm's last release (read only by `release`).
    pending: Vec<f64>,
    /// Tie-breaks.
    prng: SimRng,
    /// Privacy noise: the seeded stream (simulation) or the OS-keyed exact path (deployment,
    /// snapshotted as a marker and restored with a fresh key).
    nrng: NoiseSource,
    noise_draws: u64,
    /// Samples collected.
    t: u64,
    /// Arms sampled by the initialisation so far.
    init: usize,
    /// A release happened since the last decision.
    decide: bool,
    /// Current recommendation (last decision).
    rec: usize,
    /// Current leader (last decision).
    leader: usize,
    /// Outstanding requests of the current block: `queue[q_pos..q_len]`.
    queue: [(usize, u64); 2],
    q_pos: usize,
    q_len: usize,
    /// The request last handed out (to detect a truncation by the sample cap).
    last: (usize, u64),
}

impl TopTwoRun {
    /// A fresh run with policy seed `seed` (tie-breaks from [`rng::policy_rng`], noise from
    /// [`rng::noise_rng`], or from an OS-keyed ChaCha20 with `noise = "deployment"`).
    ///
    /// # Panics
    /// With deployment noise, if the operating system's entropy source fails (as
    /// [`NoiseSource`]'s `Clone`: there is no safe fallback key).
    pub fn new(engine: Arc<TopTwo>, seed: u64) -> Self {
        let k = engine.k;
        let nrng = NoiseSource::new(engine.p.noise, engine.p.grid_bits, seed)
            .expect("OS entropy source failed while starting a deployment-noise BAI run");
        TopTwoRun {
            gate: Gate::new(RewardBoundary::unit(BoundaryMode::Clip)),
            engine,
            n: vec![0; k],
            n_rel: vec![0; k],
            rel: vec![0; k],
            next_b: vec![1; k],
            sum: vec![0.0; k],
            mu: vec![0.0; k],
            w: vec![0.0; k],
            lead_l: vec![0; k],
            lead_n: vec![0; k],
            pending: vec![0.0; k],
            prng: rng::policy_rng(seed),
            nrng,
            noise_draws: 0,
            t: 0,
            init: 0,
            decide: false,
            rec: 0,
            leader: 0,
            queue: [(0, 0); 2],
            q_pos: 0,
            q_len: 0,
            last: (0, 0),
        }
    }

    /// One release of arm `a` at its current count: the pending reward sum enters the estimator
    /// through the privacy mechanism, then the next boundary is set.
    fn release(&mut self, a: usize) {
        let e = &*self.engine;
        let fresh = self.n[a] - self.n_rel[a];
        let s = std::mem::take(&mut self.pending[a]);
        self.rel[a] += 1;
        // The pending rewards as a boundary-built sum (clipped on admission; on the deployment
        // path each batch was rounded onto the release's grid, so `s` is an exact grid sum).
        let unit = self.gate.boundary();
        let pending = unit.drawn_sum(s, fresh);
        match e.p.estimator {
            Estimator::Cumulative { .. } => {
                // Sensitivity 1 of the increment's sum (Jourdan & Azize 2025, Alg. 1): the
                // simulation path is exactly `e.lap.release(s, nrng)` (same mechanism, same draw).
                match self.nrng.laplace_sum(1.0, e.p.epsilon, &pending, &unit) {
                    Ok((v, scale)) => {
                        self.sum[a] += v;
                        if scale > 0.0 {
                            self.noise_draws += 1;
                        }
                    }
                    Err(_) => self.sum[a] = f64::NAN,
                }
                self.w[a] = self.n[a] as f64;
                self.mu[a] = self.sum[a] / self.w[a];
            }
            Estimator::Forgetting => {
                self.w[a] = fresh as f64;
                // Cannot fail: eps was validated by `TopTwo::new` and `1 / fresh` is finite and
                // positive; a NaN mean would block stopping (reported as capped), not panic.
                // Simulation: exactly `Lap(1/(eps fresh)).release(s / fresh)`; deployment: the
                // discrete Laplace on the integer grid sum (`NoiseSource::laplace_mean`).
                self.mu[a] =
                    match self
                        .nrng
                        .laplace_mean(1.0 / fresh as f64, e.p.epsilon, &pending, &unit)
                    {
                        Ok((m, scale)) => {
                            if scale > 0.0 {
                                self.noise_draws += 1;
                            }
                            m
                        }
                        Err(_) => f64::NAN,
                    };
            }
            Estimator::Exact => {
                self.sum[a] += s;
                self.w[a] = self.n[a] as f64;
                self.mu[a] = self.sum[a] / self.w[a];
            }
        }
        self.n_rel[a] = self.n[a];
        self.next_b[a] = e.boundary_after(self.rel[a], self.n[a]);
        self.decide = true;
    }

    fn clip(&self) -> bool {
        matches!(self.engine.p.cost, StopCost::DEps)
    }

    fn score(&self, a: usize) -> f64 {
        if self.clip() {
            self.mu[a].clamp(0.0, 1.0)
        } else {
            self.mu[a]
        }
    }

    /// Argmax of the released (clipped) means, ties uniformly at random from the policy stream.
    fn recommend(&mut self) -> usize {
        let k = self.engine.k;
        let best = (0..k)
            .map(|a| self.score(a))
            .fold(f64::NEG_INFINITY, f64::max);
        let ties = (0..k).filter(|&a| self.score(a) == best).count();
        let pick = if ties > 1 {
            self.prng.random_range(0..ties)
        } else {
            0
        };
        (0..k)
            .filter(|&a| self.score(a) == best)
            .nth(pick)
            .unwrap_or(0)
    }

    /// GLR stopping rule on released statistics: every pair (rec, a) above its threshold.
    fn stop_check(&self) -> bool {
        let e = &*self.engine;
        let (r, mu, w, rel) = (self.rec, &self.mu, &self.w, &self.rel);
        (0..e.k).filter(|&a| a != r).all(|a| {
            let stat = e.cost(mu[r], mu[a], w[r], w[a]);
            let thr = e.pair_threshold(rel[r], w[r], rel[a], w[a], mu[r] - mu[a], self.t);
            !stat.is_nan() && stat > thr
        })
    }

    /// The leader of the coming steps (ties: lowest index for the private UCB).
    fn leader(&self) -> usize {
        let e = &*self.engine;
        match e.p.leader {
            Leader::EmpiricalBest => self.rec,
            Leader::PrivateUcb => {
                let idx = |a: usize| {
                    let (kk, ww) = (self.rel[a] as f64, self.w[a]);
                    self.mu[a] + (kk / ww).sqrt() + kk / (e.p.epsilon * ww)
                };
                (0..e.k).fold(0, |best, a| if idx(a) > idx(best) { a } else { best })
            }
        }
    }

    /// Hand out the next queued request.
    fn pop(&mut self) -> BaiStep {
        let (arm, n) = self.queue[self.q_pos];
        self.q_pos += 1;
        self.last = (arm, n);
        BaiStep::Sample { arm, n }
    }

    fn push(&mut self, arm: usize, n: u64) {
        if n > 0 {
            self.queue[self.q_len] = (arm, n);
            self.q_len += 1;
        }
    }

    /// Forced exploration in bulk: if the least-pulled arm `u` is below target, queue exactly
    /// the rounds the per-round rule would force on it in a row (it reads counts only), up to its
    /// next release. Returns whether a block was queued.
    fn forced_step(&mut self) -> bool {
        let e = &*self.engine;
        let n = &self.n;
        let u = (0..e.k).fold(0, |x, a| if n[a] < n[x] { a } else { x });
        let target =
            e.p.forced
                .target(self.t, e.p.epsilon, e.k, e.p.forcing_scale);
        if (n[u] as f64) >= target {
            return false;
        }
        let m = e.forced_run(u, n, self.t).min(self.next_b[u] - n[u]);
        self.push(u, m);
        true
    }

    /// A beta-tracking block between leader `b` and the current challenger `c`: `m` rounds
    /// (1, or `max(1, floor(theta t))` with the lazy challenger), shortened so that neither arm
    /// passes its next release; `lb` (closed form [`tracking_block`]) go to `b`, `m - lb` to `c`.
    fn tracking_step(&mut self) {
        let e = &*self.engine;
        let b = self.leader;
        let c = e.challenger(b, &self.mu, &self.n, self.clip());
        let m_max = if e.p.lazy > 0.0 {
            ((e.p.lazy * self.t as f64).floor() as u64).max(1)
        } else {
            1
        };
        let (rem_b, rem_c) = (self.next_b[b] - self.n[b], self.next_b[c] - self.n[c]);
        let (l0, n0, beta) = (self.lead_l[b], self.lead_n[b], e.p.beta);
        let ok = |m: u64| {
            let lb = tracking_block(l0, n0, beta, m);
            lb <= rem_b && m - lb <= rem_c
        };
        let (mut lo, mut hi) = (1u64, m_max);
        if !ok(hi) {
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if ok(mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            hi = lo;
        }
        let m = hi;
        let lb = tracking_block(l0, n0, beta, m);
        self.lead_l[b] += m;
        self.lead_n[b] += lb;
        self.push(b, lb);
        self.push(c, m - lb);
    }
}

/// The engine of a [`TopTwoRun`] in a snapshot: its parameters, rebuilt by [`TopTwo::new`] on
/// restore (thresholds and caches are pure functions of them).
mod engine_snap {
    use super::{Arc, TopTwo, TopTwoParams};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Engine {
        params: TopTwoParams,
        k: usize,
        delta: f64,
    }

    pub fn serialize<S: Serializer>(e: &Arc<TopTwo>, s: S) -> Result<S::Ok, S::Error> {
        Engine {
            params: e.p,
            k: e.k,
            delta: e.delta,
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<TopTwo>, D::Error> {
        let e = Engine::deserialize(d)?;
        TopTwo::new(e.params, e.k, e.delta)
            .map(Arc::new)
            .map_err(serde::de::Error::custom)
    }
}

impl TopTwo {
    /// The registry kind these parameters implement (the Top Two kinds differ in their
    /// estimator and challenger).
    pub fn kind(&self) -> &'static str {
        match (self.p.estimator, self.p.challenger) {
            (Estimator::Cumulative { .. }, _) => super::DP_TT.kind,
            (Estimator::Exact, _) => super::EB_TCI.kind,
            (Estimator::Forgetting, Challenger::GaussStar) => super::ADAP_TT_STAR.kind,
            (Estimator::Forgetting, _) => super::ADAP_TT.kind,
        }
    }
}

impl TopTwoRun {
    /// The algorithm's next step when no commitment is open.
    fn step(&mut self) -> BaiStep {
        if self.q_pos < self.q_len {
            return self.pop();
        }
        let k = self.engine.k;
        if self.init < k {
            self.init += 1;
            self.last = (self.init - 1, 1);
            return BaiStep::Sample {
                arm: self.init - 1,
                n: 1,
            };
        }
        if self.decide {
            self.decide = false;
            self.rec = self.recommend();
            if self.stop_check() {
                return BaiStep::Stop;
            }
            self.leader = self.leader();
        }
        self.q_pos = 0;
        self.q_len = 0;
        if !self.forced_step() {
            self.tracking_step();
        }
        self.pop()
    }
}

impl BaiAlgorithm for TopTwoRun {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(crate::config::Setting::Bai, self.engine.kind(), self)
    }
    fn num_arms(&self) -> usize {
        self.engine.k
    }

    fn next(&mut self, _t: u64) -> BaiStep {
        super::gated_next(self, |a| &mut a.gate, Self::step)
    }

    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }

    fn observe(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        let (n, mut gate) = (sum.n(), self.gate);
        let sum = gate.admit_sum(arm, sum)?;
        self.gate = gate;
        // Deployment: the batch sum onto the grid of the release it belongs to (`next_b -
        // n_rel` rewards, public); simulation: unchanged.
        let release_len = self.next_b[arm].saturating_sub(self.n_rel[arm]).max(n);
        let sum = self.nrng.discretise(sum, release_len, &gate.boundary());
        self.n[arm] += n;
        self.t += n;
        self.pending[arm] += sum;
        if n < self.last.1 {
            // Truncated by the sample cap: the run ends after the next decision.
            self.q_pos = self.q_len;
        }
        if self.n[arm] == self.next_b[arm] {
            self.release(arm);
        }
        Ok(())
    }

    fn recommendation(&self) -> usize {
        self.rec
    }

    fn noise_draws(&self) -> u64 {
        self.noise_draws
    }

    fn releases(&self) -> Vec<u64> {
        self.rel.clone()
    }

    fn released_estimates(&self) -> Option<crate::report::Released> {
        // The cached released means (never re-sampled). Cumulative (DP-TT): the running mean of
        // all `n` rewards at the release plus the `rel` Laplace(1/eps) draws of the increments'
        // sums, noise sd `sqrt(2 rel) b / n` (normal approximation of their sum); forgetting
        // (AdaP-TT, AdaP-TT*): the mean of the last phase's `w` rewards with one Laplace of
        // scale `b / w`; exact (EB-TCI): the running mean, no noise. `b` the Laplace scale of
        // sensitivity 1 (rewards in [0, 1]).
        let e = &*self.engine;
        let b = crate::privacy::LaplaceMechanism::for_pure_dp(1.0, e.p.epsilon)
            .ok()?
            .scale();
        let bd = self.gate.boundary();
        let means = (0..self.rel.len())
            .map(|a| {
                let j = self.rel[a];
                if j == 0 || !self.mu[a].is_finite() || self.w[a] < 1.0 {
                    return None;
                }
                let (n, noise) = match e.p.estimator {
                    Estimator::Cumulative { .. } => {
                        let n = self.n_rel[a].max(1);
                        let sd = (2.0 * j as f64).sqrt() * b / n as f64;
                        (n, crate::report::NoiseLaw::Gaussian { sd })
                    }
                    Estimator::Forgetting => {
                        let w = self.w[a] as u64;
                        (
                            w,
                            crate::report::NoiseLaw::Laplace {
                                scale: b / w as f64,
                            },
                        )
                    }
                    Estimator::Exact => (
                        self.n_rel[a].max(1),
                        crate::report::NoiseLaw::Gaussian { sd: 0.0 },
                    ),
                };
                Some(crate::report::Release::new(self.mu[a], n, noise).with_index(j))
            })
            .collect();
        Some(crate::report::Released {
            means,
            range: (bd.lo, bd.hi),
            rounding: 0.0,
            releases_bound: 0,
            target: None,
        })
    }

    fn risk(&self) -> Option<f64> {
        Some(self.engine.delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bulk forced run equals the round-by-round forcing rule.
    #[test]
    fn forced_run_matches_loop() {
        use crate::bai::dp_tt::DpTtConfig;
        for &(eps, c) in &[(0.001, 16.0), (0.3, 1.0), (2.0, 16.0)] {
            let mut cfg = DpTtConfig::new(eps);
            cfg.forcing_scale = c;
            let tt = TopTwo::new(cfg.params(), 4, 0.1).unwrap();
            for start in [
                vec![1u64, 1, 1, 1],
                vec![3, 1, 2, 1],
                vec![5, 9, 2, 2],
                vec![40, 2, 7, 3],
            ] {
                for t0 in [4u64, 17, 300, 5000] {
                    let t0 = t0.max(start.iter().sum());
                    let first = |n: &[u64]| (0..4).fold(0, |x, a| if n[a] < n[x] { a } else { x });
                    let u = first(&start);
                    if (start[u] as f64) >= tt.p.forced.target(t0, eps, 4, c) {
                        continue;
                    }
                    let (mut n, mut t, mut m) = (start.clone(), t0, 0u64);
                    while first(&n) == u && (n[u] as f64) < tt.p.forced.target(t, eps, 4, c) {
                        n[u] += 1;
                        t += 1;
                        m += 1;
                    }
                    assert_eq!(
                        tt.forced_run(u, &start, t0),
                        m,
                        "eps {eps} c {c} {start:?} t {t0}"
                    );
                }
            }
        }
    }

    /// The closed form of the tracking block equals the round-by-round rule.
    #[test]
    fn tracking_block_matches_loop() {
        for &beta in &[0.5, 0.3, 0.77, 0.9] {
            let (mut l, mut nl) = (0u64, 0u64);
            for step in 0..3000u64 {
                for m in [1u64, 2, 7, 50] {
                    let (mut ll, mut nn, mut b) = (l, nl, 0);
                    for _ in 0..m {
                        if (nn as f64) <= beta * (ll + 1) as f64 {
                            nn += 1;
                            b += 1;
                        }
                        ll += 1;
                    }
                    assert_eq!(
                        tracking_block(l, nl, beta, m),
                        b,
                        "beta {beta} l {l} nl {nl} m {m}"
                    );
                }
                let b = tracking_block(l, nl, beta, 1 + step % 3);
                l += 1 + step % 3;
                nl += b;
            }
        }
    }
}
