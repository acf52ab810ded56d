//! Operations without outages, issue 41 Done-when 3 (docs/perf.md, "Fair scheduling and reads
//! beside the writer"): one experiment's throughput beside an expensive one and a health-probe
//! flood, and the decisions' latency while an admin reads 10,000-row pages.
//!
//! `cargo run --release -p dpbandits-serve --example fair_bench -- [SECONDS (5)] [RUNS (5)] [DIR]`
//!
//! A service runs in-process on a database in DIR (default: the system's temp dir). Each run
//! measures, one right after the other:
//! * **alone**: `FAIR_N` clients (default 8) of an `adac_ucb` experiment, each a loop of decision
//!   then reward over a keep-alive connection, for SECONDS: decisions per second;
//! * **beside**: the same, with `FAIR_M` clients (default 4) of a `dp_ts` experiment
//!   (`epsilon = 1`, deployment-grade noise; one decision open at a time, `while_pending =
//!   "wait"`: the other clients' decisions wait at its boundary; `FAIR_NEIGHBOUR` = a policy's
//!   JSON for another neighbour) and `FAIR_H` unauthenticated `/v1/health` flooders (default 8)
//!   at the same time: the `adac_ucb` decisions per second, and their ratio to alone, and the
//!   409 answers the clients got a second (a client sleeps 0.5 ms after one). Alone and beside
//!   take turns, `FAIR_SLICES` (default 5) of SECONDS / `FAIR_SLICES` each, on the same two
//!   experiments: the machine's drift (2x within a minute here) falls on both alike;
//! * **quiet** and **read**: `FAIR_N` `adac_ucb` clients for SECONDS, first alone, then while an
//!   admin reads the 10,000-row export page of an experiment of 10,000 decisions in a loop: the
//!   decision requests' p50, p99 and maximum latency of each, and the increase.
//!
//! The medians over RUNS (fresh experiments each run) close the output. The same code built
//! from another commit measures that build (docs/perf.md gives both).

use dpbandits_serve::ServeOptions;
use dpbandits_serve::client::{Conn, request};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ADMIN: &str = "fair-bench-admin-token-0123456789";

/// A loop beside the clients (a health flooder, an admin reader) until its flag: its count.
type Extra = Box<dyn Fn(&AtomicBool) -> anyhow::Result<u64> + Send + Sync>;

/// One experiment's decisions per second and its decision requests' latencies (ms).
type Measured = (f64, Vec<f64>);
const T: Duration = Duration::from_secs(30);
/// The 409 answers the clients got (a decision at a commitment boundary), all experiments.
static CONFLICTS: AtomicU64 = AtomicU64::new(0);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// The load's threads run at a lower CPU priority than the service (`FAIR_CLIENT_NICE`,
/// default 5; Linux: a thread's own niceness), standing for clients on other machines: the
/// service's share of the cores is not taken by its own load generator, and what one
/// experiment's load costs the other is the service's doing. `FAIR_CLIENT_NICE=0` shares the
/// cores evenly.
fn client_priority() {
    let nice = i32::try_from(env_or("FAIR_CLIENT_NICE", 5)).unwrap_or(5);
    // SAFETY: setpriority reads no memory of ours; who = 0 is the calling thread on Linux.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, nice);
    }
}

