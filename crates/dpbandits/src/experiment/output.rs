//! Writing a plan's results folder (the BAI setting's own outputs are in `bai.rs`).

use super::Plan;
use super::outcome::Outcome;
use super::plot::{MAX_DISTINCT, PlotSpec, Role, Series};
use crate::error::{Error, Result};
use serde_json::json;
use std::path::{Path, PathBuf};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        path: path.display().to_string(),
        error: e,
    }
}

/// Per cell: [`Role::Baseline`] for the one non-private cell of a plan that also has private
/// cells, else [`Role::Data`].
pub(super) fn roles(plan: &Plan) -> Vec<Role> {
    let public: Vec<usize> = (0..plan.cells.len())
        .filter(|&i| !plan.cells[i].guarantee().is_private())
        .collect();
    (0..plan.cells.len())
        .map(|i| {
            if public.len() == 1 && public[0] == i && plan.cells.len() > 1 {
                Role::Baseline
            } else {
                Role::Data
            }
        })
        .collect()
}

/// The cells of each panel of the regret plot: at most [`MAX_DISTINCT`] data curves per panel,
/// the cells of one kind together where they fit (consecutive cells of a kind are packed
/// greedily; a kind with more than 20 is split), the baseline in every panel.
pub(super) fn panels(plan: &Plan, roles: &[Role]) -> Vec<Vec<usize>> {
    let baseline: Vec<usize> = (0..roles.len())
        .filter(|&i| roles[i] == Role::Baseline)
        .collect();
    let mut groups: Vec<Vec<usize>> = vec![];
    for i in (0..plan.cells.len()).filter(|&i| roles[i] != Role::Baseline) {
        match groups.last_mut() {
            Some(g)
                if plan.cells[g[0]].kind() == plan.cells[i].kind() && g.len() < MAX_DISTINCT =>
            {
                g.push(i)
            }
            _ => groups.push(vec![i]),
        }
    }
    let mut panels: Vec<Vec<usize>> = vec![];
    for g in groups {
        match panels.last_mut() {
            Some(p) if p.len() + g.len() <= MAX_DISTINCT => p.extend(g),
            _ => panels.push(g),
        }
    }
    if panels.is_empty() {
        panels.push(vec![]);
    }
    for p in &mut panels {
        let mut v = baseline.clone();
        v.extend(p.iter());
        *p = v;
    }
    panels
}

/// Write `manifest.json`, `summary.csv`, `regret.{svg,png}`, the figures (each with its
/// `.plot.json`) and `report.html` into `dir`.
/// Everything that can be written is written even when some cells failed (their errors are in
/// the manifest). Output bytes depend only on the plan and its results (no timestamps), so two
/// runs with the same seed give identical folders whatever the thread count.
pub fn write_outputs(plan: &Plan, outcome: &Outcome, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = if plan.setting == crate::config::Setting::Bai {
        super::bai::write_outputs(plan, outcome, dir)?
    } else {
        write_regret_outputs(plan, outcome, dir)?
    };
    if plan.spec.trial.is_some() {
        files.extend(super::trial::write(plan, outcome, &roles(plan), dir)?);
    }
    let canonical = super::durable::canonical(&plan.spec)?;
    let exp = dir.join(super::report::EXPERIMENT);
    std::fs::write(&exp, canonical).map_err(io(&exp))?;
    files.push(exp);
    let report = super::report::write(plan, dir, &files)?;
    files.push(report);
    Ok(files)
}

fn write_regret_outputs(plan: &Plan, outcome: &Outcome, dir: &Path) -> Result<Vec<PathBuf>> {
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

    // regret plot: mean with 5%-95% band, full labels, the baseline in its own style; more
    // than 20 curves are split into panels (`regret.svg`, `regret_2.svg`, ...), each with the
    // baseline
    let roles = roles(plan);
    let curve = |i: usize| -> Option<Series> {
        let (c, s) = (&plan.cells[i], summaries[i].as_ref()?);
        Some(Series {
            name: c.label(),
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
            role: roles[i],
        })
    };
    let panels = panels(plan, &roles);
    for (k, cells) in panels.iter().enumerate() {
        let part = if panels.len() > 1 {
            format!("; part {} of {}", k + 1, panels.len())
        } else {
            String::new()
        };
        let spec = PlotSpec {
            title: format!(
                "{}: mean cumulative pseudo-regret ({} runs; band 5%-95% over runs{part})",
                plan.spec.name, plan.spec.runs,
            ),
            x_label: "t".into(),
            y_label: "regret".into(),
            log_x: true,
            log_y: false,
            series: cells.iter().filter_map(|&i| curve(i)).collect(),
            notes: super::outcome::notes(plan, None),
            ..Default::default()
        };
        let stem = if k == 0 {
            "regret".to_string()
        } else {
            format!("regret_{}", k + 1)
        };
        files.extend(super::plot::draw(&dir.join(stem), &spec)?);
    }

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
