//! Simulated trials with delayed outcomes (`[trial]` in an experiment file): patients arrive
//! over days, each outcome comes a random delay after enrolment or never (dropout), and the
//! policy is driven through the core [`Session`] (as the decision service drives it) in
//! simulated time, under one of the strategies of `docs/service.md`, "Delayed and missing
//! outcomes":
//!
//! * `none`: no delay and no dropout (the baseline: every outcome is in before the next patient);
//! * `wait`: at a commitment boundary enrolment waits until the outcomes are in; a dropout is
//!   reported as `dropout_reward` at the end of its follow-up (a dropout recorded as an outcome
//!   value);
//! * `deadline`: strategy (a): an outcome not in `deadline` days after enrolment (late, or a
//!   dropout) is abandoned then, recording `dropout_reward`;
//! * `pipeline`: strategy (b) ([`WhilePending::Pipeline`], episodic kinds only); dropouts as in
//!   `wait`.
//!
//! Each run records the cumulative pseudo-regret over patients on the checkpoint grid (the
//! horizon is the number of patients), then [`METRICS`]: the mean and the largest enrolment
//! wait of a patient (days from arrival to decision), the trial's duration (days until the last
//! outcome is in), the dropouts and the abandoned outcomes.
//!
//! # Streams
//! Arrivals, delays and dropouts come from [`rng::trial_arrival_rng`], [`rng::trial_delay_rng`]
//! and [`rng::trial_dropout_rng`] of the run (one draw per patient, in arrival order, whatever
//! the strategy or the policy: common random numbers); rewards from the run's environment
//! ([`rng::ENV_RUN`], per-arm streams, drawn at enrolment) and the policy from its label's seed
//! ([`rng::POLICY_RUN`]), as a plain finite-armed cell. So `none` decides exactly as the plain
//! run loop in `simulation = "steps"` (a test checks it).

use crate::error::{Error, Result};
use crate::finite::EnvConfig;
use crate::privacy::PrivacyGuarantee;
use crate::rng;
use crate::session::{Next, Problem, Session, WhilePending};
use crate::sim::{Cell, CheckpointGrid};
use rand::RngExt;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// The values a run writes after its regret curve.
pub const METRICS: [&str; 5] = [
    "wait_mean_days",
    "wait_max_days",
    "duration_days",
    "dropouts",
    "abandoned",
];

/// How patients arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Patient `i` arrives on day `i / per_day`.
    #[default]
    Deterministic,
    /// A Poisson process of rate `per_day` (exponential gaps).
    Poisson,
}

/// The delay from enrolment to outcome, in days.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Delay {
    /// Always `days`.
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

/// The `[trial]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialSpec {
    /// Patients per day (> 0).
    pub per_day: f64,
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
    /// Days after enrolment at which the `deadline` strategy abandons an outcome.
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
                Err(Error::param(field, x, "days, a finite number >= 0"))
            }
        };
        pos("trial.per_day", self.per_day)?;
        match self.delay {
            Delay::Fixed { days } => nonneg("trial.delay.days", days)?,
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
                "days after enrolment, a number > 0 (the \"deadline\" strategy needs it)",
            ));
        }
        Ok(())
    }

    fn delay(&self, rng: &mut rng::SimRng) -> f64 {
        let u: f64 = rng.random();
        match self.delay {
            Delay::Fixed { days } => days,
            Delay::Uniform { low, high } => low + (high - low) * u,
            Delay::Exponential { mean } => -mean * (1.0 - u).ln(),
        }
    }
}