/// Create experiment `name` with `policy`; its client token.
fn create(addr: SocketAddr, name: &str, policy: serde_json::Value) -> anyhow::Result<String> {
    let body = json!({"name": name, "arms": 3, "policy": policy}).to_string();
    let r = request(
        addr,
        "POST",
        "/v1/experiments",
        Some(ADMIN),
        Some(body.as_bytes()),
        T,
    )?;
    anyhow::ensure!(r.status == 201, "create {name}: {}", r.body);
    Ok(r.json()["client_token"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// Decision then reward until `stop`: the decisions made and each decision request's latency
/// (ms).
fn pairs(
    addr: SocketAddr,
    name: &str,
    token: &str,
    stop: &AtomicBool,
) -> anyhow::Result<(u64, Vec<f64>)> {
    client_priority();
    let mut c = Conn::new(addr, T);
    let (dpath, rpath) = (
        format!("/v1/experiments/{name}/decisions"),
        format!("/v1/experiments/{name}/rewards"),
    );
    let (mut n, mut lat) = (0u64, Vec::new());
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let r = c.request("POST", &dpath, Some(token), Some(b"{}"))?;
        if r.status == 409 {
            CONFLICTS.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(500));
            continue;
        }
        anyhow::ensure!(r.status == 200, "decision: {}", r.body);
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        let id = r.json()["decision_id"].as_u64().unwrap_or(0);
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let reward = f64::from((x >> 40) as u32 % 2);
        let body = json!({"decision_id": id, "reward": reward}).to_string();
        let r = c.request("POST", &rpath, Some(token), Some(body.as_bytes()))?;
        anyhow::ensure!(r.status == 200, "reward: {}", r.body);
        n += 1;
    }
    Ok((n, lat))
}

/// `k` decision and reward pairs of experiment `big`.
fn fill(addr: SocketAddr, token: &str, k: u64) -> anyhow::Result<()> {
    let mut c = Conn::new(addr, T);
    let mut done = 0;
    while done < k {
        let r = c.request(
            "POST",
            "/v1/experiments/big/decisions",
            Some(token),
            Some(b"{}"),
        )?;
        if r.status == 409 {
            std::thread::sleep(Duration::from_micros(500));
            continue;
        }
        anyhow::ensure!(r.status == 200, "decision: {}", r.body);
        let id = r.json()["decision_id"].as_u64().unwrap_or(0);
        let body = json!({"decision_id": id, "reward": 1.0}).to_string();
        let r = c.request(
            "POST",
            "/v1/experiments/big/rewards",
            Some(token),
            Some(body.as_bytes()),
        )?;
        anyhow::ensure!(r.status == 200, "reward: {}", r.body);
        done += 1;
    }
    Ok(())
}

/// Run `clients` pair loops on each `(experiment, token, clients)` and `extra` (a flood or a
/// reader) for `secs`: per experiment, decisions per second and the decision latencies.
fn load(
    addr: SocketAddr,
    groups: &[(String, String, u64)],
    extra: Option<Extra>,
    extras: u64,
    secs: f64,
) -> anyhow::Result<(Vec<Measured>, u64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let extra = extra.map(Arc::new);
    let extra_n = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut threads = Vec::new();
    for (gi, (name, token, clients)) in groups.iter().enumerate() {
        for _ in 0..*clients {
            let (stop, name, token) = (stop.clone(), name.clone(), token.clone());
            threads.push((
                gi,
                std::thread::spawn(move || pairs(addr, &name, &token, &stop)),
            ));
        }
    }
    let mut ex = Vec::new();
    if let Some(f) = &extra {
        for _ in 0..extras {
            let (f, stop, n) = (f.clone(), stop.clone(), extra_n.clone());
            ex.push(std::thread::spawn(move || -> anyhow::Result<()> {
                n.fetch_add(f(&stop)?, Ordering::Relaxed);
                Ok(())
            }));
        }
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let mut out: Vec<Measured> = groups.iter().map(|_| (0.0, Vec::new())).collect();
    for (gi, t) in threads {
        let (n, lat) = t.join().expect("client")?;
        out[gi].0 += n as f64 / elapsed;
        out[gi].1.extend(lat);
    }
    for t in ex {
        t.join().expect("extra")?;
    }
    Ok((out, extra_n.load(Ordering::Relaxed)))
}

fn start(dir: &std::path::Path) -> anyhow::Result<dpbandits_serve::Background> {
    let opts = ServeOptions {
        db: dir.join("fair.sqlite"),
        listen: "127.0.0.1:0".parse()?,
        admin_token: ADMIN.into(),
        admin_token_file: None,
        log_file: Some(dir.join("fair.log")),
        audit_key_file: None,
        limits: dpbandits_serve::Limits::default(),
        publish: None,
        lease: dpbandits_serve::store::DEFAULT_LEASE,
        allow_async_replication: true,
    };
    dpbandits_serve::serve_in_thread(opts, 2, Duration::from_secs(60))
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().map_or(Ok(5.0), |a| a.parse())?;
    let runs: u64 = args.next().map_or(Ok(5), |a| a.parse())?;
    let base = args.next().map_or_else(std::env::temp_dir, Into::into);
    let (n, m, h, slices) = (
        env_or("FAIR_N", 8),
        env_or("FAIR_M", 4),
        env_or("FAIR_H", 8),
        env_or("FAIR_SLICES", 5).max(1),
    );
    let dir = tempfile::Builder::new()
        .prefix("dpb-fair")
        .tempdir_in(base)?;
    let service = start(dir.path())?;
    let addr = service.addr;
    let adac = json!({"kind": "adac_ucb", "rho": 0.5});
    // `FAIR_NEIGHBOUR='{"kind": ...}'`: another policy for the neighbour (e.g. a second
    // `adac_ucb`: what 4 more clients of an equally cheap experiment cost).
    let dpts = match std::env::var("FAIR_NEIGHBOUR") {
        Ok(p) => serde_json::from_str(&p)?,
        Err(_) => json!({"kind": "dp_ts", "epsilon": 1.0}),
    };
    // The experiment whose 10,000-row page the admin reads: 10,000 decisions (16 clients).
    let big_token = create(addr, "big", adac.clone())?;
    let fillers: Vec<_> = (0..16)
        .map(|_| {
            let token = big_token.clone();
            std::thread::spawn(move || fill(addr, &token, 625))
        })
        .collect();
    for f in fillers {
        f.join().expect("filler")?;
    }
    println!(
        "adac_ucb clients N = {n}, dp_ts clients M = {m}, health flooders H = {h}, {secs} s per measurement (alone and beside in {slices} turns each), {runs} runs"
    );
    println!(
        "| run | alone dec/s | beside dec/s | ratio | dp_ts dec/s | 409 answers/s | health probes/s | quiet p50 / p99 / max ms | read p50 / p99 / max ms | pages read | max increase ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut ratios, mut increases, mut p99s) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let a = format!("a{run}");
        let ta = create(addr, &a, adac.clone())?;
        let d = format!("d{run}");
        let td = create(addr, &d, dpts.clone())?;
        let flood = move || -> Extra {
            Box::new(move |stop: &AtomicBool| {
                client_priority();
                let mut c = Conn::new(addr, T);
                let mut k = 0;
                while !stop.load(Ordering::Relaxed) {
                    let r = c.request("GET", "/v1/health", None, None)?;
                    anyhow::ensure!(r.status == 200, "health: {}", r.body);
                    k += 1;
                }
                Ok(k)
            })
        };
        // Alone and beside in turns of SECONDS / FAIR_SLICES each: the machine's drift (2x
        // within a minute) falls on both alike. Rates are totals over the turns' time.
        let conflicts = CONFLICTS.load(Ordering::Relaxed);
        let slice = secs / slices as f64;
        let (mut alone, mut beside, mut neighbour, mut probes) = (0.0, 0.0, 0.0, 0);
        for _ in 0..slices {
            alone += load(addr, &[(a.clone(), ta.clone(), n)], None, 0, slice)?.0[0].0;
            let (b, p) = load(
                addr,
                &[(a.clone(), ta.clone(), n), (d.clone(), td.clone(), m)],
                Some(flood()),
                h,
                slice,
            )?;
            beside += b[0].0;
            neighbour += b[1].0;
            probes += p;
        }
        let (alone, beside, neighbour) = (
            alone / slices as f64,
            beside / slices as f64,
            neighbour / slices as f64,
        );
        let conflicts = (CONFLICTS.load(Ordering::Relaxed) - conflicts) as f64 / secs;
        let ratio = beside / alone;
        let q = format!("q{run}");
        let tq = create(addr, &q, adac.clone())?;
        let (mut quiet, _) = load(addr, &[(q.clone(), tq.clone(), n)], None, 0, secs)?;
        let reader: Extra = Box::new(move |stop: &AtomicBool| {
            client_priority();
            let mut c = Conn::new(addr, T);
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = c.request(
                    "GET",
                    "/v1/experiments/big/export?limit=10000",
                    Some(ADMIN),
                    None,
                )?;
                anyhow::ensure!(r.status == 200, "export: {}", r.status);
                anyhow::ensure!(r.body.lines().count() == 10_000, "a page of 10,000 rows");
                k += 1;
            }
            Ok(k)
        });
        let (mut read, pages) = load(addr, &[(q, tq, n)], Some(reader), 1, secs)?;
        let (ql, rl) = (&mut quiet[0].1, &mut read[0].1);
        let qs = (pct(ql, 0.5), pct(ql, 0.99), pct(ql, 1.0));
        let rs = (pct(rl, 0.5), pct(rl, 0.99), pct(rl, 1.0));
        let inc = rs.2 - qs.2;
        println!(
            "| {run} | {:.0} | {:.0} | {:.2} | {:.0} | {conflicts:.0} | {:.0} | {:.2} / {:.2} / {:.1} | {:.2} / {:.2} / {:.1} | {pages} | {inc:.1} |",
            alone,
            beside,
            ratio,
            neighbour,
            probes as f64 / secs,
            qs.0,
            qs.1,
            qs.2,
            rs.0,
            rs.1,
            rs.2
        );
        ratios.push(ratio);
        increases.push(inc);
        p99s.push(rs.1 - qs.1);
    }
    println!(
        "median of {runs}: adac_ucb beside / alone = {:.2}; decision latency while reading 10,000-row pages: max +{:.1} ms, p99 +{:.2} ms",
        median(ratios),
        median(increases),
        median(p99s)
    );
    Ok(())
}
