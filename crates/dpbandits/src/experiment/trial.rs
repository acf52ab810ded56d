//! Simulated trials with delayed outcomes (`[trial]` in an experiment file of any setting):
//! patients (or a recommender's requests) arrive over time, each outcome comes a random delay
//! after enrolment or never (dropout), and the policy is driven through the core [`Session`] (as
//! the decision service drives it) in simulated time, under one of the strategies of
//! `docs/service.md`, "Delayed and missing outcomes":
//!
//! * `none`: no delay and no dropout (the baseline: every outcome is in before the next patient);
//! * `wait`: at a commitment boundary enrolment waits until the outcomes are in; a dropout is
//!   reported as `dropout_reward` at the end of its follow-up (a dropout recorded as an outcome
//!   value);
//! * `deadline`: strategy (a): an outcome not in `deadline` after enrolment (late, or a
//!   dropout) is abandoned then, recording `dropout_reward`;
//! * `pipeline`: strategy (b) ([`WhilePending::Pipeline`], every kind of every setting, by the
//!   kind's rule); dropouts as in `wait`.
//!
//! Times are in days, or in seconds with `unit = "seconds"` (the rate is then `per_second`;
//! [`Unit`]); the metric names say the unit.
//!
//! Per setting (the horizon is the number of arrivals; BAI: the sample cap):
//! * finite-armed and linear: one decision per arrival ([`Session::decide`]; linear: the arm
//!   vectors of the run's environment), its reward drawn at enrolment from the arm's stream;
//! * contextual: each arrival brings the round's action set from the experiment's contextual
//!   environment (its round `i`, [`crate::contextual::ContextualEnvironment::next_round`]), the
//!   policy decides with [`Session::decide_with`], the reward is the environment's for the
//!   chosen action; the regret is the usual pseudo-regret with the round's means;
//! * BAI: one sample per arrival until the stopping rule fires ([`Decision::Stop`]).
//!
//! Rewards reach the session with [`Session::observe_decision`] when their delay elapses, in
//! any order. Each run of a regret setting records the cumulative pseudo-regret over arrivals
//! on the checkpoint grid, then [`METRICS`]: the mean and the largest enrolment wait of an
//! arrival (from arrival to decision), the trial's duration (until the last outcome is in), the
//! dropouts and the abandoned outcomes. A BAI run records a BAI outcome
//! ([`crate::bai::OUTCOME_FIELDS`]: `tau` is the sample complexity, the decisions issued until
//! the stop including those whose outcomes were still pending; the recommendation, whether it is
//! the best arm, whether the run hit the cap) then the same metrics, its duration being the time
//! of the last outcome observed before the stop was found (outcomes due by one arrival are
//! observed together). A request cut by the cap is not observed; once the cap is reached the
//! outcomes still due come in and the policy is asked once more.
//!
//! # Streams
//! Arrivals, delays and dropouts come from [`rng::trial_arrival_rng`], [`rng::trial_delay_rng`]
//! and [`rng::trial_dropout_rng`] of the run (one draw per arrival, in arrival order, whatever
//! the strategy or the policy: common random numbers); rewards (and contextual action sets)
//! from the run's environment, as the plain cell of the setting draws them (its own streams: [`rng::ENV_RUN`];
//! contextual action sets: [`rng::CONTEXT_RUN`]), and the policy from its
//! label's seed ([`rng::POLICY_RUN`]). So `none` decides exactly as the plain run loop in
//! `simulation = "steps"` (finite-armed) and as the contextual run loop (tests check both). A
//! BAI sample is drawn one at a time (`pull_sum(arm, 1)`), where the BAI run loop draws a
//! request's sum at once: not the same numbers.

use crate::bai::{BaiEnvConfig, BaiEnvironment, BaiOutcome, OUTCOME_FIELDS, OutcomeRow};
use crate::config::BySetting;
use crate::contextual::{ContextualEnvConfig, ContextualEnvironment};
use crate::error::{Error, Result};
use crate::finite::{EnvConfig, Environment};
use crate::linear::LinearEnvConfig;
use crate::privacy::PrivacyGuarantee;
use crate::registry::Restored;
use crate::rng;
use crate::session::{Decision, Next, Problem, Session, WhilePending};
use crate::sim::{Cell, CheckpointGrid};
use rand::RngExt;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// The values a run writes after its regret curve (BAI: after its outcome,
/// [`crate::bai::OUTCOME_FIELDS`]), in a trial in days ([`Unit::Days`]; [`Unit::metrics`]).
pub const METRICS: [&str; 5] = [
    "wait_mean_days",
    "wait_max_days",
    "duration_days",
    "dropouts",
    "abandoned",
];

/// [`METRICS`] in a trial in seconds ([`Unit::Seconds`]).
pub const METRICS_SECONDS: [&str; 5] = [
    "wait_mean_seconds",
    "wait_max_seconds",
    "duration_seconds",
    "dropouts",
    "abandoned",
];

/// The unit of every time of a `[trial]` (the arrival rate, the delays, the deadline) and of
/// its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Days (the default): the arrival rate is `per_day`.
    #[default]
    Days,
    /// Seconds: the arrival rate is `per_second` (a recommender's clicks).
    Seconds,
}

impl Unit {
    /// `"days"` or `"seconds"`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Days => "days",
            Unit::Seconds => "seconds",
        }
    }

    /// The names of the metrics a run writes ([`METRICS`], [`METRICS_SECONDS`]).
    pub fn metrics(self) -> [&'static str; 5] {
        match self {
            Unit::Days => METRICS,
            Unit::Seconds => METRICS_SECONDS,
        }
    }

    /// The length of a day in this unit (a fixed delay is written in days).
    fn day(self) -> f64 {
        match self {
            Unit::Days => 1.0,
            Unit::Seconds => 86_400.0,
        }
    }

    /// What arrives: patients (a trial in days) or arrivals.
    fn arrivals(self) -> &'static str {
        match self {
            Unit::Days => "patients",
            Unit::Seconds => "arrivals",
        }
    }

    fn is_days(&self) -> bool {
        *self == Unit::Days
    }
}

