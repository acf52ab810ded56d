//! BAI outputs: a fixed-confidence experiment (`[env] kind = "bai_bernoulli"`) runs through the
//! same spec -> plan -> jobs path as every setting; its runs are rows of
//! [`crate::bai::OUTCOME_FIELDS`] (stopping time, recommendation, correctness, cap, noise draws)
//! instead of regret curves, and this module turns them into its outputs.
//!
//! ```toml
//! name = "bai_mu1"
//! master_seed = 2025
//! runs = 1000
//! horizon = 1_000_000_000_000   # the sample cap: a run that reaches it stops as `capped`
//! [env]
//! kind = "bai_bernoulli"
//! means = [0.95, 0.9, 0.9, 0.9, 0.5]
//! delta = 0.01
//! [[policy]]
//! kind = "dp_tt"                 # a list of epsilons is a sweep axis, as any list
//! epsilon = [0.001, 0.01, 0.1, 1.0, 10.0]
//! lazy = 0.01
//! [[policy]]
//! kind = "eb_tci"                # non-private: one cell
//! ```
//!
//! Outputs: `summary.csv` (one row per (algorithm, eps): stopping-time mean/std/quantiles, error
//! rate with its one-sided 95% Clopper–Pearson upper bound, `T*_eps`, the lower bound
//! `T*_eps ln(1/delta)` and the ratio to it, the threshold and whether it is proved),
//! `manifest.json`, `stopping_time.svg/png` (log-log, lower bound overlaid).

use super::Plan;
use super::outcome::Outcome;
use crate::bai::{Bounds, OutcomeRow};
use crate::error::{Error, Result};
use crate::experiment::plot::{self, PlotSpec, Series};
use crate::math::stats::{Summary, clopper_pearson_upper};
use crate::rng;
use crate::sim::Cell;
use serde::Serialize;
use std::path::{Path, PathBuf};

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

/// A BAI cell's epsilon (its one parameter).
fn epsilon(c: &dyn Cell) -> f64 {
    c.params()
        .iter()
        .find(|(k, _)| *k == "epsilon")
        .map_or(f64::INFINITY, |p| p.1)
}

/// A BAI cell's threshold name and whether it is proved delta-correct.
fn threshold(c: &dyn Cell) -> (String, bool) {
    let d = c.describe();
    (
        d["threshold"].as_str().unwrap_or("?").to_string(),
        d["threshold_proved_delta_correct"]
            .as_bool()
            .unwrap_or(false),
    )
}

fn bounds_for(plan: &Plan, eps: f64) -> Option<&Bounds> {
    plan.bounds.iter().find(|b| b.epsilon == eps)
}

