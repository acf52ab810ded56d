//! `GET /metrics`: the service's counters in the Prometheus text exposition format (0.0.4).
//!
//! Process-wide counters, updated as each request is answered ([`record_request`]) and as each
//! commit is made ([`record_commit`]); the per-experiment gauges (counts, ledger totals) are read
//! from the service when the page is rendered. No reward value and no token ever appears.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Upper bounds (seconds) of the latency histogram's buckets.
const LATENCY_BUCKETS: [f64; 12] = [
    0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
];

/// Upper bounds of the commit-batch-size histogram's buckets.
const BATCH_BUCKETS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], x: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (c, b) in self.counts.iter_mut().zip(bounds) {
            if x <= *b {
                *c += 1;
            }
        }
        self.sum += x;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in bounds.iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Registry {
    /// (route, status) -> answers.
    requests: BTreeMap<(&'static str, u16), u64>,
    /// route -> latency histogram.
    latency: BTreeMap<&'static str, Histogram>,
    /// route -> answers with `Retry-After` (a commitment boundary or the connection limit).
    retry_later: BTreeMap<&'static str, u64>,
    /// Requests per commit, and seconds per commit (the fsync included).
    batch: Histogram,
    commit_seconds: Histogram,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Registry::default))
}

/// Count one answered request: its route, status, latency and whether it said `Retry-After`.
pub fn record_request(route: &'static str, status: u16, seconds: f64, retry_later: bool) {
    with(|r| {
        *r.requests.entry((route, status)).or_default() += 1;
        r.latency
            .entry(route)
            .or_default()
            .observe(&LATENCY_BUCKETS, seconds);
        if retry_later {
            *r.retry_later.entry(route).or_default() += 1;
        }
    });
}

/// Count one durable commit: how many requests it carried and how long it took (fsync included).
pub fn record_commit(requests: usize, seconds: f64) {
    with(|r| {
        r.batch.observe(&BATCH_BUCKETS, requests as f64);
        r.commit_seconds.observe(&LATENCY_BUCKETS, seconds);
    });
}

