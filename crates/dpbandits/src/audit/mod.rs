//! `dpbandits audit`: an empirical privacy auditor (in the spirit of Google's DP stochastic
//! tester), feature `experiment`.
//!
//! # Method
//! For a private kind and its parameters, the auditor builds two neighbouring reward tables
//! ([`table`]): every row (user) equal to a background row except one target row, whose rewards
//! are all at the top of the kind's reward boundary in `D` and all at the bottom in `D'`. It runs
//! the policy `runs` times on each table with independent policy seeds
//! ([`crate::rng::audit_seed`]), records features of each run's public output (the action at
//! every round, pulls per arm, the arm of each commitment (episode) and its length, for BAI also
//! the stopping time, the recommendation and the cap), and turns the two empirical output
//! distributions into a lower bound on epsilon ([`stats`]): events are selected on the first
//! half of the runs, evaluated on the second half with one-sided Clopper–Pearson bounds,
//! Bonferroni-corrected over the events evaluated, both directions and the scenarios.
//!
//! A kind whose guarantee states Joint DP ([`crate::privacy::PrivacyGuarantee::is_joint`]) is
//! audited under the joint relation instead: the target row's context changes (its decision set
//! negated in `D'`, its rewards at the top in both tables) and its own action is left out of the
//! features (Joint DP protects the other rounds' actions; Shariff & Sheffet 2018 Def. 2).
//!
//! # Scenarios (worst cases)
//! * [`Scenario::First`]: the target is user 0, the first reward any policy releases (an
//!   initialisation pull or the first episode, the largest sensitivity); the background gives
//!   arm 0 the bottom reward and every other arm the top one, so the first release of arm 0
//!   decides whether arm 0 is played again (its threshold is positioned by the other arms).
//! * [`Scenario::Late`]: the target is a user in the middle of the horizon (a late episode, where
//!   an episodic policy's sensitivity is `1/L`); every background reward at the top.
//! * [`Scenario::FirstTie`], [`Scenario::MidTie`]: user 0 with every arm tied (at the top, at
//!   the middle of the boundary): every later comparison involving arm 0 is decided by the
//!   noise, so a release that reuses user 0's reward shows it again and again.
//! * [`Scenario::Tuned`]: a design chosen per policy by pilot runs on independent seeds (arm 0's
//!   background bisected until an elimination / stopping decision is about 50/50, the target
//!   row the one with the best pilot score); the audited runs never influence the design.
//!
//! # Features
//! Single-decision features (the arm at each round, each commitment's arm and length, pulls,
//! BAI stopping time and answer) and features that **sum evidence over decisions**: the number
//! of arm-0 commitments among the first `j`, the joint arm pattern of windows of commitments
//! (prefixes of 4 to 10, and later windows of 8 up to the 24th), and arm 0's cumulative pulls at
//! 16 checkpoints. A leak spread thinly over many releases (each shifted slightly in the same
//! direction) adds up in them.
//!
//! # The claim
//! Pure DP (central or local): `epsilon` at every delta. zCDP: the CKS 2020 conversion
//! ([`crate::privacy::zcdp_to_approx_dp`], the tightest in the crate) at each stated delta
//! (default `1e-5`). The verdict is `pass` when the lower bound is at most the claim at every
//! delta. An empirical lower bound can refute a claim, never prove one.
//!
//! # Power knob and mutants
//! `noise_multiplier = m` builds the audited policy with the budget whose noise is `m` times the
//! claimed one (zCDP: `rho / m^2`; pure and local DP: `epsilon / m`) while the claim stays the
//! original: with `m < 1` the policy under-noises and a powerful audit fails it. The code mutants
//! of the mutation tests (`privacy::AuditMutant`, crate-private) are reachable only from this module's
//! crate-internal tests.

pub mod stats;
pub mod table;
pub mod whitebox;

pub use whitebox::{WhiteBoxOptions, WhiteBoxReport, WhiteVerdict, audit_white_box};

use crate::bai::{BaiEngine, BaiStep, simulate_bai};
use crate::config::{BySetting, Setting};
use crate::contextual::ContextualEnvironment;
use crate::error::{Error, Result};
use crate::privacy::{
    AuditMutant, Budget, NoiseGrade, PrivacyGuarantee, ZcdpConversion, zcdp_to_approx_dp,
};
use crate::registry::{self, Built};
use crate::rng;
use rayon::prelude::*;
use serde::Serialize;
use stats::EventBound;
use std::sync::Arc;
use table::{RewardTable, TableBai, TableContextual, TableEnv};

/// Where the neighbouring tables differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// User 0 (the first release), arm 0 at the bottom, the other arms at the top.
    First,
    /// A user in the middle of the horizon (a late episode), every arm at the top.
    Late,
    /// User 0 with every arm at the top: arm 0 stays competitive, so it is played again and
    /// again, and every later release that (wrongly) reuses user 0's reward shows it.
    FirstTie,
    /// User 0 with every background reward at the middle of the boundary: every arm ties, so
    /// each comparison of released means is decided by the noise (no release sits at the edge
    /// of the boundary), and a release that (wrongly) reuses user 0's reward shifts every later
    /// comparison of arm 0 in the same direction.
    MidTie,
    /// A design tuned for the audited policy by pilot runs on independent seeds: arm 0's
    /// background level is bisected until arm 0's pulls are halfway between their values at
    /// the bottom and at the top (an elimination / stopping decision about 50/50), the other
    /// arms at the top; the target row is, among row 0, the first rows of arm 0's first
    /// commitments in a pilot run and the rows `i L / 8` of that run (length `L`), the one with
    /// the best pilot selection score. The design depends only on pilot runs, never on the
    /// audited runs, so the confidence statement is unchanged.
    Tuned,
}

