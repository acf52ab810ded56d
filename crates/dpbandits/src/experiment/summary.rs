//! The tidy summary table: `summary.csv` of every setting, and `res.summary` in Python.
//!
//! One row per (cell, checkpoint) in the regret settings, one row per cell in BAI. Columns:
//! `label`, `kind`, then one column per parameter (the union of every cell's
//! [`crate::sim::Cell::params`] in first-seen order; empty where a parameter does not apply to a
//! cell), then the setting's statistics, then `status`. Values are typed ([`Field`]) and written
//! with the `csv` crate through serde, so a spreadsheet or `pandas.read_csv` reads numbers, not a
//! packed `k=v;k=v` string.
//!
//! # Status
//! `ok`, or why a row is unusual: `error: ...` for a cell that failed (its statistics are
//! empty), or the non-finite values it holds and why (a parameter `rho = inf` is the
//! non-private member of a family; a NaN statistic is written empty, e.g. a BAI `error_rate`
//! when every run hit the sample cap). A non-finite number never appears without a status
//! naming it.

use super::Plan;
use super::outcome::Outcome;
use crate::config::Setting;
use crate::error::{Error, Result};
use serde::Serialize;

/// One typed value of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Field {
    /// Text.
    Str(String),
    /// A count.
    Int(u64),
    /// A number (`inf` is written `inf`; NaN is never written: see the module docs).
    Num(f64),
    /// A flag.
    Bool(bool),
}

/// The table: column names and rows of optional fields (`None` = empty cell).
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryTable {
    /// Column names.
    pub columns: Vec<String>,
    /// Rows, each as long as `columns`.
    pub rows: Vec<Vec<Option<Field>>>,
}

/// The union of the cells' parameter names, in first-seen order.
fn param_names(plan: &Plan) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = vec![];
    for c in &plan.cells {
        for (k, _) in c.params() {
            if !names.contains(&k) {
                names.push(k);
            }
        }
    }
    names
}

/// Why a non-finite value is there.
fn note(column: &str, x: f64, is_param: bool) -> String {
    if is_param && x == f64::INFINITY {
        format!("{column}=inf (no budget: the non-private member of the family)")
    } else if x.is_nan() {
        format!("{column} undefined (written empty)")
    } else {
        format!("{column}={x} (non-finite)")
    }
}

/// Build rows: the fixed head (label, kind, params), the statistics, and the status computed
/// from the non-finite values (NaN statistics emptied).
struct Builder {
    names: Vec<&'static str>,
    stat_columns: Vec<&'static str>,
    rows: Vec<Vec<Option<Field>>>,
}

