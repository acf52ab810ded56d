//! Grouped jobs: several cells simulated together on common random numbers.
//!
//! Some settings are expensive to *generate* (contextual bandits draw a fresh decision set every
//! round) while each policy step is cheap. Running every cell separately would generate the same
//! contexts once per policy. A [`CellGroup`] runs one run of *all* its member cells in a single
//! job: it generates each round once and drives every member on it, writing each member's metric
//! into its own row.
//!
//! # Contract
//! * A member's result must not depend on which other members are simulated with it (the members
//!   do not interact; each draws its own private randomness from streams keyed by its label).
//!   Running a member alone through [`super::Cell::run`] gives exactly the same numbers.
//! * Output stays per cell: [`super::JobSet`] makes one job per `(group, run)` whose row is the
//!   listed members' rows concatenated, and [`super::JobSet::assemble`] returns per-cell runs in
//!   cell order and run order, byte-identical for any thread count.
//!
//! [`super::run_jobs`] uses groups by itself as soon as a cell reports one ([`super::Cell::group`]), so
//! callers need not change.

use crate::error::Result;
use std::fmt::Debug;
use std::sync::Arc;

/// Cells that are simulated together, one job per run.
pub trait CellGroup: Send + Sync + Debug {
    /// Number of member cells.
    fn members(&self) -> usize;
    /// Values one run of a member produces.
    fn width(&self) -> usize;
    /// Run number `run` of every member; write member `m`'s values into `out[m]` (each of
    /// length [`CellGroup::width`]).
    fn run_group(&self, run: u64, out: &mut [Vec<f64>]) -> Result<()>;
}

/// A cell's place in a group.
#[derive(Debug, Clone)]
pub struct GroupMember {
    /// The group.
    pub group: Arc<dyn CellGroup>,
    /// This cell's member index in the group.
    pub index: usize,
}
