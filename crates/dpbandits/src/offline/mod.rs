//! Offline evaluation on logged feedback: what would a policy have earned on a log collected by
//! another (the logging) policy? `docs/offline.md` is the user's guide.
//!
//! A log is a sequence of events `(x_i, a_i, r_i, p_i)`: an optional context `x_i`, the logged
//! action `a_i` in `0..K`, its reward `r_i`, and the logging propensity `p_i = mu(a_i | x_i)`,
//! the probability with which the logging policy `mu` chose `a_i`. Layouts: [`logged`] (the
//! generic CSV `action,reward,propensity[,x0,...]`) and [`obd`] (the Open Bandit Dataset).
//! Every estimator below assumes the events are independent draws of `(x, a, r)` with
//! `x ~ D`, `a ~ mu(. | x)` and `r ~ R(. | x, a)` (the reward distribution does not depend on
//! the logging policy nor on time), and that the logged propensities are the true ones.
//!
//! # Estimators
//! Evaluated is either a **registry kind** (any finite-armed or contextual kind, private or
//! not, simulation- or deployment-grade noise), driven through a [`Session`], or a **fixed
//! target policy** `pi` given by its action probabilities ([`FixedTarget`]; a deterministic
//! policy is an indicator).
//!
//! * **Replay** (Li, Chu, Langford & Wang 2011). Stream the log; the policy decides; when its
//!   decision equals the logged action the reward is observed (the policy learns from it) and
//!   counted, otherwise the event is skipped and the policy is unchanged. The estimate is the
//!   average reward over the `n` matched events. *Assumes* uniform logging
//!   (`mu(a | x) = 1/K`): then the matched events are distributed as `n` rounds of the policy
//!   run online (the theorem of Li et al.). For a non-uniform stochastic logger with known
//!   propensities, **rejection sampling** first makes the stream uniform: event `i` is kept with
//!   probability `p_min / p_i` (`p_min` the smallest logged propensity, assumed to be the
//!   logging policy's smallest probability of any action in any context), so kept events have
//!   `a` uniform given `x`; the coins are the [`crate::rng::REPLAY_ACCEPT`] stream. Rejection is
//!   on by default exactly when the logged propensities are not all equal ([`Rejection`]). A
//!   finite-armed kind's decision is held until an event matches it (its commitment is not
//!   re-drawn on skipped events: equivalent under uniform logging, since the skips are
//!   independent of the decision); a contextual kind decides anew on every event (the skipped
//!   round is withdrawn, [`Session::withdraw`]). A stochastic fixed target draws its decision
//!   from `pi` with the [`crate::rng::REPLAY_TARGET`] stream. *Interval*: normal approximation,
//!   `mean +- z s / sqrt(n)` with `s` the sample standard deviation of the matched rewards
//!   (exact in the limit for a fixed target; for a learning policy the matched rewards are not
//!   identically distributed and the interval describes the realised average reward of this
//!   replay, not the spread over the policy's own randomness).
//! * **IPS** (inverse propensity scoring, Horvitz & Thompson 1952): `V = (1/N) sum_i w_i r_i`,
//!   `w_i = pi(a_i | x_i) / p_i`, over all `N` events. *Assumes* `mu(a | x) > 0` wherever
//!   `pi(a | x) > 0` (support). Unbiased. *Interval*: CLT on the per-event terms `w_i r_i`.
//! * **SNIPS** (self-normalised IPS, Swaminathan & Joachims 2015):
//!   `V = sum_i w_i r_i / sum_i w_i`. Same assumptions; biased of order `1/N`, smaller variance.
//!   *Interval*: delta method, `se = sqrt(sum_i w_i^2 (r_i - V)^2) / sum_i w_i`.
//! * **DR** (doubly robust, Dudik, Langford & Li 2011): `V = (1/N) sum_i [ sum_a pi(a | x_i)
//!   q(a) + w_i (r_i - q(a_i)) ]` with the reward model `q` = the per-action mean reward,
//!   **cross-fitted** on two folds (events of even and odd index): the terms of one fold use the
//!   model fitted on the other (an action with no event in that fold: that fold's overall mean).
//!   Unbiased whatever `q` under the support assumption. *Interval*: CLT on the per-event terms.
//!
//! For a registry kind, which adapts online, IPS, SNIPS and DR evaluate **the decisions the
//! policy made along the replay**: at every event its current decision `d_i` (made from the
//! matched events before it) is taken as a deterministic target, `pi_i(a) = 1{a = d_i}`. That is
//! the average value of the replayed policy's decisions, not the value of the policy run online
//! for `N` rounds (it learns from the matched events only); the replay estimate is the one that
//! answers "what would it have earned". For a fixed target the four estimate the same value.
//!
//! Intervals are two-sided at [`ReplayOptions::confidence`] (0.95 by default) with
//! `z = Phi^-1((1 + confidence) / 2)`; with fewer than two events an interval is undefined
//! (`NaN`, `null` in JSON).

