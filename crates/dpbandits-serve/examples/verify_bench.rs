//! What the audit log's verification costs (docs/perf.md, "Decision service"): builds a database
//! of N decision/reward pairs of one AdaC-UCB experiment through the service's state machine (on
//! /dev/shm when present: the build is not what is measured), then times `verify::verify` and
//! `Service::open` (whose start-up self-check runs the same verification) and reports the
//! process's peak resident memory.
//!
//! `cargo run --release -p dpbandits-serve --example verify_bench -- [pairs, default 100000]`

use dpbandits_serve::service::{CreateRequest, Service};
use dpbandits_serve::verify;
use std::time::Instant;

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let pairs: u64 = std::env::args().nth(1).map_or(Ok(100_000), |a| a.parse())?;
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("dpb-verify")
            .tempdir_in(shm)?
    } else {
        tempfile::tempdir()?
    };
    let db = dir.path().join("big.sqlite");
    let t = Instant::now();
    {
        let mut s = Service::open(&db, "bench-admin-token-0123456789")?;
        let req: CreateRequest = serde_json::from_value(serde_json::json!({
            "name": "big", "arms": 3, "policy": {"kind": "adac_ucb", "rho": 1.0}}))?;
        s.create(req).map_err(|e| anyhow::anyhow!("{e}"))?;
        for i in 0..pairs {
            let d = s
                .decide("big", None, None)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let id = d["decision_id"].as_u64().expect("an id");
            s.reward("big", id, (i % 3) as f64 / 2.0)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    println!("built {pairs} pairs in {:.1} s", t.elapsed().as_secs_f64());
    let rss0 = peak_rss_mb();
    let t = Instant::now();
    let r = verify::verify_default(&db)?;
    let v = t.elapsed().as_secs_f64();
    println!(
        "verify: {} entries, {} decisions, {} charges in {v:.2} s ({:.1} us per entry); peak RSS {rss0:.0} MB before, {:.0} MB after",
        r.entries,
        r.decisions,
        r.charges,
        v * 1e6 / r.entries as f64,
        peak_rss_mb()
    );
    let t = Instant::now();
    let s = Service::open(&db, "bench-admin-token-0123456789")?;
    println!(
        "Service::open (start-up self-check included): {:.2} s, {} experiment(s)",
        t.elapsed().as_secs_f64(),
        s.experiment_count()
    );
    Ok(())
}
