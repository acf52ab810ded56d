//! Experiment files: TOML in, a results folder out, for every setting.
//!
//! One path, as in ripgrep's `LowArgs`/`HiArgs`:
//! 1. [`ExperimentSpec`] is the file as written (serde, unknown keys refused).
//! 2. [`Plan`] validates it against the registry, expands sweeps (any list of scalars in a
//!    `[[policy]]` table is a sweep axis) and holds buildable [`crate::sim::Cell`]s: one planner
//!    loop, whatever the setting (the setting is the environment's).
//! 3. [`run`] executes the plan's ordered `(cell, run)` jobs on the current rayon pool
//!    ([`crate::sim::run_jobs`]), byte-identical for any thread count.
//! 4. [`write_outputs`] writes `manifest.json`, `summary.csv` (the tidy [`SummaryTable`]), the plots (SVG, PNG and the plot
//!    data `<stem>.plot.json`) and `report.html` ([`report`]).

mod bai;
mod comparison;
pub mod design;
pub mod durable;
mod figures;
pub mod journal;
pub mod ldp_figures;
mod outcome;
mod output;
mod plan;
pub mod plot;
pub mod report;
mod spec;
pub mod summary;
pub mod trial;

pub use bai::BaiRow;
pub use comparison::{BudgetRow, ComparisonSpec, budget_row};
pub use figures::FigureSpec;
pub use outcome::{Outcome, run};
pub use output::{manifest, write_outputs};
pub use plan::{Limits, Plan, Work, expand_sweep};
pub use spec::{CheckpointSpec, ExperimentSpec, parse_count};
pub use summary::{Field, SummaryTable};
pub use trial::TrialSpec;
