//! `[comparison]`: comparing algorithms with different privacy currencies at **equal privacy**.
//!
//! Algorithms of the literature state their budgets in different currencies (pure epsilon-DP,
//! rho-zCDP, epsilon-local DP). A comparison is only fair when the budgets are converted
//! explicitly. With a `[comparison]` table the experiment
//! * expresses every private policy's budget in zCDP (`epsilon`-DP, central or local, implies
//!   `epsilon^2/2`-zCDP, Bun & Steinke 2016 Prop. 1.4, rounded up) and as `(epsilon, delta)`-DP at the
//!   given `delta` (pure DP: `(epsilon, 0)`; zCDP: the chosen conversion, [`ZcdpConversion`]);
//! * with `require_equal = true` (default) refuses the plan unless every private policy has the
//!   same zCDP budget (relative tolerance 1e-9), so "equal privacy" is checked, not assumed;
//! * writes the conversions into `manifest.json` (key `comparison`), and a `comparison.md` table
//!   (privacy columns + regret at the horizon) and a log-log `comparison.{svg,png}` plot.
//!
//! ```toml
//! [comparison]
//! delta = 1e-6             # for the (epsilon, delta) column
//! conversion = "cks2020"   # or "bun_steinke"
//! require_equal = true
//! bounds = true            # overlay each algorithm's theoretical regret bound (default false)
//! ```
//!
//! With `bounds = true` the plot has log-log axes and every policy whose configuration states a
//! regret bound (`regret_bound` of its setting's configuration trait: the paper's formula with its
//! constants, [`RegretBound`]) gets its bound as a theory curve (grey, dashed, `bound: <label>`),
//! and `comparison.md` a second table: per policy, the log-log slope of its mean regret over the
//! last decade of checkpoints (`[T/10, T]`, least squares) beside its bound's slope over the same
//! decade, with the bound's source and formula. A bound with alternative rates
//! ([`RegretBound::alternatives`], e.g. LinPriv's published rate beside its correction) draws each
//! as a further curve `bound (<tag>): <label>` and gives it a slope row `<label> [<tag>]`. Adding
//! an algorithm to a comparison file is one `[[policy]]` table; its bound comes with its kind.

use super::Plan;
use super::plot::{PlotSpec, Role, Series};
use crate::config::RegretBound;
use crate::error::{Error, Result};
use crate::math::stats::Summary;
use crate::privacy::{
    Budget, PrivacyGuarantee, TrustModel, ZcdpConversion, pure_to_zcdp, zcdp_to_approx_dp,
};
use crate::sim::{Cell, CellRuns};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The `[comparison]` table of an experiment file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ComparisonSpec {
    /// delta for the `(epsilon, delta)` column, in (0, 1).
    pub delta: f64,
    /// zCDP -> (epsilon, delta) conversion (default `cks2020`).
    #[serde(default)]
    pub conversion: ZcdpConversion,
    /// Refuse the plan unless all private policies have the same zCDP budget (default true).
    #[serde(default = "yes")]
    pub require_equal: bool,
    /// Overlay each algorithm's theoretical regret bound, log-log axes, and the slope table
    /// (default false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bounds: bool,
}

fn yes() -> bool {
    true
}

/// A guarantee's budget in every currency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetRow {
    /// The budget as the algorithm states it.
    pub stated: String,
    /// Trust model.
    pub model: TrustModel,
    /// Pure epsilon, if the algorithm is pure DP (central or local).
    pub pure_epsilon: Option<f64>,
    /// zCDP rho (converted when the statement is pure DP).
    pub zcdp_rho: Option<f64>,
    /// How `zcdp_rho` was obtained.
    pub zcdp_source: &'static str,
    /// epsilon of `(epsilon, delta)`-DP at the comparison's delta.
    pub approx_epsilon: Option<f64>,
    /// How `approx_epsilon` was obtained.
    pub approx_source: String,
}

