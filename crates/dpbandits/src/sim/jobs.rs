//! The ordered job list of a set of cells: what one job is, how it runs, and how job results
//! become per-cell runs.
//!
//! A *job* is the unit that is scheduled, journalled, sharded and resumed. Jobs are numbered
//! `0..len` as `unit * runs + run`, where a *unit* is either an ungrouped cell or a whole
//! [`CellGroup`] (all its listed members are simulated together on common random numbers; see
//! `group.rs`). A job's result is one flat row of [`JobSet::width`] values: the cell's row, or
//! the rows of the group's listed members concatenated in member order. Job numbers and widths
//! depend only on the cells and `runs`, so a journal written by one process, a resumed process
//! or a shard can be read back by any other.

use super::{Cell, CellGroup, CellRuns};
use crate::error::{Error, Result};
use std::sync::Arc;

enum Unit {
    Single(usize),
    /// The group and, for each member index, the cell index it belongs to (if the cell is listed).
    Group(Arc<dyn CellGroup>, Vec<Option<usize>>),
}

/// The jobs of `cells` x `runs`, in their fixed order.
pub struct JobSet<'a> {
    cells: &'a [Box<dyn Cell>],
    runs: u64,
    units: Vec<Unit>,
}

impl std::fmt::Debug for JobSet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSet")
            .field("units", &self.units.len())
            .field("runs", &self.runs)
            .finish()
    }
}

impl<'a> JobSet<'a> {
    /// The jobs of `cells` (grouped cells form one unit per group, at the position of the first
    /// listed member) with `runs` runs each.
    pub fn new(cells: &'a [Box<dyn Cell>], runs: u64) -> Self {
        let mut units: Vec<Unit> = vec![];
        for (ci, c) in cells.iter().enumerate() {
            match c.group() {
                None => units.push(Unit::Single(ci)),
                Some(m) => {
                    let pos = units
                        .iter()
                        .position(|u| matches!(u, Unit::Group(g, _) if Arc::ptr_eq(g, &m.group)));
                    let pos = pos.unwrap_or_else(|| {
                        let n = m.group.members();
                        units.push(Unit::Group(m.group.clone(), vec![None; n]));
                        units.len() - 1
                    });
                    if let Unit::Group(_, members) = &mut units[pos] {
                        members[m.index] = Some(ci);
                    }
                }
            }
        }
        JobSet { cells, runs, units }
    }

    /// Number of jobs.
    pub fn len(&self) -> u64 {
        self.units.len() as u64 * self.runs
    }

    /// Whether there is no job.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs per cell.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    fn split(&self, job: u64) -> (&Unit, u64) {
        (&self.units[(job / self.runs) as usize], job % self.runs)
    }

    /// The cells whose rows job `job` produces, in the order of its row.
    pub fn cells_of(&self, job: u64) -> Vec<usize> {
        match self.split(job).0 {
            Unit::Single(ci) => vec![*ci],
            Unit::Group(_, members) => members.iter().flatten().copied().collect(),
        }
    }

    /// The number of values job `job` produces.
    pub fn width(&self, job: u64) -> usize {
        self.cells_of(job)
            .iter()
            .map(|&ci| self.cells[ci].width())
            .sum()
    }

    /// Run job `job` (`job < len()`): its flat row of [`JobSet::width`] values.
    ///
    /// # Errors
    /// The error of the cell or group run.
    pub fn run(&self, job: u64) -> Result<Vec<f64>> {
        match self.split(job) {
            (Unit::Single(ci), r) => {
                let mut out = vec![0.0; self.cells[*ci].width()];
                self.cells[*ci].run(r, &mut out)?;
                Ok(out)
            }
            (Unit::Group(g, members), r) => {
                let mut out = vec![vec![0.0; g.width()]; members.len()];
                g.run_group(r, &mut out)?;
                Ok(members
                    .iter()
                    .zip(out)
                    .filter(|(m, _)| m.is_some())
                    .flat_map(|(_, row)| row)
                    .collect())
            }
        }
    }

    /// Per-cell runs (cell order, run order) from per-job results (`results[job]`). A cell fails
    /// with the first error of its jobs, or if one of its jobs has no result.
    pub fn assemble(&self, results: Vec<Option<Result<Vec<f64>>>>) -> Vec<CellRuns> {
        let mut per_cell: Vec<Result<Vec<Vec<f64>>>> = self
            .cells
            .iter()
            .map(|_| Ok(Vec::with_capacity(self.runs as usize)))
            .collect();
        for (job, res) in results.into_iter().enumerate() {
            let job = job as u64;
            let cells = self.cells_of(job);
            match res {
                Some(Ok(row)) => {
                    let mut rest = &row[..];
                    for ci in cells {
                        let (mine, tail) = rest.split_at(self.cells[ci].width().min(rest.len()));
                        rest = tail;
                        if let Ok(v) = &mut per_cell[ci] {
                            v.push(mine.to_vec());
                        }
                    }
                }
                Some(Err(e)) if cells.len() == 1 => {
                    if per_cell[cells[0]].is_ok() {
                        per_cell[cells[0]] = Err(e);
                    }
                }
                Some(Err(e)) => {
                    for ci in cells {
                        if per_cell[ci].is_ok() {
                            per_cell[ci] = Err(Error::Config(e.to_string()));
                        }
                    }
                }
                None => {
                    for ci in cells {
                        if per_cell[ci].is_ok() {
                            per_cell[ci] = Err(Error::Config(format!(
                                "job {job} (run {}) has no result",
                                job % self.runs
                            )));
                        }
                    }
                }
            }
        }
        per_cell
    }
}
