//! Experiment files: TOML in, a results folder out.
//!
//! Two stages, as in ripgrep's `LowArgs`/`HiArgs`:
//! 1. [`ExperimentSpec`] is the file as written (serde, unknown keys refused).
//! 2. [`Plan`] validates it against the registry, expands sweeps (any list of numbers in a
//!    `[[policy]]` table is a sweep axis) and holds buildable [`crate::sim::Cell`]s.
//!
//! [`run`] executes a plan on the current rayon pool; [`write_outputs`] writes `manifest.json`,
//! `summary.csv`, `regret.svg/png` and the figures the file asks for.

pub mod bai;
pub mod comparison;
mod contextual;
mod figures;
mod finite;
pub mod ldp_figures;
mod linear;
mod output;
mod plan;
pub mod plot;
mod spec;

pub use comparison::ComparisonSpec;
pub use contextual::{ContextualCell, ContextualGroup};
pub use figures::FigureSpec;
pub use finite::FiniteCell;
pub use linear::{LinearCell, simulate_linear};
pub use output::{Outcome, run, write_outputs};
pub use plan::{Plan, expand_sweep};
pub use spec::{CheckpointSpec, ExperimentSpec};