impl Builder {
    /// The row of a cell that failed: empty statistics, the error as its status.
    fn push_error(
        &mut self,
        label: String,
        kind: &str,
        params: &[(&'static str, f64)],
        error: &dyn std::fmt::Display,
    ) {
        let stats = vec![None; self.stat_columns.len()];
        self.push(label, kind, params, stats, vec![format!("error: {error}")]);
    }

    fn push(
        &mut self,
        label: String,
        kind: &str,
        params: &[(&'static str, f64)],
        stats: Vec<Option<Field>>,
        mut notes: Vec<String>,
    ) {
        let mut row = vec![Some(Field::Str(label)), Some(Field::Str(kind.to_string()))];
        for n in &self.names {
            let v = params.iter().find(|(k, _)| k == n).map(|p| p.1);
            if let Some(x) = v
                && !x.is_finite()
            {
                notes.push(note(n, x, true));
            }
            row.push(v.filter(|x| !x.is_nan()).map(Field::Num));
        }
        for (col, f) in self.stat_columns.iter().zip(stats) {
            match f {
                Some(Field::Num(x)) if !x.is_finite() => {
                    notes.push(note(col, x, false));
                    row.push(if x.is_nan() {
                        None
                    } else {
                        Some(Field::Num(x))
                    });
                }
                f => row.push(f),
            }
        }
        let status = if notes.is_empty() {
            "ok".to_string()
        } else {
            notes.join("; ")
        };
        row.push(Some(Field::Str(status)));
        self.rows.push(row);
    }

    fn finish(self, head: &[&str]) -> SummaryTable {
        let mut columns: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        columns.extend(self.names.iter().map(|s| s.to_string()));
        columns.extend(self.stat_columns.iter().map(|s| s.to_string()));
        columns.push("status".into());
        SummaryTable {
            columns,
            rows: self.rows,
        }
    }
}

const REGRET: &[&str] = &["t", "mean", "std", "sem", "q05", "q50", "q95", "runs"];
const BAI: &[&str] = &[
    "threshold",
    "threshold_proved",
    "runs",
    "capped",
    "mean_tau",
    "std_tau",
    "sem_tau",
    "q05_tau",
    "median_tau",
    "q95_tau",
    "max_tau",
    "errors",
    "error_rate",
    "error_upper95",
    "t_star",
    "lower_bound",
    "ratio_to_lower_bound",
    "mean_noise_draws",
];

impl SummaryTable {
    /// The summary of `outcome` (the runs of `plan`'s cells).
    pub fn of(plan: &Plan, outcome: &Outcome) -> SummaryTable {
        let bai = plan.setting == Setting::Bai;
        let mut b = Builder {
            names: param_names(plan),
            stat_columns: if bai { BAI.to_vec() } else { REGRET.to_vec() },
            rows: vec![],
        };
        if bai {
            for (c, r) in plan.cells.iter().zip(super::bai::rows(plan, outcome)) {
                let params = c.params();
                match r {
                    Ok(r) => {
                        let mut notes = vec![];
                        if r.error_rate.is_nan() {
                            notes.push(
                                "error_rate undefined: every run hit the sample cap (no stopped run; written empty)"
                                    .to_string(),
                            );
                        }
                        let num = |x: f64| {
                            if x.is_nan() && !notes.is_empty() {
                                None
                            } else {
                                Some(Field::Num(x))
                            }
                        };
                        let stats = vec![
                            Some(Field::Str(r.threshold.clone())),
                            Some(Field::Bool(r.threshold_proved)),
                            Some(Field::Int(r.runs)),
                            Some(Field::Int(r.capped)),
                            num(r.tau.mean),
                            num(r.tau.std),
                            num(r.tau.sem),
                            num(r.tau.q05),
                            num(r.tau.q50),
                            num(r.tau.q95),
                            num(r.tau_max),
                            Some(Field::Int(r.errors)),
                            num(r.error_rate),
                            num(r.error_upper95),
                            num(r.t_star),
                            num(r.lower_bound),
                            num(r.ratio),
                            num(r.noise_draws),
                        ];
                        b.push(r.label.clone(), c.kind(), &params, stats, notes);
                    }
                    Err(e) => b.push_error(c.label(), c.kind(), &params, &e),
                }
            }
            return b.finish(&["label", "kind"]);
        }
        let grid = plan.grid.points();
        for ((c, sums), r) in plan
            .cells
            .iter()
            .zip(outcome.summaries())
            .zip(&outcome.cells)
        {
            let params = c.params();
            match (sums, r) {
                (Some(sums), _) => {
                    for (&t, s) in grid.iter().zip(&sums) {
                        let stats = vec![
                            Some(Field::Int(t)),
                            Some(Field::Num(s.mean)),
                            Some(Field::Num(s.std)),
                            Some(Field::Num(s.sem)),
                            Some(Field::Num(s.q05)),
                            Some(Field::Num(s.q50)),
                            Some(Field::Num(s.q95)),
                            Some(Field::Int(s.runs as u64)),
                        ];
                        b.push(c.label(), c.kind(), &params, stats, vec![]);
                    }
                }
                (None, r) => {
                    let e = r.as_ref().err().map_or(String::new(), |e| e.to_string());
                    b.push_error(c.label(), c.kind(), &params, &e);
                }
            }
        }
        b.finish(&["label", "kind"])
    }

    /// The table as CSV text (header line, then one line per row).
    ///
    /// # Errors
    /// A value the CSV writer refuses (not expected).
    pub fn to_csv(&self) -> Result<String> {
        let mut w = csv::Writer::from_writer(vec![]);
        let err = |e: csv::Error| Error::Config(format!("summary.csv: {e}"));
        w.write_record(&self.columns).map_err(err)?;
        for row in &self.rows {
            w.serialize(row).map_err(err)?;
        }
        let bytes = w
            .into_inner()
            .map_err(|e| Error::Config(format!("summary.csv: {e}")))?;
        String::from_utf8(bytes).map_err(|e| Error::Config(format!("summary.csv: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::run;

    fn table(spec: &str) -> (SummaryTable, String) {
        let plan = Plan::from_toml(spec).unwrap();
        let out = run(&plan, &|| {});
        let t = SummaryTable::of(&plan, &out);
        let csv = t.to_csv().unwrap();
        (t, csv)
    }

    #[test]
    fn regret_table_has_a_column_per_parameter() {
        let (t, csv) = table(
            "name = \"s\"\nmaster_seed = 1\nhorizon = 200\nruns = 2\n[checkpoints]\npoints = 3\n\
             [env]\nkind = \"bernoulli\"\nmeans = [0.6, 0.4]\n\
             [[policy]]\nkind = \"ucb1\"\n[[policy]]\nkind = \"adac_ucb\"\nrho = [0.5, inf]\n",
        );
        let head = csv.lines().next().unwrap();
        assert!(head.starts_with("label,kind,"), "{head}");
        assert!(
            head.contains(",rho,") && head.ends_with(",runs,status"),
            "{head}"
        );
        assert!(!head.contains("params"));
        let n_cp = t.rows.len() / 3;
        assert_eq!(t.rows.len(), 3 * n_cp);
        let rho = t.columns.iter().position(|c| c == "rho").unwrap();
        let status = t.columns.len() - 1;
        // ucb1: no rho (empty), status ok.
        assert_eq!(t.rows[0][rho], None);
        assert_eq!(t.rows[0][status], Some(Field::Str("ok".into())));
        // rho = inf is written with a status saying why.
        let inf_row = t
            .rows
            .iter()
            .find(|r| r[rho] == Some(Field::Num(f64::INFINITY)))
            .unwrap();
        let Some(Field::Str(s)) = &inf_row[status] else {
            panic!()
        };
        assert!(s.contains("rho=inf"), "{s}");
        for line in csv.lines().filter(|l| l.contains("inf")) {
            assert!(line.contains("rho=inf"), "{line}");
        }
        assert!(!csv.to_lowercase().contains("nan"));
    }

    #[test]
    fn bai_error_rate_of_capped_runs_is_empty_with_a_status() {
        let (t, csv) = table(
            "name = \"b\"\nmaster_seed = 1\nhorizon = 20\nruns = 3\n\
             [env]\nkind = \"bai_bernoulli\"\nmeans = [0.6, 0.5, 0.4]\ndelta = 0.05\n\
             [[policy]]\nkind = \"eb_tci\"\n[[policy]]\nkind = \"dp_tt\"\nepsilon = 1.0\n",
        );
        assert_eq!(t.rows.len(), 2);
        let col = |n: &str| t.columns.iter().position(|c| c == n).unwrap();
        for r in &t.rows {
            assert_eq!(r[col("capped")], Some(Field::Int(3)));
            assert_eq!(r[col("error_rate")], None);
            let Some(Field::Str(s)) = &r[col("status")] else {
                panic!()
            };
            assert!(s.contains("every run hit the sample cap"), "{s}");
        }
        assert_eq!(t.rows[0][col("epsilon")], Some(Field::Num(f64::INFINITY)));
        assert_eq!(t.rows[1][col("epsilon")], Some(Field::Num(1.0)));
        assert!(!csv.to_lowercase().contains("nan"), "{csv}");
    }
}
