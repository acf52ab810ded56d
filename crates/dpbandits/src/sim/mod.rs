//! The setting-neutral simulator: checkpoint grids, experiment cells and deterministic parallel
//! jobs. Each setting's own run loop lives in its folder (`finite/sim.rs`, `linear/sim.rs`,
//! `contextual/sim.rs`, `bai/sim.rs`).
//!
//! # Memory
//! Regret is recorded only on a [`CheckpointGrid`] (log-spaced by default, plus any horizons a
//! figure needs), so a run's memory does not depend on the horizon `T`.
//!
//! # Parallelism and reproducibility
//! [`run_jobs`] enumerates the jobs of a [`JobSet`] (`(cell, run)`, or `(group, run)` for grouped
//! cells), runs them with rayon and collects results in job order (the `rand` crate's `rayon-monte-carlo` pattern). Each job seeds its own generators from
//! its coordinates, so results are byte-identical for any thread count.

use crate::error::{Error, Result};
use crate::privacy::PrivacyGuarantee;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;

mod group;
mod jobs;
pub use group::{CellGroup, GroupMember};
pub use jobs::JobSet;

/// How to advance a policy that commits to episodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimMode {
    /// Draw each committed episode's reward sum exactly: O(episodes) per run.
    #[default]
    Episodes,
    /// One reward at a time: O(T) per run.
    Steps,
}

/// Sorted, distinct rounds `1 <= t <= T` at which regret is recorded; the last one is `T`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointGrid {
    points: Vec<u64>,
}

impl CheckpointGrid {
    /// About `points` log-spaced rounds from 1 to `horizon`, plus the `extra` rounds.
    ///
    /// # Errors
    /// `horizon` must be >= 1, `points` >= 2, every extra round in `1..=horizon`.
    pub fn log(horizon: u64, points: usize, extra: &[u64]) -> Result<Self> {
        if horizon == 0 {
            return Err(Error::param("horizon", 0, "an integer >= 1"));
        }
        if points < 2 {
            return Err(Error::param(
                "checkpoints.points",
                points,
                "an integer >= 2",
            ));
        }
        let mut v: Vec<u64> = (0..points)
            .map(|i| {
                let x = (horizon as f64).ln() * i as f64 / (points - 1) as f64;
                (x.exp().round() as u64).clamp(1, horizon)
            })
            .collect();
        for &e in extra {
            if e == 0 || e > horizon {
                return Err(Error::param(
                    "checkpoint",
                    e,
                    format!("a round in 1..={horizon} (the horizon)"),
                ));
            }
            v.push(e);
        }
        v.push(horizon);
        v.sort_unstable();
        v.dedup();
        Ok(CheckpointGrid { points: v })
    }

    /// Explicit checkpoints (sorted and deduplicated); must be non-empty and >= 1.
    pub fn explicit(mut points: Vec<u64>) -> Result<Self> {
        points.sort_unstable();
        points.dedup();
        if points.first().is_none_or(|&p| p == 0) {
            return Err(Error::param(
                "checkpoints",
                format!("{points:?}"),
                "non-empty rounds >= 1",
            ));
        }
        Ok(CheckpointGrid { points })
    }

    /// The rounds.
    pub fn points(&self) -> &[u64] {
        &self.points
    }

    /// The horizon (last checkpoint).
    pub fn horizon(&self) -> u64 {
        *self.points.last().expect("non-empty")
    }

    /// Position of round `t` in the grid, if it is a checkpoint.
    pub fn position(&self, t: u64) -> Option<usize> {
        self.points.binary_search(&t).ok()
    }
}

/// One configuration of an experiment (an environment and a policy with fixed parameters) that
/// can produce independent runs.
pub trait Cell: Send + Sync + Debug {
    /// Label, e.g. `adac_ucb(rho=0.1)`.
    fn label(&self) -> String;
    /// Registry id of the algorithm.
    fn kind(&self) -> &'static str;
    /// Numeric parameters identifying this cell.
    fn params(&self) -> Vec<(&'static str, f64)>;
    /// The privacy claim of the algorithm.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// Free-form facts for the manifest (e.g. which simulation path is used and why).
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Number of values one run produces (the checkpoints of a regret curve; the outcome fields
    /// of a BAI run).
    fn width(&self) -> usize;
    /// Run number `run`; write its [`Cell::width`] values into `out`.
    fn run(&self, run: u64, out: &mut [f64]) -> Result<()>;
    /// The group this cell is simulated with (common random numbers, one job per group and run;
    /// see [`CellGroup`] and [`JobSet`]). `None` (the default): one job per (cell, run).
    fn group(&self) -> Option<GroupMember> {
        None
    }
    /// The algorithm's theoretical regret bound on this cell's instance (regret settings; the
    /// policy configuration's `regret_bound`), `None` by default.
    fn regret_bound(&self) -> Option<crate::config::RegretBound> {
        None
    }
}

/// Results of all runs of one cell: `values[run][i]`, or the error that stopped it.
pub type CellRuns = Result<Vec<Vec<f64>>>;

/// Run every job of `cells` x `runs` ([`JobSet`]: one job per ungrouped (cell, run), one per
/// (group, run)) in parallel on the current rayon pool. `progress` is called once per finished
/// job. Results are in cell order, runs in run order, independent of thread count. A failing job
/// makes only its own cells fail; the other cells are kept.
pub fn run_jobs(cells: &[Box<dyn Cell>], runs: u64, progress: &(dyn Fn() + Sync)) -> Vec<CellRuns> {
    let jobs = JobSet::new(cells, runs);
    let results: Vec<Option<Result<Vec<f64>>>> = (0..jobs.len())
        .into_par_iter()
        .map(|j| {
            let res = jobs.run(j);
            progress();
            Some(res)
        })
        .collect();
    jobs.assemble(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_grid() {
        let g = CheckpointGrid::log(10_000_000, 50, &[100_000, 1_000_000]).unwrap();
        assert_eq!(g.points()[0], 1);
        assert_eq!(g.horizon(), 10_000_000);
        assert!(g.position(100_000).is_some() && g.position(1_000_000).is_some());
        assert!(g.points().windows(2).all(|w| w[0] < w[1]));
        assert!(CheckpointGrid::log(0, 10, &[]).is_err());
        assert!(CheckpointGrid::log(100, 10, &[101]).is_err());
        assert_eq!(CheckpointGrid::log(1, 10, &[]).unwrap().points(), &[1]);
    }
}