pub mod logged;
pub mod obd;

pub use logged::read_csv;
pub use obd::{Slot, read_obd};

use crate::config::Setting;
use crate::contextual::ActionSet;
use crate::error::{Error, Result};
use crate::rng::{self, REPLAY_ACCEPT, REPLAY_TARGET};
use crate::session::{Decision, Problem, Session};
use rand::RngExt;
use serde::Serialize;

/// One logged event.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    /// The logged action, in `0..K`.
    pub action: usize,
    /// Its observed reward.
    pub reward: f64,
    /// The logging policy's probability of the logged action, in `(0, 1]`.
    pub propensity: f64,
    /// Context features (empty when the log has none).
    pub context: Vec<f64>,
    /// The line of the source file (the header is line 1), for error messages.
    pub line: usize,
}

/// A validated log.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedData {
    /// Where it was read from.
    pub source: String,
    /// The number of actions `K`.
    pub actions: usize,
    /// The dimension of the contexts (0: none).
    pub dim: usize,
    /// The events, in log order.
    pub events: Vec<LoggedEvent>,
}

pub(crate) fn cell_error(
    source: &str,
    line: usize,
    column: &str,
    value: &str,
    what: &str,
) -> Error {
    Error::param(
        format!("{source} line {line}, column {column}"),
        format!("{value:?}"),
        what,
    )
}

impl LoggedData {
    /// A log from events, validated: `arms` actions (`None`: the largest logged action plus
    /// one, at least 2), every action below it, every reward and context entry finite, every
    /// propensity in `(0, 1]`, every context of dimension `dim`. The column names are for the
    /// error messages, which name the source, the line and the column.
    ///
    /// # Errors
    /// The first offending value; an empty log.
    pub fn new(
        source: String,
        arms: Option<usize>,
        dim: usize,
        events: Vec<LoggedEvent>,
        action_col: &str,
        reward_col: &str,
        propensity_col: &str,
    ) -> Result<LoggedData> {
        if events.is_empty() {
            return Err(Error::param(
                "log",
                &source,
                "a log with at least one event",
            ));
        }
        let k = arms.unwrap_or_else(|| {
            events
                .iter()
                .map(|e| e.action + 1)
                .max()
                .unwrap_or(0)
                .max(2)
        });
        if k < 2 {
            return Err(Error::param("arms", k, "at least 2 actions"));
        }
        for e in &events {
            let at = |col: &str, v: String, what: &str| cell_error(&source, e.line, col, &v, what);
            if e.action >= k {
                return Err(at(
                    action_col,
                    e.action.to_string(),
                    &format!("an action in 0..{k} ({k} actions)"),
                ));
            }
            if !e.reward.is_finite() {
                return Err(at(reward_col, e.reward.to_string(), "a finite number"));
            }
            if !(e.propensity > 0.0 && e.propensity <= 1.0) {
                return Err(at(
                    propensity_col,
                    e.propensity.to_string(),
                    "a probability in (0, 1]",
                ));
            }
            if e.context.len() != dim {
                return Err(at(
                    "x",
                    format!("{} features", e.context.len()),
                    &format!("{dim} features"),
                ));
            }
            if let Some(j) = e.context.iter().position(|x| !x.is_finite()) {
                return Err(at(
                    &format!("x{j}"),
                    e.context[j].to_string(),
                    "a finite number",
                ));
            }
        }
        Ok(LoggedData {
            source,
            actions: k,
            dim,
            events,
        })
    }

    /// The smallest logged propensity.
    pub fn p_min(&self) -> f64 {
        self.events
            .iter()
            .map(|e| e.propensity)
            .fold(f64::INFINITY, f64::min)
    }

    /// Whether every logged propensity is the same (up to `1e-12` relative).
    pub fn uniform_propensities(&self) -> bool {
        let lo = self.p_min();
        let hi = self.events.iter().map(|e| e.propensity).fold(0.0, f64::max);
        hi - lo <= 1e-12 * hi
    }
}

/// A log layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The generic CSV layout ([`logged`]).
    Csv,
    /// The Open Bandit Dataset layout ([`obd`]).
    Obd,
}

impl Format {
    /// `csv` or `obd`.
    ///
    /// # Errors
    /// Anything else, naming `format`.
    pub fn parse(s: &str) -> Result<Format> {
        match s {
            "csv" => Ok(Format::Csv),
            "obd" => Ok(Format::Obd),
            _ => Err(Error::param("format", format!("{s:?}"), "csv or obd")),
        }
    }
}

