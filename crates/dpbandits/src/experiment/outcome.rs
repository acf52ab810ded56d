//! The runs of a plan ([`Outcome`]) and what every output file of it shares (figure notes): a
//! leaf of the output writers (`output.rs`, `bai.rs`, the figures), which all read it.

use super::Plan;
use crate::math::stats::Summary;
use crate::sim::{CellRuns, run_jobs};

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

/// The notes of a figure: its own (from the file), then the quick-look warning when `--runs` or
/// `--horizon` changed the file's values.
pub(super) fn notes(plan: &Plan, own: Option<&str>) -> Vec<String> {
    own.into_iter()
        .map(str::to_string)
        .chain(plan.spec.overrides.clone())
        .collect()
}
