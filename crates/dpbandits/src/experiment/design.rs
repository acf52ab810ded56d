//! `dpbandits design FILE`: the operating characteristics of candidate adaptive-trial designs by
//! simulation (FDA 2019, *Adaptive Designs for Clinical Trials of Drugs and Biologics*: power,
//! error rates, sample size and duration distributions, patients on inferior arms), side by side,
//! for a protocol (docs/trial-design.md).
//!
//! A `[design]` table gives the trial (arms through the scenarios' means, a maximum sample size,
//! accrual per day, the outcome delay and dropout, the risk `delta`), the **scenarios** (null,
//! one clear winner, close arms: each a vector of Bernoulli means) and the **candidates**:
//! * any BAI kind of the registry (`dp_tt`, `adap_tt`, `adap_tt_star`, `dp_se_bai`, and the
//!   non-private Top Two `eb_tci`) with its parameters, run as the decision service would run it:
//!   through the core [`Session`] in pipeline mode (`while_pending = "pipeline"`), one patient a
//!   `1/per_day` day, each outcome `delay` after enrolment (a dropout's recorded as
//!   `dropout_reward`), until the stopping rule fires or `max_patients` are enrolled (then the
//!   outcomes still due come in and the rule is asked once more). This is the `[trial]` pipeline
//!   simulation of `experiment/trial.rs` with the same streams: a test checks it run by run;
//! * `kind = "fixed"`: fixed equal randomisation (patient `i` gets arm `i mod K`) to
//!   `max_patients`, then a final private comparison: each arm's mean of its outcomes plus one
//!   Laplace draw of scale `1/(epsilon n_a)` (eps-DP: each outcome enters one release), and the
//!   arm with the largest release is declared best when it beats every other arm by
//!   `z sqrt(v_a + v_b)`, `v = 1/(4n) + 2/(epsilon n)^2`, `z = Phi^-1(1 - delta/(K(K-1)))`
//!   (Bonferroni over ordered pairs: under the null the probability of declaring any arm is at
//!   most about `delta`, the normal approximation).
//!
//! Per cell (candidate x scenario), over `runs` runs: the probability of selecting the best arm
//! (a declared selection that is the best arm; scenarios with a unique best), the error rate
//! (null: the probability of declaring any arm; otherwise of declaring another arm), the
//! probability of a conclusive trial, the sample size's mean and 5/50/95% quantiles (type 7), the
//! duration (days until the stop, or until the last outcome is in), the patients given an
//! inferior arm (mean), the privacy budget (the candidate's guarantee; the whole budget is
//! committed whether the trial stops early or not).
//!
//! # Streams
//! Common random numbers across candidates and scenarios: patient `i`'s delay and dropout coin
//! from [`rng::trial_delay_rng`] and [`rng::trial_dropout_rng`] of the run (one draw each per
//! patient, in order), arm `a`'s outcomes from [`rng::arm_rng`] below [`rng::env_run_seed`]
//! (the BAI environment's streams), a candidate's session seeded by [`rng::policy_seed`] of its
//! configuration's label, the fixed design's final release from [`rng::noise_rng`] of that
//! seed. Cells run on up to `threads` threads; the results do not depend on the number.

use crate::error::{Error, Result};
use crate::experiment::trial::{Delay, Strategy, TrialSpec, Unit};
use crate::privacy::Budget;
use crate::rng;
use crate::session::{Decision, Problem, Session, WhilePending};
use rand::RngExt;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

/// A design file: one `[design]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignFile {
    /// The design.
    pub design: DesignSpec,
}

/// The `[design]` table (module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignSpec {
    /// Name (the report's title).
    pub name: String,
    /// Master seed.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulated trials per cell.
    pub runs: u64,
    /// Maximum sample size (patients enrolled).
    pub max_patients: u64,
    /// Patients enrolled per day.
    pub per_day: f64,
    /// The outcome delay (`{ kind = "fixed", days = 30 }`, `uniform`, `exponential`), days.
    pub delay: Delay,
    /// Probability that an outcome never comes.
    #[serde(default)]
    pub dropout: f64,
    /// The outcome recorded for a dropout (imputed).
    #[serde(default)]
    pub dropout_reward: f64,
    /// Risk of the BAI candidates' stopping rules and of the fixed design's final comparison.
    pub delta: f64,
    /// Scenarios (`[[design.scenarios]]`: `name`, `means`).
    pub scenarios: Vec<Scenario>,
    /// Candidates (`[[design.candidates]]`: `name`, `kind`, the kind's parameters).
    pub candidates: Vec<Candidate>,
}

