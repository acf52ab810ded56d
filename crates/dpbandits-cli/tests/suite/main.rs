//! The CLI's integration tests, in one binary: smoke experiments of every setting, thread-count
//! invariance, bad input, `list` and `bounds`.

use std::path::PathBuf;
use std::process::{Command, Output};

mod audit;
mod bai;
mod cli;
mod compare;
mod contextual;
mod durable;
mod figures;
mod habits;
mod ldp;
mod linear;
mod listing;
mod replay;
mod serve;
mod serve_ops;
mod serve_pg;
mod serve_trial;
mod session;

/// The `dpbandits` binary under test.
fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dpbandits"))
}

/// The workspace root (experiment files are named relative to it).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run the binary from the workspace root.
fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .current_dir(repo())
        .output()
        .expect("binary runs")
}

/// Assert that a finished command exited 0, showing its stderr when it did not (at the
/// caller's line).
#[track_caller]
fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Everything the binary printed (stdout, then stderr).
fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
