//! The server's limits: timeouts, the connection limit, the body size (a leaf; re-exported
//! at the crate root).

use std::time::Duration;

/// Timeouts and the connection limit of the server (`docs/service.md`, "Limits").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// A request's header must arrive within this time, counted from the connection's start or
    /// the end of the previous response (so it is also the idle keep-alive timeout); else the
    /// connection is closed.
    pub header_timeout: Duration,
    /// A request's body must arrive within this time after its header (else 408, and the
    /// connection is closed). Bodies are read only after the token is checked.
    pub body_timeout: Duration,
    /// After SIGTERM/SIGINT, in-flight requests get this long to finish; then every open
    /// connection is closed and the process exits (releasing the database lock).
    pub shutdown_deadline: Duration,
    /// Open connections at most; one more is answered 503 (JSON, `Retry-After: 1`), logged, and
    /// closed. Lowered at start to fit the file-descriptor limit ([`FD_RESERVE`] kept free).
    pub max_connections: usize,
    /// PostgreSQL: the longest the writer waits to gather a batch (`--batch-wait-ms`; at most
    /// the last commit's time: [`crate::writer`]). Zero: no wait, as on SQLite.
    pub batch_wait: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            shutdown_deadline: Duration::from_secs(5),
            max_connections: 512,
            batch_wait: crate::writer::GATHER_REMOTE_MAX,
        }
    }
}

/// File descriptors kept for everything but client connections: the database, its WAL and
/// shared-memory files, the lock files, the log file, the listening socket, standard streams,
/// the runtime's epoll and event descriptors, the refused connections being answered
/// (`server::REFUSING_AT_ONCE`, 128), with a margin.
pub const FD_RESERVE: usize = 160;

/// The largest body a request may carry (bytes); a larger one is answered 413.
pub const MAX_BODY: usize = 2 * 1024 * 1024;
