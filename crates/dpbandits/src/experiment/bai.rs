//! BAI experiments: a TOML file with `setting = "bai"`, one cell per (algorithm, eps), stopping
//! times instead of regret curves.
//!
//! ```toml
//! setting = "bai"
//! name = "bai_mu1"
//! master_seed = 2025
//! runs = 1000
//! delta = 0.01
//! means = [0.95, 0.9, 0.9, 0.9, 0.5]
//! epsilon = [0.001, 0.01, 0.1, 1.0, 10.0]
//! # max_samples = 1e12 (cap; capped runs are counted and reported, never hidden)
//! [[algorithm]]
//! kind = "dp_tt"        # private algorithms get one cell per epsilon
//! threshold = "joint"   # default of dp_tt (delta-correct); also "r", "h_half", "h_arm"
//! lazy = 0.01
//! [[algorithm]]
//! kind = "eb_tci"       # non-private: one cell
//! ```
//!
//! Runs are parallel over (cell, run) with rayon and collected in order: output is byte-identical
//! for any thread count. Streams: rewards from [`crate::rng::arm_rng`] below
//! [`crate::rng::env_run_seed`] (keyed by the run and the arm only: common random numbers across
//! algorithms), tie-breaks and noise below [`crate::rng::policy_seed`] (keyed by the cell label
//! and the run). Each (cell, run) is [`crate::bai::simulate_bai`] of the cell's engine on
//! [`crate::bai::BernoulliArms`].
//!
//! Outputs: `summary.csv` (one row per (algorithm, eps): stopping-time mean/std/quantiles, error
//! rate with its one-sided 95% Clopper–Pearson upper bound, `T*_eps`, the lower bound
//! `T*_eps ln(1/delta)` and the ratio to it, the threshold and whether it is proved),
//! `manifest.json`, `stopping_time.svg/png` (log-log, lower bound overlaid).

use crate::bai::{
    BaiConfig, BaiEngine, BaiInstance, BaiOutcome, BernoulliArms, Bounds, run_seeds, simulate_bai,
};
use crate::error::{Error, Result, ResultExt, check};
use crate::experiment::plot::{self, PlotSpec, Series};
use crate::math::stats::Summary;
use crate::registry::{self, PolicyParser};
use crate::rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Whether a TOML text is a BAI experiment (`setting = "bai"` at top level).
pub fn is_bai(text: &str) -> bool {
    text.parse::<toml::Table>()
        .ok()
        .and_then(|t| {
            t.get("setting")
                .and_then(|v| v.as_str().map(|s| s == "bai"))
        })
        .unwrap_or(false)
}

fn default_cap() -> u64 {
    1_000_000_000_000
}

/// A BAI experiment file as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BaiSpec {
    /// Must be `"bai"`.
    pub setting: String,
    /// Name (names the output folder).
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Master seed.
    pub master_seed: u64,
    /// Runs per cell.
    pub runs: u64,
    /// Risk delta in (0, 1).
    pub delta: f64,
    /// Bernoulli means (unique best arm).
    pub means: Vec<f64>,
    /// Privacy budgets (each > 0).
    pub epsilon: Vec<f64>,
    /// Sample cap per run (reported when hit).
    #[serde(default = "default_cap")]
    pub max_samples: u64,
    /// Algorithms.
    pub algorithm: Vec<toml::Table>,
}

/// One (algorithm, eps) configuration.
#[derive(Debug)]
pub struct BaiCell {
    /// Index of the `[[algorithm]]` table.
    pub algorithm: usize,
    /// The configuration.
    pub config: Box<dyn BaiConfig>,
    /// The prepared engine (thresholds and caches shared by the runs).
    pub engine: Arc<dyn BaiEngine>,
}

/// A validated BAI experiment.
#[derive(Debug)]
pub struct BaiPlan {
    /// The file.
    pub spec: BaiSpec,
    /// The instance.
    pub instance: BaiInstance,
    /// Cells, algorithm-major then eps.
    pub cells: Vec<BaiCell>,
    /// Characteristic times per eps (same order as `spec.epsilon`), plus eps = inf last.
    pub bounds: Vec<Bounds>,
}

impl BaiSpec {
    /// Parse TOML text (no validation beyond types and unknown keys).
    ///
    /// # Errors
    /// TOML syntax, unknown keys, wrong types.
    pub fn from_toml(text: &str) -> Result<BaiSpec> {
        toml::from_str(text).map_err(|e| Error::Config(e.to_string().trim_end().to_string()))
    }
}

