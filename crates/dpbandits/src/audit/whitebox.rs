//! White-box mode of the auditor: the privacy loss of the **releases**, in the claim's currency.
//!
//! # Method
//! The auditor runs the policy exactly as the black-box mode builds it (the registry's
//! configuration, or `noise_multiplier` / a code mutant), through its own code: its episodes, its
//! calibration and its [`crate::privacy::NoiseSource`]. Every release the policy makes through
//! the crate's mechanisms (Gaussian, Laplace, their deployment-grade discrete versions,
//! randomized response, GOPE's phase estimate) is recorded by a thread-local tap
//! (`privacy/tap.rs`, crate-private) with the context the driver is in: the arm whose rewards it is
//! feeding (`observe`), or the decision step (`choose`). A release is keyed by
//! `(context, position within the call, how many such releases came before)`: for an episodic
//! policy, key `(arm 0, 0, k)` is arm 0's `k`-th release, in every run.
//!
//! Neighbouring inputs hit the stated sensitivity: every reward is a background value (the
//! middle of the kind's boundary, so every arm ties and no release sits at an edge) except the
//! **target**, the `j`-th reward of arm 0 (the neighbour relation of View DP, Azize & Basu 2024,
//! Prop. 1: two reward sequences differing in one observed reward), at the top of the boundary
//! in `D` and at the bottom in `D'`; contextual kinds (whose releases follow the round, not the
//! arm): every arm's reward of round `j`. A kind whose guarantee states Joint DP
//! ([`crate::privacy::PrivacyGuarantee::is_joint`]: neighbours differ in one round's context and
//! reward, and the protected output is the other rounds' actions; Shariff & Sheffet 2018 Def. 2)
//! is audited under the **joint relation** instead: round `j`'s reward at the top on both sides
//! and its decision set negated in `D'` (the played row `(a, r)` becomes `(-a, r)`: as far as one
//! row moves a linear reward statistic or a Gram matrix, `contextual/joint_dp.rs`). The releases
//! are what later rounds read; round `j`'s own action is not a release. Each table is run `samples` times with independent
//! seeds, and for every key the two samples of released values give an estimate of that
//! release's loss:
//!
//! * Gaussian: `mu_k = |mean_D - mean_D'| / s` (pooled sd): the Gaussian-DP `mu` of a location
//!   shift. Interval: a normal interval for the mean difference and a chi-square interval for
//!   `sigma` (Wilson–Hilferty), each at half the level, combined conservatively.
//! * Laplace: `eps_k = |med_D - med_D'| / b` with `b` the pooled mean absolute deviation from the
//!   medians (the MLE of the Laplace scale): the epsilon of a location shift. Interval: the
//!   asymptotic normal interval of the median difference (`var = b^2 / n` per sample, with the
//!   upper bound of `b`) and the exact chi-square interval of `b` (`2 n b^ / b ~ chi2(2n)`).
//! * Bits (randomized response): `eps_k = max |ln(p / q)|` over the two outcomes, with
//!   Clopper–Pearson intervals for `p` and `q`.
//!
//! A key **carries the target** when its interval excludes 0. The run's loss composes the
//! carrying keys exactly: Gaussian `mu^2 = sum mu_k^2` (Gaussian-DP composition, exact also
//! under adaptivity; so `rho = mu^2 / 2 = sum rho_k`), pure DP `eps = sum eps_k` (the worst-case
//! loss of independent Laplace / RR releases is the sum of theirs). The honest policies release
//! each reward once (disjoint episodes, parallel composition), so the run's loss is the one
//! release's. The ratio `empirical / claimed` of the run is the report: near 1 when the
//! calibration is exact, above 1 (beyond the interval) a **leak**, below the tolerance
//! (`0.9`) an **over-noised** policy that wastes utility. The mechanism's loss is the maximum
//! over users, so several targets are audited and the largest ratio is reported.
//!
//! Every interval is at level `alpha / (targets x keys)` (Bonferroni), so all of them hold at
//! once with probability `>= confidence`.
//!
//! # Limits
//! White-box audits the mechanism as the kind calibrates and calls it, through the tap: a leak
//! outside the tapped releases (a decision that reads raw rewards, a release that bypasses the
//! crate's mechanisms) is invisible to it; the black-box mode covers that. The estimators assume
//! the mechanism's noise family (a location shift of a Gaussian or Laplace, a bit).

