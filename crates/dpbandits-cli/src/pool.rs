//! The worker pool of the commands that run jobs (`run`, `resume`, `audit`): a leaf.

use anyhow::{Context, Result, bail};

/// The worker pool of `--threads N` (default: all cores); 0 is refused.
pub(crate) fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool> {
    if threads == Some(0) {
        bail!("--threads 0: expected an integer >= 1");
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .context("starting worker threads")
}
