//! Running a plan and writing its results folder.

use super::Plan;
use super::plot::{PlotSpec, Series};
use crate::error::{Error, Result};
use crate::math::stats::Summary;
use crate::sim::{CellRuns, run_jobs};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The runs of every cell of a plan, in cell order.
#[derive(Debug)]
pub struct Outcome {
    /// Per cell: `values[run][checkpoint]`, or the error that stopped the cell.
    pub cells: Vec<CellRuns>,
}

impl Outcome {
    /// Per cell, per checkpoint summaries (`None` for a failed cell).
    pub fn summaries(&self) -> Vec<Option<Vec<Summary>>> {
        self.cells
            .iter()
            .map(|c| {
                c.as_ref().ok().map(|runs| {
                    let n_cp = runs.first().map_or(0, Vec::len);
                    (0..n_cp)
                        .map(|i| Summary::of(&mut runs.iter().map(|r| r[i]).collect::<Vec<_>>()))
                        .collect()
                })
            })
            .collect()
    }

    /// The errors of failed cells, with their labels.
    pub fn errors(&self, plan: &Plan) -> Vec<(String, String)> {
        self.cells
            .iter()
            .zip(&plan.cells)
            .filter_map(|(r, c)| r.as_ref().err().map(|e| (c.label(), e.to_string())))
            .collect()
    }
}

/// Run every cell of `plan` on the current rayon pool; `progress` is called once per finished run.
pub fn run(plan: &Plan, progress: &(dyn Fn() + Sync)) -> Outcome {
    Outcome {
        cells: run_jobs(&plan.cells, plan.spec.runs, progress),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        path: path.display().to_string(),
        error: e,
    }
}

/// Write `manifest.json`, `summary.csv`, `regret.{svg,png}` and the figures into `dir`.
/// Everything that can be written is written even when some cells failed (their errors are in
/// the manifest). Output bytes depend only on the plan and its results (no timestamps), so two
/// runs with the same seed give identical folders whatever the thread count.
pub fn write_outputs(plan: &Plan, outcome: &Outcome, dir: &Path) -> Result<Vec<PathBuf>> {
    if plan.setting == crate::config::Setting::Bai {
        return super::bai::write_outputs(plan, outcome, dir);
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut files = vec![];
    let summaries = outcome.summaries();
    let grid = plan.grid.points();

    // summary.csv: the tidy table
    let csv = super::SummaryTable::of(plan, outcome).to_csv()?;
    let p = dir.join("summary.csv");
    std::fs::write(&p, csv).map_err(io(&p))?;
    files.push(p);

    // manifest.json
    let manifest = manifest(plan, outcome)?;
    let p = dir.join("manifest.json");
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| Error::Config(e.to_string()))?;
    std::fs::write(&p, text + "\n").map_err(io(&p))?;
    files.push(p);

    // regret plot: mean with 5%-95% band
    let series: Vec<Series> = plan
        .cells
        .iter()
        .zip(&summaries)
        .filter_map(|(c, s)| {
            let s = s.as_ref()?;
            Some(Series {
                name: super::plot::short_label(c.kind(), &c.params()),
                points: grid
                    .iter()
                    .zip(s)
                    .map(|(&t, s)| (t as f64, s.mean))
                    .collect(),
                band: Some(
                    grid.iter()
                        .zip(s)
                        .map(|(&t, s)| (t as f64, s.q05, s.q95))
                        .collect(),
                ),
            })
        })
        .collect();
    let spec = PlotSpec {
        title: format!(
            "{}: mean cumulative pseudo-regret ({} runs{})",
            plan.spec.name,
            plan.spec.runs,
            if plan.cells.len() <= 6 {
                "; band 5%-95%"
            } else {
                ""
            }
        ),
        x_label: "t".into(),
        y_label: "regret".into(),
        log_x: true,
        log_y: false,
        series,
        hline: None,
    };
    files.extend(super::plot::draw(&dir.join("regret"), &spec)?);

    if let Some(c) = &plan.spec.comparison {
        files.extend(c.write(plan, &outcome.cells, dir)?);
    }
    for f in &plan.spec.figure {
        files.extend(f.render(plan, &outcome.cells, dir)?);
    }
    Ok(files)
}

/// The `manifest.json` of `outcome` (what [`write_outputs`] writes; BAI has its own).
///
/// # Errors
/// A comparison section that cannot be computed.
pub fn manifest(plan: &Plan, outcome: &Outcome) -> Result<serde_json::Value> {
    if plan.setting == crate::config::Setting::Bai {
        return Ok(super::bai::manifest(plan, outcome));
    }
    let grid = plan.grid.points();
    let policies: Vec<serde_json::Value> = plan
        .cells
        .iter()
        .map(|c| {
            json!({
                "label": c.label(),
                "kind": c.kind(),
                "params": c.params().iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
                "privacy": c.guarantee(),
                "privacy_summary": c.guarantee().summary(),
                // false for deployment-grade noise (OS-seeded): such runs cannot be replayed.
                "reproducible": c.guarantee().noise.reproducible(),
                "details": c.describe(),
            })
        })
        .collect();
    let errors: Vec<serde_json::Value> = outcome
        .errors(plan)
        .into_iter()
        .map(|(l, e)| json!({"policy": l, "error": e}))
        .collect();
    let mut manifest = json!({
        "experiment": plan.spec.name,
        "description": plan.spec.description,
        "dpbandits_version": env!("CARGO_PKG_VERSION"),
        "rustc": env!("DPB_RUSTC_VERSION"),
        "master_seed": plan.spec.master_seed,
        "horizon": plan.spec.horizon,
        "runs": plan.spec.runs,
        "setting": plan.setting,
        "simulation": plan.spec.simulation,
        "generator": "Xoshiro256PlusPlus (rand_xoshiro), seeds derived with SplitMix64 from master_seed",
        "metric": "cumulative pseudo-regret sum_t (mu*(t) - mu_{a_t}(t)) at each checkpoint",
        "checkpoints": grid,
        "environment": plan.env_info,
        "policies": policies,
        "errors": errors,
        "resolved_spec": plan.spec,
    });
    if let Some(c) = &plan.spec.comparison {
        manifest["comparison"] = c.manifest(&plan.cells)?;
    }
    Ok(manifest)
}
