//! Where the structured log lines go: standard error, or a file given at start (`--log-file`)
//! that SIGHUP reopens (so a log rotator can move it away and the service writes a new one).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