fn default_seed() -> u64 {
    1
}

/// One scenario: Bernoulli means of the arms.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// Means in [0, 1], one per arm.
    pub means: Vec<f64>,
}

impl Scenario {
    /// The unique best arm, if any.
    pub fn best(&self) -> Option<usize> {
        let top = self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let at: Vec<usize> = (0..self.means.len())
            .filter(|&a| self.means[a] == top)
            .collect();
        (at.len() == 1).then(|| at[0])
    }

    /// Whether every arm has the same mean.
    pub fn is_null(&self) -> bool {
        self.means.iter().all(|&m| m == self.means[0])
    }
}

/// One candidate design.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Candidate {
    /// Name (the report's label).
    pub name: String,
    /// A BAI kind of the registry, or `"fixed"`.
    pub kind: String,
    /// The kind's parameters (`fixed`: `epsilon`).
    #[serde(flatten)]
    pub params: toml::Table,
}

impl DesignSpec {
    /// Parse a design file.
    ///
    /// # Errors
    /// TOML errors; every value checked by [`DesignSpec::validate`].
    pub fn from_toml(text: &str) -> Result<DesignSpec> {
        let f: DesignFile = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        f.design.validate()?;
        Ok(f.design)
    }

    /// The `[trial]` these trial parameters are (pipeline strategy, days).
    pub fn trial(&self) -> TrialSpec {
        TrialSpec {
            unit: Unit::Days,
            per_day: self.per_day,
            per_second: None,
            arrivals: Default::default(),
            delay: self.delay,
            dropout: self.dropout,
            dropout_reward: self.dropout_reward,
            deadline: None,
            strategies: vec![Strategy::Pipeline],
        }
    }

    /// Check every value, naming the field.
    ///
    /// # Errors
    /// [`Error::Param`] naming `design.<field>`, the value and what is allowed.
    pub fn validate(&self) -> Result<()> {
        self.trial().validate().map_err(|e| match e {
            Error::Param {
                field,
                value,
                expected,
            } => Error::Param {
                field: field.replacen("trial.", "design.", 1),
                value,
                expected,
            },
            e => e,
        })?;
        if self.runs == 0 || self.runs > 1_000_000 {
            return Err(Error::param(
                "design.runs",
                self.runs,
                "an integer in 1..=1e6",
            ));
        }
        if self.max_patients == 0 || self.max_patients > 10_000_000 {
            return Err(Error::param(
                "design.max_patients",
                self.max_patients,
                "an integer in 1..=1e7",
            ));
        }
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return Err(Error::param("design.delta", self.delta, "a risk in (0, 1)"));
        }
        if self.scenarios.is_empty() {
            return Err(Error::param(
                "design.scenarios",
                "[]",
                "at least one [[design.scenarios]] with name and means",
            ));
        }
        let k = self.scenarios[0].means.len();
        for (i, s) in self.scenarios.iter().enumerate() {
            if s.means.len() != k || k < 2 {
                return Err(Error::param(
                    format!("design.scenarios[{i}].means"),
                    format!("{:?}", s.means),
                    format!(
                        "{} means (every scenario has the same arms, at least 2)",
                        k.max(2)
                    ),
                ));
            }
            if let Some(m) = s.means.iter().find(|m| !(0.0..=1.0).contains(*m)) {
                return Err(Error::param(
                    format!("design.scenarios[{i}].means"),
                    m,
                    "Bernoulli means in [0, 1]",
                ));
            }
        }
        if self.candidates.is_empty() {
            return Err(Error::param(
                "design.candidates",
                "[]",
                "at least one [[design.candidates]] with name and kind",
            ));
        }
        for (i, c) in self.candidates.iter().enumerate() {
            self.prepare(c).map_err(|e| match e {
                Error::Param {
                    field,
                    value,
                    expected,
                } => Error::Param {
                    field: format!("design.candidates[{i}].{field}"),
                    value,
                    expected,
                },
                e => e,
            })?;
        }
        Ok(())
    }

    /// A candidate's label (keys its seed) and privacy budget; checks its kind and parameters.
    fn prepare(&self, c: &Candidate) -> Result<(String, Budget)> {
        let k = self.scenarios[0].means.len();
        if c.kind == "fixed" {
            let eps = fixed_epsilon(c)?;
            let budget = if eps.is_infinite() {
                Budget::NonPrivate
            } else {
                Budget::PureDp { epsilon: eps }
            };
            return Ok((format!("fixed(epsilon={eps})"), budget));
        }
        let entry = crate::registry::policy(&c.kind)?;
        if entry.setting() != crate::config::Setting::Bai {
            return Err(Error::param(
                "kind",
                format!("\"{}\"", c.kind),
                "a BAI kind (dp_tt, adap_tt, adap_tt_star, dp_se_bai, eb_tci) or \"fixed\"",
            ));
        }
        let s = Session::new(
            &c.kind,
            c.params.clone(),
            &Problem::Bai {
                arms: k,
                delta: self.delta,
            },
            0,
        )?;
        let label = s.label().unwrap_or(&c.kind).to_string();
        Ok((label, s.guarantee()?.budget))
    }
}

