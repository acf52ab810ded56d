//! The service's structured log: one JSON object a line on stderr, or in a file given at
//! start (`--log-file`) that SIGHUP reopens (so a log rotator can move it away and the service
//! writes a new one) (`ts`, `event`, the event's fields). Below every other module of the crate (the HTTP layer, the state machine,
//! the server and the publisher all write it).

use serde_json::{Map, Value};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One structured log line (JSON) on stderr or the `--log-file`. Never carries reward values.
pub fn log(event: &str, fields: Value) {
    let mut m = Map::new();
    m.insert("ts".into(), Value::String(crate::store::now()));
    m.insert("event".into(), Value::String(event.into()));
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    // One write per line: stderr is unbuffered, and formatting through `eprintln!` would make
    // a system call per fragment of the line.
    let mut line = serde_json::to_vec(&Value::Object(m)).unwrap_or_default();
    line.push(b'\n');
    write_line(&line);
}

/// The log file and its path, when one is set; else lines go to standard error.
static SINK: Mutex<Option<(PathBuf, File)>> = Mutex::new(None);

fn open_append(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Send every later line to `path` (created 0600 if missing, appended to otherwise).
///
/// # Errors
/// The file cannot be opened for appending.
pub fn set_file(path: &Path) -> std::io::Result<()> {
    let f = open_append(path)?;
    *SINK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((path.to_path_buf(), f));
    Ok(())
}

/// Reopen the log file at its path (after a rotator renamed it). `Ok(None)`: lines go to
/// standard error, nothing to reopen. On an error the old file stays in use.
///
/// # Errors
/// The path cannot be opened; the message names it.
pub fn reopen() -> Result<Option<PathBuf>, String> {
    let mut g = SINK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some((path, file)) = g.as_mut() else {
        return Ok(None);
    };
    match open_append(path) {
        Ok(f) => {
            *file = f;
            Ok(Some(path.clone()))
        }
        Err(e) => Err(format!("--log-file {}: {e}", path.display())),
    }
}

/// Write one whole line (one system call: lines of concurrent writers never interleave).
pub fn write_line(line: &[u8]) {
    let mut g = SINK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match g.as_mut() {
        Some((_, f)) => {
            let _ = f.write_all(line);
        }
        None => {
            drop(g);
            let _ = std::io::stderr().lock().write_all(line);
        }
    }
}