use super::{AuditOptions, Audited, build_mutant, guarantee, label, prepare, scaled_params};
use crate::bai::{BaiAlgorithm, BaiEnvironment, BaiStep, simulate_bai};
use crate::contextual::{ActionSet, ContextualEnvironment};
use crate::error::{Error, Result};
use crate::math::stats::{clopper_pearson_lower, clopper_pearson_upper};
use crate::privacy::tap::{self, Family, Tapped};
use crate::privacy::{Budget, RewardBoundary, RewardSum};
use crate::registry::{self, Built};
use crate::rng;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;

/// The context of releases made inside `choose` / `next`.
const CHOOSE: u32 = u32::MAX;

/// Ratio below which a policy is reported over-noised.
pub const TOLERANCE: f64 = 0.9;

/// Options of a white-box audit (on top of [`AuditOptions`]: seed, noise multiplier, confidence,
/// horizon, arms, mutant).
#[derive(Debug, Clone)]
pub struct WhiteBoxOptions {
    /// Runs per table and target (the samples of every release), >= 100.
    pub samples: u64,
    /// Targets: arm 0's `j`-th reward (contextual kinds: round `j`); empty: the setting's default.
    pub targets: Vec<u64>,
}

impl Default for WhiteBoxOptions {
    fn default() -> Self {
        WhiteBoxOptions {
            samples: 20_000,
            targets: vec![],
        }
    }
}

/// `leak`, `tight` or `over_noised`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhiteVerdict {
    /// The empirical loss exceeds the claim beyond the interval.
    Leak,
    /// Within the interval of the claim (down to the tolerance).
    Tight,
    /// The whole interval lies below `TOLERANCE` times the claim.
    OverNoised,
}

impl WhiteVerdict {
    /// Name, as in the JSON.
    pub fn name(&self) -> &'static str {
        match self {
            WhiteVerdict::Leak => "leak",
            WhiteVerdict::Tight => "tight",
            WhiteVerdict::OverNoised => "over_noised",
        }
    }
}

/// One release (key) whose interval excludes 0.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KeyEstimate {
    /// `ctx/position/k`: `ctx` = the arm fed (or `choose`), the position among the releases of
    /// one call, and the count of such releases before it.
    pub key: String,
    /// `gaussian`, `laplace` or `bit`.
    pub family: String,
    /// Samples on `D` and `D'` (runs that made this release).
    pub n: (usize, usize),
    /// Point estimate (Gaussian: `mu`; Laplace and bits: `epsilon`).
    pub estimate: f64,
    /// Interval at the Bonferroni level.
    pub lower: f64,
    /// Interval at the Bonferroni level.
    pub upper: f64,
}

/// The estimate for one target.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TargetEstimate {
    /// Arm 0's reward index (contextual: the round).
    pub target: u64,
    /// Releases recorded per run (mean over runs).
    pub releases_per_run: f64,
    /// Keys seen in at least one run of each table.
    pub keys: usize,
    /// Releases carrying the target.
    pub carrying: Vec<KeyEstimate>,
    /// How many releases the kind's claim says hold the target (its composition: 1 for the
    /// episodic kinds, the tree's p-sums for the tree-based ones: the kinds'
    /// `releases_per_reward` / `releases_per_round`).
    pub releases: u64,
    /// The largest single release's loss, in the claim's currency (`rho` or `epsilon`).
    pub per_release: f64,
    /// The run's loss composed over the carrying releases (claim's currency), and its interval.
    pub composed: f64,
    /// Lower end.
    pub composed_lower: f64,
    /// Upper end.
    pub composed_upper: f64,
    /// Gaussian kinds: the composed Gaussian-DP `mu`.
    pub mu: Option<f64>,
    /// `composed / claim`.
    pub ratio: f64,
    /// Interval of the ratio.
    pub ratio_lower: f64,
    /// Interval of the ratio.
    pub ratio_upper: f64,
}

