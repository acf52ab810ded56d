//! Opening the database: the start-up check, migration, pins of earlier experiments, release
//! intents settled, every experiment restored from its snapshot.

use super::*;

/// A schema-1 experiment's session: the stored bare policy snapshot after `observed` rewards,
/// with the decisions issued but not yet rewarded (`issued - observed`, all of the open
/// commitment) issued again from it, so the session stands where the service stood.
pub(super) fn migrate(row: &store::ExperimentRow) -> anyhow::Result<Session> {
    let name = &row.name;
    let c = row.counters;
    let snap = Snapshot::decode(&row.snapshot)
        .with_context(|| format!("experiment {name:?}: its policy snapshot does not decode"))?;
    let mut s = Session::from_policy_snapshot(&snap, c.observed)
        .with_context(|| format!("experiment {name:?}: its policy snapshot does not restore"))?;
    let pending = c.issued.checked_sub(c.observed).with_context(|| {
        format!(
            "experiment {name:?}: issued = {} < observed = {}",
            c.issued, c.observed
        )
    })?;
    if pending > 0 {
        let Some((arm, left)) = c.commit else {
            bail!("experiment {name:?}: {pending} pending decision(s) without a commitment");
        };
        for i in 0..pending {
            let d = s.decide().with_context(|| {
                format!("experiment {name:?}: re-issuing its pending decisions")
            })?;
            let want = Decision::Play {
                arm,
                opened: (i == 0).then_some(left),
            };
            if d != want {
                bail!(
                    "experiment {name:?}: its policy continues with {d:?}, but the stored commitment is arm {arm}, {left} round(s) left"
                );
            }
        }
    }
    Ok(s)
}

/// Settle the open release intents that no redo can finish as charged `lost` rows with their
/// audit entries (a crash, or a failed batch, between the intent and its state change: the
/// release may have been drawn): those without a release key (written before keys existed).
/// An intent with a key stays open: the release's redo takes it and its key
/// (`Service::insert_intent`), so the release is drawn once and charged once.
pub(super) fn settle_intents(tx: &store::Tx<'_>) -> anyhow::Result<()> {
    for i in tx.open_intents()? {
        if i.key.is_none() {
            settle_lost(tx, &i)?;
        }
    }
    Ok(())
}

/// Settle one open intent as a charged `lost` row, with its audit entry.
pub(super) fn settle_lost(tx: &store::Tx<'_>, i: &store::Intent) -> anyhow::Result<()> {
    tx.set_ledger_status(i.id, "lost")?;
    tx.audit(&i.experiment,
        store::Event::BudgetCharge,
        &json!({"ledger_id": i.id, "release": i.release, "arm": i.arm, "cost": i.cost,
                "status": "lost", "why": "a release intent without its state change that no redo can finish: charged, a redo is charged again"}),
    )?;
    Ok(())
}

/// Every experiment of the database, restored (refusing, naming the experiment, when a snapshot
/// does not restore or its stored counters disagree with it). The ledger's counts are read here,
/// once (SQL aggregates), and maintained with each charge afterwards.
pub(super) fn load_all(conn: &store::Reads) -> anyhow::Result<HashMap<String, Experiment>> {
    let mut experiments = HashMap::new();
    for row in conn.load_experiments()? {
        let name = row.name;
        let closed = conn.close_entry(&name)?;
        let mut session = Session::restore(&row.snapshot)
            .with_context(|| format!("experiment {name:?}: its snapshot does not restore"))?;
        // Which decisions wait for a reward: the decisions table is the record (a snapshot
        // written before per-decision tracking holds only counts).
        if session.pending() > 0 {
            let ids: Vec<u64> = conn
                .pending_decisions(&name)?
                .into_iter()
                .map(|id| id.saturating_sub(1))
                .collect();
            session.adopt_pending(&ids).with_context(|| {
                format!("experiment {name:?}: its pending decisions disagree with its session snapshot; refusing to start")
            })?;
        }
        let restored = counters_of(&session, row.counters.releases);
        if restored != row.counters || session.kind() != row.kind {
            bail!(
                "experiment {name:?}: the stored counters ({:?}, kind {:?}) disagree with its session snapshot ({restored:?}, kind {:?}); refusing to start",
                row.counters,
                row.kind,
                session.kind()
            );
        }
        let guarantee = session
            .guarantee()
            .with_context(|| format!("experiment {name:?}"))?
            .clone();
        // Experiments created before the service served every setting are finite-armed.
        let config = serde_json::from_str::<Value>(&row.config).unwrap_or(Value::Null);
        let problem = config
            .get("problem")
            .cloned()
            .unwrap_or_else(|| json!({"setting": "finite", "arms": row.arms}));
        let totals = conn.ledger_totals(&name)?;
        experiments.insert(
            name,
            Experiment {
                session,
                arms: row.arms,
                problem,
                dropout: config.get("dropout_reward").and_then(Value::as_f64),
                deadline: config.get("reward_deadline").and_then(Value::as_f64),
                token_hash: row.token_hash,
                guarantee,
                releases: row.counters.releases,
                closed,
                charges: totals.charges,
                max_per_release: totals.max_per_release,
            },
        );
    }
    Ok(experiments)
}