/// Read a log: `format` at `path` (OBD: a campaign folder or its CSV), keeping the rows of
/// `slot` (OBD only: the generic layout has no positions, and a `slot` other than
/// [`obd::Slot::All`] is refused for it), with `arms` actions (`None`: from the data).
///
/// # Errors
/// As [`logged::read_csv`] and [`obd::read_obd`]; a position filter on a CSV log.
pub fn load(
    path: &std::path::Path,
    format: Format,
    slot: Slot,
    arms: Option<usize>,
) -> Result<LoggedData> {
    match format {
        Format::Csv => {
            if slot != Slot::All {
                return Err(Error::param(
                    "position",
                    slot,
                    "all for a csv log (positions are an OBD column)",
                ));
            }
            read_csv(path, arms)
        }
        Format::Obd => read_obd(path, slot, arms),
    }
}

/// A fixed target from a comma-separated list of action probabilities (`0,1,0` is the
/// deterministic policy playing action 1).
///
/// # Errors
/// A list that is not a distribution, naming `target`.
pub fn parse_target(s: &str) -> Result<FixedTarget> {
    let probs = s
        .split(',')
        .map(|x| {
            x.trim().parse::<f64>().map_err(|_| {
                Error::param(
                    "target",
                    format!("{s:?}"),
                    "comma-separated action probabilities, e.g. 0,1,0",
                )
            })
        })
        .collect::<Result<Vec<f64>>>()?;
    FixedTarget::new(format!("target({s})"), probs)
}

/// A fixed target policy: the same action probabilities at every event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FixedTarget {
    /// Its name in the report.
    pub name: String,
    /// `pi(a)`, `a` in `0..K`.
    pub probs: Vec<f64>,
}

impl FixedTarget {
    /// Probabilities `probs` (non-negative, finite, summing to 1 within `1e-9`).
    ///
    /// # Errors
    /// Probabilities that are not a distribution, naming `target`.
    pub fn new(name: impl Into<String>, probs: Vec<f64>) -> Result<FixedTarget> {
        let sum: f64 = probs.iter().sum();
        if probs.is_empty()
            || probs.iter().any(|p| !(p.is_finite() && *p >= 0.0))
            || (sum - 1.0).abs() > 1e-9
        {
            return Err(Error::param(
                "target",
                format!("{probs:?}"),
                "action probabilities: non-negative numbers summing to 1",
            ));
        }
        Ok(FixedTarget {
            name: name.into(),
            probs,
        })
    }

    /// The deterministic policy that always plays `arm` of `arms`.
    ///
    /// # Errors
    /// `arm >= arms`.
    pub fn arm(arm: usize, arms: usize) -> Result<FixedTarget> {
        if arm >= arms {
            return Err(Error::param("target", arm, format!("an arm in 0..{arms}")));
        }
        let mut probs = vec![0.0; arms];
        probs[arm] = 1.0;
        FixedTarget::new(format!("arm {arm}"), probs)
    }
}

/// What is evaluated.
#[derive(Debug, Clone)]
pub enum Target {
    /// A registry kind with its parameters (an experiment file's `[[policy]]` table without
    /// `kind`), driven through a [`Session`].
    Kind {
        /// The registry kind.
        kind: String,
        /// Its parameters.
        params: toml::Table,
    },
    /// A fixed target policy.
    Fixed(FixedTarget),
}

/// When replay uses rejection sampling (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// On exactly when the logged propensities are not all equal.
    Auto,
    /// Always (a no-op on a uniform log: every event is kept).
    On,
    /// Never (replay then assumes uniform logging).
    Off,
}

impl Rejection {
    /// `auto`, `on` or `off`.
    ///
    /// # Errors
    /// Anything else, naming `rejection`.
    pub fn parse(s: &str) -> Result<Rejection> {
        match s {
            "auto" => Ok(Rejection::Auto),
            "on" => Ok(Rejection::On),
            "off" => Ok(Rejection::Off),
            _ => Err(Error::param(
                "rejection",
                format!("{s:?}"),
                "auto, on or off",
            )),
        }
    }
}

/// Options of [`evaluate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayOptions {
    /// Master seed of the replay streams ([`crate::rng::REPLAY_ACCEPT`],
    /// [`crate::rng::REPLAY_TARGET`], [`crate::rng::REPLAY_POLICY`]).
    pub seed: u64,
    /// Two-sided confidence of the intervals, in (0, 1).
    pub confidence: f64,
    /// Rejection sampling in replay.
    pub rejection: Rejection,
    /// Repetitions of a registry kind's replay (>= 1; default 10): repetition `r` runs under the
    /// master seed [`crate::rng::replay_repeat_seed`]`(seed, r)` (its rejection coins and the
    /// policy's own randomness), and the report gives the replay values' spread. The estimates
    /// are those of repetition 0 (the master seed itself). A fixed target is replayed once.
    pub replays: u32,
    /// The switch-DR threshold `tau` (> 0; default 100): an event whose importance weight
    /// exceeds it contributes the reward model only.
    pub switch_tau: f64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            seed: 20240917,
            confidence: 0.95,
            rejection: Rejection::Auto,
            replays: 10,
            switch_tau: 100.0,
        }
    }
}