/// The result of one white-box audit (serialised as the JSON output).
#[derive(Debug, Clone, Serialize)]
pub struct WhiteBoxReport {
    /// `white-box`.
    pub mode: String,
    /// Kind.
    pub kind: String,
    /// Parameters as given.
    pub params: serde_json::Value,
    /// The claimed budget.
    pub budget: String,
    /// The claimed guarantee's notion.
    pub notion: String,
    /// `rho` (zCDP kinds) or `epsilon`.
    pub currency: String,
    /// The claim in that currency (the whole run's).
    pub claimed: f64,
    /// Noise relative to the claimed one.
    pub noise_multiplier: f64,
    /// The code mutant audited, if any (tests only).
    pub mutant: Option<String>,
    /// The worst target's composed loss (claim's currency).
    pub empirical: f64,
    /// Its interval.
    pub empirical_lower: f64,
    /// Its interval.
    pub empirical_upper: f64,
    /// The worst target's largest single release.
    pub per_release: f64,
    /// `empirical / claimed`.
    pub ratio: f64,
    /// Interval of the ratio.
    pub ratio_lower: f64,
    /// Interval of the ratio.
    pub ratio_upper: f64,
    /// The worst target.
    pub target: u64,
    /// `leak`, `tight` or `over_noised`.
    pub verdict: WhiteVerdict,
    /// Confidence of every interval at once.
    pub confidence: f64,
    /// Runs per table and target.
    pub samples: u64,
    /// Horizon (BAI: sample cap).
    pub horizon: u64,
    /// Arms.
    pub arms: usize,
    /// Background reward of every arm.
    pub background: f64,
    /// Master seed.
    pub seed: u64,
    /// The audited policy's noise grade (`simulation-grade` or `deployment-grade`).
    pub noise: crate::privacy::NoiseGrade,
    /// Whether the report is a function of the seed (false for deployment-grade noise: its
    /// draws are keyed by the operating system).
    pub reproducible: bool,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Every target.
    pub targets: Vec<TargetEstimate>,
}

impl WhiteBoxReport {
    /// A text table: one line per target, then the verdict.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{} ({}), white-box, noise x{}{}: {} runs per table and target, horizon {}, {} arms, \
             confidence {}\n",
            self.kind,
            self.budget,
            self.noise_multiplier,
            self.mutant
                .as_ref()
                .map_or(String::new(), |m| format!(", MUTANT {m}")),
            self.samples,
            self.horizon,
            self.arms,
            self.confidence
        );
        s += &super::deployment_note(self.noise);
        s += &format!(
            "{:<7} {:>9} {:>11} {:>11} {:>9} {:>21}  carrying releases\n",
            "target", "claimed", "per_release", "composed", "ratio", "ratio interval"
        );
        for t in &self.targets {
            s += &format!(
                "{:<7} {:>9.4} {:>11.4} {:>11.4} {:>9.4} {:>21}  {}\n",
                t.target,
                self.claimed,
                t.per_release,
                t.composed,
                t.ratio,
                format!("[{:.4}, {:.4}]", t.ratio_lower, t.ratio_upper),
                t.carrying.len()
            );
        }
        s += &format!(
            "{}: {} = {:.4} against {:.4}, ratio {:.4} [{:.4}, {:.4}] ({:.2} s)\n",
            self.verdict.name(),
            self.currency,
            self.empirical,
            self.claimed,
            self.ratio,
            self.ratio_lower,
            self.ratio_upper,
            self.seconds
        );
        s
    }
}

/// A reward table in which every reward is `background` except the target.
#[derive(Debug, Clone, Copy)]
struct Neighbour {
    background: f64,
    value: f64,
    /// Arm 0's reward index (per-arm target), or the round (row target).
    target: u64,
    by_row: bool,
    /// Joint relation, neighbour side: the target round's decision set is negated (its context
    /// changed; its reward is `value` on both sides).
    negated: bool,
    /// Joint relation (both sides).
    joint: bool,
}

impl Neighbour {
    /// Sum of arm `arm`'s rewards number `c .. c + n` (per-arm target), or of rounds
    /// `t .. t + n` (row target).
    fn sum(&self, arm: usize, c: u64, t: u64, n: u64) -> f64 {
        let start = if self.by_row { t } else { c };
        let hit =
            (self.by_row || arm == 0) && (start..start.saturating_add(n)).contains(&self.target);
        self.background * n as f64
            + if hit {
                self.value - self.background
            } else {
                0.0
            }
    }
}

/// The finite-armed environment of a [`Neighbour`].
#[derive(Debug)]
struct NeighbourEnv {
    table: Neighbour,
    counts: Vec<u64>,
}