/// One policy under one strategy.
#[derive(Debug)]
pub struct TrialCell {
    env: Arc<dyn EnvConfig>,
    kind: &'static str,
    params: Vec<(&'static str, f64)>,
    guarantee: PrivacyGuarantee,
    table: toml::Table,
    policy_label: String,
    strategy: Strategy,
    trial: Arc<TrialSpec>,
    grid: Arc<CheckpointGrid>,
    master_seed: u64,
}

impl TrialCell {
    /// The cell of a policy (`kind`, its parameter `table`, its configuration's `label`,
    /// `params` and `guarantee`) under `strategy`.
    ///
    /// # Errors
    /// The policy's session cannot be built, or cannot pipeline under `pipeline` (naming
    /// `while_pending`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        env: Arc<dyn EnvConfig>,
        kind: &'static str,
        cfg: &dyn crate::finite::PolicyConfig,
        table: toml::Table,
        strategy: Strategy,
        trial: Arc<TrialSpec>,
        grid: Arc<CheckpointGrid>,
        master_seed: u64,
    ) -> Result<Self> {
        let cell = TrialCell {
            kind,
            params: cfg.params(),
            guarantee: cfg.guarantee(),
            policy_label: cfg.label(),
            env,
            table,
            strategy,
            trial,
            grid,
            master_seed,
        };
        cell.session(0)?;
        Ok(cell)
    }

    /// The strategy.
    pub fn strategy(&self) -> &'static str {
        self.strategy.name()
    }

    /// The policy's label (without the strategy).
    pub fn policy_label(&self) -> &str {
        &self.policy_label
    }

    fn session(&self, run: u64) -> Result<Session> {
        let seed = rng::policy_seed(self.master_seed, &self.policy_label, run);
        let mut s = Session::new(
            self.kind,
            self.table.clone(),
            &Problem::Finite {
                arms: self.env.num_arms(),
            },
            seed,
        )?;
        if self.strategy == Strategy::Pipeline {
            s.set_while_pending(WhilePending::Pipeline)?;
        }
        Ok(s)
    }
}

/// Order of outcome events: time (non-negative, so its bits order as the number), then the
/// decision.
type Event = Reverse<(u64, u64)>;

impl Cell for TrialCell {
    fn label(&self) -> String {
        format!("{} [{}]", self.policy_label, self.strategy.name())
    }
    fn kind(&self) -> &'static str {
        self.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        self.params.clone()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.guarantee.clone()
    }
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "simulation_path": "a simulated trial through the core session (experiment/trial.rs)",
            "strategy": self.strategy.name(),
            "metrics_after_the_regret_curve": METRICS,
        })
    }
    fn width(&self) -> usize {
        self.grid.points().len() + METRICS.len()
    }
    fn run(&self, run: u64, out: &mut [f64]) -> Result<()> {
        let t = &*self.trial;
        let n = self.grid.horizon();
        let cps = self.grid.points();
        let mut env = self.env.build(rng::env_run_seed(self.master_seed, run))?;
        let mut s = self.session(run)?;
        let (mut arrivals, mut delays, mut coins) = (
            rng::trial_arrival_rng(self.master_seed, run),
            rng::trial_delay_rng(self.master_seed, run),
            rng::trial_dropout_rng(self.master_seed, run),
        );
        let mut events: BinaryHeap<Event> = BinaryHeap::new();
        let mut values = vec![0.0f64; n as usize];
        let apply = |s: &mut Session, values: &[f64], (time, i): (u64, u64)| -> Result<f64> {
            s.observe_decision(i, values[i as usize])?;
            Ok(f64::from_bits(time))
        };
        let (mut arrival, mut clock, mut last) = (0.0f64, 0.0f64, 0.0f64);
        let (mut regret, mut ci) = (0.0f64, 0usize);
        let (mut wait_sum, mut wait_max, mut dropouts, mut abandoned) =
            (0.0f64, 0.0f64, 0u64, 0u64);
        for i in 0..n {
            // Draws of patient i, whatever the strategy (common random numbers).
            if i > 0 {
                arrival += match t.arrivals {
                    Arrivals::Deterministic => 0.0,
                    Arrivals::Poisson => {
                        let u: f64 = arrivals.random();
                        -(1.0 - u).ln() / t.per_day
                    }
                };
            }
            let arrived = match t.arrivals {
                Arrivals::Deterministic => i as f64 / t.per_day,
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
            let arm = s
                .decide()?
                .arm()
                .ok_or_else(|| Error::Protocol("a finite session plays".into()))?;
            regret += env.regret(arm, i, 1);
            while ci < cps.len() && cps[ci] <= i + 1 {
                out[ci] = regret;
                ci += 1;
            }
            let reward = env.pull(arm, i);
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
            values[i as usize] = value;
            if self.strategy == Strategy::None {
                s.observe_decision(i, value)?;
                last = last.max(now);
            } else {
                events.push(Reverse((at.to_bits(), i)));
            }
        }
        while let Some(Reverse(e)) = events.pop() {
            last = last.max(apply(&mut s, &values, e)?);
        }
        let g = cps.len();
        out[g..].copy_from_slice(&[
            wait_sum / n as f64,
            wait_max,
            last,
            dropouts as f64,
            abandoned as f64,
        ]);
        Ok(())
    }
}

