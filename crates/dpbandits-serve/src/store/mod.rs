//! The store (an SQLite file by default, or a PostgreSQL database: `sql.rs`): schema, the hash-chained audit log, the ledger, and read-only inspection.
//!
//! One database file (WAL mode, `synchronous = FULL`: a commit is on disk before it returns).
//! Tables: `meta`, `experiments` (configuration, client token hash, the core session's snapshot
//! and queryable copies of its counters), `decisions`, `ledger` (release intents and budget
//! charges), `release_keys` (the key of each release in flight, deleted when the release is
//! stored: `service::reward`, "A release is drawn once") and `audit` (append-only,
//! hash-chained; triggers refuse `UPDATE` and `DELETE`).
//! **Protected data**: the decisions table and the audit log hold raw rewards, the snapshots hold
//! raw reward sums, a release key determines its release's noise.
//!
//! Every SQL statement of the service is here, in a named function; the state machine
//! (`service/`) calls them inside its transactions, the verifier (`verify/`) reads through
//! them. Parts: `db.rs` (the file, the schema, the batch's transaction), `chain.rs` (the audit
//! chain and its key), `tables.rs` (experiments, decisions, ledger), `reads.rs` (the verifier's
//! reads, the pins' digest, inspection), `checkpoint.rs` (the keyed start-up checkpoint's rows and
//! the tables' keyed digest).

mod chain;
mod checkpoint;
mod db;
mod fence;
mod owner;
mod reads;
pub(crate) mod sql;
mod tables;

pub use chain::*;
pub use checkpoint::*;
pub use db::*;
pub use owner::{DEFAULT_LEASE, Fenced, Holder, node_name};
pub use reads::*;
pub use sql::{create_database, is_postgres_url, is_unreachable, redacted, round_trips, shown};
pub use tables::*;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_and_hex_are_written_as_the_formatter_would() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000000Z");
        // 2000-02-29 (a leap day of a century leap year), 23:59:59.999999.
        assert_eq!(
            rfc3339(Duration::new(951_868_799, 999_999_000)),
            "2000-02-29T23:59:59.999999Z"
        );
        assert_eq!(
            rfc3339(Duration::new(4_102_444_800, 1_000)),
            "2100-01-01T00:00:00.000001Z"
        );
        assert_eq!(
            rfc3339(Duration::new(253_402_300_800, 0)),
            "10000-01-01T00:00:00.000000Z"
        );
        // Every field against the formatting machinery, over 200 years in odd steps.
        let mut t = 0u64;
        while t < 6_400_000_000 {
            let d = Duration::new(t, (t % 1_000_000) as u32 * 1000);
            let s = rfc3339(d);
            let parts: Vec<u32> = s[..26]
                .split(['-', 'T', ':', '.'])
                .map(|p| p.parse().unwrap())
                .collect();
            let again = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]
            );
            assert_eq!(s, again);
            assert_eq!(
                u64::from(parts[3]) * 3600 + u64::from(parts[4]) * 60 + u64::from(parts[5]),
                t % 86_400
            );
            t += 86_400 * 37 + 3_599;
        }
        let bytes: Vec<u8> = (0..=255).collect();
        let reference: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&bytes), reference);
    }
}
