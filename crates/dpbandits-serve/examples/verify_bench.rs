//! What the audit log's verification and a restart cost (docs/perf.md, "Decision service").
//!
//! `cargo run --release -p dpbandits-serve --example verify_bench -- [pairs, default 100000] [DB]`
//!
//! Builds a database of `pairs` decision/reward pairs of one AdaC-UCB experiment through the
//! service's state machine (1,000 operations a batch; on /dev/shm when present and no `DB` is
//! given: the build is not what is measured). With `DB`, an existing file is reused as it is
//! (build it once, measure many times). Then times `verify::verify` (the full check of
//! `audit-log verify`) and `Service::open` (the start-up check: the full check the first time,
//! a keyed checkpoint plus the tail after that) and reports the process's peak resident memory.
//!
//! `... --example verify_bench -- restart DB [runs, default 5] [tail pairs, default 1000]`
//! measures a restart of the service as an operator sees it: `serve_until` on `DB` (a copy of
//! it, so that every run starts from the same file), the time until `/v1/health` first answers
//! (503 "verifying" or 200) and until it answers 200 (fully ready), median of `runs`. Before
//! the runs the copy is opened once (its checkpoint is written) and `tail pairs` more pairs are
//! appended, so the restart checks a checkpoint plus a tail, as after a crash.

use dpbandits_serve::service::{CreateRequest, Service};
use dpbandits_serve::verify;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ADMIN: &str = "bench-admin-token-0123456789";

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

/// Append `pairs` decision/reward pairs to experiment `big` (created when missing), 1,000
/// operations a batch.
fn add_pairs(db: &Path, pairs: u64) -> anyhow::Result<()> {
    let mut s = Service::open(db, ADMIN)?;
    if s.experiment_count() == 0 {
        let req: CreateRequest = serde_json::from_value(serde_json::json!({
            "name": "big", "arms": 3, "policy": {"kind": "adac_ucb", "rho": 1.0}}))?;
        s.create(req).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let mut i = 0;
    while i < pairs {
        s.begin_batch();
        for _ in 0..500.min(pairs - i) {
            let d = s
                .decide("big", None, None)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let id = d["decision_id"].as_u64().expect("an id");
            s.reward("big", id, (i % 3) as f64 / 2.0)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            i += 1;
        }
        s.commit_batch().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One restart of the service on `db`: seconds until `/v1/health` first answers and until it
/// answers 200.
fn restart(db: &Path) -> anyhow::Result<(f64, f64)> {
    // The port is not known before the service binds it: bind a probe port first, free it, and
    // give the service that address.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let opts = dpbandits_serve::ServeOptions {
        db: db.to_path_buf(),
        listen: addr,
        admin_token: ADMIN.into(),
        admin_token_file: None,
        log_file: Some(db.with_extension("log")),
        audit_key_file: None,
        limits: dpbandits_serve::Limits::default(),
        publish: None,
        lease: dpbandits_serve::store::DEFAULT_LEASE,
        allow_async_replication: true,
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let t0 = Instant::now();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(dpbandits_serve::serve_until(
            opts,
            async {
                let _ = stop_rx.await;
            },
            |_| (),
        ))
    });
    let mut first = None;
    let ready = loop {
        let probe = dpbandits_serve::client::request(
            addr,
            "GET",
            "/v1/health",
            None,
            None,
            Duration::from_secs(2),
        );
        match probe.map(|r| r.status) {
            Ok(status) => {
                let at = t0.elapsed().as_secs_f64();
                first.get_or_insert(at);
                if status == 200 {
                    break at;
                }
            }
            Err(_) if t0.elapsed() > Duration::from_secs(120) => anyhow::bail!("no answer"),
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = stop_tx.send(());
    server.join().expect("server thread")?;
    Ok((first.unwrap_or(ready), ready))
}

fn copy_db(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::copy(from, to)?;
    let key = |p: &Path| dpbandits_serve::store::default_key_path(p);
    std::fs::copy(key(from), key(to))?;
    Ok(())
}

fn restarts(args: &[String]) -> anyhow::Result<()> {
    let db = PathBuf::from(&args[0]);
    let runs: usize = args.get(1).map_or(Ok(5), |a| a.parse())?;
    let tail: u64 = args.get(2).map_or(Ok(1000), |a| a.parse())?;
    let dir = tempfile::Builder::new()
        .prefix("dpb-restart")
        .tempdir_in(db.parent().unwrap_or(Path::new(".")))?;
    let base = dir.path().join("base.sqlite");
    copy_db(&db, &base)?;
    let t = Instant::now();
    {
        let s = Service::open(&base, ADMIN)?;
        drop(s);
    }
    println!(
        "first open of the copy (writes the checkpoint): {:.2} s",
        t.elapsed().as_secs_f64()
    );
    add_pairs(&base, tail)?;
    let entries = dpbandits_serve::store::Store::open(&base)?.audit_head()?.0;
    println!("{entries} entries; {tail} pairs after the checkpoint");
    let (mut firsts, mut readies) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let copy = dir.path().join(format!("run{run}.sqlite"));
        copy_db(&base, &copy)?;
        let (f, r) = restart(&copy)?;
        println!("run {run}: health answers after {f:.3} s, ready (200) after {r:.3} s");
        firsts.push(f);
        readies.push(r);
        std::fs::remove_file(&copy)?;
    }
    println!(
        "median of {runs}: health answers after {:.3} s, fully ready after {:.3} s",
        median(firsts),
        median(readies)
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("restart") {
        return restarts(&args[1..]);
    }
    let pairs: u64 = args.first().map_or(Ok(100_000), |a| a.parse())?;
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("dpb-verify")
            .tempdir_in(shm)?
    } else {
        tempfile::tempdir()?
    };
    let db = args
        .get(1)
        .map_or_else(|| dir.path().join("big.sqlite"), PathBuf::from);
    if db.exists() {
        println!("reusing {}", db.display());
    } else {
        let t = Instant::now();
        add_pairs(&db, pairs)?;
        println!("built {pairs} pairs in {:.1} s", t.elapsed().as_secs_f64());
    }
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
    for what in ["first", "second"] {
        let t = Instant::now();
        let s = Service::open(&db, ADMIN)?;
        println!(
            "Service::open ({what}; start-up self-check included): {:.2} s, {} experiment(s)",
            t.elapsed().as_secs_f64(),
            s.experiment_count()
        );
    }
    Ok(())
}
