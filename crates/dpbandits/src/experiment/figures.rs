//! Paper figures computed from the runs: privacy gap against a parameter, and price of privacy.
//!
//! Both compare a private algorithm with its non-private baseline run on the same environment
//! streams. Gaps are averaged over *paired* runs (run r of the private cell against run r of the
//! baseline), and their standard error comes from the paired differences.

use super::Plan;
use super::plot::{PlotSpec, Series};
use crate::error::{Error, Result};
use crate::math::stats::Summary;
use crate::sim::CellRuns;
use serde::{Deserialize, Serialize};

/// A `[[figure]]` table.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FigureSpec {
    /// `Reg_priv(T) - Reg_base(T)` against a parameter of the private policy (log axis), one curve
    /// per horizon T (Figure 4, left panels).
    GapVsParam {
        /// Kind of the private policy.
        private: String,
        /// Kind of the non-private baseline (exactly one configuration).
        baseline: String,
        /// Swept parameter of the private policy (default `rho`).
        #[serde(default = "rho")]
        param: String,
        /// Horizons, each one curve (added to the checkpoints); `1e7` allowed.
        #[serde(deserialize_with = "super::spec::whole_vec")]
        horizons: Vec<u64>,
        /// Output file stem (default `gap_vs_<param>`).
        #[serde(default)]
        name: Option<String>,
        /// A one-line note printed on the figure (e.g. why it does not show the paper's claim).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// `PoP(t) = (Reg_priv(t) - Reg_base(t)) / Reg_base(t)` against t, one curve per parameter value
    /// (Figure 4, right panels).
    PriceOfPrivacy {
        /// Kind of the private policy.
        private: String,
        /// Kind of the non-private baseline.
        baseline: String,
        /// Parameter of the private policy (default `rho`).
        #[serde(default = "rho")]
        param: String,
        /// Parameter values, each one curve.
        values: Vec<f64>,
        /// Output file stem (default `price_of_privacy`).
        #[serde(default)]
        name: Option<String>,
        /// A one-line note printed on the figure (e.g. why it does not show the paper's claim).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Mean cumulative regret against t on linear axes, with the breakpoints of a piecewise
    /// environment as vertical lines (spec ldp §6.3 F1).
    RegretVsT {
        /// Substrings of the policy labels to draw (default: all).
        #[serde(default)]
        policies: Vec<String>,
        /// Output file stem (default `regret_vs_t`).
        #[serde(default)]
        name: Option<String>,
        /// A one-line note printed on the figure (e.g. why it does not show the paper's claim).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Regret at the horizon against `epsilon` (log-log), one line per algorithm, with the shape of
    /// Gajane (2023) Corollary 2 fitted to one algorithm (spec ldp §6.3 F2).
    RegretVsEps {
        /// Substrings of the policy labels to draw (default: all with an `epsilon`).
        #[serde(default)]
        policies: Vec<String>,
        /// Label prefix of the algorithm the bound shapes are fitted to (default `sw_klucb_cf`).
        #[serde(default = "sw_klucb_cf")]
        fit: String,
        /// Output file stem (default `regret_vs_eps`).
        #[serde(default)]
        name: Option<String>,
        /// A one-line note printed on the figure (e.g. why it does not show the paper's claim).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Mean regret curves of selected policies with their 5%-95% bands, with optional log axes
    /// (e.g. Figure 5: one panel per rho; linear y by default, where the gap between the two
    /// algorithms shows).
    RegretCurves {
        /// Keep only policies whose parameter `param` equals `value` (both or neither), plus every
        /// policy without that parameter.
        #[serde(default)]
        param: Option<String>,
        /// The value of `param`.
        #[serde(default)]
        value: Option<f64>,
        /// Log-scale x axis (default false).
        #[serde(default)]
        log_x: bool,
        /// Log-scale y axis (default false: a log y axis hides the differences the figure is
        /// about).
        #[serde(default)]
        log_y: bool,
        /// Output file stem (default `regret_curves`).
        #[serde(default)]
        name: Option<String>,
        /// A one-line note printed on the figure (e.g. why it does not show the paper's claim).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
}

fn sw_klucb_cf() -> String {
    "sw_klucb_cf".into()
}

fn rho() -> String {
    "rho".into()
}

impl FigureSpec {
    /// Horizons that must be checkpoints.
    pub fn horizons(&self) -> Vec<u64> {
        match self {
            FigureSpec::GapVsParam { horizons, .. } => horizons.clone(),
            FigureSpec::PriceOfPrivacy { .. } => vec![],
            FigureSpec::RegretVsT { .. } | FigureSpec::RegretVsEps { .. } => vec![],
            FigureSpec::RegretCurves { .. } => vec![],
        }
    }

    /// The file's note for this figure.
    pub fn note(&self) -> Option<&str> {
        match self {
            FigureSpec::GapVsParam { note, .. }
            | FigureSpec::PriceOfPrivacy { note, .. }
            | FigureSpec::RegretVsT { note, .. }
            | FigureSpec::RegretVsEps { note, .. }
            | FigureSpec::RegretCurves { note, .. } => note.as_deref(),
        }
    }

    /// File stem.
    pub fn stem(&self) -> String {
        match self {
            FigureSpec::GapVsParam { name, param, .. } => {
                name.clone().unwrap_or(format!("gap_vs_{param}"))
            }
            FigureSpec::PriceOfPrivacy { name, .. } => {
                name.clone().unwrap_or("price_of_privacy".into())
            }
            FigureSpec::RegretVsT { name, .. } => name.clone().unwrap_or("regret_vs_t".into()),
            FigureSpec::RegretVsEps { name, .. } => name.clone().unwrap_or("regret_vs_eps".into()),
            FigureSpec::RegretCurves { name, .. } => name.clone().unwrap_or("regret_curves".into()),
        }
    }

    fn parts(&self) -> (&str, &str, &str) {
        match self {
            FigureSpec::GapVsParam {
                private,
                baseline,
                param,
                ..
            }
            | FigureSpec::PriceOfPrivacy {
                private,
                baseline,
                param,
                ..
            } => (private, baseline, param),
            FigureSpec::RegretVsT { .. } | FigureSpec::RegretVsEps { .. } => ("", "", ""),
            FigureSpec::RegretCurves { .. } => {
                unreachable!("regret_curves has no private/baseline pair")
            }
        }
    }

    /// Check that the policies and values it names exist in the plan.
    pub fn validate(&self, plan: &Plan) -> Result<()> {
        if let FigureSpec::RegretVsT { policies, .. } | FigureSpec::RegretVsEps { policies, .. } =
            self
        {
            return super::ldp_figures::validate(plan, policies);
        }
        if let FigureSpec::RegretCurves { param, value, .. } = self {
            return match (param, value) {
                (None, None) => Ok(()),
                (Some(p), Some(v)) => {
                    if regret_cells(plan, Some((p, *v))).is_empty() {
                        Err(Error::param(
                            "value",
                            v,
                            format!("a value of '{p}' that some listed policy uses"),
                        ))
                    } else {
                        Ok(())
                    }
                }
                _ => Err(Error::param(
                    "param",
                    format!("{param:?}"),
                    "`param` and `value` together, or neither",
                )),
            };
        }
        let (private, baseline, param) = self.parts();
        baseline_cell(plan, baseline)?;
        let privs = private_cells(plan, private, param);
        if privs.is_empty() {
            return Err(Error::param(
                "private",
                format!("\"{private}\""),
                format!("the kind of a listed policy with parameter '{param}'"),
            ));
        }
        match self {
            FigureSpec::GapVsParam { horizons, .. } => {
                if horizons.is_empty() {
                    return Err(Error::param("horizons", "[]", "at least one horizon"));
                }
            }
            FigureSpec::PriceOfPrivacy { values, .. } => {
                if values.is_empty() {
                    return Err(Error::param("values", "[]", "at least one parameter value"));
                }
                for v in values {
                    if !privs.iter().any(|&(_, p)| same(p, *v)) {
                        return Err(Error::param(
                            "values",
                            v,
                            format!(
                                "a value of '{param}' that some '{private}' policy in the file uses"
                            ),
                        ));
                    }
                }
            }
            FigureSpec::RegretVsT { .. } | FigureSpec::RegretVsEps { .. } => {}
            FigureSpec::RegretCurves { .. } => {}
        }
        Ok(())
    }

    /// Compute the figure's table, write `<stem>.csv`, `<stem>.svg`, `<stem>.png`.
    pub(super) fn render(
        &self,
        plan: &Plan,
        results: &[CellRuns],
        dir: &std::path::Path,
    ) -> Result<Vec<std::path::PathBuf>> {
        match self {
            FigureSpec::RegretVsT { policies, .. } => {
                return super::ldp_figures::regret_vs_t(
                    plan,
                    results,
                    dir,
                    &self.stem(),
                    policies,
                    self.note(),
                );
            }
            FigureSpec::RegretVsEps { policies, fit, .. } => {
                return super::ldp_figures::regret_vs_eps(
                    plan,
                    results,
                    dir,
                    &self.stem(),
                    policies,
                    fit,
                    self.note(),
                );
            }
            _ => {}
        }
        if let FigureSpec::RegretCurves {
            param,
            value,
            log_x,
            log_y,
            ..
        } = self
        {
            return render_regret_curves(
                plan,
                results,
                dir,
                &self.stem(),
                param.as_deref().zip(*value),
                (*log_x, *log_y),
                self.note(),
            );
        }
        let (private, baseline, param) = self.parts();
        let b = baseline_cell(plan, baseline)?;
        let Ok(base_runs) = &results[b] else {
            return Ok(vec![]);
        };
        let grid = plan.grid.points();
        let stem = dir.join(self.stem());
        let mut csv = String::new();
        let spec = match self {
            FigureSpec::GapVsParam { horizons, .. } => {
                csv.push_str(&format!(
                    "T,{param},reg_private,reg_baseline,gap,gap_sem,runs\n"
                ));
                let mut series = vec![];
                for &h in horizons {
                    let i = plan
                        .grid
                        .position(h)
                        .expect("figure horizons are checkpoints");
                    let mut pts = vec![];
                    let mut band = vec![];
                    for (c, v) in private_cells(plan, private, param) {
                        let Ok(runs) = &results[c] else { continue };
                        let (mp, mb, gap) = paired(runs, base_runs, i);
                        csv.push_str(&format!(
                            "{h},{v},{mp},{mb},{},{},{}\n",
                            gap.mean, gap.sem, gap.runs
                        ));
                        pts.push((v, gap.mean));
                        band.push((v, gap.mean - 2.0 * gap.sem, gap.mean + 2.0 * gap.sem));
                    }
                    series.push(Series {
                        name: format!("T = {}", super::plot::count(h)),
                        points: pts,
                        band: Some(band),
                        ..Default::default()
                    });
                }
                PlotSpec {
                    title: format!(
                        "Reg({private}) - Reg({baseline}) at horizon T (band: +-2 s.e.)"
                    ),
                    x_label: param.to_string(),
                    y_label: "regret difference".into(),
                    log_x: true,
                    log_y: false,
                    series,
                    hline: Some(0.0),
                    notes: super::outcome::notes(plan, self.note()),
                    ..Default::default()
                }
            }
            FigureSpec::PriceOfPrivacy { values, .. } => {
                csv.push_str(&format!("t,{param},reg_private,reg_baseline,pop\n"));
                let mut series = vec![];
                for &v in values {
                    let Some(&(c, _)) = private_cells(plan, private, param)
                        .iter()
                        .find(|&&(_, p)| same(p, v))
                    else {
                        continue;
                    };
                    let Ok(runs) = &results[c] else { continue };
                    let mut pts = vec![];
                    for (i, &t) in grid.iter().enumerate() {
                        let (mp, mb, _) = paired(runs, base_runs, i);
                        if mb > 0.0 {
                            let pop = (mp - mb) / mb;
                            csv.push_str(&format!("{t},{v},{mp},{mb},{pop}\n"));
                            pts.push((t as f64, pop));
                        }
                    }
                    series.push(Series {
                        name: format!("{param} = {v}"),
                        points: pts,
                        band: None,
                        ..Default::default()
                    });
                }
                PlotSpec {
                    title: format!(
                        "Price of privacy: (Reg({private}) - Reg({baseline})) / Reg({baseline})"
                    ),
                    x_label: "t".into(),
                    y_label: "PoP(t)".into(),
                    // the paper's axis: linear t
                    log_x: false,
                    log_y: false,
                    series,
                    hline: Some(0.0),
                    notes: super::outcome::notes(plan, self.note()),
                    ..Default::default()
                }
            }
            FigureSpec::RegretVsT { .. } | FigureSpec::RegretVsEps { .. } => {
                unreachable!("handled above")
            }
            FigureSpec::RegretCurves { .. } => unreachable!("rendered above"),
        };
        let csv_path = stem.with_extension("csv");
        std::fs::write(&csv_path, csv).map_err(|e| Error::Io {
            path: csv_path.display().to_string(),
            error: e,
        })?;
        let mut files = vec![csv_path];
        files.extend(super::plot::draw(&stem, &spec)?);
        Ok(files)
    }
}

/// Cells shown by a `regret_curves` figure.
fn regret_cells(plan: &Plan, filter: Option<(&str, f64)>) -> Vec<usize> {
    (0..plan.cells.len())
        .filter(|&i| match filter {
            None => true,
            Some((p, v)) => plan.cells[i]
                .params()
                .iter()
                .find(|(k, _)| *k == p)
                .is_none_or(|&(_, x)| same(x, v)),
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn render_regret_curves(
    plan: &Plan,
    results: &[CellRuns],
    dir: &std::path::Path,
    stem: &str,
    filter: Option<(&str, f64)>,
    (log_x, log_y): (bool, bool),
    note: Option<&str>,
) -> Result<Vec<std::path::PathBuf>> {
    let grid = plan.grid.points();
    let roles = super::output::roles(plan);
    let mut csv = String::from("policy,t,mean,sem,q05,q95,runs\n");
    let mut series = vec![];
    for c in regret_cells(plan, filter) {
        let Ok(runs) = &results[c] else { continue };
        let label = plan.cells[c].label();
        let mut pts = vec![];
        let mut band = vec![];
        for (i, &t) in grid.iter().enumerate() {
            let s = Summary::of(&mut runs.iter().map(|r| r[i]).collect::<Vec<_>>());
            csv.push_str(&format!(
                "{},{t},{},{},{},{},{}\n",
                csv_field(&label),
                s.mean,
                s.sem,
                s.q05,
                s.q95,
                s.runs
            ));
            pts.push((t as f64, s.mean));
            band.push((t as f64, s.q05, s.q95));
        }
        series.push(Series {
            name: label,
            points: pts,
            band: Some(band),
            role: roles[c],
        });
    }
    let title = match filter {
        Some((p, v)) => format!(
            "{}: mean cumulative pseudo-regret, {p} = {v} ({} runs; band 5%-95% over runs)",
            plan.spec.name, plan.spec.runs
        ),
        None => format!(
            "{}: mean cumulative pseudo-regret ({} runs; band 5%-95% over runs)",
            plan.spec.name, plan.spec.runs
        ),
    };
    let spec = PlotSpec {
        title,
        x_label: "t".into(),
        y_label: "regret".into(),
        log_x,
        log_y,
        series,
        notes: super::outcome::notes(plan, note),
        ..Default::default()
    };
    let stem = dir.join(stem);
    let csv_path = stem.with_extension("csv");
    std::fs::write(&csv_path, csv).map_err(|e| Error::Io {
        path: csv_path.display().to_string(),
        error: e,
    })?;
    let mut files = vec![csv_path];
    files.extend(super::plot::draw(&stem, &spec)?);
    Ok(files)
}

/// A CSV field, quoted when it holds a comma, a quote or a newline.
pub(super) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Index of the single cell of kind `baseline`.
fn baseline_cell(plan: &Plan, baseline: &str) -> Result<usize> {
    let idx: Vec<usize> = plan
        .cells
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind() == baseline)
        .map(|(i, _)| i)
        .collect();
    match idx.as_slice() {
        [i] => Ok(*i),
        [] => Err(Error::param(
            "baseline",
            format!("\"{baseline}\""),
            "the kind of a listed policy",
        )),
        _ => Err(Error::param(
            "baseline",
            format!("\"{baseline}\""),
            "a policy kind listed with exactly one configuration (no sweep)",
        )),
    }
}

/// Cells of kind `private` with their value of `param`, sorted by that value.
fn private_cells(plan: &Plan, private: &str, param: &str) -> Vec<(usize, f64)> {
    let mut v: Vec<(usize, f64)> = plan
        .cells
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind() == private)
        .filter_map(|(i, c)| {
            c.params()
                .iter()
                .find(|(k, _)| *k == param)
                .map(|&(_, v)| (i, v))
        })
        .collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    v
}

/// Means of both cells at checkpoint `i`, and the summary of paired differences.
fn paired(private: &[Vec<f64>], base: &[Vec<f64>], i: usize) -> (f64, f64, Summary) {
    let n = private.len().min(base.len());
    let mp = private[..n].iter().map(|r| r[i]).sum::<f64>() / n as f64;
    let mb = base[..n].iter().map(|r| r[i]).sum::<f64>() / n as f64;
    let mut d: Vec<f64> = (0..n).map(|r| private[r][i] - base[r][i]).collect();
    (mp, mb, Summary::of(&mut d))
}