fn fixed_epsilon(c: &Candidate) -> Result<f64> {
    for key in c.params.keys() {
        if key != "epsilon" {
            return Err(Error::param(
                key.as_str(),
                "(given)",
                "the fixed design takes `epsilon` only",
            ));
        }
    }
    let v = c
        .params
        .get("epsilon")
        .ok_or_else(|| Error::param("epsilon", "(missing)", "epsilon > 0 (inf: non-private)"))?;
    let eps = match v {
        toml::Value::Float(x) => *x,
        toml::Value::Integer(i) => *i as f64,
        other => return Err(Error::param("epsilon", other, "a number > 0")),
    };
    if eps.is_nan() || eps <= 0.0 {
        return Err(Error::param(
            "epsilon",
            eps,
            "a number > 0 (inf: non-private)",
        ));
    }
    Ok(eps)
}

/// One simulated trial.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialRun {
    /// Patients enrolled.
    pub patients: u64,
    /// The declared best arm (`None`: the trial ended without a conclusion).
    pub selected: Option<usize>,
    /// The recommendation (BAI: the rule's current one; fixed: the largest release).
    pub recommendation: usize,
    /// Days until the stop, or until the last outcome is in.
    pub duration: f64,
    /// Patients given an arm with a mean below the best.
    pub inferior: u64,
    /// The run reached `max_patients` without the stopping rule firing (BAI).
    pub capped: bool,
}

