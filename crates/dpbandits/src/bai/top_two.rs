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
//! * **Rewards are drawn at release time.** Decisions never read unreleased rewards, so the sum of
//!   the `m` rewards an arm collected since its last release is drawn as one `Binomial(m, mu_a)` when
//!   it is released: the same distribution as summing `m` Bernoulli draws (rewards are i.i.d. and
//!   independent of the decisions that chose to collect them). Tested against a naive step-by-step
//!   simulator in `tests/bai.rs` (two-sample KS test).
//! * **Leader and tracking in bulk.** Between releases the leader is frozen; the number of leader
//!   pulls in the next `m` rounds has a closed form ([`tracking_block`], tested against the loop).
//! * **Lazy challenger (`lazy = theta`).** With `theta = 0` (the default) the challenger is
//!   recomputed every round: the paper's algorithm. With `theta > 0` it is recomputed after every
//!   release and at least every `max(1, floor(theta t))` rounds. This is a (documented) variant:
//!   it changes only which challenger gets each of a block of pulls, never the privacy argument or
//!   the delta-correctness of a threshold proved for any sampling rule (threshold `r`). Its
//!   stopping-time distribution is compared with `theta = 0` in `tests/bai.rs` (KS test). The
//!   experiments use `theta = 0.01` (recorded in every output label).
//! * **Cap.** A run that reaches `max_samples` stops with `capped = true` (reported, never silent).

use super::charact::BaiInstance;
use super::divergence::{w_eps, w_gauss, w_gauss_star};
use super::threshold::{self, ThresholdKind};
use crate::error::{Error, Result, check};
use crate::privacy::LaplaceMechanism;
use crate::rng::SimRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Binomial, Distribution};
use std::sync::OnceLock;

/// How released means are built.
#[derive(Debug, Clone, Copy, PartialEq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leader {
    /// Empirical best (the recommendation).
    EmpiricalBest,
    /// AdaP-TT private UCB `mu_a + sqrt(k_a / N~_a) + k_a / (eps N~_a)` (ties: lowest index).
    PrivateUcb,
}

/// Challenger rule (current counts `N`; ties: lowest index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenger {
    /// TCI: `argmin W_eps(m_B, m_a; N_B, N_a) + ln N_a` on clipped means.
    Tci,
    /// AdaP-TT: `argmin (mu_B - mu_a) / sqrt(1/N_B + 1/N_a)` (signed).
    SignedGauss,
    /// AdaP-TT*: `argmin W^{G,eps}_{B,a}`, ties towards the smaller signed score.
    GaussStar,
}

/// Stopping cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq)]
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

/// Seeds of the three streams of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSeeds {
    /// Rewards (one generator per arm is derived from it).
    pub env: u64,
    /// Tie-breaks.
    pub policy: u64,
    /// Privacy noise.
    pub noise: u64,
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