impl crate::finite::Environment for NeighbourEnv {
    fn reward_range(&self) -> (f64, f64) {
        let (a, b) = (self.table.background, self.table.value);
        (a.min(b), a.max(b))
    }
    fn num_arms(&self) -> usize {
        self.counts.len()
    }
    fn mean(&self, _arm: usize, _t: u64) -> f64 {
        self.table.background
    }
    fn best_mean(&self, _t: u64) -> f64 {
        self.table.background
    }
    fn pull(&mut self, arm: usize, t: u64) -> f64 {
        self.pull_sum(arm, t, 1)
    }
    fn pull_sum(&mut self, arm: usize, t: u64, n: u64) -> f64 {
        let s = self.table.sum(arm, self.counts[arm], t, n);
        self.counts[arm] += n;
        s
    }
}

/// The BAI environment of a [`Neighbour`].
#[derive(Debug)]
struct NeighbourBai {
    env: NeighbourEnv,
    t: u64,
}

impl BaiEnvironment for NeighbourBai {
    fn reward_range(&self) -> (f64, f64) {
        crate::finite::Environment::reward_range(&self.env)
    }
    fn num_arms(&self) -> usize {
        self.env.counts.len()
    }
    fn best_arm(&self) -> usize {
        0
    }
    fn pull_sum(&mut self, arm: usize, n: u64) -> f64 {
        let s = crate::finite::Environment::pull_sum(&mut self.env, arm, self.t, n);
        self.t += n;
        s
    }
}

/// A BAI algorithm whose releases are tagged with the driver's context.
#[derive(Debug)]
struct Tagged<'a> {
    inner: &'a mut dyn BaiAlgorithm,
}

impl BaiAlgorithm for Tagged<'_> {
    fn num_arms(&self) -> usize {
        self.inner.num_arms()
    }
    fn next(&mut self, t: u64) -> BaiStep {
        tap::context(CHOOSE);
        self.inner.next(t)
    }
    fn observe(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        tap::context(arm as u32);
        self.inner.observe(arm, sum)
    }
    fn boundary(&self) -> RewardBoundary {
        self.inner.boundary()
    }
    fn recommendation(&self) -> usize {
        self.inner.recommendation()
    }
    fn noise_draws(&self) -> u64 {
        self.inner.noise_draws()
    }
    fn releases(&self) -> Vec<u64> {
        self.inner.releases()
    }
}

/// The contextual environment of a row target: actions `e_1 .. e_k`, no noise; under the joint
/// relation every action is `e_1`, and `-e_1` in the target round on the neighbour side.
#[derive(Debug)]
struct NeighbourContextual {
    table: Neighbour,
    features: Vec<f64>,
    negated: Vec<f64>,
    current_negated: bool,
    means: Vec<f64>,
}

impl ContextualEnvironment for NeighbourContextual {
    fn dim(&self) -> usize {
        self.means.len()
    }
    fn next_round(&mut self, t: u64) {
        let v = self.table.sum(0, 0, t, 1);
        self.means.iter_mut().for_each(|m| *m = v);
        self.current_negated = self.table.negated && t == self.table.target;
    }
    fn actions(&self) -> ActionSet<'_> {
        let k = self.means.len();
        ActionSet {
            d: k,
            k,
            features: if self.current_negated {
                &self.negated
            } else {
                &self.features
            },
        }
    }
    fn means(&self) -> &[f64] {
        &self.means
    }
    fn best_mean(&self) -> f64 {
        self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }
    fn noise(&self) -> f64 {
        0.0
    }
}

/// One run of `built` on `table`: its tapped releases.
fn run_tapped(
    audited: &Audited,
    table: Neighbour,
    k: usize,
    horizon: u64,
    seed: u64,
) -> Result<Vec<Tapped>> {
    tap::open();
    let out = drive(audited, table, k, horizon, seed);
    let releases = tap::close();
    out.map(|()| releases)
}

