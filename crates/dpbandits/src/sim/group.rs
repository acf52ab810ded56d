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
//!   Running a member alone through [`Cell::run`] gives exactly the same numbers.
//! * Output stays per cell: [`run_grouped`] returns the same `Vec<CellRuns>` shape as
//!   [`super::run_jobs`], in cell order and run order, byte-identical for any thread count (a job
//!   is `(unit, run)` where a unit is a group or an ungrouped cell; results are collected in job
//!   order).
//!
//! [`super::run_jobs`] switches to this path by itself as soon as one cell reports a group
//! ([`Cell::group`]), so callers need not change.

use super::{Cell, CellRuns};
use crate::error::Result;
use rayon::prelude::*;
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

enum Unit {
    Single(usize),
    /// The group and, for each member index, the cell index it belongs to (if the cell is listed).
    Group(Arc<dyn CellGroup>, Vec<Option<usize>>),
}

/// Run every cell (grouped cells one job per group and run) and return per-cell results, as
/// [`super::run_jobs`] does. `progress` is called once per finished (cell, run).
pub fn run_grouped(
    cells: &[Box<dyn Cell>],
    runs: u64,
    progress: &(dyn Fn() + Sync),
) -> Vec<CellRuns> {
    let mut units: Vec<Unit> = vec![];
    for (ci, c) in cells.iter().enumerate() {
        match c.group() {
            None => units.push(Unit::Single(ci)),
            Some(m) => {
                let existing = units.iter_mut().find_map(|u| match u {
                    Unit::Group(g, members) if Arc::ptr_eq(g, &m.group) => Some(members),
                    _ => None,
                });
                let members = match existing {
                    Some(members) => members,
                    None => {
                        let n = m.group.members();
                        units.push(Unit::Group(m.group.clone(), vec![None; n]));
                        match units.last_mut() {
                            Some(Unit::Group(_, members)) => members,
                            _ => unreachable!("just pushed a group"),
                        }
                    }
                };
                members[m.index] = Some(ci);
            }
        }
    }
    let jobs = units.len() as u64 * runs;
    // Each job returns (cell index, result) pairs.
    let results: Vec<Vec<(usize, Result<Vec<f64>>)>> = (0..jobs)
        .into_par_iter()
        .map(|j| {
            let (u, r) = ((j / runs) as usize, j % runs);
            match &units[u] {
                Unit::Single(ci) => {
                    let mut out = vec![0.0; cells[*ci].width()];
                    let res = cells[*ci].run(r, &mut out).map(|()| out);
                    progress();
                    vec![(*ci, res)]
                }
                Unit::Group(g, members) => {
                    let mut out = vec![vec![0.0; g.width()]; members.len()];
                    let res = g.run_group(r, &mut out);
                    let mut v = vec![];
                    for (m, row) in out.into_iter().enumerate() {
                        let Some(ci) = members[m] else { continue };
                        v.push((
                            ci,
                            match &res {
                                Ok(()) => Ok(row),
                                Err(e) => Err(crate::error::Error::Config(e.to_string())),
                            },
                        ));
                        progress();
                    }
                    v
                }
            }
        })
        .collect();
    // Scatter into per-cell, per-run slots (jobs are in (unit, run) order, so runs stay in order).
    let mut per_cell: Vec<Vec<Result<Vec<f64>>>> = (0..cells.len()).map(|_| vec![]).collect();
    for job in results {
        for (ci, res) in job {
            per_cell[ci].push(res);
        }
    }
    per_cell
        .into_iter()
        .map(|rs| {
            let mut ok = Vec::with_capacity(rs.len());
            for r in rs {
                ok.push(r?);
            }
            Ok(ok)
        })
        .collect()
}
