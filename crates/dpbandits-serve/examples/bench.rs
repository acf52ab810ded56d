//! Decision-service benchmark (docs/perf.md): decisions per second and p50/p99 latency of the
//! decision and reward requests, for 1, 8 and 32 concurrent clients, durability on (WAL,
//! `synchronous = FULL`: every response waits for its commit to reach the disk).
//!
//! `cargo run --release -p dpbandits-serve --example bench [-- PAIRS [DIR [KIND [CLIENTS]]]]`:
//! PAIRS decision + reward pairs per configuration (default 2000); the database goes in DIR
//! (default: a temporary folder under the system's temp dir; put it on the disk you mean to
//! measure); KIND the policy kind, `KIND` or `KIND:key=value` (default `adac_ucb`, `rho = 0.5`;
//! e.g. `dp_ts:epsilon=1.0`); CLIENTS a comma-separated
//! list of client counts (default `1,8,32`). With `BENCH_ADDR=127.0.0.1:PORT` (and the admin
//! token in `BENCH_ADMIN`) the clients drive an external `dpbandits serve` instead (to compare two
//! builds with the same client code; DIR is then unused). Over loopback, each client keeps one
//! HTTP/1.1 connection open (`client::Conn`, as HTTP clients do); with `BENCH_KEEPALIVE=0` it
//! opens one per request. Issue 30's figure (docs/perf.md):
//! `target/release/examples/bench 40000 /work/benchdb adac_ucb 32`.

use dpbandits_serve::client::{Conn, request};
use dpbandits_serve::{ServeOptions, serve_until};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ADMIN: &str = "bench-admin-token-0123456789";
const T: Duration = Duration::from_secs(30);

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// The sums and counts of the commit histograms in `/metrics`: (requests summed, commits, commit
/// seconds summed).
fn commits(addr: SocketAddr, admin: &str) -> anyhow::Result<(f64, f64, f64)> {
    let r = request(addr, "GET", "/metrics", Some(admin), None, T)?;
    anyhow::ensure!(r.status == 200, "metrics: {}", r.body);
    let get = |name: &str| {
        r.body
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        get("dpbandits_commit_batch_requests_sum"),
        get("dpbandits_commit_batch_requests_count"),
        get("dpbandits_commit_seconds_sum"),
    ))
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let pairs: u64 = args.next().map_or(Ok(2000), |a| a.parse())?;
    let base = args.next().map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::Builder::new()
        .prefix("dpb-bench")
        .tempdir_in(base)?;
    let db = dir.path().join("bench.sqlite");
    let kind = args.next().unwrap_or_else(|| "adac_ucb".into());
    let counts: Vec<u64> = args
        .next()
        .unwrap_or_else(|| "1,8,32".into())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let external: Option<SocketAddr> = std::env::var("BENCH_ADDR")
        .ok()
        .map(|a| a.parse())
        .transpose()?;
    let admin = std::env::var("BENCH_ADMIN").unwrap_or_else(|_| ADMIN.into());
    let run_id = std::process::id();
    let keepalive = match std::env::var("BENCH_KEEPALIVE").as_deref() {
        Err(_) | Ok("1") => true,
        Ok("0") => false,
        Ok(v) => anyhow::bail!("BENCH_KEEPALIVE = {v:?}: expected 1 (the default) or 0"),
    };
    // KIND or KIND:key=value (default key: rho = 0.5), e.g. `dp_ts:epsilon=1.0`.
    let (kind, param) = match kind.split_once(':') {
        Some((k, p)) => (k.to_string(), p.to_string()),
        None => (kind, "rho=0.5".to_string()),
    };
    let policy = format!("kind = \"{kind}\"\n{}", param.replacen('=', " = ", 1));
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let opts = ServeOptions {
        db: db.clone(),
        listen: "127.0.0.1:0".parse()?,
        admin_token: ADMIN.into(),
        audit_key_file: None,
        limits: dpbandits_serve::Limits::default(),
    };
    let server = external.is_none().then(|| {
        std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(serve_until(
                opts,
                async move {
                    let _ = stop_rx.await;
                },
                move |a| tx.send(a).expect("bench alive"),
            ))
        })
    });
    let addr: SocketAddr = match external {
        Some(a) => a,
        None => rx.recv_timeout(T)?,
    };
    println!(
        "database: {} (durability on: WAL, synchronous = FULL)",
        db.display()
    );
    println!(
        "| kind | clients | decisions | decisions/s | decision p50 ms | decision p99 ms | reward p50 ms | reward p99 ms | 409 retries | requests per commit | ms per commit |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for clients in counts {
        let name = format!("bench{run_id}-{kind}-{clients}");
        let r = request(
            addr,
            "POST",
            "/v1/experiments",
            Some(&admin),
            Some(
                json!({"name": name, "arms": 3, "policy": policy})
                    .to_string()
                    .as_bytes(),
            ),
            T,
        )?;
        anyhow::ensure!(r.status == 201, "create: {}", r.body);
        let token = r.json()["client_token"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let retries = Arc::new(AtomicU64::new(0));
        let before = commits(addr, &admin)?;
        let start = Instant::now();
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (token, name, retries) = (token.clone(), name.clone(), retries.clone());
                let n = pairs / clients + u64::from(c < pairs % clients);
                std::thread::spawn(move || -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
                    let (mut dl, mut rl) = (vec![], vec![]);
                    let mut conn = keepalive.then(|| Conn::new(addr, T));
                    let mut send = |path: &str, token: &str, body: &[u8]| match conn.as_mut() {
                        Some(c) => c.request("POST", path, Some(token), Some(body)),
                        None => request(addr, "POST", path, Some(token), Some(body), T),
                    };
                    for i in 0..n {
                        let id = loop {
                            let t = Instant::now();
                            let r =
                                send(&format!("/v1/experiments/{name}/decisions"), &token, b"{}")?;
                            if r.status == 409 {
                                retries.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_micros(500));
                                continue;
                            }
                            anyhow::ensure!(r.status == 200, "decision: {}", r.body);
                            dl.push(t.elapsed().as_secs_f64() * 1e3);
                            break r.json()["decision_id"].as_u64().unwrap_or(0);
                        };
                        let reward = ((id + i) % 10) as f64 / 10.0;
                        let t = Instant::now();
                        let body = json!({"decision_id": id, "reward": reward}).to_string();
                        let r = send(
                            &format!("/v1/experiments/{name}/rewards"),
                            &token,
                            body.as_bytes(),
                        )?;
                        anyhow::ensure!(r.status == 200, "reward: {}", r.body);
                        rl.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok((dl, rl))
                })
            })
            .collect();
        let (mut dl, mut rl) = (vec![], vec![]);
        for h in handles {
            let (d, r) = h.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
            dl.extend(d);
            rl.extend(r);
        }
        let secs = start.elapsed().as_secs_f64();
        let after = commits(addr, &admin)?;
        let n_commits = (after.1 - before.1).max(1.0);
        println!(
            "| {kind} | {clients} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {:.2} |",
            dl.len(),
            dl.len() as f64 / secs,
            pct(&mut dl, 0.5),
            pct(&mut dl, 0.99),
            pct(&mut rl, 0.5),
            pct(&mut rl, 0.99),
            retries.load(Ordering::Relaxed),
            (after.0 - before.0) / n_commits,
            (after.2 - before.2) / n_commits * 1e3,
        );
    }
    let _ = stop_tx.send(());
    if let Some(server) = server {
        server
            .join()
            .map_err(|_| anyhow::anyhow!("server panicked"))??;
    }
    Ok(())
}
