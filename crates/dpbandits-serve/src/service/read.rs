//! What the service reads without changing state (and closing): the list, metrics gauges,
//! status, ledger, report, export, the audit export and the closing report.

use super::reward::cost_of;
use super::*;
use dpbandits::report::Validity;

impl Service {
    /// Every experiment (admin): name, kind, problem, counts, whether it has stopped.
    pub fn list(&self) -> ServiceResult<Value> {
        let mut names: Vec<&String> = self.experiments.keys().collect();
        names.sort();
        let rows: Vec<Value> = names
            .into_iter()
            .map(|n| {
                let e = &self.experiments[n];
                let c = e.counters();
                json!({"experiment": n, "kind": e.session.kind(), "problem": e.problem,
                       "decisions": c.issued, "rewarded": c.observed, "pending": e.session.pending(),
                       "stopped": e.session.stopped().map(|r| json!({"recommendation": r}))})
            })
            .collect();
        Ok(json!({"experiments": rows}))
    }

    /// Every experiment's gauges for `/metrics` (maintained counts: no table is read).
    pub fn metrics_gauges(&self) -> Vec<crate::metrics::ExperimentGauges> {
        let mut names: Vec<&String> = self.experiments.keys().collect();
        names.sort();
        names
            .into_iter()
            .map(|n| {
                let e = &self.experiments[n];
                let c = e.counters();
                let cost = cost_of(&e.guarantee);
                crate::metrics::ExperimentGauges {
                    name: n.clone(),
                    decisions: c.issued,
                    rewarded: c.observed,
                    pending: e.session.pending(),
                    charges: e.charges,
                    charged_total: cost.map_or(0.0, |(_, c)| c * e.charges as f64),
                    measure: cost.map_or("none", |(m, _)| m).to_string(),
                }
            })
            .collect()
    }