impl Scenario {
    /// Name, as on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::First => "first",
            Scenario::Late => "late",
            Scenario::FirstTie => "first_tie",
            Scenario::MidTie => "mid_tie",
            Scenario::Tuned => "tuned",
        }
    }

    /// Parse a name.
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "first" => Ok(Scenario::First),
            "late" => Ok(Scenario::Late),
            "first_tie" => Ok(Scenario::FirstTie),
            "mid_tie" => Ok(Scenario::MidTie),
            "tuned" => Ok(Scenario::Tuned),
            _ => Err(Error::param(
                "scenario",
                s,
                "\"first\", \"late\", \"first_tie\", \"mid_tie\" or \"tuned\"",
            )),
        }
    }
}

/// Options of one audit.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Runs per table and scenario (half select the events, half evaluate them); >= 20.
    pub runs: u64,
    /// Master seed.
    pub seed: u64,
    /// Deltas at which the bound and the claim are computed; empty: `[1e-5]` for zCDP kinds,
    /// `[0]` for pure and local DP.
    pub deltas: Vec<f64>,
    /// Noise scale relative to the claimed one (1 = the claimed policy; < 1 under-noises).
    pub noise_multiplier: f64,
    /// Confidence of the lower bound, in (0, 1).
    pub confidence: f64,
    /// Horizon (finite, linear, contextual) or sample cap (BAI); `None`: the setting's default.
    pub horizon: Option<u64>,
    /// Number of arms (>= 2).
    pub arms: usize,
    /// Scenarios; each gets its own runs.
    pub scenarios: Vec<Scenario>,
    /// Events evaluated per scenario.
    pub events: usize,
    /// zCDP kinds: select the events along the whole (epsilon, delta) curve the claim implies
    /// ([`CURVE_DELTAS`]) and report the point where the evidence is strongest
    /// ([`AuditReport::curve`]); the rows at `deltas` use the same events and intervals.
    pub curve: bool,
    /// A deliberately broken policy (crate-internal mutation tests only).
    pub(crate) mutant: Option<AuditMutant>,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            runs: 4000,
            seed: 20240917,
            deltas: vec![],
            noise_multiplier: 1.0,
            confidence: 0.95,
            horizon: None,
            arms: 2,
            scenarios: vec![Scenario::First, Scenario::Late, Scenario::FirstTie],
            events: 3,
            curve: false,
            mutant: None,
        }
    }
}

impl AuditOptions {
    fn validate(&self) -> Result<()> {
        if self.runs < 20 {
            return Err(Error::param("runs", self.runs, "an integer >= 20"));
        }
        if !(self.noise_multiplier.is_finite() && self.noise_multiplier > 0.0) {
            return Err(Error::param(
                "noise_multiplier",
                self.noise_multiplier,
                "a finite number > 0 (1 = the claimed noise; < 1 under-noises)",
            ));
        }
        if !(self.confidence > 0.0 && self.confidence < 1.0) {
            return Err(Error::param(
                "confidence",
                self.confidence,
                "a number in the open interval (0, 1)",
            ));
        }
        for &d in &self.deltas {
            if !(0.0..1.0).contains(&d) {
                return Err(Error::param("delta", d, "a number in [0, 1)"));
            }
        }
        if let Some(h) = self.horizon
            && !(2..=1_000_000).contains(&h)
        {
            return Err(Error::param("horizon", h, "an integer in [2, 1000000]"));
        }
        if !(2..=16).contains(&self.arms) {
            return Err(Error::param("arms", self.arms, "an integer in [2, 16]"));
        }
        if self.scenarios.is_empty() {
            return Err(Error::param("scenario", "(none)", "at least one scenario"));
        }
        if !(1..=100).contains(&self.events) {
            return Err(Error::param(
                "events",
                self.events,
                "an integer in [1, 100]",
            ));
        }
        Ok(())
    }
}

/// `pass` when the lower bound is at most the claim at every delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No evidence against the claim.
    Pass,
    /// The claim is refuted (at the stated confidence).
    Fail,
    /// No refutation, but the design could not have refuted the claim: every run made the same
    /// decisions on both tables, or even a perfect distinguishing event would give a bound
    /// below the claim with these runs ([`AuditReport::why_inconclusive`] says what to change).
    Inconclusive,
}

impl Verdict {
    /// `pass`, `FAIL` or `INCONCLUSIVE` (the text tables).
    pub fn shout(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }
}

/// The largest lower bound on epsilon at `delta` that any event can give with `n` evaluation
/// runs per table at per-event level `a`: an event seen in every run of one table and in none
/// of the other.
pub fn strongest_possible_bound(n: u64, a: f64, delta: f64) -> f64 {
    stats::eps_bound(
        crate::math::stats::clopper_pearson_lower(n, n, a),
        crate::math::stats::clopper_pearson_upper(0, n, a),
        delta,
    )
}

/// One (scenario, delta) result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AuditRow {
    /// Scenario.
    pub scenario: Scenario,
    /// Delta.
    pub delta: f64,
    /// The claimed epsilon at `delta`.
    pub claimed: f64,
    /// The empirical lower bound.
    pub eps_lower_bound: f64,
    /// The event that gave the bound (none: no event passed selection).
    pub event: Option<EventBound>,
    /// `pass` or `fail`.
    pub verdict: Verdict,
}

