//! The writer's cost per operation without HTTP (docs/perf.md): batches of decisions and
//! rewards as group commit runs them, on a database in DIR (`synchronous = FULL`).
//!
//! `cargo run --release -p dpbandits-serve --example writer_bench [-- OPS [DIR [BATCH]]]`: OPS
//! decision + reward pairs (default 20000), BATCH pairs per batch (default 8: 16 operations,
//! about what 32 HTTP clients give). `WB_POLICY` (a policy's JSON) measures another kind than
//! `adac_ucb`.

use dpbandits_serve::service::{CreateRequest, Service};
use serde_json::json;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let pairs: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let base = args.next().map_or_else(std::env::temp_dir, Into::into);
    let batch: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    let dir = tempfile::Builder::new()
        .prefix("dpb-wbench")
        .tempdir_in(base)?;
    let mut s = Service::open(
        &dir.path().join("w.sqlite"),
        "writer-bench-admin-token-01234",
    )?;
    let policy: serde_json::Value = match std::env::var("WB_POLICY") {
        Ok(p) => serde_json::from_str(&p)?,
        Err(_) => json!({"kind": "adac_ucb", "rho": 0.5}),
    };
    let req: CreateRequest =
        serde_json::from_value(json!({"name": "w", "arms": 3, "policy": policy}))?;
    s.create(req).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (mut ops_time, mut commit_time, mut done, mut commits) = (0.0, 0.0, 0, 0);
    let mut ids = Vec::with_capacity(batch);
    while done < pairs {
        // One batch of decisions, then one batch of their rewards (as clients that wait for
        // each answer produce them).
        for phase in 0..2 {
            let t = Instant::now();
            s.begin_batch();
            if phase == 0 {
                ids.clear();
                for _ in 0..batch.min(pairs - done) {
                    match s.decide("w", None, None) {
                        Ok(v) => ids.push(v["decision_id"].as_u64().unwrap_or(0)),
                        Err(_) => break, // a commitment boundary: the rewards come first
                    }
                }
            } else {
                for &id in &ids {
                    s.reward("w", id, (id % 10) as f64 / 10.0)
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }
            let t1 = Instant::now();
            s.commit_batch().map_err(|e| anyhow::anyhow!("{e}"))?;
            ops_time += (t1 - t).as_secs_f64();
            commit_time += t1.elapsed().as_secs_f64();
            commits += 1;
        }
        done += ids.len();
    }
    println!(
        "pairs {done}, batches {commits}: {:.1} us per operation, {:.3} ms per commit, {:.0} pairs/s",
        ops_time / (2 * done) as f64 * 1e6,
        commit_time / commits as f64 * 1e3,
        done as f64 / (ops_time + commit_time)
    );
    Ok(())
}