/// A ready-to-run Top Two algorithm (parameters plus precomputed thresholds for `K`, `delta`).
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
        let scale = LaplaceMechanism::for_pure_dp(1.0, p.epsilon)?.scale();
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

    /// Run once on `inst` (which must have `K` arms).
    ///
    /// # Errors
    /// `inst` with a different number of arms.
    pub fn run(&self, inst: &BaiInstance, seeds: RunSeeds, max_samples: u64) -> Result<BaiOutcome> {
        if inst.k() != self.k {
            return Err(Error::param(
                "means",
                format!("{} arms", inst.k()),
                format!("{} arms", self.k),
            ));
        }
        let k = self.k;
        let eps = self.p.epsilon;
        let mu_true = inst.means();
        let mut env: Vec<SimRng> = (0..k)
            .map(|a| {
                SimRng::seed_from_u64(crate::rng::splitmix64(
                    seeds.env ^ crate::rng::splitmix64(a as u64 + 1),
                ))
            })
            .collect();
        let mut prng = SimRng::seed_from_u64(seeds.policy);
        let mut nrng = SimRng::seed_from_u64(seeds.noise);
        let lap = LaplaceMechanism::for_pure_dp(1.0, eps)?;
        let mut n = vec![0u64; k];
        let mut n_rel = vec![0u64; k];
        let mut rel = vec![0u64; k];
        let mut next_b = vec![0u64; k];
        let mut sum = vec![0.0f64; k];
        let mut mu = vec![0.0f64; k];
        let mut w = vec![0.0f64; k];
        let mut lead_l = vec![0u64; k];
        let mut lead_n = vec![0u64; k];
        let mut noise_draws = 0u64;
        let mut t: u64 = 0;

        // One release of arm a at its current count.
        let mut release = |a: usize,
                           n: &[u64],
                           n_rel: &mut [u64],
                           rel: &mut [u64],
                           sum: &mut [f64],
                           mu: &mut [f64],
                           w: &mut [f64],
                           noise_draws: &mut u64|
         -> Result<()> {
            let fresh = n[a] - n_rel[a];
            let s = Binomial::new(fresh, mu_true[a])
                .map_err(|e| Error::Config(format!("binomial: {e}")))?
                .sample(&mut env[a]) as f64;
            rel[a] += 1;
            match self.p.estimator {
                Estimator::Cumulative { .. } => {
                    sum[a] += lap.release(s, &mut nrng);
                    if lap.scale() > 0.0 {
                        *noise_draws += 1;
                    }
                    w[a] = n[a] as f64;
                    mu[a] = sum[a] / w[a];
                }
                Estimator::Forgetting => {
                    let m = LaplaceMechanism::for_pure_dp(1.0 / fresh as f64, eps)?;
                    if m.scale() > 0.0 {
                        *noise_draws += 1;
                    }
                    w[a] = fresh as f64;
                    mu[a] = m.release(s / fresh as f64, &mut nrng);
                }
                Estimator::Exact => {
                    sum[a] += s;
                    w[a] = n[a] as f64;
                    mu[a] = sum[a] / w[a];
                }
            }
            n_rel[a] = n[a];
            Ok(())
        };

        for a in 0..k {
            n[a] = 1;
            release(
                a,
                &n,
                &mut n_rel,
                &mut rel,
                &mut sum,
                &mut mu,
                &mut w,
                &mut noise_draws,
            )?;
            next_b[a] = self.boundary_after(rel[a], n[a]);
        }
        t += k as u64;
        let clip = matches!(self.p.cost, StopCost::DEps);
        let score = |mu: &[f64], a: usize| if clip { mu[a].clamp(0.0, 1.0) } else { mu[a] };
        loop {
            // After releases: recommendation, leader, stopping.
            let rec = {
                let best = (0..k)
                    .map(|a| score(&mu, a))
                    .fold(f64::NEG_INFINITY, f64::max);
                let ties = (0..k).filter(|&a| score(&mu, a) == best).count();
                let pick = if ties > 1 {
                    prng.random_range(0..ties)
                } else {
                    0
                };
                (0..k)
                    .filter(|&a| score(&mu, a) == best)
                    .nth(pick)
                    .unwrap_or(0)
            };
            let mut stop = true;
            for a in 0..k {
                if a == rec {
                    continue;
                }
                let stat = self.cost(mu[rec], mu[a], w[rec], w[a]);
                let thr = self.pair_threshold(rel[rec], w[rec], rel[a], w[a], mu[rec] - mu[a], t);
                if stat.is_nan() || stat <= thr {
                    stop = false;
                    break;
                }
            }
            let capped = !stop && t >= max_samples;
            if stop || capped {
                return Ok(BaiOutcome {
                    tau: t,
                    recommendation: rec,
                    correct: rec == inst.best(),
                    capped,
                    noise_draws,
                    pulls: n,
                    releases: rel,
                });
            }
            let b = match self.p.leader {
                Leader::EmpiricalBest => rec,
                Leader::PrivateUcb => {
                    let idx = |a: usize| {
                        let (kk, ww) = (rel[a] as f64, w[a]);
                        mu[a] + (kk / ww).sqrt() + kk / (eps * ww)
                    };
                    (0..k).fold(0, |best, a| if idx(a) > idx(best) { a } else { best })
                }
            };
            // Rounds until the next release.
            loop {
                let u = (0..k).fold(0, |x, a| if n[a] < n[x] { a } else { x });
                let target = self.p.forced.target(t, eps, k, self.p.forcing_scale);
                if (n[u] as f64) < target {
                    // Exactly the rounds the per-round rule would force on `u` in a row
                    // (it reads counts only): while `u` stays the first argmin and below target.
                    let m = self
                        .forced_run(u, &n, t)
                        .min(next_b[u] - n[u])
                        .min(max_samples.saturating_sub(t).max(1));
                    n[u] += m;
                    t += m;
                    if n[u] == next_b[u] {
                        release(
                            u,
                            &n,
                            &mut n_rel,
                            &mut rel,
                            &mut sum,
                            &mut mu,
                            &mut w,
                            &mut noise_draws,
                        )?;
                        next_b[u] = self.boundary_after(rel[u], n[u]);
                        break;
                    }
                    if t >= max_samples {
                        break;
                    }
                    continue;
                }
                let c = self.challenger(b, &mu, &n, clip);
                let m_max = if self.p.lazy > 0.0 {
                    ((self.p.lazy * t as f64).floor() as u64).max(1)
                } else {
                    1
                }
                .min(max_samples.saturating_sub(t).max(1));
                let (rem_b, rem_c) = (next_b[b] - n[b], next_b[c] - n[c]);
                let ok = |m: u64| {
                    let lb = tracking_block(lead_l[b], lead_n[b], self.p.beta, m);
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
                let lb = tracking_block(lead_l[b], lead_n[b], self.p.beta, m);
                lead_l[b] += m;
                lead_n[b] += lb;
                n[b] += lb;
                n[c] += m - lb;
                t += m;
                let mut released = false;
                for a in [b, c] {
                    if n[a] == next_b[a] {
                        release(
                            a,
                            &n,
                            &mut n_rel,
                            &mut rel,
                            &mut sum,
                            &mut mu,
                            &mut w,
                            &mut noise_draws,
                        )?;
                        next_b[a] = self.boundary_after(rel[a], n[a]);
                        released = true;
                    }
                }
                if released || t >= max_samples {
                    break;
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The bulk forced run equals the round-by-round forcing rule.
    #[test]
    fn forced_run_matches_loop() {
        use crate::bai::BaiConfig;
        use crate::bai::dp_tt::DpTtConfig;
        for &(eps, c) in &[(0.001, 16.0), (0.3, 1.0), (2.0, 16.0)] {
            let mut cfg = DpTtConfig::new(eps);
            cfg.forcing_scale = c;
            let tt = cfg.build(4, 0.1).unwrap();
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