/// The result of one audit (serialised as the JSON output).
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// Kind.
    pub kind: String,
    /// Parameters as given.
    pub params: serde_json::Value,
    /// The claimed budget.
    pub budget: String,
    /// The claimed guarantee's notion.
    pub notion: String,
    /// Noise relative to the claimed one.
    pub noise_multiplier: f64,
    /// The audited policy's noise grade (`simulation-grade` or `deployment-grade`).
    pub noise: NoiseGrade,
    /// Whether the report is a function of the seed: false for deployment-grade noise, whose
    /// draws are keyed by the operating system (everything else, the tables, the runs' reward
    /// streams and the event selection's split, stays derived from the seed).
    pub reproducible: bool,
    /// The code mutant audited, if any (tests only).
    pub mutant: Option<String>,
    /// Delta of the row closest to failing (largest bound minus claim).
    pub delta: f64,
    /// Claim of that row.
    pub claimed: f64,
    /// Bound of that row.
    pub eps_lower_bound: f64,
    /// Scenario of that row.
    pub scenario: Scenario,
    /// Event of that row.
    pub event: Option<String>,
    /// Confidence of every bound at once (all scenarios and deltas).
    pub confidence: f64,
    /// Runs per table and scenario.
    pub runs: u64,
    /// Horizon (or BAI sample cap).
    pub horizon: u64,
    /// Number of arms.
    pub arms: usize,
    /// Master seed.
    pub seed: u64,
    /// `fail` if any row fails; `inconclusive` if none does but the design had no power.
    pub verdict: Verdict,
    /// Why the verdict is `inconclusive`, and what to change (runs, horizon, scenario).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_inconclusive: Option<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Every (scenario, delta).
    pub results: Vec<AuditRow>,
    /// The tables of every scenario (the tuned scenario's are chosen by pilot runs).
    pub designs: Vec<Design>,
    /// Whole-curve mode (zCDP kinds, `curve`): the (scenario, delta, event) where the lower bound
    /// is largest relative to the claim.
    pub curve: Option<CurveRow>,
}

/// The deltas of the whole-curve mode: 61 points log-spaced in `[1e-6, 0.5]`.
pub const CURVE_DELTAS: (f64, f64, usize) = (1e-6, 0.5, 61);

/// The strongest point of the whole-curve mode.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CurveRow {
    /// Scenario of the point.
    pub scenario: Scenario,
    /// The point (delta, claim, bound, ratio, event).
    #[serde(flatten)]
    pub point: stats::CurvePoint,
}

/// The claimed epsilon of `g` at `delta`.
///
/// # Errors
/// A non-private guarantee.
pub fn claimed_epsilon(g: &PrivacyGuarantee, delta: f64) -> Result<f64> {
    Ok(match g.budget {
        Budget::PureDp { epsilon } => epsilon,
        Budget::Zcdp { rho } => {
            if delta <= 0.0 {
                f64::INFINITY
            } else {
                zcdp_to_approx_dp(rho, delta, ZcdpConversion::Cks2020)?
            }
        }
        Budget::ApproxDp { epsilon, delta: d0 } => {
            if delta >= d0 {
                epsilon
            } else {
                f64::INFINITY
            }
        }
        _ => {
            return Err(Error::param(
                "kind",
                "(non-private)",
                "a private kind (`dpbandits list` shows the privacy claim of each)",
            ));
        }
    })
}

fn guarantee(b: &Built) -> PrivacyGuarantee {
    match b {
        Built::Finite(c) => c.guarantee(),
        Built::Linear(c) => c.guarantee(),
        Built::Contextual(c) => c.guarantee(),
        Built::Bai(c) => c.guarantee(),
    }
}

fn label(b: &Built) -> String {
    match b {
        Built::Finite(c) => c.label(),
        Built::Linear(c) => c.label(),
        Built::Contextual(c) => c.label(),
        Built::Bai(c) => c.label(),
    }
}

/// The table with the budget scaled so that the noise is `m` times the claimed one.
fn scaled_params(params: &toml::Table, m: f64) -> toml::Table {
    let mut t = params.clone();
    if m == 1.0 {
        return t;
    }
    for (key, power) in [("rho", 2), ("epsilon", 1)] {
        if let Some(v) = t
            .get(key)
            .and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)))
        {
            t.insert(key.into(), toml::Value::Float(v / m.powi(power)));
        }
    }
    t
}

/// Default horizon (or sample cap) of a setting.
fn default_horizon(b: &Built) -> u64 {
    match b {
        Built::Finite(_) | Built::Contextual(_) => 128,
        Built::Linear(_) => 512,
        Built::Bai(_) => 2048,
    }
}

/// What one run is reduced to: a fixed-width vector of integer features, and their names.
struct Shape {
    horizon: u64,
    arms: usize,
}

/// Commitment features recorded per run.
const COMMITMENTS: usize = 24;

/// Windows `[a, b)` of commitments whose joint arm pattern is a feature: prefixes, and later
/// windows (a policy whose first decisions are forced, e.g. by a clipped index, decides later).
const PATTERNS: [(usize, usize); 8] = [
    (0, 4),
    (0, 6),
    (0, 8),
    (0, 10),
    (4, 12),
    (8, 16),
    (12, 20),
    (16, 24),
];

/// Checkpoints (equally spaced over the horizon or sample cap) of the cumulative pulls of arm 0.
const CHECKPOINTS: u64 = 16;

impl Shape {
    /// `arm@t` for every round, `pulls[a]`, `commitment[j].arm`, `commitment[j].len`,
    /// `commitments` (regret settings); BAI: the same over sample requests, plus `tau`,
    /// `recommendation`, `capped`.
    fn names(&self, bai: bool) -> Vec<String> {
        let mut n: Vec<String> = vec![];
        if !bai {
            n.extend((0..self.horizon).map(|t| format!("arm@{t}")));
        }
        n.extend((0..self.arms).map(|a| format!("pulls[{a}]")));
        n.extend((0..COMMITMENTS).map(|j| format!("commitment[{j}].arm")));
        n.extend((0..COMMITMENTS).map(|j| format!("commitment[{j}].len")));
        n.push("commitments".into());
        // Features that sum evidence over many decisions (a leak spread thinly over every
        // release of an arm adds up in them).
        n.extend((2..=COMMITMENTS).map(|j| format!("arm0_commitments[<{j}]")));
        n.extend(PATTERNS.iter().map(|(a, b)| format!("pattern[{a}..{b})")));
        n.extend(self.checkpoints().map(|t| format!("pulls[0]@{t}")));
        if bai {
            n.extend(["tau".into(), "recommendation".into(), "capped".into()]);
        }
        n
    }