/// Summarise results into rows (cell order). A run's row is [`crate::bai::OUTCOME_FIELDS`].
pub fn rows(plan: &Plan, outcome: &Outcome) -> Vec<std::result::Result<BaiRow, String>> {
    plan.cells
        .iter()
        .zip(&outcome.cells)
        .map(|(c, r)| {
            let r = r.as_ref().map_err(|e| e.to_string())?;
            let eps = epsilon(c.as_ref());
            let b = bounds_for(plan, eps).ok_or("no characteristic time for this epsilon")?;
            let (threshold, threshold_proved) = threshold(c.as_ref());
            let r: Vec<OutcomeRow> = r.iter().map(|row| OutcomeRow::from_row(row)).collect();
            let mut taus: Vec<f64> = r.iter().map(|o| o.tau).collect();
            let tau_max = taus.iter().cloned().fold(0.0, f64::max);
            let tau = Summary::of(&mut taus);
            let capped = r.iter().filter(|o| o.capped).count() as u64;
            let stopped = r.len() as u64 - capped;
            let errors = r.iter().filter(|o| !o.capped && !o.correct).count() as u64;
            Ok(BaiRow {
                algorithm: c.kind().into(),
                label: c.label(),
                epsilon: eps,
                threshold,
                threshold_proved,
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
                noise_draws: r.iter().map(|o| o.noise_draws).sum::<f64>() / r.len() as f64,
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
pub fn write_outputs(plan: &Plan, outcome: &Outcome, out: &Path) -> Result<Vec<PathBuf>> {
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
    let rows = rows(plan, outcome);
    let csv = super::SummaryTable::of(plan, outcome).to_csv()?;
    let summary = out.join("summary.csv");
    std::fs::write(&summary, csv).map_err(io(&summary))?;

    let manifest = manifest(plan, outcome);
    let mpath = out.join("manifest.json");
    std::fs::write(
        &mpath,
        serde_json::to_string_pretty(&manifest).unwrap_or_default() + "\n",
    )
    .map_err(io(&mpath))?;

    // Plot: mean stopping time vs eps per algorithm configuration (label without eps; a label
    // whose only parameter is eps, e.g. `dp_se_bai(eps=0.1)`, becomes its kind).
    let finite = || {
        plan.bounds
            .iter()
            .map(|b| b.epsilon)
            .filter(|e| e.is_finite())
    };
    let eps_lo = finite().fold(f64::INFINITY, f64::min);
    let eps_hi = finite().fold(0.0, f64::max);
    let mut series: Vec<Series> = vec![];
    for (c, r) in plan.cells.iter().zip(&rows) {
        let Ok(r) = r else { continue };
        let eps = epsilon(c.as_ref());
        let name = c
            .label()
            .replace(&format!("eps={},", g(eps)), "")
            .replace(&format!("(eps={})", g(eps)), "");
        let pts: Vec<(f64, f64, f64, f64)> = if eps.is_infinite() {
            vec![
                (eps_lo, r.tau.mean, r.tau.q05, r.tau.q95),
                (eps_hi, r.tau.mean, r.tau.q05, r.tau.q95),
            ]
        } else {
            vec![(eps, r.tau.mean, r.tau.q05, r.tau.q95)]
        };
        let s = match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s,
            None => {
                series.push(Series {
                    name: name.clone(),
                    points: vec![],
                    band: Some(vec![]),
                    role: if eps.is_infinite() {
                        plot::Role::Baseline
                    } else {
                        plot::Role::Data
                    },
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
        role: plot::Role::Theory,
    });
    for s in &mut series {
        let mut idx: Vec<usize> = (0..s.points.len()).collect();
        idx.sort_by(|&a, &b| s.points[a].0.total_cmp(&s.points[b].0));
        s.points = idx.iter().map(|&i| s.points[i]).collect();
        if let Some(b) = s.band.as_mut() {
            b.sort_by(|x, y| x.0.total_cmp(&y.0));
        }
    }
    let capped: u64 = rows.iter().flatten().map(|r| r.capped).sum();
    let total: u64 = rows.iter().flatten().map(|r| r.runs).sum();
    let capped_note = (capped > 0).then(|| {
        format!(
            "{capped} of {total} runs hit the sample cap {}: counted at the cap, so their means are lower bounds",
            plan.spec.horizon
        )
    });
    let spec = PlotSpec {
        title: format!(
            "{}: mean stopping time ({} runs; band 5%-95% over runs), delta = {}",
            plan.spec.name, plan.spec.runs, plan.env_info["delta"]
        ),
        x_label: "epsilon".into(),
        y_label: "stopping time".into(),
        log_x: true,
        log_y: true,
        series,
        notes: super::outcome::notes(plan, capped_note.as_deref()),
        ..Default::default()
    };
    let mut files = vec![summary, mpath];
    files.extend(plot::draw(&out.join("stopping_time"), &spec)?);
    Ok(files)
}

/// The BAI `manifest.json` (what [`write_outputs`] writes).
pub(super) fn manifest(plan: &Plan, outcome: &Outcome) -> serde_json::Value {
    let cells: Vec<serde_json::Value> = plan
        .cells
        .iter()
        .map(|c| {
            let mut v = serde_json::json!({
                "label": c.label(),
                "kind": c.kind(),
                "epsilon": g(epsilon(c.as_ref())),
                "guarantee": c.guarantee(),
                "privacy_summary": c.guarantee().summary(),
            });
            if let serde_json::Value::Object(facts) = c.describe() {
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
    serde_json::json!({
        "dpbandits_version": env!("CARGO_PKG_VERSION"),
        "rustc": env!("DPB_RUSTC_VERSION"),
        "master_seed": plan.spec.master_seed,
        "generator": "Xoshiro256PlusPlus (rand_xoshiro), seeds derived with SplitMix64 from master_seed",
        "seed_derivation": rng::describe(&[rng::ENV_RUN, rng::ENV_ARM, rng::POLICY_RUN, rng::POLICY_OWN, rng::POLICY_NOISE]),
        "setting": "bai",
        "spec": plan.spec,
        "environment": plan.env_info,
        "characteristic_times": bounds,
        "threshold_note": "DP-TT's exact threshold (Jourdan & Azize 2025, Eq. (8)) was not recovered; 'joint' (default) is our delta-correct pair threshold Proposal J (bai::threshold docs), 'r' the delta-correct Proposal R of spec dp-bai 3.5.2, 'h_half'/'h_arm'/'eb' are heuristics (not proved), 'code23' is the threshold formula of the 2023 DP-BAI code inside our stopping rule (EB leader, signed gap; the code itself tests the UCB leader with an unsigned gap), a heuristic, not the authors' algorithm, 'thesis' are the AdaP-TT thresholds of Azize's thesis with s = 2",
        "simulation": "algorithms request blocks of n samples of one arm, answered with one exact Binomial(n, mu_a) reward sum from the arm's stream; Top Two algorithms hold the sums until the arm's next release and check stopping after each release; lazy_challenger = theta > 0 recomputes the challenger at least every max(1, floor(theta t)) rounds and after each release (0 = every round)",
        "cells": cells,
        "errors": rows(plan, outcome).iter().zip(&plan.cells).filter_map(|(r, c)| r.as_ref().err().map(|e| format!("{}: {e}", c.label()))).collect::<Vec<_>>(),
    })
}