/// How patients arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Patient `i` arrives at time `i / rate`.
    #[default]
    Deterministic,
    /// A Poisson process of the trial's rate (exponential gaps).
    Poisson,
}

/// The delay from enrolment to outcome, in the trial's unit (a fixed delay in days).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Delay {
    /// Always `days` (days whatever the trial's unit: `days * 86400` in a trial in seconds).
    Fixed {
        /// Days.
        days: f64,
    },
    /// Uniform on `[low, high]`.
    Uniform {
        /// Lowest delay.
        low: f64,
        /// Highest delay.
        high: f64,
    },
    /// Exponential of mean `mean`.
    Exponential {
        /// Mean delay.
        mean: f64,
    },
}

/// What to do at a commitment boundary with outcomes pending (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// No delay, no dropout.
    None,
    /// Enrolment waits.
    Wait,
    /// Strategy (a): abandon at the deadline.
    Deadline,
    /// Strategy (b): pipelined commitments.
    Pipeline,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Wait => "wait",
            Strategy::Deadline => "deadline",
            Strategy::Pipeline => "pipeline",
        }
    }
}

fn missing() -> f64 {
    f64::NAN
}

fn is_missing(x: &f64) -> bool {
    x.is_nan()
}

/// The `[trial]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialSpec {
    /// The unit of every time below and of the outputs: `days` (default) or `seconds`.
    #[serde(default, skip_serializing_if = "Unit::is_days")]
    pub unit: Unit,
    /// Patients per day (> 0; a trial in days). NaN when not written.
    #[serde(default = "missing", skip_serializing_if = "is_missing")]
    pub per_day: f64,
    /// Arrivals per second (> 0; a trial in seconds, `unit = "seconds"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_second: Option<f64>,
    /// `deterministic` (default) or `poisson`.
    #[serde(default)]
    pub arrivals: Arrivals,
    /// The outcome delay.
    pub delay: Delay,
    /// Probability that an outcome never comes, in `[0, 1)`.
    #[serde(default)]
    pub dropout: f64,
    /// The reward recorded for a dropout or an abandoned outcome (inside `[0, 1]`).
    #[serde(default)]
    pub dropout_reward: f64,
    /// Time after enrolment (in the trial's unit) at which the `deadline` strategy abandons an
    /// outcome.
    #[serde(default)]
    pub deadline: Option<f64>,
    /// The strategies to compare, each a cell per policy.
    pub strategies: Vec<Strategy>,
}

impl TrialSpec {
    /// Check every value, naming the field.
    ///
    /// # Errors
    /// [`Error::Param`] naming `trial.<field>`, the value and what is allowed.
    pub fn validate(&self) -> Result<()> {
        let unit = self.unit.name();
        let pos = |field: &str, x: f64| {
            if x.is_finite() && x > 0.0 {
                Ok(())
            } else {
                Err(Error::param(field, x, "a finite number > 0"))
            }
        };
        let nonneg = |field: &str, x: f64| {
            if x.is_finite() && x >= 0.0 {
                Ok(())
            } else {
                Err(Error::param(
                    field,
                    x,
                    format!("{unit}, a finite number >= 0"),
                ))
            }
        };
        match (self.unit, self.per_day.is_nan(), self.per_second) {
            (Unit::Days, _, Some(x)) => {
                return Err(Error::param(
                    "trial.per_second",
                    x,
                    "no per_second in a trial in days: write per_day, or unit = \"seconds\"",
                ));
            }
            (Unit::Days, true, None) => {
                return Err(Error::param(
                    "trial.per_day",
                    "(missing)",
                    "patients per day, a finite number > 0",
                ));
            }
            (Unit::Days, false, None) => pos("trial.per_day", self.per_day)?,
            (Unit::Seconds, false, _) => {
                return Err(Error::param(
                    "trial.per_day",
                    self.per_day,
                    "no per_day in a trial in seconds (unit = \"seconds\"): write per_second",
                ));
            }
            (Unit::Seconds, true, None) => {
                return Err(Error::param(
                    "trial.per_second",
                    "(missing)",
                    "arrivals per second, a finite number > 0 (unit = \"seconds\")",
                ));
            }
            (Unit::Seconds, true, Some(x)) => pos("trial.per_second", x)?,
        }
        match self.delay {
            Delay::Fixed { days } => {
                if !(days.is_finite() && days >= 0.0) {
                    return Err(Error::param(
                        "trial.delay.days",
                        days,
                        "days, a finite number >= 0",
                    ));
                }
            }
            Delay::Uniform { low, high } => {
                nonneg("trial.delay.low", low)?;
                nonneg("trial.delay.high", high)?;
                if high < low {
                    return Err(Error::param(
                        "trial.delay.high",
                        high,
                        format!("a delay >= trial.delay.low = {low}"),
                    ));
                }
            }
            Delay::Exponential { mean } => pos("trial.delay.mean", mean)?,
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::param(
                "trial.dropout",
                self.dropout,
                "a probability in [0, 1)",
            ));
        }
        if !(0.0..=1.0).contains(&self.dropout_reward) {
            return Err(Error::param(
                "trial.dropout_reward",
                self.dropout_reward,
                "a reward in [0, 1] (the private kinds' boundary)",
            ));
        }
        if let Some(d) = self.deadline {
            pos("trial.deadline", d)?;
        }
        if self.strategies.is_empty() {
            return Err(Error::param(
                "trial.strategies",
                "[]",
                "a non-empty list of \"none\", \"wait\", \"deadline\", \"pipeline\"",
            ));
        }
        for (i, s) in self.strategies.iter().enumerate() {
            if self.strategies[..i].contains(s) {
                return Err(Error::param(
                    "trial.strategies",
                    format!("\"{}\" twice", s.name()),
                    "each strategy once",
                ));
            }
        }
        if self.strategies.contains(&Strategy::Deadline) && self.deadline.is_none() {
            return Err(Error::param(
                "trial.deadline",
                "(missing)",
                format!(
                    "{unit} after enrolment, a number > 0 (the \"deadline\" strategy needs it)"
                ),
            ));
        }
        Ok(())
    }

    /// Arrivals per unit of time.
    pub(crate) fn rate(&self) -> f64 {
        self.per_second.unwrap_or(self.per_day)
    }

    pub(crate) fn delay(&self, rng: &mut rng::SimRng) -> f64 {
        let u: f64 = rng.random();
        match self.delay {
            Delay::Fixed { days } => days * self.unit.day(),
            Delay::Uniform { low, high } => low + (high - low) * u,
            Delay::Exponential { mean } => -mean * (1.0 - u).ln(),
        }
    }
}