/// Refuse to key an unkeyed audit log of `entries` entries when keying it would hide a removed
/// keying: the database says it is schema 4 (keyed), or the key file exists (a key is made for a
/// database's first keyed start; an old, never-keyed database has none yet). Re-keying such a
/// log would make a chain re-hashed without the key verify under the new key.
pub(super) fn refuse_unkeyed(
    conn: &store::Reads,
    db: &Path,
    key_path: &Path,
    entries: u64,
) -> anyhow::Result<()> {
    let schema = conn.schema_version()?;
    if schema == store::SCHEMA_VERSION {
        bail!(
            "--db {}: refusing to start: the database is schema {schema} (a keyed audit chain) but its meta rows audit_key and audit_keyed_from are missing: its keying was removed; it is never re-keyed (verify it with its key file, restore a backup)",
            store::shown(db)
        );
    }
    if key_path.exists() {
        bail!(
            "--db {}: refusing to start: its audit log ({entries} entries) is not keyed, but the audit key file {} exists: either its keying was removed (meta rows deleted, the chain re-hashed without the key), or the key file belongs to another database; a log is never re-keyed over an existing key. An old database that was never keyed is keyed on its first start only when no key file exists at the key path yet (move the key file away or give another --audit-key-file path after checking the log against a published head)",
            store::shown(db),
            key_path.display()
        );
    }
    Ok(())
}

/// Pin, at the first start of this build, the experiments an earlier build created
/// ([`crate::verify::Report::unpinned`]): one `pin` entry each with the configuration values
/// the service reads back as they stand and the digest of the earlier decisions' request ids,
/// propensities and issue times ([`crate::verify::LOG_FORMAT`]). What was changed before this
/// start cannot be proved (docs/service.md, "What an old database cannot prove").
pub(super) fn pin_earlier(tx: &store::Tx<'_>, names: &[String]) -> anyhow::Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    for row in tx.load_experiments()? {
        if !names.contains(&row.name) {
            continue;
        }
        let s = Session::restore(&row.snapshot)
            .with_context(|| format!("experiment {:?}: its snapshot does not restore", row.name))?;
        let config = serde_json::from_str::<Value>(&row.config).unwrap_or(Value::Null);
        let g = serde_json::to_value(s.guarantee().ok())?;
        let (n, digest) = tx.decisions_digest(&row.name, row.counters.issued)?;
        tx.audit(
            &row.name,
            store::Event::Config,
            &json!({"action": store::Action::Pin.name(), "format": crate::verify::LOG_FORMAT,
                    "label": s.label().unwrap_or(s.kind()), "params": s.params(),
                    "while_pending": s.while_pending(), "guarantee": g,
                    "dropout_reward": config.get("dropout_reward"),
                    "reward_deadline": config.get("reward_deadline"),
                    "decisions": n, "decisions_sha256": digest}),
        )?;
    }
    Ok(())
}

