//! Rewards and abandonments: admitting a reward, its release with the ledger's intent and
//! charge, and the reward deadline.

use super::*;

/// The per-release cost and measure of a guarantee (`rho` of zCDP, `epsilon` of pure or approximate
/// DP), or `None` for a non-private policy.
/// Settle ledger row `id` (release `release_no` of `name`'s `arm`) as charged inside `tx`, with
/// its `budget-charge` audit entry.
pub(super) fn charge(
    tx: &store::Tx<'_>,
    name: &str,
    id: i64,
    release_no: u64,
    arm: usize,
    measure: &str,
    cost: f64,
) -> ServiceResult<()> {
    tx.set_ledger_status(id, "charged")?;
    tx.audit(name,
        store::Event::BudgetCharge,
        &json!({"ledger_id": id, "release": release_no, "arm": arm, "measure": measure, "cost": cost, "status": "charged"}),
    )?;
    Ok(())
}

pub(super) fn cost_of(g: &PrivacyGuarantee) -> Option<(&'static str, f64)> {
    match g.budget {
        Budget::NonPrivate => None,
        Budget::Zcdp { rho } => Some(("rho", rho)),
        Budget::PureDp { epsilon } => Some(("epsilon", epsilon)),
        Budget::ApproxDp { epsilon, .. } => Some(("epsilon", epsilon)),
        // A budget kind this build does not know: charged as non-private would be wrong, so
        // the experiment is refused at creation (see `Service::create`).
        _ => None,
    }
}

impl Service {
    /// The answer to a reward for a decision that has one already: a late true outcome of an
    /// abandoned decision is stored ([`Service::late_outcome`]); anything else is a duplicate,
    /// not applied, saying whether it differs from the applied reward or the decision was
    /// abandoned.
    #[allow(clippy::too_many_arguments)]
    fn repeated(
        &mut self,
        name: &str,
        decision_id: u64,
        arm: usize,
        reward: f64,
        prev: f64,
        outcome: Option<&str>,
        abandoned: Option<&str>,
    ) -> ServiceResult<Value> {
        if outcome == Some("abandoned") && abandoned.is_none() {
            return self.late_outcome(name, decision_id, arm, reward);
        }
        let mut v = json!({"decision_id": decision_id, "status": "duplicate"});
        if outcome == Some("abandoned") {
            v["note"] = json!(
                "the decision was abandoned (its dropout reward is recorded); this report was not applied"
            );
            v["abandoned"] = json!(true);
        } else if prev.to_bits() != reward.to_bits() && abandoned.is_none() {
            v["note"] = json!(
                "a different reward was reported first and applied; this report was not applied"
            );
            v["differs"] = json!(true);
        }
        Ok(v)
    }

    /// Report the reward of a decision (idempotent per `decision_id`: a second report is not
    /// applied; the answer says whether it differs from the applied one, or that the decision
    /// was abandoned).
    pub fn reward(&mut self, name: &str, decision_id: u64, reward: f64) -> ServiceResult<Value> {
        self.apply(name, decision_id, reward, None)
    }

