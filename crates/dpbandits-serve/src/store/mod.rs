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
mod deferred;
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

    /// A decision row of experiment `x` (arm `arm`, round `id`), for the batch tests.
    fn decision(id: u64, arm: usize) -> NewDecision<'static> {
        NewDecision {
            id,
            arm,
            round: id,
            request_id: None,
            actions: None,
            propensity: None,
            issued_unix: 0.0,
        }
    }

    /// A batch's decision rows are merged into one insert on PostgreSQL (`store/deferred.rs`),
    /// moving past the rewards' updates of other rows: every reward still lands on its row, and
    /// an insert and an update of the same row keep their order.
    #[test]
    fn merged_inserts_keep_every_update_on_its_row() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::testdb::db(dir.path(), "m.sqlite");
        let mut store = Store::open(&db).unwrap();
        store.begin_batch().unwrap();
        // Decisions 1 and 2, the reward of 1, decision 3, the rewards of 3 and 2, decision 4.
        let steps: [(&str, u64, f64); 7] = [
            ("d", 1, 0.0),
            ("d", 2, 0.0),
            ("r", 1, 0.25),
            ("d", 3, 0.0),
            ("r", 3, 0.75),
            ("r", 2, 0.5),
            ("d", 4, 0.0),
        ];
        for (what, id, reward) in steps {
            let tx = store.begin().unwrap();
            if what == "d" {
                tx.insert_decision("x", &decision(id, id as usize % 2))
                    .unwrap();
            } else {
                tx.record_reward("x", id, reward, reward, "reward").unwrap();
            }
            tx.commit().unwrap();
        }
        store.commit_batch().unwrap();
        let got: Vec<(usize, Option<f64>)> = (1..=4)
            .map(|i| {
                let (arm, reward, _) = store.decision("x", i).unwrap().expect("stored");
                (arm, reward)
            })
            .collect();
        assert_eq!(
            got,
            [(1, Some(0.25)), (0, Some(0.5)), (1, Some(0.75)), (0, None)]
        );
    }

    /// One operation's rollback inside a batch undoes that operation alone, nested ones with
    /// it, on either store (PostgreSQL: no savepoint, its deferred statements dropped unsent).
    /// An operation that read (sending what was deferred, its own writes among it) and then
    /// rolls back: SQLite rolls back to its savepoint and the batch commits; PostgreSQL cannot
    /// undo the statements sent, so the batch refuses to commit, and its rollback leaves the
    /// database as it was.
    #[test]
    fn an_operation_rolled_back_in_a_batch_leaves_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::testdb::db(dir.path(), "t.sqlite");
        let mut store = Store::open(&db).unwrap();
        let decision = |id: u64| decision(id, 0);
        let ids = |store: &Store| -> Vec<u64> {
            (1..=9)
                .filter(|&i| store.decision("x", i).unwrap().is_some())
                .collect()
        };
        store.begin_batch().unwrap();
        let tx = store.begin().unwrap();
        tx.insert_decision("x", &decision(1)).unwrap();
        tx.commit().unwrap();
        let tx = store.begin().unwrap();
        tx.insert_decision("x", &decision(2)).unwrap();
        drop(tx);
        let outer = store.begin().unwrap();
        outer.insert_decision("x", &decision(3)).unwrap();
        let inner = store.begin().unwrap();
        inner.insert_decision("x", &decision(4)).unwrap();
        inner.commit().unwrap();
        drop(outer);
        let tx = store.begin().unwrap();
        tx.insert_decision("x", &decision(5)).unwrap();
        tx.commit().unwrap();
        store.commit_batch().unwrap();
        assert_eq!(ids(&store), [1, 5]);
        // A read inside the operation, then its rollback.
        store.begin_batch().unwrap();
        let tx = store.begin().unwrap();
        tx.insert_decision("x", &decision(6)).unwrap();
        assert!(tx.decision("x", 6).unwrap().is_some());
        drop(tx);
        let tx = store.begin().unwrap();
        tx.insert_decision("x", &decision(7)).unwrap();
        tx.commit().unwrap();
        if is_postgres_url(&db) {
            assert!(store.commit_batch().is_err());
            store.rollback_batch().unwrap();
            assert_eq!(ids(&store), [1, 5]);
        } else {
            store.commit_batch().unwrap();
            assert_eq!(ids(&store), [1, 5, 7]);
        }
        // A statement the database refuses (a second experiment of one name): on PostgreSQL
        // the transaction is aborted (no savepoint to go back to), so the batch refuses to
        // commit (a `COMMIT` would roll it back without an error) and answers as failed.
        let e = NewExperiment {
            name: "e",
            kind: "k",
            arms: 2,
            config: "{}",
            token_hash: "h",
            guarantee: "{}",
            snapshot: b"s",
            create_request: None,
        };
        let before = ids(&store);
        store.begin_batch().unwrap();
        let tx = store.begin().unwrap();
        tx.insert_decision("x", &decision(8)).unwrap();
        tx.insert_experiment(&e).unwrap();
        tx.commit().unwrap();
        let tx = store.begin().unwrap();
        assert!(tx.insert_experiment(&e).is_err());
        drop(tx);
        if is_postgres_url(&db) {
            assert!(store.commit_batch().is_err());
            store.rollback_batch().unwrap();
            assert_eq!(ids(&store), before);
        } else {
            store.commit_batch().unwrap();
            assert_eq!(ids(&store), [before.as_slice(), &[8]].concat());
        }
    }

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