    /// Features of a run from its commitments `(arm, length)`.
    fn features(&self, commitments: &[(usize, u64)], bai: bool) -> Vec<i64> {
        let mut f = vec![];
        if !bai {
            let start = f.len();
            for &(a, l) in commitments {
                f.extend(std::iter::repeat_n(a as i64, l as usize));
            }
            // (a run under the joint relation leaves out one round: -1 at the end)
            f.resize(start + self.horizon as usize, -1);
        }
        let mut pulls = vec![0i64; self.arms];
        for &(a, l) in commitments {
            pulls[a] += l as i64;
        }
        f.extend(pulls);
        for j in 0..COMMITMENTS {
            f.push(commitments.get(j).map_or(-1, |c| c.0 as i64));
        }
        for j in 0..COMMITMENTS {
            f.push(commitments.get(j).map_or(-1, |c| c.1 as i64));
        }
        f.push(commitments.len() as i64);
        let mut arm0 = 0;
        for j in 0..COMMITMENTS {
            arm0 += i64::from(commitments.get(j).is_some_and(|c| c.0 == 0));
            if j >= 1 {
                f.push(arm0);
            }
        }
        // base K + 1: digit K for "no such commitment"
        let base = self.arms as i64 + 1;
        for &(a, b) in &PATTERNS {
            f.push((a..b).fold(0i64, |acc, i| {
                acc.saturating_mul(base)
                    .saturating_add(commitments.get(i).map_or(base - 1, |c| c.0 as i64))
            }));
        }
        let checkpoints: Vec<u64> = self.checkpoints().collect();
        let (mut t, mut pulls0, mut c) = (0u64, 0i64, 0usize);
        for &(a, l) in commitments {
            while c < checkpoints.len() && checkpoints[c] <= t + l {
                let inside = checkpoints[c] - t;
                f.push(pulls0 + if a == 0 { inside as i64 } else { 0 });
                c += 1;
            }
            if a == 0 {
                pulls0 += l as i64;
            }
            t += l;
        }
        f.extend(std::iter::repeat_n(pulls0, checkpoints.len() - c));
        f
    }

    /// The rounds (samples) at which the cumulative pulls of arm 0 are recorded.
    fn checkpoints(&self) -> impl Iterator<Item = u64> + use<> {
        let h = self.horizon;
        (1..=CHECKPOINTS).map(move |i| (h * i / CHECKPOINTS).max(1))
    }
}

/// The audited policy, ready for many runs: a configuration of its setting, or for BAI the engine
/// its configuration prepared for the audit's arms and risk [`BAI_RISK`].
type Audited = BySetting<
    Box<dyn crate::finite::PolicyConfig>,
    Box<dyn crate::linear::LinearPolicyConfig>,
    Box<dyn crate::contextual::ContextualPolicyConfig>,
    Arc<dyn BaiEngine>,
>;

/// Prepare a parsed configuration for the runs of an audit on `arms` arms.
///
/// # Errors
/// A BAI configuration that cannot be prepared for `arms` arms.
fn prepare(built: Built, arms: usize) -> Result<Audited> {
    Ok(match built {
        Built::Finite(c) => Audited::Finite(c),
        Built::Linear(c) => Audited::Linear(c),
        Built::Contextual(c) => Audited::Contextual(c),
        Built::Bai(c) => Audited::Bai(c.prepare(arms, BAI_RISK)?),
    })
}

/// One run of `audited` on `table`; the features of its output.
fn run_once(audited: &Audited, table: &RewardTable, shape: &Shape, seed: u64) -> Result<Vec<i64>> {
    let horizon = shape.horizon;
    let k = shape.arms;
    let mut commitments: Vec<(usize, u64)> = vec![];
    match audited {
        Audited::Finite(cfg) => {
            let mut policy = cfg.build(k, seed)?;
            let mut env = TableEnv(table.clone());
            let mut t = 0;
            while t < horizon {
                let pull = policy.choose(t);
                let steps = pull.steps.clamp(1, horizon - t);
                let sum = crate::finite::Environment::pull_sum(&mut env, pull.arm, t, steps);
                feed_finite(policy.as_mut(), pull.arm, steps, sum)?;
                commitments.push((pull.arm, steps));
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
                let pull = policy.choose(t)?;
                let steps = pull.steps.clamp(1, horizon - t);
                // Table rewards lie inside the kind's boundary (they are its end points).
                let sum = policy
                    .boundary()
                    .drawn_sum(table.sum(pull.arm, t, steps), steps);
                policy.observe_batch(pull.arm, &sum)?;
                commitments.push((pull.arm, steps));
                t += steps;
            }
        }
        Audited::Contextual(cfg) => {
            let mut policy = cfg.build(k, horizon, seed)?;
            let mut env = TableContextual::new(table.clone());
            for t in 0..horizon {
                env.next_round(t);
                let actions = env.actions();
                let a = policy.choose(t, &actions);
                let r = env.reward(a);
                policy.observe(&actions, a, r)?;
                if table.joint && t == table.target_row {
                    // Joint DP: the target round's own action is shown to its user only
                    continue;
                }
                match commitments.last_mut() {
                    Some(c) if c.0 == a => c.1 += 1,
                    _ => commitments.push((a, 1)),
                }
            }
        }
        Audited::Bai(engine) => {
            let mut alg = engine.clone().start(seed);
            let mut env = TableBai::new(table.clone());
            let mut log = Recorder {
                inner: alg.as_mut(),
                requests: &mut commitments,
            };
            let out = simulate_bai(&mut env, &mut log, horizon)?;
            let mut f = shape.features(&commitments, true);
            f.extend([
                out.tau as i64,
                out.recommendation as i64,
                i64::from(out.capped),
            ]);
            return Ok(f);
        }
    }
    Ok(shape.features(&commitments, false))
}