    /// Abandon a pending decision (the client: the outcome will never come): its reward is
    /// recorded as the experiment's `dropout_reward`, so its commitment can complete. Refused
    /// naming `dropout_reward` when the experiment has none.
    pub fn abandon(&mut self, name: &str, decision_id: u64) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        let Some(d) = e.dropout else {
            return Err(ServiceError::invalid(
                "dropout_reward",
                format!(
                    "dropout_reward = (not set): experiment {name:?} was created without a dropout reward, so a decision cannot be abandoned"
                ),
            ));
        };
        self.apply(name, decision_id, d, Some("client"))
    }

    /// Abandon every pending decision of `name` older than its `reward_deadline` (oldest first).
    pub(super) fn expire(&mut self, name: &str) -> ServiceResult<()> {
        let e = self.experiment(name)?;
        let (Some(deadline), Some(d)) = (e.deadline, e.dropout) else {
            return Ok(());
        };
        let cutoff = store::unix_now() - deadline;
        for id in self.store.expired_decisions(name, cutoff)? {
            self.apply(name, id, d, Some("deadline"))?;
        }
        Ok(())
    }

    /// Apply a reward (`abandoned`: `Some(why)` for a dropout recorded as the reward).
    pub(super) fn apply(
        &mut self,
        name: &str,
        decision_id: u64,
        reward: f64,
        abandoned: Option<&'static str>,
    ) -> ServiceResult<Value> {
        let fresh = match self.admit(name, decision_id, reward, abandoned)? {
            Admitted::Answered(v) => return Ok(v),
            Admitted::Fresh(f) => f,
        };
        // A release is about to be drawn: its intent is committed first, so a crash between the
        // draw and the state change leaves a charged (`lost`) row, and a redo is charged again.
        let intent = match fresh.release {
            Some(rounds) => self.reserve(name, fresh.release_no, fresh.arm, rounds)?,
            None => None,
        };
        self.complete(name, fresh, intent)
    }

    /// A reward in a batch (the writer's path, [`Staged`]): like [`Service::reward`], except
    /// that a reward whose release needs a ledger intent does not commit the batch part-way.
    /// Its intent is written into the batch and the rest (the draw, the state, the audit
    /// entries, the answer) is returned as the step after the batch's commit, which the writer
    /// runs first in its next batch, before any other operation on the experiment: the intent
    /// is durable before the draw, as in [`Service::reward`], with no commit of its own.
    /// Outside a batch the same as [`Service::reward`].
    pub fn reward_staged(
        &mut self,
        name: &str,
        decision_id: u64,
        reward: f64,
    ) -> ServiceResult<Staged<Value>> {
        if !self.store.in_batch() {
            return self.reward(name, decision_id, reward).map(Staged::Done);
        }
        let fresh = match self.admit(name, decision_id, reward, None)? {
            Admitted::Answered(v) => return Ok(Staged::Done(v)),
            Admitted::Fresh(f) => f,
        };
        let priced = cost_of(&self.experiment(name)?.guarantee);
        let (Some(rounds), Some((measure, cost))) = (fresh.release, priced) else {
            return self.complete(name, fresh, None).map(Staged::Done);
        };
        let (id, key) =
            self.insert_intent(name, fresh.release_no, fresh.arm, rounds, (measure, cost))?;
        let intent = Intent {
            id,
            measure,
            cost,
            key,
        };
        let name = name.to_string();
        Ok(Staged::AfterCommit(Box::new(move |s: &mut Service| {
            s.complete(&name, fresh, Some(intent))
        })))
    }

    /// The checks of a reward before anything changes: the experiment is open, the decision
    /// exists and has no reward yet (else the answer for a repeated report), and the policy's
    /// boundary admits the reward (clip, or refuse in reject mode; a refused reward changes
    /// nothing and the decision stays pending). Also whether it completes a release.
    fn admit(
        &mut self,
        name: &str,
        decision_id: u64,
        reward: f64,
        abandoned: Option<&'static str>,
    ) -> ServiceResult<Admitted> {
        if self.experiment(name)?.closed.is_some() {
            return Err(ServiceError::Closed { name: name.into() });
        }
        // A decision the session holds pending is stored without a reward (its row was written
        // before it was answered, and the session adopts the stored pending decisions at every
        // start): no read. Any other (a repeat, a late outcome, an unknown id) is read.
        let pending = self
            .experiments
            .get(name)
            .and_then(|e| e.session.pending_arm(decision_id.checked_sub(1)?))
            .map(|arm| (arm, None, None));
        let stored = match pending {
            Some(p) => Some(p),
            None => self.store.decision(name, decision_id)?,
        };
        let Some((arm, previous, outcome)) = stored else {
            return Err(ServiceError::NotFound(format!(
                "decision_id = {decision_id}: no such decision in experiment {name:?}"
            )));
        };
        if let Some(prev) = previous {
            let outcome = outcome.as_deref();
            return self
                .repeated(name, decision_id, arm, reward, prev, outcome, abandoned)
                .map(Admitted::Answered);
        }
        let e = self.experiments.get(name).expect("checked above");
        let admitted = e
            .session
            .boundary()
            .single(reward)
            .map_err(invalid_reward)?;
        Ok(Admitted::Fresh(Fresh {
            decision_id,
            arm,
            reward,
            admitted: admitted.sum(),
            abandoned,
            release: release_of(&e.session, decision_id, arm)?,
            release_no: e.releases + 1,
        }))
    }

    /// An admitted reward taken (the release drawn, when it completes one, after its intent
    /// is durable) and stored with its audit entries and charge; its answer.
    fn complete(&mut self, name: &str, f: Fresh, intent: Option<Intent>) -> ServiceResult<Value> {
        let e = self
            .experiments
            .get_mut(name)
            .expect("checked by the caller");
        let index = f.decision_id.saturating_sub(1);
        if e.session.pending_arm(index) != Some(f.arm) {
            // Nothing else runs on the experiment between a staged reward's two steps; were it
            // otherwise, nothing is drawn (an open intent is charged as lost on restart).
            return Err(ServiceError::internal(format!(
                "decision {} of {name:?} is no longer pending",
                f.decision_id
            )));
        }
        // A release is drawn with its intent's stored key: a redo draws the same noise.
        let observed = match intent {
            Some(i) => dpbandits::privacy::with_release_key(i.key, || {
                e.session.observe_decision(index, f.reward)
            }),
            None => e.session.observe_decision(index, f.reward),
        };
        observed.map_err(refused_reward)?;
        let applied = Applied {
            decision_id: f.decision_id,
            arm: f.arm,
            reward: f.reward,
            admitted: f.admitted,
            abandoned: f.abandoned,
            release: f.release.map(|_| f.release_no),
            intent,
        };
        if let Err(err) = self.store_reward(name, &applied) {
            // Nothing stored: put the session back to its stored state (the drawn release, if
            // any, stays charged through its open intent once the service restarts).
            self.undo(name)?;
            return Err(err);
        }
        // Stored: the release count follows at once (the batch's end writes it with the
        // snapshot); then the maintained counts (the release's rows through the ledger's index
        // by release, so no scan).
        let e = self.experiments.get_mut(name).expect("checked above");
        if f.release.is_some() {
            e.releases = f.release_no;
        }
        if intent.is_some() {
            self.count_charge(name, f.release_no)?;
        }
        if let Some(why) = f.abandoned {
            api_log_abandon(name, f.decision_id, why);
            return Ok(json!({"decision_id": f.decision_id, "status": "abandoned", "why": why}));
        }
        let clipped = f.admitted != f.reward;
        Ok(json!({"decision_id": f.decision_id, "status": "applied", "clipped": clipped}))
    }

    /// Commit the ledger intent of `name`'s release `release_no` (of `arm`, `rounds` rewards)
    /// before it is drawn: durable also inside a batch (the batch so far is committed). `None`
    /// for a non-private experiment (nothing to charge).
    fn reserve(
        &mut self,
        name: &str,
        release_no: u64,
        arm: usize,
        rounds: u64,
    ) -> ServiceResult<Option<Intent>> {
        let e = self.experiment(name)?;
        let Some((measure, cost)) = cost_of(&e.guarantee) else {
            return Ok(None);
        };
        let (id, key) = self.write_intent(name, release_no, arm, rounds, (measure, cost))?;
        Ok(Some(Intent {
            id,
            measure,
            cost,
            key,
        }))
    }

    /// Write the ledger intent of `name`'s release `release_no` (of `arm`, `rounds` rewards, at
    /// `cost` in `measure`) and make it durable before the release is drawn: committed at once
    /// outside a batch; inside one, with the batch so far ([`Service::flush_batch`]). Returns
    /// its ledger row and the key the release is drawn with.
    pub(super) fn write_intent(
        &mut self,
        name: &str,
        release_no: u64,
        arm: usize,
        rounds: u64,
        (measure, cost): (&str, f64),
    ) -> ServiceResult<(i64, [u8; 32])> {
        let written = self.insert_intent(name, release_no, arm, rounds, (measure, cost))?;
        self.flush_batch()?;
        Ok(written)
    }

    /// Write the ledger intent row of [`Service::write_intent`] with a fresh release key from
    /// the operating system, in its own savepoint, without making it durable (a staged reward's
    /// batch commit does that). Returns its ledger row and key.
    ///
    /// **A release is drawn once.** When the release already has an open intent with a key (a
    /// crash, a failed batch or a lost writer came between an earlier intent and its release:
    /// the state went back to the stored one, from before the release), that intent and its
    /// key are returned instead: the redo draws the same noise
    /// ([`dpbandits::privacy::with_release_key`]) and the release is charged once. An open
    /// intent of the release that cannot be reused (no key, another arm or cost) is settled as
    /// charged `lost` first.
    fn insert_intent(
        &mut self,
        name: &str,
        release_no: u64,
        arm: usize,
        rounds: u64,
        (measure, cost): (&str, f64),
    ) -> ServiceResult<(i64, [u8; 32])> {
        let tx = self.store.begin()?;
        if let Some(open) = tx.open_intent(name, release_no)? {
            match open.key {
                Some(key) if open.arm == arm as i64 && open.cost == cost => {
                    crate::log::log(
                        "release-redo",
                        json!({"experiment": name, "release": release_no, "ledger_id": open.id}),
                    );
                    tx.commit()?;
                    return Ok((open.id, key));
                }
                _ => super::open::settle_lost(&tx, &open)?,
            }
        }
        let mut key = [0u8; 32];
        super::fill_os(&mut key)?;
        let id = tx.insert_intent(name, release_no, arm, rounds, measure, cost, &key)?;
        tx.commit()?;
        Ok((id, key))
    }

    /// Store an applied reward: the state, the decision's reward, its `reward` (or `abandon`)
    /// entry, and with a release its `release` entry and charge, in one savepoint.
    fn store_reward(&mut self, name: &str, a: &Applied<'_>) -> ServiceResult<()> {
        let e = self.experiments.get(name).expect("checked by the caller");
        let releases = a.release.unwrap_or(e.releases);
        let tx = self.store.begin()?;
        store_state(&tx, e, &mut self.stale, name, releases)?;
        let outcome = if a.abandoned.is_some() {
            "abandoned"
        } else {
            "reward"
        };
        tx.record_reward(name, a.decision_id, a.reward, a.admitted, outcome)?;
        let mut body = json!({"decision_id": a.decision_id, "arm": a.arm, "reward": a.reward, "admitted": a.admitted});
        let event = match a.abandoned {
            Some(why) => {
                body["abandoned"] = json!(why);
                store::Event::Abandon
            }
            None => store::Event::Reward,
        };
        tx.audit(name, event, &body)?;
        if let Some(release_no) = a.release {
            tx.audit(
                name,
                store::Event::Release,
                &json!({"release": release_no, "arm": a.arm, "episode_rounds": "complete"}),
            )?;
            if let Some(i) = a.intent {
                charge(&tx, name, i.id, release_no, a.arm, i.measure, i.cost)?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

/// A reward the policy's boundary or the session refuses, naming `reward`.
fn invalid_reward(err: dpbandits::Error) -> ServiceError {
    ServiceError::invalid("reward", format!("reward: {err}"))
}

/// The session's refusal to observe a reward: the reward's (naming it), or an internal error.
fn refused_reward(err: dpbandits::Error) -> ServiceError {
    match err {
        dpbandits::Error::Boundary { .. } => invalid_reward(err),
        dpbandits::Error::Param { ref field, .. } if field == "reward" => invalid_reward(err),
        other => ServiceError::internal(other),
    }
}

/// Whether the reward of decision `decision_id` (of `arm`) completes a commitment (a release;
/// pipelined experiments have several commitments open): `Some(rounds)` of the release.
fn release_of(session: &Session, decision_id: u64, arm: usize) -> ServiceResult<Option<u64>> {
    let index = decision_id.saturating_sub(1);
    match session.pending_arm(index) {
        Some(carm) if carm == arm => {}
        other => {
            return Err(ServiceError::internal(format!(
                "decision {decision_id} (arm {arm}) has no reward, but the session has it {}",
                other.map_or("observed".to_string(), |a| format!("of arm {a}"))
            )));
        }
    }
    let release = session
        .observe_releases(index)
        .map_err(ServiceError::internal)?;
    Ok(release.map(|r| r.rounds))
}

/// A committed ledger intent: its row and what it charges.
#[derive(Clone, Copy)]
struct Intent {
    id: i64,
    measure: &'static str,
    cost: f64,
    /// The key its release is drawn with.
    key: [u8; 32],
}

/// A reward's checks, done ([`Service::admit`]).
enum Admitted {
    /// A repeated report: its answer (nothing changes).
    Answered(Value),
    /// A first report the boundary admits.
    Fresh(Fresh),
}

/// A reward admitted and not yet taken.
struct Fresh {
    decision_id: u64,
    arm: usize,
    reward: f64,
    /// The admitted (clipped) reward.
    admitted: f64,
    abandoned: Option<&'static str>,
    /// The rewards of the release it completes, if it completes one.
    release: Option<u64>,
    /// That release's number.
    release_no: u64,
}

/// What an operation answers in a batch: its answer now, or the step to run after the batch's
/// commit (first in the writer's next batch), which answers it. A staged reward's release
/// intent is made durable by the batch's own commit instead of a commit of its own.
pub enum Staged<T> {
    /// Answered.
    Done(T),
    /// To run after the batch commits; not run if the commit fails.
    AfterCommit(AfterCommit<T>),
}

/// The step of a [`Staged`] operation after its batch's commit.
pub type AfterCommit<T> = Box<dyn FnOnce(&mut Service) -> ServiceResult<T> + Send>;

/// A reward the session took, as it is stored.
struct Applied<'a> {
    decision_id: u64,
    arm: usize,
    reward: f64,
    admitted: f64,
    abandoned: Option<&'a str>,
    /// The release it completed.
    release: Option<u64>,
    /// The release's committed intent (a private experiment).
    intent: Option<Intent>,
}
