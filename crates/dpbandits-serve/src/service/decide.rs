//! Issuing a decision: the action set, the releases a decision draws first, the decision row
//! and its audit entries.

use super::create::{check_request_id, core_error};
use super::reward::{charge, cost_of};
use super::*;

/// A contextual decision's action set from JSON: `k >= 1` arrays of the same length `d`.
pub(super) fn action_set(v: &Value) -> ServiceResult<(usize, usize, Vec<f64>)> {
    let bad = || {
        let s = v.to_string();
        let s = if s.chars().count() > 60 {
            format!("{}...", s.chars().take(60).collect::<String>())
        } else {
            s
        };
        ServiceError::invalid(
            "actions",
            format!(
                "actions = {s}: expected the round's action set, an array of k >= 1 arrays of d numbers"
            ),
        )
    };
    let rows = v.as_array().filter(|r| !r.is_empty()).ok_or_else(bad)?;
    let d = rows[0].as_array().map_or(0, Vec::len);
    let mut features = Vec::with_capacity(rows.len() * d);
    for (i, row) in rows.iter().enumerate() {
        let cells = row.as_array().ok_or_else(bad)?;
        if cells.len() != d || d == 0 {
            return Err(ServiceError::invalid(
                "actions",
                format!(
                    "actions[{i}]: {} numbers, expected {d} (every action of the set has the same dimension >= 1)",
                    cells.len()
                ),
            ));
        }
        for (j, x) in cells.iter().enumerate() {
            features.push(x.as_f64().ok_or_else(|| {
                ServiceError::invalid(
                    "actions",
                    format!("actions[{i}][{j}] = {x}: expected a number"),
                )
            })?);
        }
    }
    Ok((rows.len(), d, features))
}

/// A decision's action set: `(k, d, features)` row by row.
type Actions = (usize, usize, Vec<f64>);

/// The action set as the decision row stores it (an array of `k` arrays of `d` numbers).
fn actions_json((k, d, f): &Actions) -> String {
    Value::Array(
        (0..*k)
            .map(|i| json!(f[i * d..(i + 1) * d]))
            .collect::<Vec<_>>(),
    )
    .to_string()
}

/// Whether `session` takes a decision now with `actions`: an action set exactly when the
/// setting needs one (refused first, naming `actions`: it does not depend on the state), not
/// stopped, not at a commitment boundary (answered as a conflict with the counts, before the
/// session is asked), and an action set the session admits (validated before anything is
/// drawn).
fn check_decidable(session: &Session, actions: Option<&Actions>) -> ServiceResult<()> {
    match (session.dim(), actions) {
        (Some(d), None) => {
            return Err(ServiceError::invalid(
                "actions",
                format!(
                    "actions = (missing): expected the round's action set, an array of k >= 1 arrays of d = {d} numbers"
                ),
            ));
        }
        (None, Some((k, d, _))) => {
            return Err(ServiceError::invalid(
                "actions",
                format!(
                    "actions = a {k} x {d} array: a {} experiment decides without an action set",
                    session.setting()
                ),
            ));
        }
        _ => {}
    }
    match session.next() {
        Next::Stopped { recommendation } => {
            return Err(ServiceError::Stopped { recommendation });
        }
        Next::Reward { pending, .. } => {
            let rounds_left = session
                .commitment()
                .map_or(0, |(_, rounds, _, observed)| rounds - observed);
            return Err(ServiceError::Conflict {
                pending,
                rounds_left,
            });
        }
        Next::Decision | Next::ActionSet { .. } => {}
    }
    if let Some((k, d, features)) = actions {
        session
            .check_actions(&ActionSet {
                d: *d,
                k: *k,
                features,
            })
            .map_err(|err| core_error(err, "actions"))?;
    }
    Ok(())
}

/// What a decision stores beside the session: its round, the round observed when it was
/// asked, the request id, the action set and the propensity.
struct Issued<'a> {
    round: u64,
    at_round: u64,
    request_id: Option<&'a str>,
    actions: Option<String>,
    propensity: Option<f64>,
}

