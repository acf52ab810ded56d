//! The Open Bandit Dataset layout (Saito, Aihara, Matsutani & Narita 2021; published by ZOZO,
//! Inc.; `docs/offline.md` for its licence and attribution).
//!
//! A campaign folder `{random,bts}/{all,men,women}/` holds `<campaign>.csv` (one row per
//! impression and position: an unnamed index column, then `timestamp, item_id, position, click,
//! propensity_score, user_feature_0..3, user-item_affinity_0..`) and `item_context.csv` (one row
//! per item). Read here:
//!
//! * **actions** are the items: `item_id` in `0..K`, `K` = the number of rows of
//!   `item_context.csv` beside the log (34 for `men`, 46 for `women`, 80 for `all`), else the
//!   largest logged item plus one;
//! * **reward** = `click` (0 or 1); **propensity** = `propensity_score` (the probability of the
//!   item at that position under the logging policy: 1/34 for the uniform-random logger on
//!   `men`);
//! * **slot**: `position` is 1, 2 or 3 in the files (left, centre, right; Open Bandit Pipeline
//!   counts them 0, 1, 2). [`Slot::Position`] keeps the rows of one position (a one-slot
//!   problem: one event per impression); [`Slot::All`] keeps every row, each (impression,
//!   position) an event, so an impression contributes three events whose items differ and whose
//!   clicks are not independent (the intervals' independence assumption is then approximate);
//! * the user features are hashed categorical strings and the affinities are per item: neither
//!   is read as a context (the log is evaluated as a finite-armed problem).

use super::{LoggedData, LoggedEvent, cell_error};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Which positions of the recommendation interface become events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    /// Every row (module docs).
    All,
    /// Only the rows of this position (1, 2 or 3 as in the files).
    Position(u32),
}

impl Slot {
    /// `all`, or a position `1`, `2`, `3`.
    ///
    /// # Errors
    /// Anything else, naming `position`.
    pub fn parse(s: &str) -> Result<Slot> {
        match s.trim() {
            "all" => Ok(Slot::All),
            p => match p.parse::<u32>() {
                Ok(n @ 1..=3) => Ok(Slot::Position(n)),
                _ => Err(Error::param(
                    "position",
                    format!("{s:?}"),
                    "all, or a position of the OBD interface: 1, 2 or 3 (left, centre, right)",
                )),
            },
        }
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::All => f.write_str("all"),
            Slot::Position(p) => write!(f, "{p}"),
        }
    }
}

/// The log file of a campaign folder (`<folder>/<folder name>.csv`, else its one CSV file other
/// than `item_context.csv`), or `path` itself when it is a file.
fn log_file(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    if let Some(name) = path.file_name() {
        let f = path.join(format!("{}.csv", name.to_string_lossy()));
        if f.is_file() {
            return Ok(f);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "csv")
                && p.file_name().is_some_and(|n| n != "item_context.csv")
        })
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(Error::param(
            "log",
            path.display(),
            format!("an OBD campaign folder with one log CSV besides item_context.csv (found {n})"),
        )),
    }
}

/// The number of items listed in `item_context.csv` beside `log`, if that file exists.
fn items_beside(log: &Path) -> Result<Option<usize>> {
    let Some(ctx) = log.parent().map(|d| d.join("item_context.csv")) else {
        return Ok(None);
    };
    if !ctx.is_file() {
        return Ok(None);
    }
    let mut rdr = csv::Reader::from_path(&ctx)
        .map_err(|e| Error::Config(format!("{}: {e}", ctx.display())))?;
    let mut n = 0;
    for r in rdr.records() {
        r.map_err(|e| Error::Config(format!("{}: {e}", ctx.display())))?;
        n += 1;
    }
    Ok(Some(n))
}

/// Read an OBD campaign log (a folder such as `obd/random/men`, or its CSV file) keeping the
/// rows of `slot` (module docs). `arms` overrides the number of items.
///
/// # Errors
/// An unreadable file, a missing column, or a value out of range (named by line and column).
pub fn read_obd(path: &Path, slot: Slot, arms: Option<usize>) -> Result<LoggedData> {
    let file = log_file(path)?;
    let source = file.display().to_string();
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(&file)
        .map_err(|e| Error::Config(format!("{source}: {e}")))?;
    let header = rdr
        .headers()
        .map_err(|e| Error::Config(format!("{source}: {e}")))?
        .clone();
    let col = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| {
            Error::param(
                format!("{source} line 1"),
                format!("a header without {name:?}"),
                "the OBD columns timestamp, item_id, position, click, propensity_score, ...",
            )
        })
    };
    let (c_item, c_pos, c_click, c_prop) = (
        col("item_id")?,
        col("position")?,
        col("click")?,
        col("propensity_score")?,
    );
    let mut events = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let line = i + 2;
        let rec = rec.map_err(|e| Error::Config(format!("{source} line {line}: {e}")))?;
        let cell = |j: usize| rec.get(j).unwrap_or("").trim();
        let p = cell(c_pos);
        let position = p
            .parse::<u32>()
            .map_err(|_| cell_error(&source, line, "position", p, "a position 1, 2 or 3"))?;
        if let Slot::Position(want) = slot
            && position != want
        {
            continue;
        }
        let a = cell(c_item);
        let action = a
            .parse::<usize>()
            .map_err(|_| cell_error(&source, line, "item_id", a, "an item index >= 0"))?;
        let c = cell(c_click);
        let reward = c
            .parse::<f64>()
            .map_err(|_| cell_error(&source, line, "click", c, "0 or 1"))?;
        let q = cell(c_prop);
        let propensity = q.parse::<f64>().map_err(|_| {
            cell_error(
                &source,
                line,
                "propensity_score",
                q,
                "a probability in (0, 1]",
            )
        })?;
        events.push(LoggedEvent {
            action,
            reward,
            propensity,
            context: vec![],
            line,
        });
    }
    let arms = match arms {
        Some(k) => Some(k),
        None => items_beside(&file)?,
    };
    LoggedData::new(
        source,
        arms,
        0,
        events,
        "item_id",
        "click",
        "propensity_score",
    )
}