/// Simulate run `run` of `candidate` in `scenario`.
///
/// # Errors
/// A session error (an internal error: the design was validated).
pub fn simulate(
    spec: &DesignSpec,
    candidate: &Candidate,
    scenario: &Scenario,
    run: u64,
) -> Result<TrialRun> {
    let (label, _) = spec.prepare(candidate)?;
    let master = spec.seed;
    let k = scenario.means.len();
    let trial = spec.trial();
    let env_seed = rng::env_run_seed(master, run);
    let mut outcomes: Vec<rng::SimRng> = (0..k).map(|a| rng::arm_rng(env_seed, a)).collect();
    let (mut delays, mut coins) = (
        rng::trial_delay_rng(master, run),
        rng::trial_dropout_rng(master, run),
    );
    let top = scenario.means.iter().copied().fold(0.0, f64::max);
    let rate = trial.rate();
    let seed = rng::policy_seed(master, &label, run);
    if candidate.kind == "fixed" {
        let eps = fixed_epsilon(candidate)?;
        let (mut sums, mut n) = (vec![0.0f64; k], vec![0u64; k]);
        let mut last = 0.0f64;
        let mut inferior = 0;
        for i in 0..spec.max_patients {
            let now = i as f64 / rate;
            let delay = trial.delay(&mut delays);
            let u: f64 = coins.random();
            let arm = (i % k as u64) as usize;
            let y = f64::from(u8::from(
                outcomes[arm].random::<f64>() < scenario.means[arm],
            ));
            let value = if u < spec.dropout {
                spec.dropout_reward
            } else {
                y
            };
            sums[arm] += value;
            n[arm] += 1;
            inferior += u64::from(scenario.means[arm] < top);
            last = last.max(now + delay);
        }
        let mut noise = rng::noise_rng(seed);
        let released: Vec<f64> = (0..k)
            .map(|a| {
                let m = sums[a] / n[a].max(1) as f64;
                if eps.is_infinite() {
                    m
                } else {
                    // Laplace(1/(eps n)) by inversion of one uniform.
                    // (u = -0.5 exactly would give ln 0: kept just inside.)
                    let u: f64 = (noise.random::<f64>() - 0.5).max(-0.5 + f64::EPSILON);
                    m - (1.0 / (eps * n[a].max(1) as f64)) * u.signum() * (1.0 - 2.0 * u.abs()).ln()
                }
            })
            .collect();
        let best = crate::finite::argmax(released.iter().copied());
        let var = |a: usize| {
            let n = n[a].max(1) as f64;
            let lap = if eps.is_infinite() {
                0.0
            } else {
                2.0 / (eps * n).powi(2)
            };
            0.25 / n + lap
        };
        let z = crate::math::stats::normal_quantile(1.0 - spec.delta / (k * (k - 1)) as f64);
        let declared = (0..k)
            .filter(|&b| b != best)
            .all(|b| released[best] - released[b] > z * (var(best) + var(b)).sqrt());
        return Ok(TrialRun {
            patients: spec.max_patients,
            selected: declared.then_some(best),
            recommendation: best,
            duration: last,
            inferior,
            capped: false,
        });
    }
    let mut s = Session::new(
        &candidate.kind,
        candidate.params.clone(),
        &Problem::Bai {
            arms: k,
            delta: spec.delta,
        },
        seed,
    )?;
    s.set_while_pending(WhilePending::Pipeline)?;
    let mut events: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut values: Vec<f64> = vec![];
    let (mut last, mut inferior) = (0.0f64, 0u64);
    let mut stopped = false;
    let apply = |s: &mut Session, values: &[f64], (time, i): (u64, u64)| -> Result<f64> {
        s.observe_decision(i, values[i as usize])?;
        Ok(f64::from_bits(time))
    };
    for i in 0..spec.max_patients {
        let delay = trial.delay(&mut delays);
        let u: f64 = coins.random();
        let now = i as f64 / rate;
        while let Some(&Reverse(e)) = events.peek()
            && f64::from_bits(e.0) <= now
        {
            events.pop();
            last = last.max(apply(&mut s, &values, e)?);
        }
        let arm = match s.decide()? {
            Decision::Stop { .. } => {
                stopped = true;
                break;
            }
            Decision::Play { arm, .. } => arm,
        };
        let y = f64::from(u8::from(
            outcomes[arm].random::<f64>() < scenario.means[arm],
        ));
        inferior += u64::from(scenario.means[arm] < top);
        values.push(if u < spec.dropout {
            spec.dropout_reward
        } else {
            y
        });
        events.push(Reverse(((now + delay).to_bits(), i)));
    }
    let patients = values.len() as u64;
    let capped = !stopped && {
        while let Some(Reverse(e)) = events.pop() {
            last = last.max(apply(&mut s, &values, e)?);
        }
        !matches!(s.decide()?, Decision::Stop { .. })
    };
    let recommendation = s.recommendation().unwrap_or(0);
    Ok(TrialRun {
        patients,
        selected: (!capped).then_some(recommendation),
        recommendation,
        duration: last,
        inferior,
        capped,
    })
}

/// One cell's operating characteristics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellSummary {
    /// Candidate name.
    pub design: String,
    /// Its configuration's label.
    pub label: String,
    /// Scenario name.
    pub scenario: String,
    /// `(metric, value)` in a fixed order; a metric that does not apply is absent.
    pub metrics: Vec<(&'static str, f64)>,
    /// The guarantee's budget.
    pub budget: String,
    /// Per run, for the figures: (patients, selected the best arm, declared any arm).
    #[serde(skip)]
    pub runs: Vec<(u64, bool, bool)>,
}