impl Service {
    /// Issue a decision. A repeated `request_id` returns the decision it already got. A
    /// contextual experiment needs the round's action set (`actions`, `k x d`); the answer's
    /// `arm` is the chosen action's index. A best-arm identification experiment answers
    /// [`ServiceError::Stopped`] once its stopping rule fired (recorded once, in the audit log
    /// and the status).
    pub fn decide(
        &mut self,
        name: &str,
        request_id: Option<String>,
        actions: Option<&Value>,
    ) -> ServiceResult<Value> {
        self.experiment(name)?;
        if let Some(rid) = &request_id {
            check_request_id(rid)?;
            if let Some((id, arm)) = self.store.find_request(name, rid)? {
                return Ok(json!({"decision_id": id, "arm": arm, "repeat": true}));
            }
        }
        if self.experiment(name)?.closed.is_some() {
            return Err(ServiceError::Closed { name: name.into() });
        }
        let actions = actions.map(action_set).transpose()?;
        self.expire(name)?;
        check_decidable(&self.experiment(name)?.session, actions.as_ref())?;
        // Releases the decision draws first (contextual: an episode ends; pipelined: a
        // commitment completed from rewards received): each one's intent is committed first.
        self.releases_before_decision(name)?;
        let e = self.experiments.get_mut(name).expect("checked above");
        let round = e.session.issued();
        let at_round = e.session.t();
        // The session validates the action set (or its absence) before the policy sees it; a
        // refusal leaves it unchanged.
        let decided = match &actions {
            Some((k, d, features)) => e.session.decide_with(&ActionSet {
                d: *d,
                k: *k,
                features,
            }),
            None => e.session.decide(),
        }
        .map_err(|err| match err {
            dpbandits::Error::Param { .. } | dpbandits::Error::UnknownField { .. } => {
                core_error(err, "actions")
            }
            other => ServiceError::internal(other),
        })?;
        let issued = Issued {
            round,
            at_round,
            request_id: request_id.as_deref(),
            actions: actions.as_ref().map(actions_json),
            propensity: e.session.propensity(),
        };
        let stored = match decided {
            // The stopping rule fired now: recorded once, then refused as stopped.
            Decision::Stop { recommendation } => self
                .store_stop(name, recommendation, at_round)
                .and(Err(ServiceError::Stopped { recommendation })),
            Decision::Play { arm, opened } => self.store_decision(name, arm, opened, &issued),
        };
        match stored {
            Ok(v) => Ok(v),
            Err(err @ ServiceError::Stopped { .. }) => Err(err),
            Err(err) => {
                // The session decided in memory but nothing was stored: back to the stored state.
                self.undo(name)?;
                Err(err)
            }
        }
    }

    /// Whether experiment `name` is at a commitment boundary: its next decision waits for a
    /// reward (`false` for an unknown name).
    pub fn at_boundary(&self, name: &str) -> bool {
        self.experiments
            .get(name)
            .is_some_and(|e| matches!(e.session.next(), Next::Reward { .. }))
    }