impl BaiPlan {
    /// Parse and validate TOML text.
    ///
    /// # Errors
    /// Any field, with its name and value.
    pub fn from_toml(text: &str) -> Result<BaiPlan> {
        BaiPlan::new(BaiSpec::from_toml(text)?)
    }

    /// Validate a parsed spec.
    ///
    /// # Errors
    /// Any field, with its name and value.
    pub fn new(spec: BaiSpec) -> Result<BaiPlan> {
        if spec.setting != "bai" {
            return Err(Error::param(
                "setting",
                format!("\"{}\"", spec.setting),
                "\"bai\"",
            ));
        }
        if spec.name.is_empty()
            || !spec
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            || spec.name.starts_with('.')
        {
            return Err(Error::param(
                "name",
                format!("\"{}\"", spec.name),
                "a non-empty name of letters, digits, '-', '_' or '.'",
            ));
        }
        check::at_least("runs", spec.runs, 1)?;
        check::at_least("max_samples", spec.max_samples, 1)?;
        check::open_unit("delta", spec.delta)?;
        let instance = BaiInstance::new(spec.means.clone())?;
        if spec.epsilon.is_empty() {
            return Err(Error::param(
                "epsilon",
                "[]",
                "a non-empty list of numbers > 0",
            ));
        }
        for (i, &e) in spec.epsilon.iter().enumerate() {
            check::budget(&format!("epsilon[{i}]"), e)?;
        }
        if spec.algorithm.is_empty() {
            return Err(Error::param(
                "algorithm",
                "(none)",
                "at least one [[algorithm]] table",
            ));
        }
        let mut cells = vec![];
        for (i, table) in spec.algorithm.iter().enumerate() {
            let at = || format!("algorithm[{i}]");
            let kind = match table.get("kind") {
                Some(toml::Value::String(s)) => s.clone(),
                _ => {
                    return Err(Error::param(
                        "kind",
                        "(missing)",
                        "an algorithm kind, e.g. \"dp_tt\"",
                    ))
                    .at(at);
                }
            };
            let entry = registry::policy(&kind).at(at)?;
            let parser = match entry.parse {
                PolicyParser::Bai(p) => p,
                _ => {
                    return Err(Error::Config(format!(
                        "algorithm[{i}]: '{kind}' is a {} algorithm, not a BAI algorithm",
                        entry.setting
                    )));
                }
            };
            let mut base = table.clone();
            base.remove("kind");
            if base.contains_key("epsilon") {
                return Err(Error::param(
                    "epsilon",
                    "(set in [[algorithm]])",
                    "epsilon only in the top-level list (private algorithms get one cell per value)",
                ))
                .at(at);
            }
            let at_k = || format!("algorithm[{i}] ({kind})");
            for t in super::expand_sweep(&base).at(at_k)? {
                let eps_list: Vec<Option<f64>> = if parser.private {
                    spec.epsilon.iter().map(|&e| Some(e)).collect()
                } else {
                    vec![None]
                };
                for e in eps_list {
                    let mut t = t.clone();
                    if let Some(e) = e {
                        t.insert("epsilon".into(), toml::Value::Float(e));
                    }
                    let config = (parser.parse)(t).at(at_k)?;
                    let engine = config.prepare(instance.k(), spec.delta).at(at_k)?;
                    cells.push(BaiCell {
                        algorithm: i,
                        config,
                        engine,
                    });
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for c in &cells {
            if !seen.insert(c.config.label()) {
                return Err(Error::Config(format!(
                    "algorithm {} appears twice; each configuration may be listed once",
                    c.config.label()
                )));
            }
        }
        let mut bounds = vec![];
        for &e in spec.epsilon.iter().chain(std::iter::once(&f64::INFINITY)) {
            bounds.push(Bounds::compute(&instance, e, spec.delta)?);
        }
        Ok(BaiPlan {
            spec,
            instance,
            cells,
            bounds,
        })
    }

    fn bounds_for(&self, eps: f64) -> &Bounds {
        self.bounds
            .iter()
            .find(|b| b.epsilon == eps)
            .unwrap_or_else(|| self.bounds.last().expect("inf bounds"))
    }
}

/// All outcomes: `result[cell][run]`.
pub type BaiResults = Vec<Result<Vec<BaiOutcome>>>;

/// Run every (cell, run) in parallel on the current rayon pool; results in order.
pub fn run(plan: &BaiPlan, progress: &(dyn Fn() + Sync)) -> BaiResults {
    let runs = plan.spec.runs;
    let jobs = plan.cells.len() as u64 * runs;
    let labels: Vec<String> = plan.cells.iter().map(|c| c.config.label()).collect();
    let all: Vec<Result<BaiOutcome>> = (0..jobs)
        .into_par_iter()
        .map(|j| {
            let (c, r) = ((j / runs) as usize, j % runs);
            let (es, ps) = run_seeds(plan.spec.master_seed, &labels[c], r);
            let mut env = BernoulliArms::new(&plan.instance, es);
            let mut alg = plan.cells[c].engine.clone().start(ps);
            let res = simulate_bai(&mut env, alg.as_mut(), plan.spec.max_samples);
            progress();
            Ok(res)
        })
        .collect();
    let mut it = all.into_iter();
    plan.cells
        .iter()
        .map(|_| it.by_ref().take(runs as usize).collect::<Result<Vec<_>>>())
        .collect()
}

/// One-sided upper `1 - alpha` Clopper–Pearson bound for a binomial proportion (`x` of `n`).
pub fn clopper_pearson_upper(x: u64, n: u64, alpha: f64) -> f64 {
    if n == 0 {
        return 1.0;
    }
    if x >= n {
        return 1.0;
    }
    // P(Bin(n, p) <= x) is decreasing in p; find p with it equal to alpha.
    let cdf = |p: f64| -> f64 {
        let (lp, lq) = (p.ln(), (-p).ln_1p());
        let mut lc = 0.0; // ln C(n, i)
        let mut terms = Vec::with_capacity(x as usize + 1);
        for i in 0..=x {
            if i > 0 {
                lc += ((n - i + 1) as f64).ln() - (i as f64).ln();
            }
            terms.push(lc + i as f64 * lp + (n - i) as f64 * lq);
        }
        let m = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        (m + terms.iter().map(|t| (t - m).exp()).sum::<f64>().ln()).exp()
    };
    let (mut lo, mut hi) = (x as f64 / n as f64, 1.0);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// One row of `summary.csv`.
#[derive(Debug, Clone, Serialize)]
pub struct BaiRow {
    /// Algorithm kind.
    pub algorithm: String,
    /// Full label.
    pub label: String,
    /// eps (`inf` for non-private).
    pub epsilon: f64,
    /// Threshold name.
    pub threshold: String,
    /// Whether the threshold is proved delta-correct.
    pub threshold_proved: bool,
    /// Runs.
    pub runs: u64,
    /// Runs that hit the cap.
    pub capped: u64,
    /// Stopping time summary over all runs (capped runs count at the cap).
    pub tau: Summary,
    /// Largest stopping time.
    pub tau_max: f64,
    /// Wrong recommendations among stopped runs.
    pub errors: u64,
    /// errors / stopped runs.
    pub error_rate: f64,
    /// One-sided 95% Clopper–Pearson upper bound of the error probability.
    pub error_upper95: f64,
    /// `T*_eps` (`T*_KL` for non-private).
    pub t_star: f64,
    /// `T*_eps ln(1/delta)`.
    pub lower_bound: f64,
    /// mean tau / lower bound.
    pub ratio: f64,
    /// Mean number of Laplace draws.
    pub noise_draws: f64,
}

/// Summarise results into rows (cell order).
pub fn rows(plan: &BaiPlan, results: &BaiResults) -> Vec<std::result::Result<BaiRow, String>> {
    plan.cells
        .iter()
        .zip(results)
        .map(|(c, r)| {
            let r = r.as_ref().map_err(|e| e.to_string())?;
            let eps = c.config.epsilon();
            let b = plan.bounds_for(eps);
            let mut taus: Vec<f64> = r.iter().map(|o| o.tau as f64).collect();
            let tau_max = taus.iter().cloned().fold(0.0, f64::max);
            let tau = Summary::of(&mut taus);
            let capped = r.iter().filter(|o| o.capped).count() as u64;
            let stopped = r.len() as u64 - capped;
            let errors = r.iter().filter(|o| !o.capped && !o.correct).count() as u64;
            Ok(BaiRow {
                algorithm: c.config.kind().into(),
                label: c.config.label(),
                epsilon: eps,
                threshold: c.config.threshold_name().into(),
                threshold_proved: c.config.threshold_proved(),
                runs: r.len() as u64,
                capped,
                tau,
                tau_max,
                errors,
                error_rate: if stopped > 0 {
                    errors as f64 / stopped as f64
                } else {
                    f64::NAN
                },
                error_upper95: clopper_pearson_upper(errors, stopped, 0.05),
                t_star: b.t_eps,
                lower_bound: b.lower_bound,
                ratio: tau.mean / b.lower_bound,
                noise_draws: r.iter().map(|o| o.noise_draws as f64).sum::<f64>() / r.len() as f64,
            })
        })
        .collect()
}

fn g(x: f64) -> String {
    if x.is_infinite() {
        "inf".into()
    } else {
        format!("{x}")
    }
}

/// Write `summary.csv`, `manifest.json` and `stopping_time.svg/png` into `out`.
///
/// # Errors
/// I/O and plotting errors.
pub fn write_outputs(plan: &BaiPlan, results: &BaiResults, out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).map_err(|e| Error::Io {
        path: out.display().to_string(),
        error: e,
    })?;
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |e: std::io::Error| Error::Io {
            path: p.clone(),
            error: e,
        }
    };
    let rows = rows(plan, results);
    let mut csv = String::from(
        "algorithm,label,epsilon,threshold,threshold_proved,runs,capped,mean_tau,std_tau,sem_tau,q05_tau,median_tau,q95_tau,max_tau,errors,error_rate,error_upper95,t_star,lower_bound,ratio_to_lower_bound,mean_noise_draws,status\n",
    );
    for (c, r) in plan.cells.iter().zip(&rows) {
        match r {
            Ok(r) => csv.push_str(&format!(
                "{},\"{}\",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},ok\n",
                r.algorithm,
                r.label,
                g(r.epsilon),
                r.threshold,
                r.threshold_proved,
                r.runs,
                r.capped,
                r.tau.mean,
                r.tau.std,
                r.tau.sem,
                r.tau.q05,
                r.tau.q50,
                r.tau.q95,
                r.tau_max,
                r.errors,
                r.error_rate,
                r.error_upper95,
                r.t_star,
                r.lower_bound,
                r.ratio,
                r.noise_draws
            )),
            Err(e) => csv.push_str(&format!(
                "{},\"{}\",{},{},,,,,,,,,,,,,,,,,,\"error: {}\"\n",
                c.config.kind(),
                c.config.label(),
                g(c.config.epsilon()),
                c.config.threshold_name(),
                e.replace('"', "'")
            )),
        }
    }
    let summary = out.join("summary.csv");
    std::fs::write(&summary, csv).map_err(io(&summary))?;

    let cells: Vec<serde_json::Value> = plan
        .cells
        .iter()
        .map(|c| {
            let mut v = serde_json::json!({
                "label": c.config.label(),
                "kind": c.config.kind(),
                "epsilon": g(c.config.epsilon()),
                "threshold": c.config.threshold_name(),
                "threshold_proved_delta_correct": c.config.threshold_proved(),
                "guarantee": c.config.guarantee(),
            });
            if let serde_json::Value::Object(facts) = c.config.describe() {
                for (key, x) in facts {
                    v[key] = x;
                }
            }
            v
        })
        .collect();
    let bounds: Vec<serde_json::Value> = plan
        .bounds
        .iter()
        .map(|b| {
            let mut v = serde_json::to_value(b).unwrap_or_default();
            v["epsilon"] = serde_json::Value::String(g(b.epsilon));
            v
        })
        .collect();
    let manifest = serde_json::json!({
        "dpbandits_version": env!("CARGO_PKG_VERSION"),
        "rustc": env!("DPB_RUSTC_VERSION"),
        "master_seed": plan.spec.master_seed,
        "generator": "Xoshiro256PlusPlus (rand_xoshiro), seeds derived with SplitMix64 from master_seed",
        "seed_derivation": rng::describe(&[rng::ENV_RUN, rng::ENV_ARM, rng::POLICY_RUN, rng::POLICY_OWN, rng::POLICY_NOISE]),
        "setting": "bai",
        "spec": plan.spec,
        "best_arm": plan.instance.best(),
        "characteristic_times": bounds,
        "threshold_note": "DP-TT's exact threshold (Jourdan & Azize 2025, Eq. (8)) was not recovered; 'joint' (default) is our delta-correct pair threshold Proposal J (bai::threshold docs), 'r' the delta-correct Proposal R of spec dp-bai 3.5.2, 'h_half'/'h_arm'/'eb'/'code23' are heuristics (not proved), 'thesis' are the AdaP-TT thresholds of Azize's thesis with s = 2",
        "simulation": "algorithms request blocks of n samples of one arm, answered with one exact Binomial(n, mu_a) reward sum from the arm's stream; Top Two algorithms hold the sums until the arm's next release and check stopping after each release; lazy_challenger = theta > 0 recomputes the challenger at least every max(1, floor(theta t)) rounds and after each release (0 = every round)",
        "cells": cells,
        "errors": rows.iter().zip(&plan.cells).filter_map(|(r, c)| r.as_ref().err().map(|e| format!("{}: {e}", c.config.label()))).collect::<Vec<_>>(),
    });
    let mpath = out.join("manifest.json");
    std::fs::write(
        &mpath,
        serde_json::to_string_pretty(&manifest).unwrap_or_default() + "\n",
    )
    .map_err(io(&mpath))?;

    // Plot: mean stopping time vs eps per algorithm configuration (label without eps; a label
    // whose only parameter is eps, e.g. `dp_se_bai(eps=0.1)`, becomes its kind).
    let eps_lo = plan
        .spec
        .epsilon
        .iter()
        .cloned()
        .fold(f64::INFINITY, f64::min);
    let eps_hi = plan.spec.epsilon.iter().cloned().fold(0.0, f64::max);
    let mut series: Vec<Series> = vec![];
    for (c, r) in plan.cells.iter().zip(&rows) {
        let Ok(r) = r else { continue };
        let name = c
            .config
            .label()
            .replace(&format!("eps={},", g(c.config.epsilon())), "")
            .replace(&format!("(eps={})", g(c.config.epsilon())), "");
        let pts: Vec<(f64, f64, f64, f64)> = if c.config.epsilon().is_infinite() {
            vec![
                (eps_lo, r.tau.mean, r.tau.q05, r.tau.q95),
                (eps_hi, r.tau.mean, r.tau.q05, r.tau.q95),
            ]
        } else {
            vec![(c.config.epsilon(), r.tau.mean, r.tau.q05, r.tau.q95)]
        };
        let s = match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s,
            None => {
                series.push(Series {
                    name: name.clone(),
                    points: vec![],
                    band: Some(vec![]),
                });
                series.last_mut().expect("just pushed")
            }
        };
        for (x, m, lo, hi) in pts {
            s.points.push((x, m));
            if let Some(b) = s.band.as_mut() {
                b.push((x, lo, hi));
            }
        }
    }
    series.push(Series {
        name: "lower bound T*_eps ln(1/delta)".into(),
        points: plan
            .bounds
            .iter()
            .filter(|b| b.epsilon.is_finite())
            .map(|b| (b.epsilon, b.lower_bound))
            .collect(),
        band: None,
    });
    for s in &mut series {
        let mut idx: Vec<usize> = (0..s.points.len()).collect();
        idx.sort_by(|&a, &b| s.points[a].0.total_cmp(&s.points[b].0));
        s.points = idx.iter().map(|&i| s.points[i]).collect();
        if let Some(b) = s.band.as_mut() {
            b.sort_by(|x, y| x.0.total_cmp(&y.0));
        }
    }
    let spec = PlotSpec {
        title: format!(
            "{}: mean stopping time (band 5%-95%), delta = {}",
            plan.spec.name, plan.spec.delta
        ),
        x_label: "epsilon".into(),
        y_label: "stopping time".into(),
        log_x: true,
        log_y: true,
        series,
        hline: None,
    };
    let mut files = vec![summary, mpath];
    files.extend(plot::draw(&out.join("stopping_time"), &spec)?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clopper_pearson() {
        // Known values: 0 of 1000 -> 1 - 0.05^(1/1000) = 0.002991; 5 of 100 -> 0.1024 (one-sided 95%).
        assert!((clopper_pearson_upper(0, 1000, 0.05) - 0.002_991).abs() < 2e-6);
        assert!((clopper_pearson_upper(5, 100, 0.05) - 0.1024).abs() < 5e-4);
        assert_eq!(clopper_pearson_upper(3, 3, 0.05), 1.0);
    }
}