    /// The ledger summary of an experiment (maintained counts: no row is read).
    pub(super) fn ledger_summary(&self, name: &str) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        let cost = cost_of(&e.guarantee);
        let effective =
            cost.map(|(m, c)| json!({"measure": m, "value": c * e.max_per_release.max(1) as f64}));
        // Every row of an experiment costs the same (its guarantee's per-release cost).
        let total = cost.map_or(0.0, |(_, c)| c * e.charges as f64);
        Ok(json!({
            "charged_total": total,
            "charges": e.charges,
            "releases": e.releases,
            "max_charges_per_release": e.max_per_release,
            "effective_budget": effective,
            "note": "each completed commitment is charged once as a release (an upper bound: a kind may release at fewer of them); \
                     a release redone after a crash is charged again. The kinds release on disjoint rewards (parallel composition), \
                     so the guarantee holds with the budget multiplied by max_charges_per_release.",
        }))
    }

    /// An experiment's status (public counts, the problem, the guarantee, the ledger summary;
    /// BAI: the stop and its recommendation once the stopping rule fired).
    pub fn status(&self, name: &str) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        let ledger = self.ledger_summary(name)?;
        let c = e.counters();
        Ok(json!({
            "experiment": name,
            "kind": e.session.kind(),
            "arms": e.arms,
            "problem": e.problem,
            "decisions": c.issued,
            "rewarded": c.observed,
            "pending": e.session.pending(),
            "commitment": c.commit.map(|(arm, left)| json!({"arm": arm, "rounds_left": left})),
            "stopped": e.session.stopped().map(|r| json!({"recommendation": r})),
            "dropout_reward": e.dropout,
            "reward_deadline": e.deadline,
            "guarantee": e.guarantee,
            "ledger": ledger,
            "closed": e.closed.as_ref().map(|r| json!({"at_round": r["rounds"], "recommended_arm": r["recommended_arm"], "audit_seq": r["audit_seq"]})),
        }))
    }

    /// Close an experiment (admin): no further decisions or rewards, and the report — per-arm
    /// pulls (public counts of completed decisions), the private estimates and intervals at
    /// `level` computed from released statistics only (`dpbandits::report`), the recommended
    /// arm, the guarantee and the ledger — recorded once in the audit log (`close`) and
    /// returned. Refused while decisions are pending (abandon them or wait for their rewards or
    /// their deadline). Closing again returns the same report (`"repeat": true`).
    pub fn close(&mut self, name: &str, level: Option<f64>) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        if let Some(r) = &e.closed {
            let mut r = r.clone();
            r["repeat"] = json!(true);
            return Ok(r);
        }
        let level = level.unwrap_or(0.95);
        let pending = e.session.pending();
        if pending > 0 {
            return Err(ServiceError::invalid(
                "pending",
                format!(
                    "pending = {pending}: decisions wait for their rewards; report them, abandon them \
                     (POST /v1/experiments/{name}/decisions/{{id}}/abandon, or in bulk POST /v1/experiments/{name}/abandon), \
                     wait for their reward_deadline, or close with \"abandon_overdue\": true"
                ),
            ));
        }
        let report = self.core_report(name, level, Validity::AtClose, None)?;
        let pulls = self.store.completed_by_arm(name, e.arms)?;
        // The recommendation follows the evidence: the stopping rule's (BAI, once it fired),
        // else the largest private estimate, else the most-pulled arm; every rule is reported
        // (`recommended`), and `rules_differ` flags an argmax that is not the most-pulled arm.
        let recommended = report.recommended.arm;
        let rule = match report.recommended.rule {
            Some("stopping_rule") => "the stopping rule's recommendation",
            Some("argmax_estimate") => "the largest private estimate (ties: the lowest index)",
            Some("most_pulled") => "the most-pulled arm (ties: the lowest index)",
            _ => "no completed decision",
        };
        let ledger = self.ledger_summary(name)?;
        let e = self.experiment(name)?;
        let mut body = json!({
            "experiment": name,
            "kind": report.kind,
            "problem": e.problem,
            "rounds": report.rounds,
            "decisions": e.session.issued(),
            "pulls": pulls,
            "recommended_arm": recommended,
            "recommendation_rule": rule,
            "recommended": report.recommended,
            "level": level,
            "validity": report.validity,
            "estimates": report.estimates,
            "linear": report.linear,
            "method": report.method,
            "clipping": report.clipping,
            "why_no_estimates": report.why_no_estimates,
            "outcomes": report.counts,
            "warnings": report.warnings,
            "guarantee": e.guarantee,
            "ledger": ledger,
            "cost": "none: the report is post-processing of released statistics and public counts",
        });
        let tx = self.store.begin()?;
        let (seq, head) = tx.audit(name, store::Event::Close, &body)?;
        tx.commit()?;
        self.request_publish();
        body["audit_seq"] = json!(seq);
        body["audit_hash"] = json!(head);
        self.experiments
            .get_mut(name)
            .expect("checked above")
            .closed = Some(body.clone());
        Ok(body)
    }

    /// The report of a closed experiment.
    pub fn report(&self, name: &str) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        e.closed.clone().ok_or_else(|| {
            ServiceError::NotFound(format!(
                "experiment {name:?} is not closed: POST /v1/experiments/{name}/close (admin) publishes its report"
            ))
        })
    }

    /// The ledger summary and its rows with `id > after`, at most `limit` (`next_after`: the
    /// last row's id when more may follow).
    pub fn ledger_rows(&self, name: &str, after: i64, limit: u64) -> ServiceResult<Value> {
        let mut v = self.ledger_summary(name)?;
        let rows = self.store.ledger_rows(name, after, limit)?;
        let next = (rows.len() as u64 == limit)
            .then(|| rows.last().map(|r| r.id))
            .flatten();
        v["rows"] = json!(rows);
        v["next_after"] = json!(next);
        Ok(v)
    }

    /// Decisions with their rewards (admin; protected data), `decision_id > after`, at most
    /// `limit`: `(rows, next_after)`.
    pub fn export(
        &self,
        name: &str,
        after: u64,
        limit: u64,
    ) -> ServiceResult<(Vec<store::DecisionRow>, Option<u64>)> {
        self.experiment(name)?;
        export_rows(&self.store, name, after, limit)
    }

    /// The audit log (admin only): entries after `after`, at most `limit`.
    pub fn audit_export(
        &self,
        experiment: Option<&str>,
        after: i64,
        limit: i64,
    ) -> ServiceResult<Value> {
        audit_page(&self.store, experiment, after, limit)
    }
}

/// Decisions with their rewards (admin; protected data) of experiment `name`, `decision_id >
/// after`, at most `limit`: `(rows, next_after)`. On any connection (a reader beside the writer:
/// what is committed).
///
/// # Errors
/// No such experiment, or SQLite errors.
pub fn export_rows(
    reads: &store::Reads,
    name: &str,
    after: u64,
    limit: u64,
) -> ServiceResult<(Vec<store::DecisionRow>, Option<u64>)> {
    if !reads.experiment_exists(name)? {
        return Err(ServiceError::NotFound(format!(
            "experiment = {name:?}: no such experiment"
        )));
    }
    let rows = reads.decision_rows(name, after, limit)?;
    let next = (rows.len() as u64 == limit)
        .then(|| rows.last().map(|r| r.decision_id))
        .flatten();
    Ok((rows, next))
}

/// The audit log (admin only): entries after `after`, at most `limit`, of one experiment or all.
///
/// # Errors
/// SQLite errors.
pub fn audit_page(
    reads: &store::Reads,
    experiment: Option<&str>,
    after: i64,
    limit: i64,
) -> ServiceResult<Value> {
    let rows = reads.audit_entries(experiment, after, limit)?;
    Ok(json!({"entries": rows}))
}