    /// Store that `name`'s stopping rule fired at `at_round` (its state and a `stop` entry).
    fn store_stop(
        &mut self,
        name: &str,
        recommendation: usize,
        at_round: u64,
    ) -> ServiceResult<()> {
        let e = self.experiments.get(name).expect("checked by the caller");
        let tx = self.store.begin()?;
        store_state(&tx, e, &mut self.stale, name, e.releases)?;
        tx.audit(
            name,
            store::Event::Stop,
            &json!({"recommendation": recommendation, "at_round": at_round}),
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Store decision `arm` of `name` (its state, the commitment it opened, the decision row
    /// and its entry) and answer it.
    fn store_decision(
        &mut self,
        name: &str,
        arm: usize,
        opened: Option<u64>,
        d: &Issued<'_>,
    ) -> ServiceResult<Value> {
        let e = self.experiments.get(name).expect("checked by the caller");
        let id = e.session.issued();
        let tx = self.store.begin()?;
        store_state(&tx, e, &mut self.stale, name, e.releases)?;
        if let Some(rounds) = opened {
            tx.audit(
                name,
                store::Event::Commitment,
                &json!({"arm": arm, "rounds": rounds, "at_round": d.at_round}),
            )?;
        }
        let issued_unix = store::unix_now();
        tx.insert_decision(
            name,
            &store::NewDecision {
                id,
                arm,
                round: d.round,
                request_id: d.request_id,
                actions: d.actions.as_deref(),
                propensity: d.propensity,
                issued_unix,
            },
        )?;
        // The entry pins everything of the row the service reads back: the arm, the action
        // set (by its hash), the request id (a retry's answer), the propensity (the export)
        // and the issue time (the reward deadline).
        let mut body = json!({"decision_id": id, "arm": arm, "issued_unix": issued_unix});
        if let Some(a) = &d.actions {
            // The chained entry pins the action set by its hash (the set is in `decisions`).
            body["actions_sha256"] = json!(store::sha256_hex(a.as_bytes()));
        }
        if let Some(r) = d.request_id {
            body["request_id"] = json!(r);
        }
        if let Some(p) = d.propensity {
            body["propensity"] = json!(p);
        }
        tx.audit(name, store::Event::Decision, &body)?;
        tx.commit()?;
        let mut answer = json!({"decision_id": id, "arm": arm});
        if let Some(p) = d.propensity {
            answer["propensity"] = json!(p);
        }
        Ok(answer)
    }

    /// Draw, one at a time, the releases `name`'s next decision draws before it is issued
    /// ([`Session::prepare_decision`]): each one's ledger intent is committed (durable) before
    /// its draw, then the release, its charge and the state are stored, as a reward's release is.
    pub(super) fn releases_before_decision(&mut self, name: &str) -> ServiceResult<()> {
        loop {
            let e = self
                .experiments
                .get_mut(name)
                .expect("checked by the caller");
            let prepared = e.session.prepare_decision();
            // The preparation may have changed the session (the policy's next commitment,
            // rewards it took): its state is written with the batch's next commit.
            if self.store.in_batch() && !self.stale.contains(name) {
                self.stale.insert(name.to_string());
            }
            let Some(release) = prepared.map_err(ServiceError::internal)? else {
                return Ok(());
            };
            let e = self
                .experiments
                .get_mut(name)
                .expect("checked by the caller");
            let Some((measure, c)) = cost_of(&e.guarantee) else {
                e.session
                    .release_prepared()
                    .map_err(ServiceError::internal)?;
                continue;
            };
            let release_no = e.releases + 1;
            let intent =
                self.write_intent(name, release_no, release.arm, release.rounds, (measure, c));
            let (id, key) = match intent {
                Ok(written) => written,
                Err(err) => {
                    // Nothing drawn: back to the stored state (the preparation included).
                    self.undo(name)?;
                    return Err(err);
                }
            };
            let e = self
                .experiments
                .get_mut(name)
                .expect("checked by the caller");
            // Drawn with the intent's stored key: a redo draws the same noise.
            let drawn = dpbandits::privacy::with_release_key(key, || e.session.release_prepared());
            if let Err(err) = drawn {
                self.undo(name)?;
                return Err(ServiceError::internal(err));
            }
            let result: ServiceResult<()> = (|| {
                let tx = self.store.begin()?;
                store_state(&tx, e, &mut self.stale, name, release_no)?;
                tx.audit(name,
                    store::Event::Release,
                    &json!({"release": release_no, "arm": release.arm, "episode_rounds": release.rounds, "at": "decision"}),
                )?;
                charge(&tx, name, id, release_no, release.arm, measure, c)?;
                tx.commit()?;
                Ok(())
            })();
            if let Err(err) = result {
                self.undo(name)?;
                return Err(err);
            }
            e.releases = release_no;
            self.count_charge(name, release_no)?;
        }
    }

    /// A charge of `name`'s release `release_no` is stored: the maintained counts follow (the
    /// release's rows through the ledger's index by release, so no scan).
    pub(super) fn count_charge(&mut self, name: &str, release_no: u64) -> ServiceResult<()> {
        let per_release = self.store.ledger_release_charges(name, release_no)?;
        let e = self
            .experiments
            .get_mut(name)
            .expect("checked by the caller");
        e.charges += 1;
        e.max_per_release = e.max_per_release.max(per_release);
        Ok(())
    }

    /// After an operation changed `name`'s session but failed to store it: outside a batch,
    /// put the session back to its stored state; inside one, fail the batch (its rollback
    /// reloads every experiment from the last commit, since the snapshots of the batch's earlier
    /// operations are written only at its end).
    pub(super) fn undo(&mut self, name: &str) -> ServiceResult<()> {
        if self.store.in_batch() {
            self.batch_failed = true;
            return Ok(());
        }
        let snap = self.store.load_snapshot(name)?;
        let s = Session::restore(&snap).map_err(ServiceError::internal)?;
        if let Some(e) = self.experiments.get_mut(name) {
            e.session = s;
        }
        Ok(())
    }
}