/// One estimate with its interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// `replay`, `ips`, `snips` or `dr`.
    pub estimator: String,
    /// The estimated value (average reward per event).
    pub value: f64,
    /// Lower end of the interval.
    pub lo: f64,
    /// Upper end of the interval.
    pub hi: f64,
    /// Events the estimate averages over (replay: matched events; the others: all events).
    pub events: u64,
    /// How the interval is computed.
    pub interval: String,
    /// Whether the log supports this estimate ([`Diagnostics`]); `false`: do not use it.
    pub valid: bool,
    /// Why the estimate is invalid (`None` when valid).
    pub why_invalid: Option<String>,
}

impl Estimate {
    fn invalidate(&mut self, why: &str) {
        self.valid = false;
        match &mut self.why_invalid {
            Some(w) => {
                w.push_str("; ");
                w.push_str(why);
            }
            None => self.why_invalid = Some(why.into()),
        }
    }
}

/// What the log can support (docs/offline.md "Diagnostics"): the importance weights, the target's
/// mass on actions the log never shows, and the propensities of a context-free log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnostics {
    /// The mean importance weight `(1/N) sum_i w_i`: 1 in expectation when the propensities are
    /// the logger's probabilities and the target is supported.
    pub mean_weight: f64,
    /// Its interval at the report's confidence (CLT).
    pub mean_weight_lo: f64,
    /// Upper end.
    pub mean_weight_hi: f64,
    /// Whether the mean weight is too far from 1 to be chance: `|mean - 1| > 3.29 se` (a
    /// correct log is flagged with probability about 0.1%).
    pub weights_off: bool,
    /// The effective sample size `(sum w)^2 / sum w^2` (Kish): the number of events the
    /// weighted estimators are worth.
    pub ess: f64,
    /// The actions that never appear in the log.
    pub never_logged: Vec<usize>,
    /// The target's average mass on never-logged actions (a registry kind: the share of events
    /// at which its decision was a never-logged action). Above 0: no estimator sees those
    /// rewards, and every estimate is marked invalid.
    pub unsupported_mass: f64,
    /// A log without contexts whose propensity is constant per action: the sum of the logged
    /// actions' propensities (1 when every action is logged; at most 1 otherwise). `None`: the
    /// log has contexts, or an action's propensity varies (a logger that changed over time).
    pub propensity_sum: Option<f64>,
    /// Whether `propensity_sum` is wrong (off 1 by more than 1e-6 with every action logged, or
    /// above 1).
    pub propensities_off: bool,
}

/// The spread of a registry kind's replay estimate over [`ReplayOptions::replays`] seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplaySpread {
    /// Repetitions.
    pub replays: u32,
    /// The replay estimate of each repetition (repetition 0 first: the report's `replay`).
    pub values: Vec<f64>,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (0 for one repetition).
    pub sd: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// The result of [`evaluate`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The log's source.
    pub source: String,
    /// What was evaluated: the kind's label, or the fixed target's name.
    pub policy: String,
    /// Number of actions.
    pub actions: usize,
    /// Events in the log.
    pub events: u64,
    /// Events kept by rejection sampling (all of them when it is off).
    pub accepted: u64,
    /// Accepted events whose logged action matched the policy's decision.
    pub matched: u64,
    /// Whether replay used rejection sampling.
    pub rejection: bool,
    /// The smallest logged propensity.
    pub p_min: f64,
    /// Master seed.
    pub seed: u64,
    /// Confidence of the intervals.
    pub confidence: f64,
    /// Replay, IPS, SNIPS, DR, DM, switch-DR.
    pub estimates: Vec<Estimate>,
    /// The reward model of DR, DM and switch-DR.
    pub reward_model: String,
    /// The switch-DR threshold.
    pub switch_tau: f64,
    /// What the log can support.
    pub diagnostics: Diagnostics,
    /// A registry kind's replay over several seeds (`None` for a fixed target).
    pub spread: Option<ReplaySpread>,
    /// What is wrong with the log or the estimates, one sentence each (empty: nothing found).
    pub warnings: Vec<String>,
}