/// The one place the auditor feeds rewards to a finite-armed policy (table rewards lie inside
/// the kind's boundary: they are its end points).
fn feed_finite(policy: &mut dyn crate::finite::Policy, arm: usize, n: u64, sum: f64) -> Result<()> {
    if n == 1 {
        policy.observe(arm, sum)
    } else {
        policy.observe_batch(arm, &policy.boundary().drawn_sum(sum, n))
    }
}

/// A BAI algorithm that records the requests it makes.
#[derive(Debug)]
struct Recorder<'a> {
    inner: &'a mut dyn crate::bai::BaiAlgorithm,
    requests: &'a mut Vec<(usize, u64)>,
}

impl crate::bai::BaiAlgorithm for Recorder<'_> {
    fn num_arms(&self) -> usize {
        self.inner.num_arms()
    }
    fn next(&mut self, t: u64) -> BaiStep {
        self.inner.next(t)
    }
    fn observe(&mut self, arm: usize, sum: &crate::privacy::RewardSum) -> Result<()> {
        self.requests.push((arm, sum.n()));
        self.inner.observe(arm, sum)
    }
    fn boundary(&self) -> crate::privacy::RewardBoundary {
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

/// The risk delta given to BAI algorithms during an audit (their stopping rule's target; not a
/// privacy parameter).
pub const BAI_RISK: f64 = 0.1;

/// Audit `kind` with parameters `params` (the `[[policy]]` table without `kind`).
///
/// # Errors
/// An unknown or non-private kind, invalid parameters or options (naming the field), a policy
/// that fails to build.
pub fn audit(kind: &str, params: &toml::Table, opts: &AuditOptions) -> Result<AuditReport> {
    opts.validate()?;
    let start = std::time::Instant::now();
    let entry = registry::policy(kind)?;
    let honest = entry.build(params.clone())?;
    let g = guarantee(&honest);
    if !g.is_private() {
        return Err(Error::param(
            "kind",
            format!("\"{kind}\""),
            "a private kind: this one makes no privacy claim (`dpbandits list`)",
        ));
    }
    let deltas = if opts.deltas.is_empty() {
        match g.budget {
            Budget::Zcdp { .. } => vec![1e-5],
            _ => vec![0.0],
        }
    } else {
        opts.deltas.clone()
    };
    let claims: Vec<f64> = deltas
        .iter()
        .map(|&d| claimed_epsilon(&g, d))
        .collect::<Result<_>>()?;
    let scaled = scaled_params(params, opts.noise_multiplier);
    let audited = match opts.mutant {
        None => entry.build(scaled)?,
        Some(m) => build_mutant(kind, scaled, m)?,
    };
    audit_built(
        kind,
        params,
        &honest,
        audited,
        &g,
        (deltas, claims),
        opts,
        start,
    )
}

/// Audit a finite-armed policy configuration that is not a registry kind (a policy written in
/// Python, `dpbandits.audit`): black-box on its decisions, exactly as [`audit`] does for a
/// kind; `config` builds the policy of each run (`build(arms, audit seed)`) and states the claim.
/// The budget cannot be scaled, so `noise_multiplier` must be 1.
///
/// # Errors
/// As [`audit`]; a configuration that makes no privacy claim, `noise_multiplier != 1`.
pub fn audit_custom(
    config: Box<dyn crate::finite::PolicyConfig>,
    opts: &AuditOptions,
) -> Result<AuditReport> {
    opts.validate()?;
    let start = std::time::Instant::now();
    if opts.noise_multiplier != 1.0 {
        return Err(Error::param(
            "noise_multiplier",
            opts.noise_multiplier,
            "1 for a policy that is not a registry kind (its budget cannot be rescaled)",
        ));
    }
    let g = config.guarantee();
    if !g.is_private() {
        return Err(Error::param(
            "guarantee",
            "(none)",
            "a privacy claim (a policy that claims nothing has nothing to audit)",
        ));
    }
    let deltas = if opts.deltas.is_empty() {
        match g.budget {
            Budget::Zcdp { .. } => vec![1e-5],
            _ => vec![0.0],
        }
    } else {
        opts.deltas.clone()
    };
    let claims: Vec<f64> = deltas
        .iter()
        .map(|&d| claimed_epsilon(&g, d))
        .collect::<Result<_>>()?;
    let kind = config.kind();
    let honest = Built::Finite(Box::new(NoBuild(config.label())));
    let params = toml::Table::new();
    audit_built(
        kind,
        &params,
        &honest,
        Built::Finite(config),
        &g,
        (deltas, claims),
        opts,
        start,
    )
}

/// The label of a custom configuration, as the `honest` configuration of [`audit_built`] (which
/// only asks it for its label and horizon).
#[derive(Debug)]
struct NoBuild(String);

impl crate::finite::PolicyConfig for NoBuild {
    fn kind(&self) -> &'static str {
        "custom"
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![]
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn build(&self, _k: usize, _seed: u64) -> Result<Box<dyn crate::finite::Policy>> {
        Err(Error::Config(
            "audit: the label-only configuration builds nothing".into(),
        ))
    }
    fn label(&self) -> String {
        self.0.clone()
    }
}

/// The audit of `audited` once the claim is known (the part shared by [`audit`] and
/// [`audit_custom`]).
#[allow(clippy::too_many_arguments)]
fn audit_built(
    kind: &str,
    params: &toml::Table,
    honest: &Built,
    audited: Built,
    g: &PrivacyGuarantee,
    (deltas, claims): (Vec<f64>, Vec<f64>),
    opts: &AuditOptions,
    start: std::time::Instant,
) -> Result<AuditReport> {
    let (lo, hi) = g
        .boundary
        .map_or((0.0, 1.0), |b| (b.lo.max(-1.0), b.hi.min(1.0)));
    let (lo, hi) = if lo < hi { (lo, hi) } else { (0.0, 1.0) };
    let horizon = opts.horizon.unwrap_or_else(|| default_horizon(honest));
    let shape = Shape {
        horizon,
        arms: opts.arms,
    };
    let audited = prepare(audited, opts.arms)?;
    let names = shape.names(audited.setting() == Setting::Bai);
    let alpha = (1.0 - opts.confidence) / opts.scenarios.len() as f64;
    let base_label = label(honest);
    let mut rows = vec![];
    let min_delta = deltas.iter().copied().fold(f64::INFINITY, f64::min);
    let curve = match g.budget {
        Budget::Zcdp { .. } if opts.curve => {
            let (lo, hi, n) = CURVE_DELTAS;
            Some(stats::Curve::new(lo, hi, n, |d| claimed_epsilon(g, d))?)
        }
        _ => None,
    };
    let mut curve_row: Option<CurveRow> = None;
    // Joint DP (the guarantee's adjacency; contextual kinds): the joint relation
    let joint = g.is_joint() && audited.setting() == Setting::Contextual;
    let runner = Runner {
        audited: &audited,
        shape: &shape,
        seed: opts.seed,
        joint,
    };
    let mut designs = vec![];
    let mut powered_scenarios = 0usize;
    for &sc in &opts.scenarios {
        let run_label = format!("{base_label}/{}", sc.name());
        let (background, target_row) = match sc {
            Scenario::First => {
                let mut b = vec![hi; opts.arms];
                b[0] = lo;
                (b, 0)
            }
            Scenario::Late => (vec![hi; opts.arms], horizon / 2),
            Scenario::FirstTie => (vec![hi; opts.arms], 0),
            Scenario::MidTie => (vec![0.5 * (lo + hi); opts.arms], 0),
            Scenario::Tuned => {
                // pilot tables are scored as the audit will select its events
                let score = |d: &[Vec<i64>], d2: &[Vec<i64>]| match &curve {
                    Some(c) => stats::best_score_on_curve(d, d2, c),
                    None => stats::best_score(d, d2, min_delta),
                };
                runner.tune(&names, lo, hi, &run_label, opts.runs, &score)?
            }
        };
        designs.push(Design {
            scenario: sc,
            background: background.clone(),
            target_row,
        });
        let tables = neighbour_tables(&background, target_row, lo, hi, joint);
        let sides = [
            runner.runs(&tables[0], &run_label, false, opts.runs)?,
            runner.runs(&tables[1], &run_label, true, opts.runs)?,
        ];
        if sides.iter().flatten().any(|r| r != &sides[0][0]) {
            powered_scenarios += 1;
        }
        let half = (opts.runs / 2) as usize;
        let (sel_d, ev_d) = sides[0].split_at(half);
        let (sel_d2, ev_d2) = sides[1].split_at(half);
        let events = match &curve {
            Some(c) => stats::select_on_curve(sel_d, sel_d2, c, opts.events),
            None => stats::select(sel_d, sel_d2, min_delta, opts.events),
        };
        let bounds = stats::evaluate(&events, ev_d, ev_d2, &deltas, alpha, &names);
        if let Some(c) = &curve
            && let Some(point) = stats::evaluate_on_curve(&events, ev_d, ev_d2, c, alpha, &names)
            && curve_row
                .as_ref()
                .is_none_or(|r| point.ratio > r.point.ratio)
        {
            curve_row = Some(CurveRow {
                scenario: sc,
                point,
            });
        }
        for ((&delta, &claimed), b) in deltas.iter().zip(&claims).zip(bounds) {
            let eps = b.as_ref().map_or(0.0, |b| b.eps_lower_bound);
            rows.push(AuditRow {
                scenario: sc,
                delta,
                claimed,
                eps_lower_bound: eps,
                event: b,
                verdict: if eps <= claimed {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                },
            });
        }
    }
    let worst = rows
        .iter()
        .max_by(|a, b| (a.eps_lower_bound - a.claimed).total_cmp(&(b.eps_lower_bound - b.claimed)))
        .expect("at least one row")
        .clone();
    let verdict = if rows.iter().all(|r| r.verdict == Verdict::Pass)
        && curve_row.as_ref().is_none_or(|c| c.point.ratio <= 1.0)
    {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    let why_inconclusive = if verdict == Verdict::Fail {
        None
    } else if powered_scenarios == 0 {
        Some(format!(
            "in every scenario all {} runs made the same decisions on both neighbouring tables: within horizon {horizon} the decisions do not depend on the rewards, so no event can show a leak; raise the horizon past the point where the policy first uses its rewards (e.g. past an exploration phase), or try another scenario (`tuned`)",
            opts.runs
        ))
    } else {
        // The most favourable event: one selected event (per-event level alpha / 2).
        let n_eval = opts.runs - opts.runs / 2;
        let strongest = |n: u64, delta: f64| strongest_possible_bound(n, alpha / 2.0, delta);
        // (the whole-curve mode tests other deltas too: judged on its rows' deltas only when off)
        let hopeless = curve_row.is_none()
            && curve.is_none()
            && rows.iter().all(|r| strongest(n_eval, r.delta) <= r.claimed);
        hopeless.then(|| {
            let needed = (1..=40)
                .map(|i| opts.runs << i)
                .find(|&runs| {
                    rows.iter()
                        .any(|r| strongest(runs - runs / 2, r.delta) > r.claimed)
                });
            let best = rows
                .iter()
                .map(|r| strongest(n_eval, r.delta))
                .fold(0.0, f64::max);
            format!(
                "with {} runs per table ({} evaluated) the strongest possible event gives a bound of at most {best:.4}, not above the claim {:.4}: this audit cannot refute the claim whatever the policy does; raise runs{}",
                opts.runs,
                n_eval,
                worst.claimed,
                needed.map_or(String::new(), |r| format!(" (at least {r})"))
            )
        })
    };
    let verdict = if why_inconclusive.is_some() {
        Verdict::Inconclusive
    } else {
        verdict
    };
    Ok(AuditReport {
        kind: kind.into(),
        params: serde_json::to_value(params).unwrap_or(serde_json::Value::Null),
        budget: g.budget.to_string(),
        notion: g.notion.clone(),
        noise_multiplier: opts.noise_multiplier,
        noise: g.noise,
        reproducible: g.noise != NoiseGrade::Deployment,
        mutant: opts.mutant.map(|m| format!("{m:?}")),
        delta: worst.delta,
        claimed: worst.claimed,
        eps_lower_bound: worst.eps_lower_bound,
        scenario: worst.scenario,
        event: worst.event.as_ref().map(|e| e.event.clone()),
        confidence: opts.confidence,
        runs: opts.runs,
        horizon,
        arms: opts.arms,
        seed: opts.seed,
        verdict,
        why_inconclusive,
        seconds: start.elapsed().as_secs_f64(),
        results: rows,
        designs,
        curve: curve_row,
    })
}

/// The line a report prints for deployment-grade noise (empty otherwise).
pub(crate) fn deployment_note(noise: NoiseGrade) -> String {
    if noise == NoiseGrade::Deployment {
        "deployment-grade noise: every run draws exact noise from an OS-keyed generator, so this \
         report is not reproducible from the seed (the tables, reward streams and selection \
         split still are)\n"
            .into()
    } else {
        String::new()
    }
}

/// The tables of one scenario: arm backgrounds and the target row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Design {
    /// Scenario.
    pub scenario: Scenario,
    /// Background reward of every arm.
    pub background: Vec<f64>,
    /// The user whose rewards differ.
    pub target_row: u64,
}

/// Runs of the audited policy on a table.
struct Runner<'a> {
    audited: &'a Audited,
    shape: &'a Shape,
    seed: u64,
    /// The joint relation ([`neighbour_tables`]).
    joint: bool,
}