/// The environment of a trial, of the experiment's setting (linear: the arm vectors and rewards
/// of each run; contextual: each arrival brings the round's action set; BAI: the instance).
pub type TrialEnv = BySetting<
    Arc<dyn EnvConfig>,
    Arc<dyn LinearEnvConfig>,
    Arc<dyn ContextualEnvConfig>,
    Arc<dyn BaiEnvConfig>,
>;

/// The policy of a trial cell: a registry kind with its parameter table (one sweep point of a
/// `[[policy]]` table) and what its configuration says of itself.
#[derive(Debug, Clone)]
pub struct TrialPolicy {
    /// The registry kind.
    pub kind: &'static str,
    /// Its parameters (the `[[policy]]` table without `kind`).
    pub table: toml::Table,
    /// The configuration's label (keys the policy's seed, as in the plain cells).
    pub label: String,
    /// The configuration's parameters.
    pub params: Vec<(&'static str, f64)>,
    /// The configuration's guarantee.
    pub guarantee: PrivacyGuarantee,
    /// Facts for the manifest's `details`, merged into the cell's own (BAI: the threshold, as a
    /// [`crate::bai::BaiCell`] writes them); `Null` for none.
    pub facts: serde_json::Value,
}

impl TrialPolicy {
    /// A policy of `kind` described by its configuration (`label`, `params`, `guarantee`,
    /// `facts`); its parameter table is set by the planner, one per sweep point.
    pub fn new(
        kind: &'static str,
        label: String,
        params: Vec<(&'static str, f64)>,
        guarantee: PrivacyGuarantee,
        facts: serde_json::Value,
    ) -> Self {
        TrialPolicy {
            kind,
            table: toml::Table::new(),
            label,
            params,
            guarantee,
            facts,
        }
    }
}

/// One run's environment.
enum RunEnv {
    /// Finite-armed and linear: arms with per-arm streams.
    Arms(Box<dyn Environment>),
    Contextual(Box<dyn ContextualEnvironment>),
    Bai(Box<dyn BaiEnvironment>),
}

/// One arrival's decision.
enum Step {
    /// Played: the round's pseudo-regret and the reward its outcome will bring.
    Play { regret: f64, reward: f64 },
    /// BAI: the stopping rule fired.
    Stop,
}

impl RunEnv {
    /// The decision of arrival `i` (the `i`-th decision) and its reward, drawn now.
    fn step(&mut self, s: &mut Session, i: u64) -> Result<Step> {
        let played = |d: Decision| {
            d.arm()
                .ok_or_else(|| Error::Protocol("the session stopped outside BAI".into()))
        };
        match self {
            RunEnv::Arms(env) => {
                let arm = played(s.decide()?)?;
                let regret = env.regret(arm, i, 1);
                Ok(Step::Play {
                    regret,
                    reward: env.pull(arm, i),
                })
            }
            RunEnv::Contextual(env) => {
                env.next_round(i);
                let arm = played(s.decide_with(&env.actions())?)?;
                let m = *env.means().get(arm).ok_or_else(|| {
                    Error::Protocol(format!("the session chose action {arm} of a smaller set"))
                })?;
                Ok(Step::Play {
                    regret: env.best_mean() - m,
                    reward: env.reward(arm),
                })
            }
            RunEnv::Bai(env) => match s.decide()? {
                Decision::Stop { .. } => Ok(Step::Stop),
                Decision::Play { arm, .. } => Ok(Step::Play {
                    regret: 0.0,
                    reward: env.pull_sum(arm, 1),
                }),
            },
        }
    }
}

/// One policy under one strategy.
#[derive(Debug)]
pub struct TrialCell {
    env: TrialEnv,
    policy: TrialPolicy,
    strategy: Strategy,
    trial: Arc<TrialSpec>,
    grid: Arc<CheckpointGrid>,
    master_seed: u64,
}

impl TrialCell {
    /// The cell of `policy` on `env` under `strategy`; the horizon (the grid's) is the number of
    /// arrivals (BAI: the sample cap).
    ///
    /// # Errors
    /// The policy's session cannot be built (for the environment of run 0), or cannot pipeline
    /// under `pipeline` (naming `while_pending`).
    pub fn new(
        env: TrialEnv,
        policy: TrialPolicy,
        strategy: Strategy,
        trial: Arc<TrialSpec>,
        grid: Arc<CheckpointGrid>,
        master_seed: u64,
    ) -> Result<Self> {
        let cell = TrialCell {
            env,
            policy,
            strategy,
            trial,
            grid,
            master_seed,
        };
        cell.start(0)?;
        Ok(cell)
    }

    /// The strategy.
    pub fn strategy(&self) -> &'static str {
        self.strategy.name()
    }

    /// The policy's label (without the strategy).
    pub fn policy_label(&self) -> &str {
        &self.policy.label
    }

    fn bai(&self) -> bool {
        matches!(self.env, BySetting::Bai(_))
    }