fn drive(audited: &Audited, table: Neighbour, k: usize, horizon: u64, seed: u64) -> Result<()> {
    let mut env = NeighbourEnv {
        table,
        counts: vec![0; k],
    };
    match audited {
        Audited::Finite(cfg) => {
            let mut policy = cfg.build(k, seed)?;
            let mut t = 0;
            while t < horizon {
                tap::context(CHOOSE);
                let pull = policy.choose(t);
                let steps = pull.steps.clamp(1, horizon - t);
                let sum = crate::finite::Environment::pull_sum(&mut env, pull.arm, t, steps);
                tap::context(pull.arm as u32);
                super::feed_finite(policy.as_mut(), pull.arm, steps, sum)?;
                t += steps;
            }
        }
        Audited::Linear(cfg) => {
            let arms: Vec<nalgebra::DVector<f64>> = (0..k)
                .map(|i| nalgebra::DVector::from_fn(k, |j, _| if i == j { 1.0 } else { 0.0 }))
                .collect();
            let mut policy = cfg.build(&arms, seed)?;
            let mut t = 0;
            while t < horizon {
                tap::context(CHOOSE);
                let pull = policy.choose(t)?;
                let steps = pull.steps.clamp(1, horizon - t);
                let s = crate::finite::Environment::pull_sum(&mut env, pull.arm, t, steps);
                let sum = policy.boundary().drawn_sum(s, steps);
                tap::context(pull.arm as u32);
                policy.observe_batch(pull.arm, &sum)?;
                t += steps;
            }
        }
        Audited::Contextual(cfg) => {
            let mut policy = cfg.build(k, horizon, seed)?;
            // joint relation: every action is e_1 (the target round's are -e_1 in D'), so the
            // rows of the later rounds are the same whichever action the policy picks (a Gram
            // matrix shows the played action; with distinct actions the later releases would
            // carry the target through the choices they follow, adaptively)
            let mut features = vec![0.0; k * k];
            for i in 0..k {
                features[i * k + if table.joint { 0 } else { i }] = 1.0;
            }
            let negated = features.iter().map(|x| -x).collect();
            let mut cenv = NeighbourContextual {
                table,
                features,
                negated,
                current_negated: false,
                means: vec![table.background; k],
            };
            for t in 0..horizon {
                cenv.next_round(t);
                let actions = cenv.actions();
                tap::context(CHOOSE);
                let a = policy.choose(t, &actions);
                let r = cenv.reward(a);
                // releases follow the round, not the arm
                tap::context(0);
                policy.observe(&actions, a, r)?;
            }
        }
        Audited::Bai(engine) => {
            let mut alg = engine.clone().start(seed);
            let mut benv = NeighbourBai { env, t: 0 };
            let mut tagged = Tagged {
                inner: alg.as_mut(),
            };
            simulate_bai(&mut benv, &mut tagged, horizon)?;
        }
    }
    Ok(())
}

/// A release's family and its values on `D` and `D'`.
type Samples = (Family, Vec<f64>, Vec<f64>);

/// A release's key `(context, position, count)`, its family and its value.
type Keyed = ((u32, u32, u32), Family, f64);

/// The key of every release of a run: `(context, position, count of earlier releases with the
/// same context and position)`.
fn keyed(releases: &[Tapped]) -> Vec<Keyed> {
    let mut seen: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    releases
        .iter()
        .map(|r| {
            let c = seen.entry((r.context, r.position)).or_default();
            let key = (r.context, r.position, *c);
            *c += 1;
            (key, r.family, r.value)
        })
        .collect()
}

/// Acklam's rational approximation of the standard normal quantile (relative error < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let pl = 0.02425;
    if p < pl {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - pl {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -normal_quantile(1.0 - p)
    }
}