/// Connections open now, accepted since start, and refused at the connection limit.
static CONNECTIONS_OPEN: AtomicI64 = AtomicI64::new(0);
static CONNECTIONS_ACCEPTED: AtomicU64 = AtomicU64::new(0);
static CONNECTIONS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// A connection was accepted (`true`) or closed (`false`).
pub fn record_connection(open: bool) {
    if open {
        CONNECTIONS_ACCEPTED.fetch_add(1, Ordering::Relaxed);
        CONNECTIONS_OPEN.fetch_add(1, Ordering::Relaxed);
    } else {
        CONNECTIONS_OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection was refused at the connection limit.
pub fn record_refusal() {
    CONNECTIONS_REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// The process's own figures from `/proc/self` (Linux): resident memory in bytes, open file
/// descriptors, CPU seconds (user + system) and the start time in seconds since the epoch;
/// `None` for a figure that cannot be read.
fn process_figures() -> [(&'static str, &'static str, &'static str, Option<f64>); 5] {
    // SAFETY: sysconf only reads configuration values.
    let (page, ticks) = unsafe {
        (
            libc::sysconf(libc::_SC_PAGESIZE) as f64,
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
        )
    };
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map(|pages| pages * page);
    let fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    // Fields after the command name (which may hold spaces, inside parentheses).
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let after = stat
        .as_deref()
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect::<Vec<_>>());
    let field = |i: usize| after.as_ref()?.get(i)?.parse::<f64>().ok();
    // utime, stime, starttime are fields 14, 15, 22 of stat(5): 11, 12, 19 after the name.
    let cpu = field(11).zip(field(12)).map(|(u, s)| (u + s) / ticks);
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    let start = field(19).zip(boot).map(|(t, b)| b + t / ticks);
    [
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            rss,
        ),
        ("process_open_fds", "gauge", "Open file descriptors.", fds),
        (
            "dpbandits_database_round_trips_total",
            "counter",
            "PostgreSQL round trips of this process (statements, transaction control, first preparations); 0 on SQLite.",
            Some(crate::store::round_trips() as f64),
        ),
        (
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time in seconds.",
            cpu,
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the epoch, in seconds.",
            start,
        ),
    ]
}

/// A label value escaped for the text format (backslash, double quote, newline).
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One experiment's gauges, read from the service when the page is rendered.
#[derive(Debug, Clone)]
pub struct ExperimentGauges {
    /// The experiment's name.
    pub name: String,
    /// Decisions issued, rewards recorded, decisions pending.
    pub decisions: u64,
    /// See `decisions`.
    pub rewarded: u64,
    /// See `decisions`.
    pub pending: u64,
    /// Ledger: charged and lost rows, their total cost, and the budget's measure (`rho`,
    /// `epsilon`).
    pub charges: u64,
    /// See `charges`.
    pub charged_total: f64,
    /// See `charges`.
    pub measure: String,
}

/// The page: process counters and the experiments' gauges.
pub fn render(experiments: &[ExperimentGauges]) -> String {
    let mut out = String::new();
    with(|r| {
        out.push_str("# HELP dpbandits_requests_total Requests answered, by route and status.\n");
        out.push_str("# TYPE dpbandits_requests_total counter\n");
        for ((route, status), n) in &r.requests {
            let _ = writeln!(
                out,
                "dpbandits_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                label(route)
            );
        }
        out.push_str(
            "# HELP dpbandits_request_duration_seconds Time from a request's arrival to its answer, by route.\n",
        );
        out.push_str("# TYPE dpbandits_request_duration_seconds histogram\n");
        for (route, h) in &r.latency {
            h.render(
                &mut out,
                "dpbandits_request_duration_seconds",
                &format!("route=\"{}\"", label(route)),
                &LATENCY_BUCKETS,
            );
        }
        out.push_str(
            "# HELP dpbandits_retry_later_total Answers that said Retry-After (409 at a commitment boundary, 503 at the connection limit), by route.\n",
        );
        out.push_str("# TYPE dpbandits_retry_later_total counter\n");
        for (route, n) in &r.retry_later {
            let _ = writeln!(
                out,
                "dpbandits_retry_later_total{{route=\"{}\"}} {n}",
                label(route)
            );
        }
        out.push_str(
            "# HELP dpbandits_commit_batch_requests Requests made durable by one commit (one fsync).\n",
        );
        out.push_str("# TYPE dpbandits_commit_batch_requests histogram\n");
        r.batch.render(
            &mut out,
            "dpbandits_commit_batch_requests",
            "",
            &BATCH_BUCKETS,
        );
        out.push_str(
            "# HELP dpbandits_commit_seconds Time of one durable commit, its fsync included.\n",
        );
        out.push_str("# TYPE dpbandits_commit_seconds histogram\n");
        r.commit_seconds
            .render(&mut out, "dpbandits_commit_seconds", "", &LATENCY_BUCKETS);
    });
    render_process(&mut out);
    render_experiments(&mut out, experiments);
    out
}

/// The connection counters and the process's own figures of [`render`].
fn render_process(out: &mut String) {
    for (metric, kind, help, v) in [
        (
            "dpbandits_connections_open",
            "gauge",
            "Client connections open now.",
            CONNECTIONS_OPEN.load(Ordering::Relaxed) as f64,
        ),
        (
            "dpbandits_connections_accepted_total",
            "counter",
            "Client connections accepted since start.",
            CONNECTIONS_ACCEPTED.load(Ordering::Relaxed) as f64,
        ),
        (
            "dpbandits_connections_refused_total",
            "counter",
            "Connections refused at the connection limit (answered 503 or closed).",
            CONNECTIONS_REFUSED.load(Ordering::Relaxed) as f64,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} {kind}\n{metric} {v}"
        );
    }
    for (metric, kind, help, v) in process_figures() {
        if let Some(v) = v {
            let _ = writeln!(
                out,
                "# HELP {metric} {help}\n# TYPE {metric} {kind}\n{metric} {v}"
            );
        }
    }
}

/// The per-experiment gauges of [`render`].
fn render_experiments(out: &mut String, experiments: &[ExperimentGauges]) {
    out.push_str("# HELP dpbandits_experiments Experiments in the database.\n");
    out.push_str("# TYPE dpbandits_experiments gauge\n");
    let _ = writeln!(out, "dpbandits_experiments {}", experiments.len());
    for (metric, help, get) in [
        (
            "dpbandits_experiment_decisions",
            "Decisions issued, by experiment.",
            (|e: &ExperimentGauges| e.decisions as f64) as fn(&ExperimentGauges) -> f64,
        ),
        (
            "dpbandits_experiment_rewarded",
            "Decisions with a recorded reward (abandoned ones included), by experiment.",
            |e| e.rewarded as f64,
        ),
        (
            "dpbandits_experiment_pending",
            "Decisions waiting for their reward, by experiment.",
            |e| e.pending as f64,
        ),
        (
            "dpbandits_ledger_charges",
            "Charged and lost ledger rows, by experiment.",
            |e| e.charges as f64,
        ),
    ] {
        let _ = writeln!(out, "# HELP {metric} {help}");
        let _ = writeln!(out, "# TYPE {metric} gauge");
        for e in experiments {
            let _ = writeln!(
                out,
                "{metric}{{experiment=\"{}\"}} {}",
                label(&e.name),
                get(e)
            );
        }
    }
    out.push_str(
        "# HELP dpbandits_ledger_charged_total The ledger's charged total (budget spent), by experiment and measure.\n",
    );
    out.push_str("# TYPE dpbandits_ledger_charged_total gauge\n");
    for e in experiments {
        let _ = writeln!(
            out,
            "dpbandits_ledger_charged_total{{experiment=\"{}\",measure=\"{}\"}} {}",
            label(&e.name),
            label(&e.measure),
            e.charged_total
        );
    }
}