/// The two neighbouring tables of a design: the reward relation (the target row's rewards at
/// the top in `D`, at the bottom in `D'`) or, for a Joint-DP kind (`joint`), the joint relation:
/// the target row's rewards at the top in both and its decision set negated in `D'`, the target
/// round's own action left out of the output (Shariff & Sheffet 2018 Def. 2).
fn neighbour_tables(
    background: &[f64],
    target_row: u64,
    lo: f64,
    hi: f64,
    joint: bool,
) -> [RewardTable; 2] {
    let table = |target_value: f64, negated: bool| RewardTable {
        background: background.to_vec(),
        target_row,
        target_value,
        negated,
        joint,
    };
    if joint {
        [table(hi, false), table(hi, true)]
    } else {
        [table(hi, false), table(lo, false)]
    }
}

/// How the tuned scenario scores a pair of pilot samples (runs x features on `D` and `D'`).
type PilotScore<'a> = dyn Fn(&[Vec<i64>], &[Vec<i64>]) -> f64 + 'a;

/// Steps of the bisection of the tuned scenario's background level.
const TUNE_STEPS: usize = 20;

/// Candidate target rows of the tuned scenario among the first rows of arm 0's commitments.
const TUNE_ROWS: usize = 6;

/// The tuned scenario also tries the rows `i L / TUNE_FRACTIONS` (`0 < i < TUNE_FRACTIONS`) of
/// a pilot run of length `L`.
const TUNE_FRACTIONS: u64 = 8;