/// Wilson–Hilferty approximation of the `p`-quantile of chi-square with `nu` degrees of freedom.
fn chi2_quantile(p: f64, nu: f64) -> f64 {
    let h = 2.0 / (9.0 * nu);
    nu * (1.0 - h + normal_quantile(p) * h.sqrt()).powi(3).max(0.0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// `(estimate, lower, upper)` of one release's loss from its samples on `D` and `D'`, each end
/// at two-sided level `a` (Gaussian: `mu`; Laplace and bits: `epsilon`).
pub(crate) fn estimate(family: Family, d: &mut [f64], d2: &mut [f64], a: f64) -> (f64, f64, f64) {
    let (n1, n2) = (d.len() as f64, d2.len() as f64);
    match family {
        Family::Gaussian => {
            let m1 = d.iter().sum::<f64>() / n1;
            let m2 = d2.iter().sum::<f64>() / n2;
            let ss = d.iter().map(|x| (x - m1).powi(2)).sum::<f64>()
                + d2.iter().map(|x| (x - m2).powi(2)).sum::<f64>();
            let nu = n1 + n2 - 2.0;
            let s = (ss / nu).sqrt();
            let diff = (m1 - m2).abs();
            if s == 0.0 {
                let inf = if diff > 0.0 { f64::INFINITY } else { 0.0 };
                return (inf, inf, inf);
            }
            let z = normal_quantile(1.0 - a / 4.0);
            let half = z * s * (1.0 / n1 + 1.0 / n2).sqrt();
            let s_lo = (ss / chi2_quantile(1.0 - a / 4.0, nu)).sqrt();
            let s_hi = (ss / chi2_quantile(a / 4.0, nu)).sqrt();
            (
                diff / s,
                (diff - half).max(0.0) / s_hi,
                (diff + half) / s_lo,
            )
        }
        Family::Laplace => {
            let m1 = median(d);
            let m2 = median(d2);
            let abs = d.iter().map(|x| (x - m1).abs()).sum::<f64>()
                + d2.iter().map(|x| (x - m2).abs()).sum::<f64>();
            let n = n1 + n2;
            let b = abs / n;
            let diff = (m1 - m2).abs();
            if b == 0.0 {
                let inf = if diff > 0.0 { f64::INFINITY } else { 0.0 };
                return (inf, inf, inf);
            }
            // 2 n b^ / b ~ chi2(2n) for exponential deviations
            let b_lo = 2.0 * abs / chi2_quantile(1.0 - a / 4.0, 2.0 * n);
            let b_hi = 2.0 * abs / chi2_quantile(a / 4.0, 2.0 * n);
            let z = normal_quantile(1.0 - a / 4.0);
            let half = z * b_hi * (1.0 / n1 + 1.0 / n2).sqrt();
            (
                diff / b,
                (diff - half).max(0.0) / b_hi,
                (diff + half) / b_lo,
            )
        }
        Family::Bit => {
            let x1 = d.iter().filter(|&&x| x > 0.5).count() as u64;
            let x2 = d2.iter().filter(|&&x| x > 0.5).count() as u64;
            let (m1, m2) = (d.len() as u64, d2.len() as u64);
            let q = a / 4.0;
            let (p_lo, p_hi) = (
                clopper_pearson_lower(x1, m1, q),
                clopper_pearson_upper(x1, m1, q),
            );
            let (q_lo, q_hi) = (
                clopper_pearson_lower(x2, m2, q),
                clopper_pearson_upper(x2, m2, q),
            );
            let (p, qq) = (x1 as f64 / n1, x2 as f64 / n2);
            let ln = |a: f64, b: f64| {
                if a <= 0.0 {
                    0.0
                } else if b <= 0.0 {
                    f64::INFINITY
                } else {
                    (a / b).ln()
                }
            };
            let point = ln(p, qq)
                .abs()
                .max(ln(1.0 - p, 1.0 - qq).abs())
                .max(ln(qq, p).abs());
            let lower = [
                ln(p_lo, q_hi),
                ln(q_lo, p_hi),
                ln(1.0 - p_hi, 1.0 - q_lo),
                ln(1.0 - q_hi, 1.0 - p_lo),
            ]
            .into_iter()
            .fold(0.0, f64::max);
            let upper = [
                ln(p_hi, q_lo),
                ln(q_hi, p_lo),
                ln(1.0 - p_lo, 1.0 - q_hi),
                ln(1.0 - q_lo, 1.0 - p_hi),
            ]
            .into_iter()
            .fold(0.0, f64::max);
            (point, lower, upper.max(point))
        }
    }
}

fn family_name(f: Family) -> &'static str {
    match f {
        Family::Gaussian => "gaussian",
        Family::Laplace => "laplace",
        Family::Bit => "bit",
    }
}

/// The white-box design of a kind (the one place that matches on the setting, with [`drive`]):
/// its horizon (shorter than the black-box one: only the releases around the target matter,
/// with kind-specific lengths where the first release comes late), its default targets (arm
/// 0's rewards 0, 1 and 3: the first three episodes of a doubling policy; linear: arm 0's
/// first reward; contextual: round 0) and whether targets are rounds (contextual kinds, whose
/// releases follow the round, not the arm).
fn design(kind: &str, b: &Built) -> (u64, Vec<u64>, bool) {
    let (horizon, targets, by_row) = match b {
        Built::Finite(_) => (32, vec![0, 1, 3], false),
        // the first phase of the GOPE family at delta = 0.001 and 2 arms ends near 2^12
        Built::Linear(_) => (8192, vec![0], false),
        // arm 0's first rewards are released within the first phases
        Built::Bai(_) => (256, vec![0, 1, 3], false),
        Built::Contextual(_) => (64, vec![0], true),
    };
    // DP-SE's first epoch at beta = 0.001 is 2 x 1239 rounds; DP-SE (BAI) at the audit's risk
    // 0.1 and 2 arms: R_1 = floor(32 ln(160) 4) + 1 = 650 samples per arm, 1300 in all
    let horizon = match kind {
        "dp_se" => 4096,
        "dp_se_bai" => 2048,
        _ => horizon,
    };
    (horizon, targets, by_row)
}

/// How many releases hold the target according to the kind's own accounting: a finite kind's
/// [`crate::finite::PolicyConfig::releases_per_reward`] of arm 0's `target`-th reward, a
/// contextual kind's [`crate::contextual::ContextualPolicyConfig::releases_per_round`] of round
/// `target` (the tree-based kinds' p-sums), 1 for the other settings (each of their kinds
/// releases a reward once: disjoint phases).
fn claimed_releases(b: &Built, horizon: u64, target: u64) -> u64 {
    match b {
        Built::Finite(c) => c.releases_per_reward(target),
        Built::Contextual(c) => c.releases_per_round(horizon, target),
        _ => 1,
    }
}

/// White-box audit of `kind` with `params`. `opts` gives the seed, confidence, noise multiplier,
/// horizon, arms and mutant (its runs, deltas, scenarios and events are the black-box mode's and
/// are not used).
///
/// # Errors
/// An unknown or non-private kind, an approximate-DP claim (no white-box currency), invalid
/// options, a policy that fails to build or run.
pub fn audit_white_box(
    kind: &str,
    params: &toml::Table,
    opts: &AuditOptions,
    wopts: &WhiteBoxOptions,
) -> Result<WhiteBoxReport> {
    opts.validate()?;
    if wopts.samples < 100 {
        return Err(Error::param("samples", wopts.samples, "an integer >= 100"));
    }
    let start = std::time::Instant::now();
    let entry = registry::policy(kind)?;
    let honest = entry.build(params.clone())?;
    let g = guarantee(&honest);
    let (currency, claimed) = match g.budget {
        Budget::Zcdp { rho } => ("rho", rho),
        Budget::PureDp { epsilon } => ("epsilon", epsilon),
        _ => {
            return Err(Error::param(
                "kind",
                format!("\"{kind}\""),
                "a zCDP or pure-DP kind (the white-box mode estimates rho or epsilon; \
                 `dpbandits list`)",
            ));
        }
    };
    let scaled = scaled_params(params, opts.noise_multiplier);
    let audited = match opts.mutant {
        None => entry.build(scaled)?,
        Some(m) => build_mutant(kind, scaled, m)?,
    };
    let (lo, hi) = g
        .boundary
        .map_or((0.0, 1.0), |b| (b.lo.max(-1.0), b.hi.min(1.0)));
    let (lo, hi) = if lo < hi { (lo, hi) } else { (0.0, 1.0) };
    let background = 0.5 * (lo + hi);
    let (default_h, default_targets, by_row) = design(kind, &honest);
    // Joint DP (the guarantee's adjacency): only contextual kinds, whose targets are rounds
    let joint = g.is_joint() && by_row;
    let horizon = opts.horizon.unwrap_or(default_h);
    let k = opts.arms;
    let audited = prepare(audited, k)?;
    let targets = if wopts.targets.is_empty() {
        default_targets
    } else {
        wopts.targets.clone()
    };
    let base_label = format!("white-box/{}", label(&honest));
    let alpha = 1.0 - opts.confidence;
    let mut results = vec![];
    for &target in &targets {
        let run_label = format!("{base_label}/target{target}");
        // the reward relation: the target's rewards at the top in D, at the bottom in D'; the joint
        // relation (a Joint-DP kind): the target round's reward at the top on both sides and its
        // decision set negated in D' (module docs)
        let pairs = if joint {
            [(hi, false, false), (hi, true, true)]
        } else {
            [(hi, false, false), (lo, true, false)]
        };
        let sides: Vec<Vec<Vec<Keyed>>> = pairs
            .into_iter()
            .map(|(value, neighbour, negated)| {
                let table = Neighbour {
                    background,
                    value,
                    target,
                    by_row,
                    negated,
                    joint,
                };
                (0..wopts.samples)
                    .into_par_iter()
                    .map(|r| {
                        let seed = rng::audit_seed(opts.seed, &run_label, neighbour, r);
                        run_tapped(&audited, table, k, horizon, seed).map(|rel| keyed(&rel))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        let total: usize = sides.iter().flatten().map(Vec::len).sum();
        let releases_per_run = total as f64 / (2 * wopts.samples) as f64;
        // key -> (family, values on D, values on D')
        let mut by_key: BTreeMap<(u32, u32, u32), Samples> = BTreeMap::new();
        for (side, runs) in sides.into_iter().enumerate() {
            for run in runs {
                for (key, fam, v) in run {
                    let e = by_key.entry(key).or_insert((fam, vec![], vec![]));
                    if side == 0 { &mut e.1 } else { &mut e.2 }.push(v);
                }
            }
        }
        // keys seen often enough on both sides to be estimated
        let min_n = 30.min(wopts.samples as usize / 2);
        by_key.retain(|_, (_, a, b)| a.len() >= min_n && b.len() >= min_n);
        let keys = by_key.len();
        let a_key = alpha / (targets.len() as f64 * keys.max(1) as f64);
        let gaussian = by_key.values().any(|(f, _, _)| *f == Family::Gaussian);
        let mut carrying = vec![];
        for (key, (fam, mut d, mut d2)) in by_key {
            let (est, lower, upper) = estimate(fam, &mut d, &mut d2, a_key);
            if lower > 0.0 {
                let ctx = if key.0 == CHOOSE {
                    "choose".to_string()
                } else if by_row {
                    "round".to_string()
                } else {
                    format!("arm{}", key.0)
                };
                carrying.push(KeyEstimate {
                    key: format!("{ctx}/{}/{}", key.1, key.2),
                    family: family_name(fam).into(),
                    n: (d.len(), d2.len()),
                    estimate: est,
                    lower,
                    upper,
                });
            }
        }
        // compose in the claim's currency
        let to_currency = |x: f64, gaussian_key: bool| {
            if gaussian_key { x * x / 2.0 } else { x }
        };
        let sum = |f: fn(&KeyEstimate) -> f64| -> f64 {
            carrying
                .iter()
                .map(|c| to_currency(f(c), c.family == "gaussian"))
                .fold(0.0, |a, b| a + b)
        };
        let composed = sum(|c| c.estimate);
        let composed_lower = sum(|c| c.lower);
        let composed_upper = sum(|c| c.upper);
        let per_release = carrying
            .iter()
            .map(|c| to_currency(c.estimate, c.family == "gaussian"))
            .fold(0.0, f64::max);
        results.push(TargetEstimate {
            target,
            releases_per_run,
            keys,
            releases: claimed_releases(&honest, horizon, target),
            carrying,
            per_release,
            composed,
            composed_lower,
            composed_upper,
            mu: gaussian.then(|| (2.0 * composed).sqrt()),
            ratio: composed / claimed,
            ratio_lower: composed_lower / claimed,
            ratio_upper: composed_upper / claimed,
        });
    }
    let worst = results
        .iter()
        .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
        .expect("at least one target")
        .clone();
    let verdict = if results.iter().any(|t| t.ratio_lower > 1.0) {
        WhiteVerdict::Leak
    } else if results.iter().all(|t| t.ratio_upper < TOLERANCE) {
        WhiteVerdict::OverNoised
    } else {
        WhiteVerdict::Tight
    };
    Ok(WhiteBoxReport {
        mode: "white-box".into(),
        kind: kind.into(),
        params: serde_json::to_value(params).unwrap_or(serde_json::Value::Null),
        budget: g.budget.to_string(),
        notion: g.notion.clone(),
        currency: currency.into(),
        claimed,
        noise_multiplier: opts.noise_multiplier,
        mutant: opts.mutant.map(|m| format!("{m:?}")),
        empirical: worst.composed,
        empirical_lower: worst.composed_lower,
        empirical_upper: worst.composed_upper,
        per_release: worst.per_release,
        ratio: worst.ratio,
        ratio_lower: worst.ratio_lower,
        ratio_upper: worst.ratio_upper,
        target: worst.target,
        verdict,
        confidence: opts.confidence,
        samples: wopts.samples,
        horizon,
        arms: k,
        background,
        seed: opts.seed,
        noise: g.noise,
        reproducible: g.noise != crate::privacy::NoiseGrade::Deployment,
        seconds: start.elapsed().as_secs_f64(),
        targets: results,
    })
}

#[cfg(test)]
mod tests;