impl Report {
    /// A plain-text table: estimator, value, interval, events used.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{}: {} on {} ({} actions, {} events; replay: {} accepted{}, {} matched)\n",
            "replay",
            self.policy,
            self.source,
            self.actions,
            self.events,
            self.accepted,
            if self.rejection {
                format!(" by rejection sampling, p_min = {:.6}", self.p_min)
            } else {
                String::new()
            },
            self.matched
        );
        s += &format!(
            "{:<10} {:>12} {:>27} {:>10}\n",
            "estimator",
            "value",
            format!("{:.0}% interval", self.confidence * 100.0),
            "events"
        );
        for e in &self.estimates {
            s += &format!(
                "{:<10} {:>12.6} {:>27} {:>10}{}\n",
                e.estimator,
                e.value,
                format!("[{:.6}, {:.6}]", e.lo, e.hi),
                e.events,
                if e.valid { "" } else { "  INVALID" }
            );
        }
        let d = &self.diagnostics;
        s += &format!(
            "diagnostics: mean importance weight {:.4} [{:.4}, {:.4}] (1 expected), effective sample size {:.1} of {}",
            d.mean_weight, d.mean_weight_lo, d.mean_weight_hi, d.ess, self.events
        );
        if let Some(sum) = d.propensity_sum {
            s += &format!(", propensities sum to {sum:.6}");
        }
        s += &format!(", mass on never-logged actions {:.4}\n", d.unsupported_mass);
        if let Some(sp) = &self.spread {
            s += &format!(
                "replay over {} seeds: mean {:.6}, s.d. {:.6}, range [{:.6}, {:.6}]\n",
                sp.replays, sp.mean, sp.sd, sp.min, sp.max
            );
        }
        for w in &self.warnings {
            s += &format!("warning: {w}\n");
        }
        s
    }
}

pub use crate::math::stats::normal_quantile;

/// Mean and normal-approximation interval of `terms`.
fn clt(name: &str, terms: &[f64], z: f64) -> Estimate {
    let n = terms.len() as f64;
    let mean = terms.iter().sum::<f64>() / n;
    let half = if terms.len() >= 2 {
        let var = terms.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (n - 1.0);
        z * (var / n).sqrt()
    } else {
        f64::NAN
    };
    Estimate {
        estimator: name.into(),
        value: if terms.is_empty() { f64::NAN } else { mean },
        lo: mean - half,
        hi: mean + half,
        events: terms.len() as u64,
        interval: "normal approximation (CLT on the per-event terms)".into(),
        valid: true,
        why_invalid: None,
    }
}

/// The policy being evaluated, one event at a time.
trait Evaluated {
    /// `pi_i(.)`, the policy's action probabilities at this event (a registry kind: the
    /// indicator of its current decision).
    fn distribution(&mut self, ev: &LoggedEvent, out: &mut [f64]) -> Result<()>;
    /// The decision `d` matched the logged action: observe its reward.
    fn matched(&mut self, d: usize, reward: f64) -> Result<()>;
    /// The event is skipped (rejected, or the decision differs from the logged action).
    fn unmatched(&mut self) -> Result<()>;
}