/// Express `g`'s budget in zCDP and `(epsilon, delta)`-DP.
///
/// # Errors
/// Invalid `delta`, or a budget the conversions refuse.
pub fn budget_row(g: &PrivacyGuarantee, delta: f64, how: ZcdpConversion) -> Result<BudgetRow> {
    let stated = g.budget.to_string();
    let row = |pure, rho, zs, approx, src: String| BudgetRow {
        stated: stated.clone(),
        model: g.model,
        pure_epsilon: pure,
        zcdp_rho: rho,
        zcdp_source: zs,
        approx_epsilon: approx,
        approx_source: src,
    };
    Ok(match g.budget {
        Budget::NonPrivate => row(None, None, "-", None, "-".into()),
        Budget::PureDp { epsilon } => {
            let rho = pure_to_zcdp(epsilon)?;
            let via = zcdp_to_approx_dp(rho, delta, how)?;
            // both are valid statements; report the smaller
            if epsilon <= via {
                row(
                    Some(epsilon),
                    Some(rho),
                    "epsilon^2/2 (Bun & Steinke 2016, Prop. 1.4)",
                    Some(epsilon),
                    "pure DP is (epsilon, 0)-DP".into(),
                )
            } else {
                row(
                    Some(epsilon),
                    Some(rho),
                    "epsilon^2/2 (Bun & Steinke 2016, Prop. 1.4)",
                    Some(via),
                    format!("via zCDP: {}", how.describe()),
                )
            }
        }
        Budget::Zcdp { rho } => row(
            None,
            Some(rho),
            "stated",
            Some(zcdp_to_approx_dp(rho, delta, how)?),
            how.describe().into(),
        ),
        Budget::ApproxDp { epsilon, delta: d } => row(
            None,
            None,
            "-",
            (d <= delta).then_some(epsilon),
            format!("stated (delta = {d})"),
        ),
        #[allow(unreachable_patterns)]
        _ => row(None, None, "-", None, "unknown budget".into()),
    })
}

impl ComparisonSpec {
    /// Check the parameters and, with `require_equal`, that all private cells have the same zCDP
    /// budget.
    ///
    /// # Errors
    /// Bad `delta`; unequal budgets (the message lists them).
    pub fn validate(&self, cells: &[Box<dyn Cell>]) -> Result<()> {
        crate::error::check::open_unit("comparison.delta", self.delta)?;
        if !self.require_equal {
            return Ok(());
        }
        let mut rhos = vec![];
        for c in cells {
            let row = budget_row(&c.guarantee(), self.delta, self.conversion)?;
            if let Some(rho) = row.zcdp_rho {
                rhos.push((c.label(), rho));
            } else if c.guarantee().is_private() {
                return Err(Error::Config(format!(
                    "comparison: {} states {}, which has no zCDP equivalent; set require_equal = false",
                    c.label(),
                    row.stated
                )));
            }
        }
        if let Some(&(_, r0)) = rhos.first()
            && rhos.iter().any(|&(_, r)| (r - r0).abs() > 1e-9 * r0.max(r))
        {
            let list: Vec<String> = rhos.iter().map(|(l, r)| format!("{l}: {r}")).collect();
            return Err(Error::Config(format!(
                "comparison.require_equal: the private policies do not have equal zCDP budgets \
                 (epsilon-DP counts as epsilon^2/2-zCDP): {}",
                list.join("; ")
            )));
        }
        Ok(())
    }

    /// The manifest entry.
    ///
    /// # Errors
    /// As [`budget_row`].
    pub fn manifest(&self, cells: &[Box<dyn Cell>]) -> Result<serde_json::Value> {
        let rows: Vec<serde_json::Value> = cells
            .iter()
            .map(|c| {
                budget_row(&c.guarantee(), self.delta, self.conversion)
                    .map(|r| json!({"policy": c.label(), "budget": r}))
            })
            .collect::<Result<_>>()?;
        Ok(json!({
            "rule": "equal privacy: every private policy has the same zCDP budget; epsilon-DP (central or local) counts as epsilon^2/2-zCDP (Bun & Steinke 2016, Prop. 1.4)",
            "require_equal": self.require_equal,
            "delta": self.delta,
            "zcdp_to_approx_dp": self.conversion,
            "zcdp_to_approx_dp_statement": self.conversion.describe(),
            "policies": rows,
        }))
    }