impl Runner<'_> {
    /// `n` runs on `table` (in parallel, collected in order), seeds keyed by `label` and the
    /// side (`D` or `D'`).
    fn runs(
        &self,
        table: &RewardTable,
        label: &str,
        neighbour: bool,
        n: u64,
    ) -> Result<Vec<Vec<i64>>> {
        (0..n)
            .into_par_iter()
            .map(|r| {
                let seed = rng::audit_seed(self.seed, label, neighbour, r);
                run_once(self.audited, table, self.shape, seed)
            })
            .collect()
    }

    /// The tuned scenario's design ([`Scenario::Tuned`]), from pilot runs whose seeds are keyed
    /// by `label/pilot...` (independent of the audited runs).
    fn tune(
        &self,
        names: &[String],
        lo: f64,
        hi: f64,
        label: &str,
        runs: u64,
        score: &PilotScore<'_>,
    ) -> Result<(Vec<f64>, u64)> {
        let pilot = (runs / 4).clamp(100, 1000);
        let k = self.shape.arms;
        let pulls0 = names.iter().position(|n| n == "pulls[0]").expect("feature");
        let background = |x: f64| {
            let mut b = vec![hi; k];
            b[0] = x;
            b
        };
        // No target: every row is the background (common pilot seeds for every level).
        let plain_label = format!("{label}/pilot-level");
        // The first `n` pilot runs at level `x` (run `r`'s seed depends on `r` only).
        let level_runs = |x: f64, n: u64| {
            self.runs(
                &RewardTable {
                    background: background(x),
                    target_row: u64::MAX,
                    target_value: x,
                    negated: false,
                    joint: false,
                },
                &plain_label,
                false,
                n,
            )
        };
        let mean_pulls0 = |x: f64| -> Result<f64> {
            let r = level_runs(x, pilot)?;
            Ok(r.iter().map(|f| f[pulls0] as f64).sum::<f64>() / r.len() as f64)
        };
        let (f_lo, f_hi) = (mean_pulls0(lo)?, mean_pulls0(hi)?);
        let level = if (f_hi - f_lo).abs() < 0.5 {
            lo
        } else {
            let goal = 0.5 * (f_lo + f_hi);
            let (mut a, mut b) = (lo, hi);
            for _ in 0..TUNE_STEPS {
                let m = 0.5 * (a + b);
                // arm 0's pulls move from f_lo (at lo) to f_hi (at hi)
                if (mean_pulls0(m)? < goal) == (f_lo < f_hi) {
                    a = m;
                } else {
                    b = m;
                }
            }
            0.5 * (a + b)
        };
        // Candidate rows: the first row of each of arm 0's first commitments in pilot run 0,
        // and rows spread over that run's length (the decisive release of a run that stops,
        // e.g. BAI, is late).
        let run0 = level_runs(level, 1)?.swap_remove(0);
        let length: i64 = (0..k).map(|a| run0[pulls0 + a]).sum::<i64>().max(1);
        let arm_at = names
            .iter()
            .position(|n| n == "commitment[0].arm")
            .expect("feature");
        let len_at = names
            .iter()
            .position(|n| n == "commitment[0].len")
            .expect("feature");
        let mut rows = vec![0u64];
        let mut start = 0u64;
        for j in 0..COMMITMENTS {
            let (a, l) = (run0[arm_at + j], run0[len_at + j]);
            if l < 0 {
                break;
            }
            if a == 0 && !rows.contains(&start) && rows.len() < TUNE_ROWS {
                rows.push(start);
            }
            start += l as u64;
        }
        for i in 1..TUNE_FRACTIONS {
            let row = (length as u64 * i / TUNE_FRACTIONS).min(self.shape.horizon - 1);
            if !rows.contains(&row) {
                rows.push(row);
            }
        }
        let mut best = (0.0, 0u64);
        for &row in &rows {
            let tables = neighbour_tables(&background(level), row, lo, hi, self.joint);
            let pl = format!("{label}/pilot-row{row}");
            let d = self.runs(&tables[0], &pl, false, pilot)?;
            let d2 = self.runs(&tables[1], &pl, true, pilot)?;
            let score = score(&d, &d2);
            if score > best.0 {
                best = (score, row);
            }
        }
        Ok((background(level), best.1))
    }
}