impl Evaluated for FixedTarget {
    fn distribution(&mut self, _ev: &LoggedEvent, out: &mut [f64]) -> Result<()> {
        out.copy_from_slice(&self.probs);
        Ok(())
    }
    fn matched(&mut self, _d: usize, _reward: f64) -> Result<()> {
        Ok(())
    }
    fn unmatched(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A registry kind in replay (module docs).
struct Replayed {
    session: Session,
    actions: usize,
    /// The decision waiting for a matching event.
    held: Option<usize>,
    /// Contextual: the round's action set (`K` blocks `e_a (x) x`).
    features: Vec<f64>,
}

impl Replayed {
    /// Contextual action set of an event: action `a` is the vector `e_a (x) x` of dimension
    /// `K * d` (the context in block `a`, zeros elsewhere; `x = 1` when the log has no context,
    /// making the actions the unit vectors).
    fn action_set(&mut self, ev: &LoggedEvent) {
        let x: &[f64] = if ev.context.is_empty() {
            &[1.0]
        } else {
            &ev.context
        };
        let d = x.len();
        let dim = self.actions * d;
        self.features.clear();
        self.features.resize(self.actions * dim, 0.0);
        for a in 0..self.actions {
            self.features[a * dim + a * d..a * dim + (a + 1) * d].copy_from_slice(x);
        }
    }
}

impl Evaluated for Replayed {
    fn distribution(&mut self, ev: &LoggedEvent, out: &mut [f64]) -> Result<()> {
        let d = match self.held {
            Some(d) => d,
            None => {
                let decision = if self.session.setting() == Setting::Contextual {
                    self.action_set(ev);
                    let k = self.actions;
                    let set = ActionSet {
                        d: self.features.len() / k,
                        k,
                        features: &self.features,
                    };
                    self.session.decide_with(&set)?
                } else {
                    self.session.decide()?
                };
                match decision {
                    Decision::Play { arm, .. } => arm,
                    Decision::Stop { .. } => {
                        return Err(Error::Protocol("replay: the policy stopped".into()));
                    }
                }
            }
        };
        self.held = Some(d);
        out.fill(0.0);
        out[d] = 1.0;
        Ok(())
    }
    fn matched(&mut self, d: usize, reward: f64) -> Result<()> {
        self.session.observe(d, reward)?;
        self.held = None;
        Ok(())
    }
    fn unmatched(&mut self) -> Result<()> {
        if self.session.setting() == Setting::Contextual {
            self.session.withdraw()?;
            self.held = None;
        }
        Ok(())
    }
}

/// The problem a registry kind is built for on a log of `data`: finite-armed, `K` arms;
/// contextual, dimension `K * d` (`d` the context dimension, 1 without contexts) and horizon
/// the number of events.
///
/// # Errors
/// A kind of another setting (linear, BAI), naming `kind`.
pub fn problem_for(kind: &str, data: &LoggedData) -> Result<Problem> {
    let setting = crate::registry::policy(kind)?.setting();
    match setting {
        Setting::FiniteArmed => Ok(Problem::Finite { arms: data.actions }),
        Setting::Contextual => Ok(Problem::Contextual {
            dim: data.actions * data.dim.max(1),
            horizon: data.events.len() as u64,
        }),
        other => Err(Error::param(
            "kind",
            format!("\"{kind}\""),
            format!(
                "a finite-armed or contextual kind (\"{kind}\" is {other}): replay evaluates a policy choosing among a log's actions"
            ),
        )),
    }
}

/// The reward model `q(x, a)` of DR, DM and switch-DR fitted on one fold: per action, the mean
/// reward (a log without contexts) or a ridge regression of the reward on `[1, x]` (penalty 1
/// on the slopes, none on the intercept); an action with no event in the fold predicts the
/// fold's overall mean.
struct RewardModel {
    /// Per action: `[intercept, slopes...]` (slopes empty without contexts).
    coef: Vec<Vec<f64>>,
}

impl RewardModel {
    fn fit(data: &LoggedData, fold: usize) -> RewardModel {
        let k = data.actions;
        let d = data.dim;
        let (mut sum, mut n) = (vec![0.0; k], vec![0u64; k]);
        let (mut all, mut m) = (0.0, 0u64);
        for e in data.events.iter().skip(fold).step_by(2) {
            sum[e.action] += e.reward;
            n[e.action] += 1;
            all += e.reward;
            m += 1;
        }
        let overall = if m > 0 { all / m as f64 } else { 0.0 };
        let coef = (0..k)
            .map(|a| {
                if n[a] == 0 {
                    let mut c = vec![overall];
                    c.resize(d + 1, 0.0);
                    return c;
                }
                if d == 0 {
                    return vec![sum[a] / n[a] as f64];
                }
                // Normal equations (X'X + diag(0, 1, ..., 1)) b = X'y on rows [1, x].
                let p = d + 1;
                let mut xtx = nalgebra::DMatrix::<f64>::zeros(p, p);
                let mut xty = nalgebra::DVector::<f64>::zeros(p);
                let mut row = vec![1.0; p];
                for e in data
                    .events
                    .iter()
                    .skip(fold)
                    .step_by(2)
                    .filter(|e| e.action == a)
                {
                    row[1..].copy_from_slice(&e.context);
                    for i in 0..p {
                        xty[i] += row[i] * e.reward;
                        for j in 0..p {
                            xtx[(i, j)] += row[i] * row[j];
                        }
                    }
                }
                for i in 1..p {
                    xtx[(i, i)] += 1.0;
                }
                match xtx.cholesky() {
                    Some(c) => c.solve(&xty).iter().copied().collect(),
                    None => {
                        let mut c = vec![sum[a] / n[a] as f64];
                        c.resize(p, 0.0);
                        c
                    }
                }
            })
            .collect();
        RewardModel { coef }
    }

    fn predict(&self, a: usize, x: &[f64]) -> f64 {
        let c = &self.coef[a];
        c[0] + c[1..].iter().zip(x).map(|(b, x)| b * x).sum::<f64>()
    }
}

/// Evaluate `target` on `data`: replay, IPS, SNIPS, DR, DM and switch-DR, with the log's
/// diagnostics, and for a registry kind the replay's spread over [`ReplayOptions::replays`]
/// seeds (module docs).
///
/// # Errors
/// Options out of range, a target of the wrong number of actions, a kind's parameter errors
/// (naming the field), a reward the kind's boundary refuses (`boundary = "reject"`).
pub fn evaluate(data: &LoggedData, target: &Target, opts: &ReplayOptions) -> Result<Report> {
    if !(opts.confidence > 0.0 && opts.confidence < 1.0) {
        return Err(Error::param(
            "confidence",
            opts.confidence,
            "a number in (0, 1)",
        ));
    }
    if opts.replays == 0 {
        return Err(Error::param("replays", opts.replays, "an integer >= 1"));
    }
    if opts.switch_tau.is_nan() || opts.switch_tau <= 0.0 {
        return Err(Error::param(
            "switch_tau",
            opts.switch_tau,
            "a number > 0 (inf: switch-DR is DR)",
        ));
    }
    let mut report = evaluate_once(data, target, opts, opts.seed)?;
    if let Target::Kind { .. } = target {
        let mut values = vec![report.estimates[0].value];
        for r in 1..u64::from(opts.replays) {
            let seed = rng::replay_repeat_seed(opts.seed, r);
            values.push(evaluate_once(data, target, opts, seed)?.estimates[0].value);
        }
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let n = finite.len() as f64;
        let mean = finite.iter().sum::<f64>() / n;
        let sd = if finite.len() >= 2 {
            (finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        let spread = ReplaySpread {
            replays: opts.replays,
            min: finite.iter().copied().fold(f64::INFINITY, f64::min),
            max: finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            values,
            mean,
            sd,
        };
        if opts.replays >= 2 && spread.sd > 0.0 {
            let r = &report.estimates[0];
            if spread.min < r.lo || spread.max > r.hi {
                report.warnings.push(format!(
                    "the replay estimate varies over seeds more than its interval shows: {} seeds give [{:.6}, {:.6}] (s.d. {:.6}) against the single replay's interval [{:.6}, {:.6}]; the interval is one trajectory's, report the spread",
                    spread.replays, spread.min, spread.max, spread.sd, r.lo, r.hi
                ));
            }
        }
        report.spread = Some(spread);
    }
    Ok(report)
}

/// One pass over the log under the master seed `seed`.
fn evaluate_once(
    data: &LoggedData,
    target: &Target,
    opts: &ReplayOptions,
    seed: u64,
) -> Result<Report> {
    let k = data.actions;
    let (mut eval, policy): (Box<dyn Evaluated>, String) = match target {
        Target::Fixed(f) => {
            if f.probs.len() != k {
                return Err(Error::param(
                    "target",
                    format!("{} probabilities", f.probs.len()),
                    format!("one probability per action of the log ({k})"),
                ));
            }
            (Box::new(f.clone()), f.name.clone())
        }
        Target::Kind { kind, params } => {
            let problem = problem_for(kind, data)?;
            let label = format!("{kind}{}", label_params(params));
            let policy_seed = rng::replay_policy_seed(seed, &label);
            let session = Session::new(kind, params.clone(), &problem, policy_seed)?;
            (
                Box::new(Replayed {
                    session,
                    actions: k,
                    held: None,
                    features: vec![],
                }),
                label,
            )
        }
    };
    let rejection = match opts.rejection {
        Rejection::Auto => !data.uniform_propensities(),
        Rejection::On => true,
        Rejection::Off => false,
    };
    let p_min = data.p_min();
    let z = normal_quantile(0.5 + opts.confidence / 2.0);
    let models = [RewardModel::fit(data, 1), RewardModel::fit(data, 0)]; // for even, odd events
    let mut logged = vec![false; k];
    for e in &data.events {
        logged[e.action] = true;
    }
    let mut accept_rng = rng::replay_rng(seed, &REPLAY_ACCEPT);
    let mut target_rng = rng::replay_rng(seed, &REPLAY_TARGET);
    let n = data.events.len();
    let (mut ips, mut dr, mut dm, mut sw_dr, mut w) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut rewards = vec![];
    let mut accepted = 0u64;
    let mut unsupported = 0.0;
    let mut pi = vec![0.0; k];
    let mut q = vec![0.0; k];
    for (i, ev) in data.events.iter().enumerate() {
        let u_accept: f64 = accept_rng.random();
        let u_target: f64 = target_rng.random();
        eval.distribution(ev, &mut pi)?;
        let wi = pi[ev.action] / ev.propensity;
        let model = &models[i % 2];
        for (a, qa) in q.iter_mut().enumerate() {
            *qa = model.predict(a, &ev.context);
        }
        let direct: f64 = pi.iter().zip(&q).map(|(p, q)| p * q).sum();
        unsupported += pi
            .iter()
            .zip(&logged)
            .filter(|(_, l)| !**l)
            .map(|(p, _)| p)
            .sum::<f64>();
        w.push(wi);
        ips.push(wi * ev.reward);
        let correction = wi * (ev.reward - q[ev.action]);
        dr.push(direct + correction);
        dm.push(direct);
        sw_dr.push(
            direct
                + if wi <= opts.switch_tau {
                    correction
                } else {
                    0.0
                },
        );
        if rejection && u_accept >= p_min / ev.propensity {
            eval.unmatched()?;
            continue;
        }
        accepted += 1;
        let d = draw(&pi, u_target);
        if d == ev.action {
            eval.matched(d, ev.reward).map_err(|e| Error::At {
                path: format!("{} line {}", data.source, ev.line),
                inner: Box::new(e),
            })?;
            rewards.push(ev.reward);
        } else {
            eval.unmatched()?;
        }
    }
    let mut replay = clt("replay", &rewards, z);
    replay.interval = "normal approximation (sample s.d. of the matched rewards)".into();
    let sw: f64 = w.iter().sum();
    let swr: f64 = ips.iter().sum();
    let v = swr / sw;
    let se = w
        .iter()
        .zip(&data.events)
        .map(|(wi, e)| wi * wi * (e.reward - v).powi(2))
        .sum::<f64>()
        .sqrt()
        / sw;
    let snips = Estimate {
        estimator: "snips".into(),
        value: v,
        lo: v - z * se,
        hi: v + z * se,
        events: n as u64,
        interval: "delta method, se = sqrt(sum w^2 (r - V)^2) / sum w".into(),
        valid: true,
        why_invalid: None,
    };
    let mut estimates = vec![
        replay,
        clt("ips", &ips, z),
        snips,
        clt("dr", &dr, z),
        clt("dm", &dm, z),
        clt("switch_dr", &sw_dr, z),
    ];
    // Diagnostics.
    let weight = clt("weight", &w, z);
    let weight_se = (weight.hi - weight.value) / z;
    let weights_off = n >= 2
        && (weight.value - 1.0).abs() > normal_quantile(0.9995) * weight_se.max(f64::EPSILON);
    let sw2: f64 = w.iter().map(|x| x * x).sum();
    let ess = if sw2 > 0.0 { sw * sw / sw2 } else { 0.0 };
    let never_logged: Vec<usize> = (0..k).filter(|a| !logged[*a]).collect();
    let unsupported_mass = unsupported / n as f64;
    let propensity_sum = if data.dim == 0 {
        let mut per = vec![None::<f64>; k];
        let mut constant = true;
        for e in &data.events {
            match per[e.action] {
                None => per[e.action] = Some(e.propensity),
                Some(p) => constant &= (p - e.propensity).abs() <= 1e-9 * p,
            }
        }
        constant.then(|| per.iter().flatten().sum::<f64>())
    } else {
        None
    };
    let propensities_off = propensity_sum.is_some_and(|sum| {
        sum > 1.0 + 1e-6 || (never_logged.is_empty() && (sum - 1.0).abs() > 1e-6)
    });
    let mut warnings = vec![];
    if unsupported_mass > 0.0 {
        let why = format!(
            "the target puts mass {unsupported_mass:.4} on actions the log never shows ({never_logged:?}): no estimator sees their rewards"
        );
        for e in &mut estimates {
            e.invalidate(&why);
        }
        warnings.push(format!("{why}; every estimate is invalid"));
    }
    let scale_dependent = ["ips", "dr", "switch_dr"];
    if weights_off {
        let why = format!(
            "the mean importance weight is {:.4} [{:.4}, {:.4}], not 1: the logged propensities are not the logging policy's probabilities (or the target leaves the logger's support)",
            weight.value, weight.lo, weight.hi
        );
        for e in estimates
            .iter_mut()
            .filter(|e| scale_dependent.contains(&e.estimator.as_str()))
        {
            e.invalidate(&why);
        }
        warnings.push(format!("{why}; ips, dr and switch_dr are invalid"));
    }
    if propensities_off {
        let sum = propensity_sum.unwrap_or(f64::NAN);
        let why = format!(
            "the logged propensities of this context-free log sum to {sum:.6} over the actions (expected 1{}): they are not a probability distribution",
            if never_logged.is_empty() {
                ""
            } else {
                " at most, some actions never logged"
            }
        );
        for e in estimates
            .iter_mut()
            .filter(|e| scale_dependent.contains(&e.estimator.as_str()))
        {
            e.invalidate(&why);
        }
        warnings.push(format!("{why}; ips, dr and switch_dr are invalid"));
    }
    Ok(Report {
        source: data.source.clone(),
        policy,
        actions: k,
        events: n as u64,
        accepted,
        matched: rewards.len() as u64,
        rejection,
        p_min,
        seed,
        confidence: opts.confidence,
        estimates,
        reward_model: if data.dim == 0 {
            "per-action mean reward, cross-fitted on two folds".into()
        } else {
            format!(
                "per-action ridge regression of the reward on [1, x] ({} features, penalty 1 on the slopes), cross-fitted on two folds",
                data.dim
            )
        },
        switch_tau: opts.switch_tau,
        diagnostics: Diagnostics {
            mean_weight: weight.value,
            mean_weight_lo: weight.lo,
            mean_weight_hi: weight.hi,
            weights_off,
            ess,
            never_logged,
            unsupported_mass,
            propensity_sum,
            propensities_off,
        },
        spread: None,
        warnings,
    })
}

/// `(k=v,...)` of a parameter table, keys sorted (empty for no parameters).
fn label_params(params: &toml::Table) -> String {
    if params.is_empty() {
        return String::new();
    }
    let mut kv: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    kv.sort();
    format!("({})", kv.join(","))
}

/// The action of `pi` at the uniform `u`: the first `a` whose cumulative probability exceeds
/// `u` (the last action of positive probability when rounding leaves `u` above the total).
fn draw(pi: &[f64], u: f64) -> usize {
    let mut c = 0.0;
    let mut last = 0;
    for (a, p) in pi.iter().enumerate() {
        if *p > 0.0 {
            c += p;
            last = a;
            if u < c {
                return a;
            }
        }
    }
    last
}

#[cfg(test)]
mod tests;