    /// Write `comparison.md` (one row per cell: privacy in every currency, regret at the horizon)
    /// and a log-log plot `comparison.{svg,png}`.
    ///
    /// # Errors
    /// I/O and plotting errors.
    pub fn write(&self, plan: &Plan, cells: &[CellRuns], dir: &Path) -> Result<Vec<PathBuf>> {
        let grid = plan.grid.points();
        let horizon = plan.grid.horizon();
        let mut md = format!(
            "Regret at T = {horizon} ({} runs), experiment `{}`; (epsilon, delta) at delta = {} via {}.\n\n\
             | policy | privacy | model | stated budget | zCDP rho | (eps, delta) eps | mean regret | sem | median | q05 | q95 |\n\
             |---|---|---|---|---|---|---|---|---|---|---|\n",
            plan.spec.runs,
            plan.spec.name,
            self.delta,
            match self.conversion {
                ZcdpConversion::Cks2020 => "Canonne-Kamath-Steinke 2020",
                ZcdpConversion::BunSteinke => "Bun-Steinke Prop. 1.3",
            }
        );
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
        let mut series = vec![];
        let (mut overlays, mut slopes) = (vec![], vec![]);
        for (c, runs) in plan.cells.iter().zip(cells) {
            let g = c.guarantee();
            let row = budget_row(&g, self.delta, self.conversion)?;
            let model = match row.model {
                TrustModel::Central => "central",
                TrustModel::Local => "local",
                TrustModel::None => "-",
            };
            let cols = match runs {
                Ok(runs) if !runs.is_empty() => {
                    let mut last: Vec<f64> = runs.iter().map(|r| r[r.len() - 1]).collect();
                    let s = Summary::of(&mut last);
                    let means: Vec<(f64, f64)> = grid
                        .iter()
                        .enumerate()
                        .map(|(i, &t)| {
                            let m = runs.iter().map(|r| r[i]).sum::<f64>() / runs.len() as f64;
                            (t as f64, m)
                        })
                        .collect();
                    let band = grid
                        .iter()
                        .enumerate()
                        .map(|(i, &t)| {
                            let s = Summary::of(&mut runs.iter().map(|r| r[i]).collect::<Vec<_>>());
                            (t as f64, s.q05, s.q95)
                        })
                        .collect();
                    if self.bounds
                        && let Some(b) = c.regret_bound()
                    {
                        // The bound, then its alternative rates (`bound (<tag>): <label>`).
                        let every = std::iter::once(("", &b))
                            .chain(b.alternatives.iter().map(|(tag, a)| (*tag, a)));
                        for (tag, b) in every {
                            let (row, name) = if tag.is_empty() {
                                (c.label(), format!("bound: {}", c.label()))
                            } else {
                                (
                                    format!("{} [{tag}]", c.label()),
                                    format!("bound ({tag}): {}", c.label()),
                                )
                            };
                            slopes.push(slope_row(&row, &means, b, horizon as f64));
                            overlays.push(Series {
                                name,
                                // From t = 2 on: ln t is 0 at t = 1 (the bounds are stated for
                                // T >= 2).
                                points: means
                                    .iter()
                                    .filter(|&&(t, _)| t >= 2.0)
                                    .map(|&(t, _)| (t, b.at(t)))
                                    .collect(),
                                band: None,
                                role: Role::Theory,
                            });
                        }
                    }
                    series.push(Series {
                        name: c.label(),
                        points: means,
                        band: Some(band),
                        role: if g.is_private() {
                            Role::Data
                        } else {
                            Role::Baseline
                        },
                    });
                    format!(
                        "{:.1} | {:.1} | {:.1} | {:.1} | {:.1}",
                        s.mean, s.sem, s.q50, s.q05, s.q95
                    )
                }
                Ok(_) => "- | - | - | - | -".into(),
                Err(e) => format!("failed: {e} | | | |"),
            };
            let _ = writeln!(
                md,
                "| `{}` | {} | {model} | {} | {} | {} | {cols} |",
                c.label(),
                if g.is_private() {
                    g.notion.as_str()
                } else {
                    "none"
                },
                row.stated,
                fmt(row.zcdp_rho),
                fmt(row.approx_epsilon),
            );
        }
        if self.bounds {
            let _ = write!(
                md,
                "\nLog-log slope of the mean regret over the last decade of checkpoints (least \
                 squares on [T/10, T]) and of the algorithm's theoretical bound over the same \
                 decade (`-`: no bound stated for the kind).\n\n\
                 | policy | measured slope | bound slope | bound at T | bound (source) |\n\
                 |---|---|---|---|---|\n"
            );
            for row in &slopes {
                md.push_str(row);
            }
            series.extend(overlays);
        }
        let p = dir.join("comparison.md");
        std::fs::write(&p, md).map_err(|e| Error::Io {
            path: p.display().to_string(),
            error: e,
        })?;
        let mut files = vec![p];
        let spec = PlotSpec {
            title: format!(
                "{}: mean cumulative pseudo-regret at equal privacy ({} runs; band 5%-95% over runs)",
                plan.spec.name, plan.spec.runs
            ),
            x_label: "t".into(),
            y_label: "regret".into(),
            // linear y: a log axis cannot show zero regret (the bound overlays ask for log-log)
            log_x: true,
            log_y: self.bounds,
            series,
            notes: super::outcome::notes(plan, None),
            ..Default::default()
        };
        files.extend(super::plot::draw(&dir.join("comparison"), &spec)?);
        Ok(files)
    }
}