/// Parse `key=value` parameters (values as TOML: numbers, booleans, quoted strings; a bare word
/// is taken as a string) into a table.
///
/// # Errors
/// A parameter without `=`.
pub fn parse_params<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<toml::Table> {
    let mut t = toml::Table::new();
    for it in items {
        let Some((k, v)) = it.split_once('=') else {
            return Err(Error::param("param", it, "key=value, e.g. rho=0.5"));
        };
        let (k, v) = (k.trim(), v.trim());
        let value = toml::from_str::<toml::Table>(&format!("x = {v}"))
            .ok()
            .and_then(|mut t| t.remove("x"))
            .unwrap_or_else(|| toml::Value::String(v.to_string()));
        t.insert(k.to_string(), value);
    }
    Ok(t)
}

impl AuditReport {
    /// A fixed-width text table: one line per (scenario, delta), then the verdict.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{} ({}), noise x{}{}: {} runs per table and scenario, horizon {}, {} arms, confidence {}\n",
            self.kind,
            self.budget,
            self.noise_multiplier,
            self.mutant
                .as_ref()
                .map_or(String::new(), |m| format!(", MUTANT {m}")),
            self.runs,
            self.horizon,
            self.arms,
            self.confidence
        );
        s += &deployment_note(self.noise);
        s += &format!(
            "{:<8} {:>9} {:>10} {:>15} {:>7}  event\n",
            "scenario", "delta", "claimed", "eps_lower_bound", "verdict"
        );
        for r in &self.results {
            s += &format!(
                "{:<8} {:>9.1e} {:>10.4} {:>15.4} {:>7}  {}\n",
                r.scenario.name(),
                r.delta,
                r.claimed,
                r.eps_lower_bound,
                r.verdict.shout(),
                r.event.as_ref().map_or("-".into(), |e| format!(
                    "{} (p^ {:.4}, q^ {:.4})",
                    e.event, e.p_hat, e.q_hat
                ))
            );
        }
        if let Some(c) = &self.curve {
            s += &format!(
                "curve: strongest at {} delta {:.3e}: bound {:.4} against {:.4}, ratio {:.4} ({})\n",
                c.scenario.name(),
                c.point.delta,
                c.point.eps_lower_bound,
                c.point.claimed,
                c.point.ratio,
                c.point.event.event
            );
        }
        s += &format!(
            "verdict: {} ({:.2} s)\n",
            self.verdict.shout(),
            self.seconds
        );
        if let Some(why) = &self.why_inconclusive {
            s += &format!("inconclusive: {why}\n");
        }
        s
    }
}

/// Build the code mutant `m` of `kind` (AdaC-UCB, AdaP-UCB, AdaP-KLUCB) from its parameters.
fn build_mutant(kind: &str, params: toml::Table, m: AuditMutant) -> Result<Built> {
    use crate::finite::{ADAC_UCB, ADAP_KLUCB, ADAP_UCB, AdaCUcbConfig, AdaPConfig, AdaPIndex};
    let cfg: Box<dyn crate::finite::PolicyConfig> =
        if kind == ADAC_UCB.kind && m != AuditMutant::TwoEpisodeReleases {
            let mut c: AdaCUcbConfig = registry::parse(params)?;
            c.mutant = Some(m);
            Box::new(c)
        } else if kind == ADAP_UCB.kind || kind == ADAP_KLUCB.kind {
            let mut c: AdaPConfig = registry::parse(params)?;
            c.index = if kind == ADAP_UCB.kind {
                AdaPIndex::Ucb
            } else {
                AdaPIndex::KlUcb
            };
            c.mutant = Some(m);
            Box::new(c)
        } else {
            return Err(Error::param(
                "mutant",
                format!("{m:?} of \"{kind}\""),
                "a mutant of adac_ucb, adap_ucb or adap_klucb (TwoEpisodeReleases: adap_ucb or \
             adap_klucb)",
            ));
        };
    Ok(Built::Finite(cfg))
}

#[cfg(test)]
mod tests;

/// What the test modules of the audit share.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// Every private kind of the registry.
    /// The private kinds, as their records say (the conformance suite checks the records
    /// against the examples' guarantees).
    pub(crate) fn private_kinds() -> Vec<&'static registry::PolicyEntry> {
        registry::POLICIES
            .iter()
            .filter(|e| e.info.private)
            .collect()
    }
}