/// Migrate a schema-1 database (bare policy snapshots) to session snapshots inside `tx`, each
/// experiment with its `migrate` audit entry; any other schema: nothing.
pub(super) fn migrate_all(tx: &store::Tx<'_>, db: &Path) -> anyhow::Result<()> {
    if tx.schema_version()? == store::SCHEMA_VERSION_POLICY_SNAPSHOTS {
        for row in tx.load_experiments()? {
            let s = migrate(&row).with_context(|| {
                format!(
                    "--db {}: migrating schema {} to {} (session snapshots)",
                    store::shown(db),
                    store::SCHEMA_VERSION_POLICY_SNAPSHOTS,
                    store::SCHEMA_VERSION
                )
            })?;
            let snap = s.snapshot()?;
            let c = counters_of(&s, row.counters.releases);
            tx.update_state(&row.name, &snap, &c)?;
            tx.audit(
                &row.name,
                store::Event::Config,
                &json!({"action": store::Action::Migrate.name(), "schema": store::SCHEMA_VERSION,
                        "state": "session snapshot", "issued": c.issued, "observed": c.observed}),
            )?;
        }
        tx.set_schema_version(store::SCHEMA_VERSION)?;
    }
    Ok(())
}

impl Service {
    /// Open the database, migrate a schema-1 database (bare policy snapshots) to session
    /// snapshots, restore every experiment's session (refusing to start, naming the experiment,
    /// when a snapshot does not restore or its stored counters disagree with it) and settle
    /// release intents left open by a crash (each becomes a `lost` ledger row: charged).
    ///
    /// # Errors
    /// The database cannot be opened, a stored snapshot does not restore or migrate, or an
    /// experiment's counters disagree with its session.
    pub fn open(db: &Path, admin_token: &str) -> anyhow::Result<Self> {
        Service::open_keyed(db, admin_token, None)
    }

    /// [`Service::open`] with the audit chain's key file `key_file` (default
    /// [`store::default_key_path`]: `<db>.audit-key`). The key file is created (0600, a fresh
    /// key) only for a database whose chain is not keyed yet; a keyed database without its key
    /// is refused. Before anything is written, the database must verify
    /// ([`crate::verify::verify_conn`]: the chain, and the tables against the log); a database
    /// that does not is refused, naming what is inconsistent.
    ///
    /// # Errors
    /// As [`Service::open`], a missing or wrong key, or a database that does not verify.
    pub fn open_keyed(
        db: &Path,
        admin_token: &str,
        key_file: Option<&Path>,
    ) -> anyhow::Result<Self> {
        Service::open_inner(db, admin_token, key_file, true, &Claim::default())
    }

    /// [`Service::open_keyed`] claiming a PostgreSQL database as `claim` says (its node name,
    /// its lease, how long to wait for another node's lease to end): what `serve` opens.
    ///
    /// # Errors
    /// As [`Service::open_keyed`], or another node holds the database past `claim.wait`.
    pub fn open_claiming(
        db: &Path,
        admin_token: &str,
        key_file: Option<&Path>,
        claim: &Claim,
    ) -> anyhow::Result<Self> {
        Service::open_inner(db, admin_token, key_file, true, claim)
    }

    /// The epoch this service claimed its PostgreSQL database with (`None` on SQLite).
    pub fn epoch(&self) -> Option<i64> {
        self.store.epoch()
    }

    /// [`Service::open`] without the start-up self-check: for tests that fill tables directly
    /// (rows the log does not explain) to measure something else.
    #[cfg(test)]
    pub(crate) fn open_unchecked(db: &Path, admin_token: &str) -> anyhow::Result<Self> {
        Service::open_inner(db, admin_token, None, false, &Claim::default())
    }