    /// Run `run`'s environment and its policy's session (seed [`rng::policy_seed`] of the
    /// label, environment [`rng::env_run_seed`] as the plain cells of each setting).
    fn start(&self, run: u64) -> Result<(Session, RunEnv)> {
        let (problem, env) = match &self.env {
            BySetting::Finite(e) => (
                Problem::Finite { arms: e.num_arms() },
                RunEnv::Arms(e.build(rng::env_run_seed(self.master_seed, run))?),
            ),
            BySetting::Linear(e) => {
                let (arms, env) = e.build(self.master_seed, run)?;
                (
                    Problem::Linear {
                        arms: arms.iter().map(|a| a.iter().copied().collect()).collect(),
                    },
                    RunEnv::Arms(env),
                )
            }
            BySetting::Contextual(e) => (
                Problem::Contextual {
                    dim: e.dim(),
                    horizon: self.grid.horizon(),
                },
                RunEnv::Contextual(e.build(self.master_seed, run)?),
            ),
            BySetting::Bai(e) => (
                Problem::Bai {
                    arms: e.instance().k(),
                    delta: e.delta(),
                },
                RunEnv::Bai(e.build(rng::env_run_seed(self.master_seed, run))),
            ),
        };
        let seed = rng::policy_seed(self.master_seed, &self.policy.label, run);
        let mut s = Session::new(self.policy.kind, self.policy.table.clone(), &problem, seed)?;
        if self.strategy == Strategy::Pipeline {
            s.set_while_pending(WhilePending::Pipeline)?;
        }
        Ok((s, env))
    }
}

/// Order of outcome events: time (non-negative, so its bits order as the number), then the
/// decision.
type Event = Reverse<(u64, u64)>;

impl Cell for TrialCell {
    fn label(&self) -> String {
        format!("{} [{}]", self.policy.label, self.strategy.name())
    }
    fn kind(&self) -> &'static str {
        self.policy.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        self.policy.params.clone()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.policy.guarantee.clone()
    }
    fn describe(&self) -> serde_json::Value {
        let metrics = self.trial.unit.metrics();
        let mut v = if self.bai() {
            serde_json::json!({
                "simulation_path": "a simulated trial through the core session (experiment/trial.rs): one sample per arrival, drawn at the decision; tau counts the decisions issued until the stop (pending ones included); a request cut by the sample cap is not observed",
                "strategy": self.strategy.name(),
                "metrics_after_the_outcome": metrics,
            })
        } else {
            serde_json::json!({
                "simulation_path": "a simulated trial through the core session (experiment/trial.rs)",
                "strategy": self.strategy.name(),
                "metrics_after_the_regret_curve": metrics,
            })
        };
        if let serde_json::Value::Object(facts) = &self.policy.facts {
            for (key, x) in facts {
                v[key] = x.clone();
            }
        }
        v
    }
    fn width(&self) -> usize {
        let head = if self.bai() {
            OUTCOME_FIELDS.len()
        } else {
            self.grid.points().len()
        };
        head + METRICS.len()
    }
    fn run(&self, run: u64, out: &mut [f64]) -> Result<()> {
        let t = &*self.trial;
        let n = self.grid.horizon();
        let cps = self.grid.points();
        let bai = self.bai();
        let (mut s, mut env) = self.start(run)?;
        let (mut arrivals, mut delays, mut coins) = (
            rng::trial_arrival_rng(self.master_seed, run),
            rng::trial_delay_rng(self.master_seed, run),
            rng::trial_dropout_rng(self.master_seed, run),
        );
        let rate = t.rate();
        let mut events: BinaryHeap<Event> = BinaryHeap::new();
        // The value each decision's outcome brings, by decision number.
        let mut values: Vec<f64> = Vec::with_capacity(n.min(1 << 20) as usize);
        let apply = |s: &mut Session, values: &[f64], (time, i): (u64, u64)| -> Result<f64> {
            s.observe_decision(i, values[i as usize])?;
            Ok(f64::from_bits(time))
        };
        let (mut arrival, mut clock, mut last) = (0.0f64, 0.0f64, 0.0f64);
        let (mut regret, mut ci) = (0.0f64, 0usize);
        let (mut wait_sum, mut wait_max, mut dropouts, mut abandoned) =
            (0.0f64, 0.0f64, 0u64, 0u64);
        let mut stopped = false;
        for i in 0..n {
            // Draws of patient i, whatever the strategy (common random numbers).
            if i > 0 {
                arrival += match t.arrivals {
                    Arrivals::Deterministic => 0.0,
                    Arrivals::Poisson => {
                        let u: f64 = arrivals.random();
                        -(1.0 - u).ln() / rate
                    }
                };
            }
            let arrived = match t.arrivals {
                Arrivals::Deterministic => i as f64 / rate,
                Arrivals::Poisson => arrival,
            };
            let delay = t.delay(&mut delays);
            let u: f64 = coins.random();
            let dropout = u < t.dropout;
            // Enrolment: in arrival order, once the outcomes due by then are in, and (at a
            // commitment boundary) once the session can decide.
            let mut now = arrived.max(clock);
            while let Some(&Reverse(e)) = events.peek()
                && f64::from_bits(e.0) <= now
            {
                events.pop();
                last = last.max(apply(&mut s, &values, e)?);
            }
            while let Next::Reward { .. } = s.next() {
                let Some(Reverse(e)) = events.pop() else {
                    return Err(Error::Protocol(
                        "a commitment waits for rewards that no event will bring".into(),
                    ));
                };
                now = now.max(apply(&mut s, &values, e)?);
                last = last.max(now);
            }
            let (round_regret, reward) = match env.step(&mut s, i)? {
                Step::Play { regret, reward } => (regret, reward),
                Step::Stop => {
                    stopped = true;
                    break;
                }
            };
            if !bai {
                regret += round_regret;
                while ci < cps.len() && cps[ci] <= i + 1 {
                    out[ci] = regret;
                    ci += 1;
                }
            }
            let wait = now - arrived;
            wait_sum += wait;
            wait_max = wait_max.max(wait);
            clock = now;
            let (at, value) = match self.strategy {
                Strategy::None => (now, reward),
                Strategy::Wait | Strategy::Pipeline => {
                    dropouts += u64::from(dropout);
                    (now + delay, if dropout { t.dropout_reward } else { reward })
                }
                Strategy::Deadline => {
                    dropouts += u64::from(dropout);
                    let deadline = t.deadline.expect("validated");
                    if dropout || delay > deadline {
                        abandoned += 1;
                        (now + deadline, t.dropout_reward)
                    } else {
                        (now + delay, reward)
                    }
                }
            };
            values.push(value);
            if self.strategy == Strategy::None {
                s.observe_decision(i, value)?;
                last = last.max(now);
            } else {
                events.push(Reverse((at.to_bits(), i)));
            }
        }
        // Decisions made: every arrival's, or (BAI) those issued until the stop.
        let decided = values.len() as u64;
        let head = if bai {
            // The trial ends at the stop (its duration: the last outcome observed before it);
            // at the cap, the outcomes still due come in and the policy is asked once more.
            let capped = !stopped && {
                while let Some(Reverse(e)) = events.pop() {
                    last = last.max(apply(&mut s, &values, e)?);
                }
                !matches!(s.decide()?, Decision::Stop { .. })
            };
            let (RunEnv::Bai(e), Restored::Bai(p)) = (&env, s.policy()) else {
                unreachable!("a BAI cell runs a BAI session on a BAI environment")
            };
            let recommendation = s.recommendation().expect("a BAI session recommends");
            let row = OutcomeRow::of(&BaiOutcome {
                tau: decided,
                recommendation,
                correct: recommendation == e.best_arm(),
                capped,
                noise_draws: p.noise_draws(),
                pulls: vec![],
                releases: vec![],
            });
            out[..row.len()].copy_from_slice(&row);
            OUTCOME_FIELDS.len()
        } else {
            while let Some(Reverse(e)) = events.pop() {
                last = last.max(apply(&mut s, &values, e)?);
            }
            cps.len()
        };
        out[head..].copy_from_slice(&[
            wait_sum / decided.max(1) as f64,
            wait_max,
            last,
            dropouts as f64,
            abandoned as f64,
        ]);
        Ok(())
    }
}