/// Summarise the runs of one cell.
fn summarise(
    spec: &DesignSpec,
    c: &Candidate,
    sc: &Scenario,
    label: String,
    budget: Budget,
    runs: &[TrialRun],
) -> CellSummary {
    let n = runs.len() as f64;
    let frac = |f: &dyn Fn(&TrialRun) -> bool| runs.iter().filter(|r| f(r)).count() as f64 / n;
    let best = sc.best();
    let mut m: Vec<(&'static str, f64)> = vec![("runs", n)];
    if let Some(b) = best {
        m.push(("p_select_best", frac(&|r| r.selected == Some(b))));
    }
    let error = if sc.is_null() || best.is_none() {
        frac(&|r| r.selected.is_some())
    } else {
        frac(&|r| r.selected.is_some_and(|a| Some(a) != best))
    };
    m.push(("error_rate", error));
    m.push(("p_conclusive", frac(&|r| r.selected.is_some())));
    let mut sizes: Vec<f64> = runs.iter().map(|r| r.patients as f64).collect();
    sizes.sort_by(f64::total_cmp);
    let mut days: Vec<f64> = runs.iter().map(|r| r.duration).collect();
    days.sort_by(f64::total_cmp);
    let q = crate::math::stats::quantile_sorted;
    m.push(("sample_size_mean", sizes.iter().sum::<f64>() / n));
    m.push(("sample_size_q05", q(&sizes, 0.05)));
    m.push(("sample_size_q50", q(&sizes, 0.5)));
    m.push(("sample_size_q95", q(&sizes, 0.95)));
    m.push(("duration_days_mean", days.iter().sum::<f64>() / n));
    m.push(("duration_days_q50", q(&days, 0.5)));
    m.push(("duration_days_q95", q(&days, 0.95)));
    m.push((
        "inferior_patients_mean",
        runs.iter().map(|r| r.inferior as f64).sum::<f64>() / n,
    ));
    m.push(("capped_rate", frac(&|r| r.capped)));
    if let Budget::PureDp { epsilon } = budget {
        m.push(("budget_epsilon", epsilon));
    }
    let _ = spec;
    CellSummary {
        design: c.name.clone(),
        label,
        scenario: sc.name.clone(),
        metrics: m,
        budget: budget.to_string(),
        runs: runs
            .iter()
            .map(|r| {
                (
                    r.patients,
                    best.is_some() && r.selected == best,
                    r.selected.is_some(),
                )
            })
            .collect(),
    }
}

/// Run every cell (candidate x scenario, in file order) on up to `threads` threads.
///
/// # Errors
/// A session error of a run.
pub fn run(spec: &DesignSpec, threads: usize) -> Result<Vec<CellSummary>> {
    let cells: Vec<(&Candidate, &Scenario)> = spec
        .candidates
        .iter()
        .flat_map(|c| spec.scenarios.iter().map(move |s| (c, s)))
        .collect();
    let one = |(c, sc): (&Candidate, &Scenario)| -> Result<CellSummary> {
        let (label, budget) = spec.prepare(c)?;
        let runs = (0..spec.runs)
            .map(|r| simulate(spec, c, sc, r))
            .collect::<Result<Vec<_>>>()?;
        Ok(summarise(spec, c, sc, label, budget, &runs))
    };
    let threads = threads.clamp(1, cells.len().max(1));
    let mut out: Vec<Option<Result<CellSummary>>> = (0..cells.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let cells = &cells;
                let one = &one;
                scope.spawn(move || {
                    (t..cells.len())
                        .step_by(threads)
                        .map(|i| (i, one(cells[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (i, r) in h.join().expect("a design worker panicked") {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter()
        .map(|r| r.expect("every cell ran"))
        .collect()
}

/// The tidy CSV: `design,label,scenario,metric,value`, one row per metric.
pub fn csv(summaries: &[CellSummary]) -> String {
    let mut s = String::from("design,label,scenario,metric,value\n");
    for c in summaries {
        for (metric, v) in &c.metrics {
            s.push_str(&format!(
                "{},{},{},{metric},{v}\n",
                quote(&c.design),
                quote(&c.label),
                quote(&c.scenario)
            ));
        }
    }
    s
}

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Write `design.csv`, one figure per scenario (`fig_<i>.svg`, `.png`, `.plot.json`: the
/// probability of a correct (null: any) declaration by each number of patients, per
/// candidate) and `report.html` (self-contained: the settings, the table, the figures inline)
/// into `out`, through a staging folder renamed into place. Returns the files written.
///
/// # Errors
/// `out` exists (unless `force`), I/O and plotting errors.
pub fn write(
    spec: &DesignSpec,
    summaries: &[CellSummary],
    out: &Path,
    force: bool,
) -> Result<Vec<PathBuf>> {
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |error: std::io::Error| Error::Io {
            path: p.clone(),
            error,
        }
    };
    if out.exists() && !force {
        return Err(Error::param(
            "--out",
            out.display(),
            "a folder that does not exist yet (or --force to replace it)",
        ));
    }
    let staging = out.with_extension("staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    std::fs::write(staging.join("design.csv"), csv(summaries)).map_err(io(&staging))?;
    let mut figures = vec![];
    for (si, sc) in spec.scenarios.iter().enumerate() {
        let null = sc.best().is_none();
        let grid: Vec<u64> = (0..=40)
            .map(|j| (spec.max_patients * j).div_ceil(40))
            .collect();
        let series = summaries
            .iter()
            .filter(|c| c.scenario == sc.name)
            .map(|c| {
                let n = c.runs.len().max(1) as f64;
                crate::experiment::plot::Series {
                    name: c.design.clone(),
                    points: grid
                        .iter()
                        .map(|&g| {
                            let k = c
                                .runs
                                .iter()
                                .filter(|&&(p, best, any)| p <= g && if null { any } else { best })
                                .count();
                            (g as f64, k as f64 / n)
                        })
                        .collect(),
                    ..Default::default()
                }
            })
            .collect();
        let spec_plot = crate::experiment::plot::PlotSpec {
            title: format!("{}: {}", sc.name, fmt_means(&sc.means)),
            x_label: "patients enrolled".into(),
            y_label: if null {
                "P(an arm declared best by then) (error)".into()
            } else {
                "P(best arm declared by then)".into()
            },
            series,
            notes: vec![format!(
                "{} runs per design; accrual {}/day; outcomes {}; dropout {}",
                spec.runs,
                spec.per_day,
                fmt_delay(&spec.delay),
                spec.dropout
            )],
            ..Default::default()
        };
        let stem = staging.join(format!("fig_{si}"));
        crate::experiment::plot::draw(&stem, &spec_plot)?;
        figures.push((sc, stem.with_extension("svg")));
    }
    let mut html = String::new();
    html.push_str(&format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}td,th{{border:1px solid #999;padding:3px 6px;text-align:right}}th{{background:#eee}}td:first-child,td:nth-child(2){{text-align:left}}</style></head><body><h1>{t}</h1>",
        t = html_escape(&spec.name)
    ));
    html.push_str(&format!(
        "<h2>Trial</h2><p>{} arms; maximum sample size {}; accrual {} patients/day; outcomes {}; dropout probability {} (recorded as {}); risk delta = {}; {} simulated trials per cell (seed {}). Adaptive candidates run through the core session in pipeline mode (decisions while outcomes are pending), as the decision service runs them.</p>",
        spec.scenarios[0].means.len(),
        spec.max_patients,
        spec.per_day,
        html_escape(&fmt_delay(&spec.delay)),
        spec.dropout,
        spec.dropout_reward,
        spec.delta,
        spec.runs,
        spec.seed
    ));
    html.push_str("<h2>Operating characteristics</h2><table><tr><th>design</th><th>scenario</th><th>P(select best)</th><th>error rate</th><th>sample size mean</th><th>q05 / q50 / q95</th><th>duration (days) mean / q95</th><th>patients on inferior arms</th><th>budget</th></tr>");
    for c in summaries {
        let get = |k: &str| c.metrics.iter().find(|(m, _)| *m == k).map(|(_, v)| *v);
        let p = |k: &str| get(k).map_or("-".to_string(), |v| format!("{v:.3}"));
        let r = |k: &str| get(k).map_or("-".to_string(), |v| format!("{v:.0}"));
        html.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} / {} / {}</td><td>{} / {}</td><td>{}</td><td>{}</td></tr>",
            html_escape(&c.design),
            html_escape(&c.scenario),
            p("p_select_best"),
            p("error_rate"),
            r("sample_size_mean"),
            r("sample_size_q05"),
            r("sample_size_q50"),
            r("sample_size_q95"),
            r("duration_days_mean"),
            r("duration_days_q95"),
            r("inferior_patients_mean"),
            html_escape(&c.budget)
        ));
    }
    html.push_str("</table><p>P(select best): a declared selection that is the best arm (scenarios with a unique best). Error rate: under the null (all means equal) the probability of declaring any arm; otherwise of declaring an inferior one. A trial that reaches the maximum sample size without its stopping rule firing declares nothing. Sample sizes are patients enrolled; duration is the day of the stop, or of the last outcome; the privacy budget is committed in full whether the trial stops early or not.</p><h2>Figures</h2>");
    for (sc, svg) in &figures {
        let text = std::fs::read_to_string(svg).map_err(io(svg))?;
        let body = text
            .find("<svg")
            .map_or(text.as_str(), |i| &text[i..])
            .to_string();
        html.push_str(&format!(
            "<h3>{}</h3><div>{}</div>",
            html_escape(&sc.name),
            body
        ));
    }
    html.push_str("<h2>Method</h2><p>Simulation by dpbandits design (crates/dpbandits/src/experiment/design.rs; docs/trial-design.md): common random numbers across designs and scenarios (patient i's outcome delay and dropout, each arm's outcome stream), one session seed per design label and run. Fixed equal randomisation ends with one Laplace release per arm (scale 1/(epsilon n)) and declares the best release when it beats every other by z sqrt(v_a + v_b), z at 1 - delta/(K(K-1)).</p></body></html>\n");
    std::fs::write(staging.join("report.html"), html).map_err(io(&staging))?;
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io(out))?;
    }
    std::fs::rename(&staging, out).map_err(io(out))?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(out)
        .map_err(io(out))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    Ok(files)
}

fn fmt_means(m: &[f64]) -> String {
    let v: Vec<String> = m.iter().map(|x| format!("{x}")).collect();
    format!("means ({})", v.join(", "))
}

fn fmt_delay(d: &Delay) -> String {
    match d {
        Delay::Fixed { days } => format!("{days} days after enrolment"),
        Delay::Uniform { low, high } => format!("uniform {low} to {high} days after enrolment"),
        Delay::Exponential { mean } => format!("exponential, mean {mean} days"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick form of `experiments/trial_design.toml` (the same trial, fewer runs and a
    /// smaller cap).
    const QUICK: &str = r#"
[design]
name = "quick"
seed = 3
runs = 12
max_patients = 4000
per_day = 10
delay = { kind = "fixed", days = 30 }
dropout = 0.05
delta = 0.05
[[design.scenarios]]
name = "null"
means = [0.5, 0.5, 0.5]
[[design.scenarios]]
name = "clear"
means = [0.3, 0.3, 0.6]
[[design.candidates]]
name = "DP-TT"
kind = "dp_tt"
epsilon = 1.0
[[design.candidates]]
name = "Top Two"
kind = "eb_tci"
[[design.candidates]]
name = "fixed"
kind = "fixed"
epsilon = 1.0
"#;

    /// The design's BAI runs are the `[trial]` pipeline simulation of the same design, run by
    /// run: tau, the recommendation, whether capped and the duration agree with
    /// `experiment::trial::TrialCell` (the experiment path) on the same seeds.
    #[test]
    fn design_runs_are_the_trial_simulation() {
        use crate::sim::Cell;
        let spec = DesignSpec::from_toml(QUICK).unwrap();
        let sc = &spec.scenarios[1];
        for c in spec.candidates.iter().filter(|c| c.kind != "fixed") {
            let (label, _) = spec.prepare(c).unwrap();
            let env_cfg =
                crate::bai::BaiBernoulliConfig::new(sc.means.clone(), spec.delta).unwrap();
            let env: crate::experiment::trial::TrialEnv =
                crate::config::BySetting::Bai(std::sync::Arc::new(env_cfg));
            let entry = crate::registry::policy(&c.kind).unwrap();
            let crate::registry::Built::Bai(cfg) = entry.build(c.params.clone()).unwrap() else {
                unreachable!()
            };
            let mut policy = crate::experiment::trial::TrialPolicy::new(
                entry.kind(),
                cfg.label(),
                vec![],
                cfg.guarantee(),
                serde_json::Value::Null,
            );
            policy.table = c.params.clone();
            assert_eq!(policy.label, label);
            let grid = std::sync::Arc::new(
                crate::sim::CheckpointGrid::log(spec.max_patients, 10, &[]).unwrap(),
            );
            let cell = crate::experiment::trial::TrialCell::new(
                env,
                policy,
                Strategy::Pipeline,
                std::sync::Arc::new(spec.trial()),
                grid,
                spec.seed,
            )
            .unwrap();
            let mut out = vec![0.0; cell.width()];
            for run in 0..spec.runs {
                cell.run(run, &mut out).unwrap();
                let d = simulate(&spec, c, sc, run).unwrap();
                assert_eq!(d.patients as f64, out[0], "{} run {run}: tau", c.name);
                assert_eq!(d.recommendation as f64, out[1], "{} run {run}", c.name);
                assert_eq!(
                    f64::from(u8::from(d.capped)),
                    out[3],
                    "{} run {run}",
                    c.name
                );
                assert_eq!(d.duration, out[5 + 2], "{} run {run}: duration", c.name);
            }
        }
    }

    /// The summary's numbers are those of direct simulation of the same designs (fixed seeds):
    /// recomputed from `simulate` run by run; the CSV and the thread count do not change them.
    #[test]
    fn design_numbers_match_direct_simulation() {
        let spec = DesignSpec::from_toml(QUICK).unwrap();
        let one = run(&spec, 1).unwrap();
        let three = run(&spec, 3).unwrap();
        assert_eq!(one, three);
        assert_eq!(csv(&one), csv(&three));
        for cell in &one {
            let c = spec
                .candidates
                .iter()
                .find(|c| c.name == cell.design)
                .unwrap();
            let sc = spec
                .scenarios
                .iter()
                .find(|s| s.name == cell.scenario)
                .unwrap();
            let runs: Vec<TrialRun> = (0..spec.runs)
                .map(|r| simulate(&spec, c, sc, r).unwrap())
                .collect();
            let get = |k: &str| cell.metrics.iter().find(|(m, _)| *m == k).unwrap().1;
            let n = runs.len() as f64;
            let mean = runs.iter().map(|r| r.patients as f64).sum::<f64>() / n;
            assert_eq!(get("sample_size_mean"), mean);
            let declared = runs.iter().filter(|r| r.selected.is_some()).count() as f64 / n;
            assert_eq!(get("p_conclusive"), declared);
            let inf = runs.iter().map(|r| r.inferior as f64).sum::<f64>() / n;
            assert_eq!(get("inferior_patients_mean"), inf);
            if let Some(b) = sc.best() {
                let right = runs.iter().filter(|r| r.selected == Some(b)).count() as f64 / n;
                assert_eq!(get("p_select_best"), right);
                // One clear winner: every design finds it in at least half the runs.
                assert!(right >= 0.5, "{} {}: {right}", cell.design, cell.scenario);
            } else {
                // Null: the error rate is the probability of declaring any arm.
                assert_eq!(get("error_rate"), declared);
                assert_eq!(get("inferior_patients_mean"), 0.0);
            }
            assert!(cell.metrics.iter().all(|(_, v)| v.is_finite()));
        }
    }

    #[test]
    fn bad_designs_name_the_field() {
        let bad = QUICK.replace("runs = 12", "runs = 0");
        let e = DesignSpec::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("design.runs"), "{e}");
        let bad = QUICK.replace("means = [0.3, 0.3, 0.6]", "means = [0.3, 0.6]");
        let e = DesignSpec::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("design.scenarios[1].means"), "{e}");
        let bad = QUICK.replace("kind = \"eb_tci\"", "kind = \"ucb1\"");
        let e = DesignSpec::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("design.candidates[1].kind"), "{e}");
        let bad = QUICK.replace("dropout = 0.05", "dropout = 1.5");
        let e = DesignSpec::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("design.dropout"), "{e}");
    }
}