    pub(super) fn open_inner(
        db: &Path,
        admin_token: &str,
        key_file: Option<&Path>,
        self_check: bool,
        claim: &Claim,
    ) -> anyhow::Result<Self> {
        let mut store = store::Store::open(db)?;
        if store.is_postgres() {
            claim_database(&mut store, db, claim)?;
        }
        let key_path = match key_file {
            Some(k) => k.to_path_buf(),
            None if store.is_postgres() => bail!(
                "--audit-key-file: required with a PostgreSQL --db {} (the audit key is kept outside the database, and a database URL has no folder to keep it beside)",
                store::shown(db)
            ),
            None => store::default_key_path(db),
        };
        let keying = store.audit_keying()?;
        let (entries, _) = store.audit_head()?;
        if keying.is_none() && entries > 0 {
            refuse_unkeyed(&store, db, &key_path, entries)?;
        }
        let key = match &keying {
            Some((f, from)) if !key_path.exists() => bail!(
                "--audit-key-file {}: no such file; the audit log of --db {} is keyed (key fingerprint {f}, from entry {from}): give its key file",
                key_path.display(),
                store::shown(db)
            ),
            Some(_) => store::AuditKey::load(&key_path)?,
            None => store::AuditKey::load_or_create(&key_path)?.0,
        };
        let (unpinned, checkpoint) = if self_check {
            start_up_check(&store, db, keying.as_ref().map(|_| &key))?
        } else {
            (Vec::new(), None)
        };
        store.init_audit_key(&key)?;
        let tx = store.begin()?;
        if let Some(c) = &checkpoint {
            // The state just verified, before this start writes anything.
            tx.set_checkpoint(c)?;
        }
        migrate_all(&tx, db)?;
        pin_earlier(&tx, &unpinned)?;
        settle_intents(&tx)?;
        tx.commit()?;
        let experiments = load_all(&store)?;
        let tokens = Tokens {
            admin: store::sha256_hex(admin_token.as_bytes()),
            clients: experiments
                .iter()
                .map(|(n, e)| (n.clone(), e.token_hash.clone()))
                .collect(),
        };
        Ok(Service {
            store,
            experiments,
            tokens: Arc::new(RwLock::new(tokens)),
            batch_failed: false,
            fenced: None,
            unsynced: false,
            stale: HashSet::new(),
            publisher: None,
        })
    }

    /// Rebuild every experiment from the database (after a failed commit: the in-memory state
    /// goes back to the stored one, experiments created in the failed batch disappear).
    ///
    /// # Errors
    /// The database cannot be read or a snapshot does not restore.
    pub fn reload_all(&mut self) -> anyhow::Result<()> {
        // A release intent made durable in the failed batch may have had its release drawn: it
        // is charged (`lost`) now, as at a restart.
        let tx = self.store.begin()?;
        settle_intents(&tx)?;
        tx.commit()?;
        let experiments = load_all(&self.store)?;
        let mut t = self
            .tokens
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        t.clients = experiments
            .iter()
            .map(|(n, e)| (n.clone(), e.token_hash.clone()))
            .collect();
        drop(t);
        self.experiments = experiments;
        self.stale.clear();
        Ok(())
    }
}

/// How `serve` claims a PostgreSQL database ([`store::Store::claim`]).
#[derive(Debug, Clone)]
pub struct Claim {
    /// This node's name ([`store::node_name`]).
    pub node: String,
    /// The lease it renews ([`store::DEFAULT_LEASE`]).
    pub lease: std::time::Duration,
    /// How long to wait while another node's lease runs (`None`: refuse at once, naming it).
    pub wait: Option<std::time::Duration>,
    /// The address this node's HTTP server listens on (recorded with the claim: standbys
    /// forward requests there).
    pub addr: Option<String>,
    /// While this node waits as a standby: the holder's address, kept current (the HTTP
    /// layer forwards requests to it); cleared once this node has claimed the database.
    pub forward_to: Option<std::sync::Arc<std::sync::Mutex<Option<String>>>>,
    /// Set when the server stopped while this node waited (SIGTERM): the wait gives up.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Take a server whose commits no standby confirms (`synchronous_standby_names` empty).
    /// `serve` refuses one unless `--allow-async-replication`: after a failover of such a
    /// server, committed ledger charges can be gone while their releases were answered, and
    /// the budget would be spent again. The library's default takes it (tests, tools).
    pub allow_async_replication: bool,
}

impl Default for Claim {
    fn default() -> Self {
        Claim {
            node: store::node_name(),
            lease: store::DEFAULT_LEASE,
            wait: None,
            addr: None,
            forward_to: None,
            cancel: None,
            allow_async_replication: true,
        }
    }
}