/// `trial.csv` and the figures `trial.{svg,png}` (regret after the last arrival, BAI: the mean
/// sample complexity, per strategy) and `trial_duration.{svg,png}` (the trial's duration per
/// strategy), a curve per policy through the strategies in file order, of a plan with `[trial]`.
/// BAI rows add the sample complexity's quantiles, the capped runs and the error rate, from
/// the BAI summary's rows ([`super::bai::rows`]).
pub(super) fn write(
    plan: &super::Plan,
    outcome: &super::Outcome,
    roles: &[super::plot::Role],
    dir: &std::path::Path,
) -> Result<Vec<std::path::PathBuf>> {
    use crate::math::stats::Summary;
    let Some(trial) = plan.spec.trial.as_ref() else {
        return Ok(vec![]);
    };
    let unit = trial.unit;
    let bai = plan.setting == crate::config::Setting::Bai;
    let head = if bai {
        OUTCOME_FIELDS.len()
    } else {
        plan.grid.points().len()
    };
    let bai_rows = if bai {
        super::bai::rows(plan, outcome)
    } else {
        vec![]
    };
    let mut w = csv::Writer::from_writer(vec![]);
    let err = |e: csv::Error| Error::Config(format!("trial.csv: {e}"));
    let mut columns = if bai {
        vec![
            "policy",
            "strategy",
            "runs",
            "sample_complexity_mean",
            "sample_complexity_sem",
            "sample_complexity_q05",
            "sample_complexity_q50",
            "sample_complexity_q95",
            "capped",
            "errors",
            "error_rate",
        ]
    } else {
        vec!["policy", "strategy", "runs", "regret_mean", "regret_sem"]
    };
    columns.extend(unit.metrics());
    w.write_record(&columns).map_err(err)?;
    let mut curves: Vec<super::plot::Series> = vec![];
    let mut durations: Vec<super::plot::Series> = vec![];
    let strategies: Vec<&str> = trial.strategies.iter().map(|s| s.name()).collect();
    for (k, ((c, r), &role)) in plan.cells.iter().zip(&outcome.cells).zip(roles).enumerate() {
        let label = c.label();
        let (policy, strategy) = label
            .rsplit_once(" [")
            .map_or((label.as_str(), ""), |(p, s)| (p, s.trim_end_matches(']')));
        let Ok(runs) = r else {
            continue;
        };
        let col = |j: usize| Summary::of(&mut runs.iter().map(|x| x[j]).collect::<Vec<_>>());
        let m: Vec<f64> = (0..METRICS.len()).map(|k| col(head + k).mean).collect();
        let mut row = vec![
            policy.to_string(),
            strategy.to_string(),
            runs.len().to_string(),
        ];
        let y = if bai {
            let Some(Ok(b)) = bai_rows.get(k) else {
                continue;
            };
            row.extend(
                [b.tau.mean, b.tau.sem, b.tau.q05, b.tau.q50, b.tau.q95]
                    .iter()
                    .map(|x| format!("{x}")),
            );
            row.extend([
                b.capped.to_string(),
                b.errors.to_string(),
                format!("{}", b.error_rate),
            ]);
            b.tau.mean
        } else {
            let regret = col(head - 1);
            row.extend([format!("{}", regret.mean), format!("{}", regret.sem)]);
            regret.mean
        };
        row.extend(m.iter().map(|x| format!("{x}")));
        w.write_record(&row).map_err(err)?;
        let x = strategies.iter().position(|s| *s == strategy).unwrap_or(0) as f64;
        for (series, y) in [(&mut curves, y), (&mut durations, m[2])] {
            match series.last_mut() {
                Some(s) if s.name == policy => s.points.push((x, y)),
                _ => series.push(super::plot::Series {
                    name: policy.to_string(),
                    points: vec![(x, y)],
                    band: None,
                    role,
                }),
            }
        }
    }
    let p = dir.join("trial.csv");
    let bytes = w.into_inner().map_err(|e| Error::Config(e.to_string()))?;
    std::fs::write(&p, bytes).map_err(|e| Error::Io {
        path: p.display().to_string(),
        error: e,
    })?;
    let axis = strategies
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{i} {s}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut files = vec![p];
    let (what, y_label) = if bai {
        (
            format!(
                "mean sample complexity (decisions until the stop; cap {})",
                plan.spec.horizon
            ),
            "samples",
        )
    } else {
        (
            format!("regret after {} {}", plan.spec.horizon, unit.arrivals()),
            "regret",
        )
    };
    for (stem, what, y_label, series) in [
        ("trial", what, y_label, curves),
        (
            "trial_duration",
            format!(
                "the trial's duration (until the {})",
                if bai { "stop" } else { "last outcome" }
            ),
            unit.name(),
            durations,
        ),
    ] {
        let spec = super::plot::PlotSpec {
            title: format!(
                "{}: {what} per strategy ({} runs)",
                plan.spec.name, plan.spec.runs
            ),
            x_label: format!("strategy ({axis})"),
            y_label: y_label.into(),
            series,
            notes: super::outcome::notes(plan, None),
            ..Default::default()
        };
        files.extend(super::plot::draw(&dir.join(stem), &spec)?);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{ExperimentSpec, Plan};

    const FILE: &str = include_str!("../../../../experiments/trial_delays.toml");

    /// `experiments/trial_delays.toml` at reduced scale (60 patients, 6 runs).
    fn spec(f: impl FnOnce(&mut TrialSpec)) -> ExperimentSpec {
        let mut s = ExperimentSpec::from_toml(FILE).unwrap();
        s.horizon = 60;
        s.runs = 6;
        f(s.trial.as_mut().unwrap());
        s
    }

    fn rows(plan: &Plan, cell: usize) -> Vec<Vec<f64>> {
        let c = &plan.cells[cell];
        (0..plan.spec.runs)
            .map(|r| {
                let mut out = vec![0.0; c.width()];
                c.run(r, &mut out).unwrap();
                out
            })
            .collect()
    }

    /// The experiment file runs at reduced scale, and its strategies behave as documented:
    /// `none` decides exactly as the plain run loop (`simulation = "steps"`, same seeds) and
    /// never waits; with outcomes all in after a fixed delay and no dropouts, `wait` has the same
    /// regret as `none` run by run (waiting costs time, not decisions) and a positive wait;
    /// `pipeline` never waits and ends sooner than `wait`; `deadline` abandons the late outcomes.
    #[test]
    fn the_trial_file_runs_and_its_strategies_behave() {
        let plan = Plan::new(spec(|_| {})).unwrap();
        assert_eq!(plan.cells.len(), 3 * 4);
        let g = plan.grid.points().len();
        for p in 0..3 {
            let cell = |s: usize| rows(&plan, 4 * p + s);
            let (none, wait, deadline, pipeline) = (cell(0), cell(1), cell(2), cell(3));
            for r in 0..6 {
                assert_eq!(none[r][g..g + 2], [0.0, 0.0], "none never waits");
                assert!(wait[r][g] > 0.0, "wait waits");
                assert_eq!(pipeline[r][g + 1], 0.0, "pipeline never waits");
                assert!(pipeline[r][g + 2] < wait[r][g + 2], "pipeline ends sooner");
                assert!(
                    deadline[r][g + 4] >= deadline[r][g + 3],
                    "dropouts are abandoned"
                );
                assert!(deadline[r][g + 1] <= wait[r][g + 1]);
            }
        }
        // `none` is the plain run loop, step by step.
        let mut plain = spec(|_| {});
        plain.trial = None;
        plain.simulation = crate::sim::SimMode::Steps;
        let plain = Plan::new(plain).unwrap();
        for p in 0..3 {
            assert_eq!(
                plain.cells[p].label() + " [none]",
                plan.cells[4 * p].label()
            );
            let a = rows(&plan, 4 * p);
            let b = rows(&plain, p);
            for r in 0..6 {
                assert_eq!(a[r][..g], b[r][..], "{}", plain.cells[p].label());
            }
        }
        // Fixed delay, no dropout: `wait` decides as `none`.
        let fixed = Plan::new(spec(|t| {
            t.dropout = 0.0;
            t.delay = Delay::Fixed { days: 30.0 };
        }))
        .unwrap();
        for p in 0..3 {
            let (none, wait) = (rows(&fixed, 4 * p), rows(&fixed, 4 * p + 1));
            for r in 0..6 {
                assert_eq!(none[r][..g], wait[r][..g]);
                assert_eq!(wait[r][g + 3], 0.0);
            }
        }
    }

    /// Bad `[trial]` values are refused naming the field, the value and what is allowed.
    #[test]
    fn bad_trial_values_name_the_field() {
        for (f, field) in [
            (
                Box::new(|t: &mut TrialSpec| t.per_day = 0.0) as Box<dyn Fn(&mut TrialSpec)>,
                "trial.per_day = 0",
            ),
            (Box::new(|t| t.dropout = 1.0), "trial.dropout = 1"),
            (
                Box::new(|t| t.dropout_reward = 2.0),
                "trial.dropout_reward = 2",
            ),
            (
                Box::new(|t| t.deadline = None),
                "trial.deadline = (missing)",
            ),
            (
                Box::new(|t| {
                    t.delay = Delay::Uniform {
                        low: 5.0,
                        high: 1.0,
                    }
                }),
                "trial.delay.high = 1",
            ),
            (
                Box::new(|t| t.delay = Delay::Exponential { mean: -1.0 }),
                "trial.delay.mean = -1",
            ),
            (Box::new(|t| t.strategies.clear()), "trial.strategies = []"),
        ] {
            let e = Plan::new(spec(f)).unwrap_err().to_string();
            assert!(e.starts_with(field), "{e}");
        }
        let text = FILE.replace(
            "kind = \"adac_ucb\"\nrho = 1.0",
            "kind = \"dp_ts\"\nepsilon = 1.0",
        );
        // The core session pipelines every kind of every setting: a per-step kind plans too.
        let plan = Plan::from_toml(&text).unwrap();
        assert!(
            plan.cells
                .iter()
                .any(|c| c.label() == "dp_ts(epsilon=1) [pipeline]")
        );
        let e = ExperimentSpec::from_toml(&FILE.replace("\"wait\",", "\"later\","))
            .unwrap_err()
            .to_string();
        assert!(e.contains("later") && e.contains("pipeline"), "{e}");
    }

    const RECOMMENDER: &str = include_str!("../../../../experiments/recommender_delays.toml");
    const BAI: &str = include_str!("../../../../experiments/bai_delays.toml");

    /// Every strategy (the core session pipelines every kind of every setting).
    const EVERY: [Strategy; 4] = [
        Strategy::None,
        Strategy::Wait,
        Strategy::Deadline,
        Strategy::Pipeline,
    ];

    /// `text` at reduced scale, with `strategies`.
    fn small(text: &str, horizon: u64, runs: u64, f: impl FnOnce(&mut TrialSpec)) -> Plan {
        let mut s = ExperimentSpec::from_toml(text).unwrap();
        s.horizon = horizon;
        s.runs = runs;
        f(s.trial.as_mut().unwrap());
        Plan::new(s).unwrap()
    }

    /// `trial.csv` of a plan run in a scratch folder, as lines of fields.
    fn trial_csv(plan: &Plan, name: &str) -> Vec<Vec<String>> {
        let dir = std::env::temp_dir().join(format!("dpb_trial_{name}_{}", std::process::id()));
        let outcome = crate::experiment::run(plan, &|| {});
        crate::experiment::write_outputs(plan, &outcome, &dir).unwrap();
        let text = std::fs::read_to_string(dir.join("trial.csv")).unwrap();
        assert!(dir.join("summary.csv").exists() && dir.join("trial.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
        let mut r = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.as_bytes());
        r.records()
            .map(|l| l.unwrap().iter().map(str::to_string).collect())
            .collect()
    }

    /// `experiments/recommender_delays.toml` at 300 requests (its quick look): the contextual
    /// policies decide through `Session::decide_with`; `none` is the plain contextual run loop
    /// (same streams, same numbers); with every click in after a fixed delay, `wait` (each
    /// request waits for the previous click) decides as `none` and waits; `pipeline` never
    /// waits, ends sooner than `wait` and decides otherwise (on fewer clicks); the outputs are
    /// named in seconds.
    #[test]
    fn the_recommender_file_runs_and_none_is_the_plain_run_loop() {
        let plan = small(RECOMMENDER, 300, 2, |t| {
            t.strategies = EVERY.to_vec();
            t.deadline = Some(90.0);
        });
        assert_eq!(plan.setting, crate::config::Setting::Contextual);
        let (g, k) = (plan.grid.points().len(), EVERY.len());
        assert_eq!(plan.cells.len(), 2 * k);
        let mut plain = ExperimentSpec::from_toml(RECOMMENDER).unwrap();
        (plain.horizon, plain.runs, plain.trial) = (300, 2, None);
        let plain = Plan::new(plain).unwrap();
        for p in 0..2 {
            assert_eq!(
                plain.cells[p].label() + " [none]",
                plan.cells[k * p].label()
            );
            let (none, plain) = (rows(&plan, k * p), rows(&plain, p));
            let (wait, deadline) = (rows(&plan, k * p + 1), rows(&plan, k * p + 2));
            let pipeline = rows(&plan, k * p + 3);
            for r in 0..2 {
                assert_eq!(pipeline[r][g + 1], 0.0, "pipeline never waits");
                assert!(pipeline[r][g + 2] < wait[r][g + 2], "pipeline ends sooner");
                assert_ne!(
                    pipeline[r][..g],
                    none[r][..g],
                    "pipeline decides on fewer clicks"
                );
                assert_eq!(none[r][..g], plain[r][..], "{}", plan.cells[k * p].label());
                assert!(none[r][g - 1] > 0.0);
                assert_eq!(none[r][g..g + 2], [0.0, 0.0], "none never waits");
                // Exponential delays of mean 60 s: some clicks come after the 90 s deadline.
                assert!(deadline[r][g + 4] > 0.0, "abandoned clicks");
                assert!(
                    deadline[r][g + 1] <= wait[r][g + 1],
                    "the deadline shortens waits"
                );
            }
        }
        let fixed = small(RECOMMENDER, 300, 2, |t| {
            t.strategies = vec![Strategy::None, Strategy::Wait];
            t.delay = Delay::Fixed { days: 1e-4 };
        });
        for p in 0..2 {
            let (none, wait) = (rows(&fixed, 2 * p), rows(&fixed, 2 * p + 1));
            for r in 0..2 {
                assert_eq!(none[r][..g], wait[r][..g]);
                assert!(wait[r][g] > 0.0 && wait[r][g + 2] > none[r][g + 2]);
            }
        }
        let csv = trial_csv(&fixed, "recommender");
        assert_eq!(csv[0][3..5], ["regret_mean", "regret_sem"]);
        assert_eq!(csv[0][5..], METRICS_SECONDS);
        assert_eq!(csv.len(), 1 + 4);
    }

    /// A linear experiment with a `[trial]` (a smoke file's arm set and GOPE-family policies):
    /// every strategy runs for every policy; `none` decides as the plain linear run loop in
    /// steps; with every outcome in after a fixed delay, `wait` decides as `none` (waiting costs
    /// time, not decisions) and waits; `pipeline` never waits and ends no later than `wait`.
    #[test]
    fn a_linear_trial_runs_and_its_strategies_behave() {
        const LINEAR: &str = r#"
name = "linear-trial"
master_seed = 7
horizon = 400
runs = 2
simulation = "steps"
[env]
kind = "linear"
arms = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.6, 0.8, 0.0], [0.5, 0.5, 0.5]]
theta = [0.9, 0.3, -0.2]
sigma = 1.0
[trial]
per_day = 10.0
delay = { kind = "fixed", days = 2.0 }
strategies = ["none", "wait", "pipeline"]
[[policy]]
kind = "adac_gope"
rho = 1.0
[[policy]]
kind = "lin_ucb"
"#;
        let plan = Plan::new(ExperimentSpec::from_toml(LINEAR).unwrap()).unwrap();
        assert_eq!(plan.setting, crate::config::Setting::Linear);
        assert_eq!(plan.cells.len(), 2 * 3);
        let g = plan.grid.points().len();
        let mut plain = ExperimentSpec::from_toml(LINEAR).unwrap();
        plain.trial = None;
        let plain = Plan::new(plain).unwrap();
        for p in 0..2 {
            let (none, wait, pipeline) = (
                rows(&plan, 3 * p),
                rows(&plan, 3 * p + 1),
                rows(&plan, 3 * p + 2),
            );
            let plain = rows(&plain, p);
            for r in 0..2 {
                // The same decisions; the regret summed per step here, per block there.
                let close = none[r][..g]
                    .iter()
                    .zip(&plain[r])
                    .all(|(a, b)| (a - b).abs() <= 1e-9 * (1.0 + b.abs()));
                assert!(
                    close,
                    "{}: {:?} vs {:?}",
                    plan.cells[3 * p].label(),
                    &none[r][..g],
                    plain[r]
                );
                assert!(none[r][g - 1] > 0.0, "some regret");
                assert_eq!(
                    none[r][..g],
                    wait[r][..g],
                    "waiting costs time, not decisions"
                );
                assert!(wait[r][g] > 0.0, "wait waits");
                assert_eq!(pipeline[r][g + 1], 0.0, "pipeline never waits");
                // (GOPE waits only at a few phase boundaries, early: the last patient's outcome
                // then ends both trials at the same day.)
                assert!(
                    pipeline[r][g + 2] <= wait[r][g + 2],
                    "pipeline ends no later: {:?} vs {:?}",
                    &pipeline[r][g..],
                    &wait[r][g..]
                );
                assert!(none[r][g - 1] > 0.0);
            }
        }
    }

    /// `experiments/bai_delays.toml` at reduced scale: every run stops; with outcomes all in
    /// after a fixed delay, `wait` takes exactly the samples and the recommendation of `none`
    /// (the session observes each request once its outcomes are in either way) but lasts
    /// longer; `pipeline` never waits, counts the samples still pending at the stop (at least
    /// the 300 enrolled in the 30 days before it) and ends sooner than `wait`; the rows are BAI outcomes (the BAI summary reads them) and `trial.csv` reports
    /// the sample complexity and the error rate per strategy.
    #[test]
    fn the_bai_trial_file_runs_and_waiting_costs_time_not_samples() {
        let plan = small(BAI, 100_000, 3, |t| {
            t.strategies = vec![Strategy::None, Strategy::Wait, Strategy::Pipeline];
            t.delay = Delay::Fixed { days: 30.0 };
        });
        assert_eq!(plan.setting, crate::config::Setting::Bai);
        assert_eq!(plan.cells.len(), 3 * 3);
        let n = OUTCOME_FIELDS.len();
        for p in 0..3 {
            let (none, wait) = (rows(&plan, 3 * p), rows(&plan, 3 * p + 1));
            let pipeline = rows(&plan, 3 * p + 2);
            for r in 0..3 {
                let (a, b) = (
                    OutcomeRow::from_row(&none[r]),
                    OutcomeRow::from_row(&wait[r]),
                );
                assert!(
                    !a.capped && a.tau > 3.0,
                    "{}: {a:?}",
                    plan.cells[3 * p].label()
                );
                let c = OutcomeRow::from_row(&pipeline[r]);
                assert!(!c.capped && c.tau >= 300.0, "{c:?}");
                assert_eq!(pipeline[r][n + 1], 0.0, "pipeline never waits");
                assert!(pipeline[r][n + 2] < wait[r][n + 2], "pipeline ends sooner");
                assert_eq!((a.tau, a.recommendation), (b.tau, b.recommendation));
                assert_eq!(none[r][n..n + 2], [0.0, 0.0], "none never waits");
                assert!(wait[r][n] > 0.0, "wait waits");
                assert!(wait[r][n + 2] > 30.0 && wait[r][n + 2] > none[r][n + 2]);
                assert!(none[r][n + 2] <= (a.tau - 1.0) / 10.0 + 1e-9);
            }
        }
        let csv = trial_csv(&plan, "bai");
        assert_eq!(csv[0][3], "sample_complexity_mean");
        assert_eq!(csv[0][10], "error_rate");
        assert_eq!(csv[0][11..], METRICS);
        assert_eq!(csv.len(), 1 + 9);
        for row in &csv[1..] {
            let rate: f64 = row[10].parse().unwrap();
            assert!((0.0..=1.0).contains(&rate), "{row:?}");
        }
    }

    /// Bad `[trial]` values of a contextual file are refused naming the field; the unit and
    /// the rate field agree.
    #[test]
    fn bad_trial_values_of_a_contextual_file_name_the_field() {
        for (from, to, field) in [
            (
                "per_second = 100.0",
                "per_second = 0.0",
                "trial.per_second = 0",
            ),
            (
                "per_second = 100.0",
                "per_day = 100.0",
                "trial.per_day = 100",
            ),
            ("per_second = 100.0", "", "trial.per_second = (missing)"),
            ("unit = \"seconds\"\n", "", "trial.per_second = 100"),
            ("mean = 60.0", "mean = -1.0", "trial.delay.mean = -1"),
            (
                "[\"none\", \"pipeline\"]",
                "[\"deadline\"]",
                "trial.deadline = (missing)",
            ),
        ] {
            let text = RECOMMENDER.replace(from, to);
            assert_ne!(text, RECOMMENDER);
            let e = Plan::from_toml(&text).unwrap_err().to_string();
            assert!(e.starts_with(field), "{e}");
        }
        let e = ExperimentSpec::from_toml(&RECOMMENDER.replace("\"seconds\"", "\"hours\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("hours") && e.contains("seconds"), "{e}");
    }
}
