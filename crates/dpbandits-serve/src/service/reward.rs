//! Rewards and abandonments: admitting a reward, its release with the ledger's intent and
//! charge, and the reward deadline.

use super::*;

/// The per-release cost and measure of a guarantee (`rho` of zCDP, `epsilon` of pure or approximate
/// DP), or `None` for a non-private policy.
/// Settle ledger row `id` (release `release_no` of `name`'s `arm`) as charged inside `tx`, with
/// its `budget-charge` audit entry.
pub(super) fn charge(
    tx: &Connection,
    name: &str,
    id: i64,
    release_no: u64,
    arm: usize,
    measure: &str,
    cost: f64,
) -> ServiceResult<()> {
    store::set_ledger_status(tx, id, "charged")?;
    store::audit(
        tx,
        name,
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
        for id in store::expired_decisions(&self.conn, name, cutoff)? {
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
        abandoned: Option<&str>,
    ) -> ServiceResult<Value> {
        if self.experiment(name)?.closed.is_some() {
            return Err(ServiceError::Closed { name: name.into() });
        }
        let Some((arm, previous, outcome)) = store::decision(&self.conn, name, decision_id)? else {
            return Err(ServiceError::NotFound(format!(
                "decision_id = {decision_id}: no such decision in experiment {name:?}"
            )));
        };
        if let Some(prev) = previous {
            return self.repeated(
                name,
                decision_id,
                arm,
                reward,
                prev,
                outcome.as_deref(),
                abandoned,
            );
        }
        let e = self.experiments.get_mut(name).expect("checked above");
        let invalid =
            |err: dpbandits::Error| ServiceError::invalid("reward", format!("reward: {err}"));
        // The policy's own boundary admits the reward first (clip, or refuse in reject mode);
        // a refused reward changes nothing and the decision stays pending.
        let admitted = e.session.boundary().single(reward).map_err(invalid)?;
        let clipped = admitted.sum() != reward;
        // Whether this reward completes a commitment (a release; pipelined experiments have
        // several commitments open).
        let index = decision_id.saturating_sub(1);
        match e.session.pending_arm(index) {
            Some(carm) if carm == arm => {}
            other => {
                return Err(ServiceError::internal(format!(
                    "decision {decision_id} (arm {arm}) has no reward, but the session has it {}",
                    other.map_or("observed".to_string(), |a| format!("of arm {a}"))
                )));
            }
        }
        let release = e
            .session
            .observe_releases(index)
            .map_err(ServiceError::internal)?;
        let completes = release.is_some();
        let rounds = release.map_or(1, |r| r.rounds);
        let cost = cost_of(&e.guarantee);
        let release_no = e.releases + 1;
        // A release is about to be drawn: its intent is committed first, so a crash between the
        // draw and the state change leaves a charged (`lost`) row, and a redo is charged again.
        let intent = match (completes, cost) {
            (true, Some((measure, c))) => {
                let id = store::insert_intent(
                    &mut self.conn,
                    name,
                    release_no,
                    arm,
                    rounds,
                    measure,
                    c,
                )?;
                // Durable before the draw, also inside a batch (the batch so far is committed).
                self.flush_batch()?;
                Some((id, measure, c))
            }
            _ => None,
        };
        let in_batch = !self.conn.is_autocommit();
        let e = self.experiments.get_mut(name).expect("checked above");
        if let Err(err) = e
            .session
            .observe_decision(decision_id.saturating_sub(1), reward)
        {
            return Err(match err {
                dpbandits::Error::Boundary { .. } => invalid(err),
                dpbandits::Error::Param { ref field, .. } if field == "reward" => invalid(err),
                other => ServiceError::internal(other),
            });
        }
        let releases = if completes { release_no } else { e.releases };
        let result: ServiceResult<()> = (|| {
            let tx = self.conn.savepoint()?;
            store_state(&tx, e, &mut self.stale, name, releases, in_batch)?;
            store::record_reward(
                &tx,
                name,
                decision_id,
                reward,
                admitted.sum(),
                if abandoned.is_some() {
                    "abandoned"
                } else {
                    "reward"
                },
            )?;
            let mut body = json!({"decision_id": decision_id, "arm": arm, "reward": reward, "admitted": admitted.sum()});
            if let Some(why) = abandoned {
                body["abandoned"] = json!(why);
            }
            store::audit(
                &tx,
                name,
                if abandoned.is_some() {
                    store::Event::Abandon
                } else {
                    store::Event::Reward
                },
                &body,
            )?;
            if completes {
                store::audit(
                    &tx,
                    name,
                    store::Event::Release,
                    &json!({"release": release_no, "arm": arm, "episode_rounds": "complete"}),
                )?;
            }
            if let Some((id, measure, c)) = intent {
                charge(&tx, name, id, release_no, arm, measure, c)?;
            }
            tx.commit()?;
            Ok(())
        })();
        if let Err(err) = result {
            // Nothing stored: put the session back to its stored state (the drawn release, if
            // any, stays charged through its open intent once the service restarts).
            self.undo(name)?;
            return Err(err);
        }
        // Stored: the release count follows at once (the batch's end writes it with the
        // snapshot); then the maintained counts (the release's rows through the ledger's index
        // by release, so no scan).
        e.releases = releases;
        if intent.is_some() {
            self.count_charge(name, release_no)?;
        }
        if let Some(why) = abandoned {
            api_log_abandon(name, decision_id, why);
            return Ok(json!({"decision_id": decision_id, "status": "abandoned", "why": why}));
        }
        Ok(json!({"decision_id": decision_id, "status": "applied", "clipped": clipped}))
    }
}