/// `trial.csv` and the figures `trial.{svg,png}` (regret after the last patient per strategy)
/// and `trial_duration.{svg,png}` (the trial's duration per strategy), a curve per policy
/// through the strategies in file order, of a plan with `[trial]`.
pub(super) fn write(
    plan: &super::Plan,
    outcome: &super::Outcome,
    roles: &[super::plot::Role],
    dir: &std::path::Path,
) -> Result<Vec<std::path::PathBuf>> {
    use crate::math::stats::Summary;
    let g = plan.grid.points().len();
    let mut w = csv::Writer::from_writer(vec![]);
    let err = |e: csv::Error| Error::Config(format!("trial.csv: {e}"));
    w.write_record([
        "policy",
        "strategy",
        "runs",
        "regret_mean",
        "regret_sem",
        "wait_mean_days",
        "wait_max_days",
        "duration_days",
        "dropouts",
        "abandoned",
    ])
    .map_err(err)?;
    let mut curves: Vec<super::plot::Series> = vec![];
    let mut durations: Vec<super::plot::Series> = vec![];
    let strategies: Vec<&str> = plan
        .spec
        .trial
        .as_ref()
        .map(|t| t.strategies.iter().map(|s| s.name()).collect())
        .unwrap_or_default();
    for ((c, r), &role) in plan.cells.iter().zip(&outcome.cells).zip(roles) {
        let label = c.label();
        let (policy, strategy) = label
            .rsplit_once(" [")
            .map_or((label.as_str(), ""), |(p, s)| (p, s.trim_end_matches(']')));
        let Ok(runs) = r else {
            continue;
        };
        let col = |j: usize| Summary::of(&mut runs.iter().map(|x| x[j]).collect::<Vec<_>>());
        let regret = col(g - 1);
        let m: Vec<f64> = (0..METRICS.len()).map(|k| col(g + k).mean).collect();
        let mut row = vec![
            policy.to_string(),
            strategy.to_string(),
            runs.len().to_string(),
            format!("{}", regret.mean),
            format!("{}", regret.sem),
        ];
        row.extend(m.iter().map(|x| format!("{x}")));
        w.write_record(&row).map_err(err)?;
        let x = strategies.iter().position(|s| *s == strategy).unwrap_or(0) as f64;
        for (series, y) in [(&mut curves, regret.mean), (&mut durations, m[2])] {
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
    for (stem, what, y_label, series) in [
        (
            "trial",
            format!("regret after {} patients", plan.spec.horizon),
            "regret",
            curves,
        ),
        (
            "trial_duration",
            "the trial's duration (until the last outcome)".to_string(),
            "days",
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
        let e = Plan::from_toml(&text).unwrap_err().to_string();
        assert!(e.contains("while_pending = \"pipeline\""), "{e}");
        let e = ExperimentSpec::from_toml(&FILE.replace("\"wait\",", "\"later\","))
            .unwrap_err()
            .to_string();
        assert!(e.contains("later") && e.contains("pipeline"), "{e}");
    }
}
