//! The generic logged-feedback layout: a CSV file with the header
//! `action,reward,propensity[,x0,x1,...]`.
//!
//! * `action`: the logged action, an integer in `0..K` (`K` given by the caller, or the largest
//!   logged action plus one);
//! * `reward`: the observed reward of the logged action, a finite number;
//! * `propensity`: the probability with which the logging policy chose the logged action for
//!   this event, a number in `(0, 1]`;
//! * `x0, x1, ...`: optional context features (finite numbers), named in this order.
//!
//! Rows are events in log order. Every value is checked at the boundary: a refused value is an
//! [`Error::Param`] naming the file, the line (the header is line 1) and the column.

use super::{LoggedData, LoggedEvent, cell_error};
use crate::error::{Error, Result};
use std::path::Path;

/// Read a generic logged-feedback CSV (module docs). `arms`: the number of actions `K` (every
/// logged action must be below it); `None` takes the largest logged action plus one.
///
/// # Errors
/// An unreadable file, a header other than `action,reward,propensity[,x0,...]`, or a value out
/// of range (named by line and column).
pub fn read_csv(path: &Path, arms: Option<usize>) -> Result<LoggedData> {
    let source = path.display().to_string();
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(|e| Error::Config(format!("{source}: {e}")))?;
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| Error::Config(format!("{source}: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    const LAYOUT: &str = "the header action,reward,propensity[,x0,x1,...]";
    for (j, want) in ["action", "reward", "propensity"].iter().enumerate() {
        if header.get(j).map(String::as_str) != Some(*want) {
            return Err(Error::param(
                format!("{source} line 1, column {}", j + 1),
                format!("{:?}", header.get(j).map_or("(missing)", String::as_str)),
                format!("{want:?} ({LAYOUT})"),
            ));
        }
    }
    for (j, name) in header.iter().enumerate().skip(3) {
        let want = format!("x{}", j - 3);
        if *name != want {
            return Err(Error::param(
                format!("{source} line 1, column {}", j + 1),
                format!("{name:?}"),
                format!("{want:?} ({LAYOUT})"),
            ));
        }
    }
    let dim = header.len() - 3;
    let mut events = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let line = i + 2;
        let rec = rec.map_err(|e| Error::Config(format!("{source} line {line}: {e}")))?;
        let cell = |j: usize| rec.get(j).unwrap_or("");
        let number = |j: usize, what: &str| -> Result<f64> {
            cell(j)
                .parse::<f64>()
                .map_err(|_| cell_error(&source, line, &header[j], cell(j), what))
        };
        let a = cell(0);
        let action = a.parse::<usize>().map_err(|_| {
            cell_error(
                &source,
                line,
                "action",
                a,
                "an action index, an integer >= 0",
            )
        })?;
        let reward = number(1, "a finite number")?;
        let propensity = number(2, "a probability in (0, 1]")?;
        let mut context = Vec::with_capacity(dim);
        for j in 3..header.len() {
            context.push(number(j, "a finite number")?);
        }
        events.push(LoggedEvent {
            action,
            reward,
            propensity,
            context,
            line,
        });
    }
    LoggedData::new(source, arms, dim, events, "action", "reward", "propensity")
}