/// Least-squares slope of `ln y` on `ln t` over the points with `t >= t_max / 10` and `y > 0`
/// (`None` with fewer than two).
pub fn loglog_slope(points: &[(f64, f64)], t_max: f64) -> Option<f64> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|&&(t, y)| t >= t_max / 10.0 && t > 0.0 && y > 0.0)
        .map(|&(t, y)| (t.ln(), y.ln()))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// One row of the slope table.
fn slope_row(label: &str, means: &[(f64, f64)], b: &RegretBound, horizon: f64) -> String {
    let measured = loglog_slope(means, horizon).map_or("-".into(), |s| format!("{s:.3}"));
    format!(
        "| `{label}` | {measured} | {:.3} | {:.4e} | {} ({}) |\n",
        b.slope(horizon),
        b.at(horizon),
        b.formula,
        b.source
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::{BoundaryMode, RewardBoundary};

    fn g(budget: Budget, model: TrustModel) -> PrivacyGuarantee {
        PrivacyGuarantee {
            notion: "test".into(),
            model,
            adjacency: "-".into(),
            budget,
            mechanism: "-".into(),
            boundary: Some(RewardBoundary::unit(BoundaryMode::Clip)),
            noise: crate::privacy::NoiseGrade::Simulation,
        }
    }

    #[test]
    fn rows() {
        let r = budget_row(
            &g(Budget::PureDp { epsilon: 1.0 }, TrustModel::Central),
            1e-6,
            ZcdpConversion::Cks2020,
        )
        .unwrap();
        assert_eq!(r.zcdp_rho, Some(0.5));
        assert_eq!(r.approx_epsilon, Some(1.0));
        let z = budget_row(
            &g(Budget::Zcdp { rho: 0.1 }, TrustModel::Central),
            1e-6,
            ZcdpConversion::Cks2020,
        )
        .unwrap();
        assert!((z.approx_epsilon.unwrap() - 2.142).abs() < 1e-3);
        let n = budget_row(
            &PrivacyGuarantee::non_private(),
            1e-6,
            ZcdpConversion::Cks2020,
        )
        .unwrap();
        assert_eq!(n.zcdp_rho, None);
    }

    /// The slope of `c t^a` is `a`; of a log curve, small; too few points: none.
    #[test]
    fn slopes() {
        let pts: Vec<(f64, f64)> = (1..=40)
            .map(|i| {
                let t = 10f64.powf(i as f64 / 10.0);
                (t, 3.0 * t.sqrt())
            })
            .collect();
        assert!((loglog_slope(&pts, 1e4).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(loglog_slope(&pts[..1], 1e4), None);
        let b = RegretBound {
            source: "test",
            formula: "T^0.5".into(),
            terms: vec![crate::config::BoundTerm {
                coef: 2.0,
                t_pow: 0.5,
                log_pow: 0.0,
                log_mult: 1.0,
            }],
            alternatives: vec![],
        };
        assert!((b.slope(1e6) - 0.5).abs() < 1e-12);
        assert!((b.at(100.0) - 20.0).abs() < 1e-12);
    }
}