/// Refuse a server whose commits no standby confirms (`synchronous_standby_names` empty)
/// unless `claim` allows it ([`Claim::allow_async_replication`]; then logged as a warning).
fn check_replication(store: &store::Store, db: &Path, claim: &Claim) -> anyhow::Result<()> {
    if !store.synchronous_standbys()?.trim().is_empty() {
        return Ok(());
    }
    if !claim.allow_async_replication {
        bail!(
            "--db {}: the server's synchronous_standby_names is empty (no standby confirms a commit before it is acknowledged): after a failover, ledger charges that were committed and answered could be gone and the budget spent again. Run PostgreSQL with synchronous replication (docs/service.md, \"PostgreSQL and several nodes\"), or give --allow-async-replication for a server without failover",
            store::shown(db)
        );
    }
    crate::log::log(
        "warning",
        json!({"db": store::shown(db), "message": "asynchronous replication allowed (--allow-async-replication): a failover of the database could lose committed ledger charges"}),
    );
    Ok(())
}

/// Claim the PostgreSQL database `db` for this node: at once when nobody holds it or the
/// holder's lease has ended; else wait (as a standby, logging the holder once) for at most
/// `claim.wait`, or refuse naming the holder.
fn claim_database(store: &mut store::Store, db: &Path, claim: &Claim) -> anyhow::Result<()> {
    check_replication(store, db, claim)?;
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        if claim
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        {
            bail!(
                "--db {}: stopped while waiting for the database",
                store::shown(db)
            );
        }
        let claimed = match store.claim(&claim.node, claim.addr.as_deref(), claim.lease) {
            Ok(c) => c,
            // A standby outlives the database's restarts: it tries again on a new connection.
            Err(e) if claim.wait.is_some_and(|w| started.elapsed() < w) => {
                crate::log::log("claim-failed", json!({"error": format!("{e:#}")}));
                std::thread::sleep(std::time::Duration::from_secs(1));
                let _ = store.reconnect_if_closed();
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Some(slot) = &claim.forward_to {
            // Not to this node's own address: the holder there is this node's predecessor (killed
            // and restarted on the same port), whose lease has not ended yet.
            let holder = claimed
                .as_ref()
                .err()
                .and_then(|h| h.addr.clone())
                .filter(|a| Some(a) != claim.addr.as_ref());
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = holder;
        }
        match claimed {
            Ok(epoch) => {
                crate::log::log(
                    "claimed",
                    json!({"db": store::shown(db), "node": claim.node, "epoch": epoch,
                           "lease_s": claim.lease.as_secs_f64()}),
                );
                return Ok(());
            }
            Err(h) => {
                let waited = started.elapsed();
                if claim.wait.is_none_or(|w| waited >= w) {
                    bail!(
                        "--db {}: node {:?} holds it (epoch {}, its lease ends in {:.1} s); one writer per database: another node takes it over only when that lease has ended",
                        store::shown(db),
                        h.node,
                        h.epoch,
                        h.left.max(0.0)
                    );
                }
                if !said {
                    crate::log::log(
                        "standby",
                        json!({"db": store::shown(db), "holder": h.node, "epoch": h.epoch,
                               "lease_left_s": h.left}),
                    );
                    said = true;
                }
                let pause = h.left.clamp(0.05, 1.0);
                std::thread::sleep(std::time::Duration::from_secs_f64(pause));
            }
        }
    }
}

/// The start-up check ([`crate::verify::startup_check`]): after the stored keyed checkpoint
/// when it holds, else the whole log. Returns the experiments to pin and the checkpoint of the
/// state just verified (to store before this start writes anything).
fn start_up_check(
    store: &store::Store,
    db: &Path,
    key: Option<&store::AuditKey>,
) -> anyhow::Result<(Vec<String>, Option<String>)> {
    let checked = crate::verify::startup_check(store, key).with_context(|| {
        format!(
            "--db {}: refusing to start: the database does not verify against its audit log (dpbandits audit-log verify names the same)",
            store::shown(db)
        )
    })?;
    crate::verify::progress::passed(checked.report.entries as i64);
    crate::log::log(
        "start-up-check",
        json!({"entries": checked.report.entries, "resumed_after_checkpoint": checked.resumed_after,
               "checkpoint_refused": checked.checkpoint_refused}),
    );
    Ok((checked.report.unpinned, checked.next))
}
