//! Creating an experiment: the request, the policy table, the session it builds, and client
//! token rotation.

use super::reward::cost_of;
use super::*;

/// The request that creates an experiment (the HTTP layer deserializes it). The problem's keys
/// depend on the kind's setting ([`Problem::keys`]): finite-armed `arms` (an integer >= 2),
/// linear `arms` (the arm vectors: K >= 2 arrays of d numbers), contextual `dim` and `horizon`,
/// best-arm identification `arms` and `delta`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The experiment's name: 1 to 64 characters from `[A-Za-z0-9_.-]`.
    pub name: String,
    /// Finite-armed and BAI: the number of arms (treatments); linear: the arm vectors.
    #[serde(default)]
    pub arms: Option<Value>,
    /// Contextual: the dimension of the actions.
    #[serde(default)]
    pub dim: Option<Value>,
    /// Contextual: the horizon (it enters the confidence radii).
    #[serde(default)]
    pub horizon: Option<Value>,
    /// BAI: the risk in (0, 1).
    #[serde(default)]
    pub delta: Option<Value>,
    /// The policy: a `[[policy]]` table of an experiment file, as TOML text or a JSON object.
    pub policy: Value,
    /// Allow a non-private kind (default false).
    #[serde(default)]
    pub allow_non_private: bool,
    /// Seed of a simulation-grade policy's generators (default: from the operating system).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Idempotent creation: the same body with the same `request_id` again answers 200 with the
    /// experiment (and a fresh client token: the one of the lost answer is revoked).
    #[serde(default)]
    pub request_id: Option<String>,
    /// Delayed outcomes: the reward recorded for an abandoned decision (a dropout recorded as an
    /// outcome value; admitted by the policy's boundary). Needed to abandon decisions.
    #[serde(default)]
    pub dropout_reward: Option<f64>,
    /// Delayed outcomes: seconds after which a pending decision is abandoned automatically (its
    /// reward recorded as `dropout_reward`), so that enrolment never waits longer.
    #[serde(default)]
    pub reward_deadline: Option<f64>,
    /// Delayed outcomes: `"wait"` (default) or `"pipeline"` (the episodic finite-armed kinds:
    /// the next commitment is opened from the released statistics while earlier ones wait for
    /// their rewards; `dpbandits::session::WhilePending`).
    #[serde(default)]
    pub while_pending: Option<String>,
}

impl CreateRequest {
    /// The body's keys, in the order error messages list them.
    pub const FIELDS: &'static [&'static str] = &[
        "name",
        "arms",
        "dim",
        "horizon",
        "delta",
        "policy",
        "allow_non_private",
        "seed",
        "request_id",
        "dropout_reward",
        "reward_deadline",
        "while_pending",
    ];

    /// The problem's keys as a TOML table for [`Problem::take_from`]; a key the setting does
    /// not take is refused naming it.
    pub(super) fn problem(&self, setting: Setting) -> ServiceResult<Problem> {
        let wanted = Problem::keys(setting);
        let mut t = toml::Table::new();
        for (key, v) in [
            ("arms", &self.arms),
            ("dim", &self.dim),
            ("horizon", &self.horizon),
            ("delta", &self.delta),
        ] {
            let Some(v) = v else { continue };
            if !wanted.contains(&key) {
                return Err(ServiceError::invalid(
                    key,
                    format!(
                        "{key} = {v}: not a key of a {setting} experiment (it takes {})",
                        wanted.join(", ")
                    ),
                ));
            }
            let tv = toml::Value::try_from(v).map_err(|_| {
                ServiceError::invalid(key, format!("{key} = {v}: expected a number or an array"))
            })?;
            t.insert(key.into(), tv);
        }
        Problem::take_from(setting, &mut t).map_err(|e| core_error(e, "arms"))
    }
}

/// A core-library refusal as the service's: a parameter error names its field (`default`
/// otherwise).
pub(super) fn core_error(e: dpbandits::Error, default: &str) -> ServiceError {
    let field = match &e {
        dpbandits::Error::Param { field, .. } | dpbandits::Error::UnknownField { field, .. } => {
            field.clone()
        }
        _ => default.to_string(),
    };
    ServiceError::invalid(field, e.to_string())
}

/// The problem as the status shows it (linear: the arm vectors too).
pub(super) fn problem_json(p: &Problem) -> Value {
    match p {
        Problem::Finite { arms } => json!({"setting": "finite", "arms": arms}),
        Problem::Linear { arms } => json!({"setting": "linear", "arms": arms.len(),
                                           "dim": arms.first().map_or(0, Vec::len), "arm_vectors": arms}),
        Problem::Contextual { dim, horizon } => {
            json!({"setting": "contextual", "dim": dim, "horizon": horizon})
        }
        Problem::Bai { arms, delta } => json!({"setting": "bai", "arms": arms, "delta": delta}),
    }
}

/// The number stored in the `arms` column: arms (finite, BAI), arm vectors (linear), 0
/// (contextual: each round brings its own action set).
pub(super) fn arms_of(p: &Problem) -> usize {
    match p {
        Problem::Finite { arms } | Problem::Bai { arms, .. } => *arms,
        Problem::Linear { arms } => arms.len(),
        Problem::Contextual { .. } => 0,
    }
}

/// A valid experiment name: 1 to 64 characters from `[A-Za-z0-9_.-]`, not `.` or `..`.
///
/// # Errors
/// [`ServiceError::Invalid`] naming `name`.
pub fn check_name(name: &str) -> ServiceResult<()> {
    // `.` and `..` are path segments, not names: a URL with them is normalised by clients and
    // proxies to another path.
    let ok = (1..=64).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(ServiceError::invalid(
            "name",
            format!(
                "name = {name:?}: expected 1 to 64 characters from [A-Za-z0-9_.-], not \".\" or \"..\""
            ),
        ))
    }
}

/// A valid request id: 1 to 128 characters.
///
/// # Errors
/// [`ServiceError::Invalid`] naming `request_id`.
pub fn check_request_id(rid: &str) -> ServiceResult<()> {
    if rid.is_empty() || rid.chars().count() > 128 {
        return Err(ServiceError::invalid(
            "request_id",
            format!("request_id = {rid:?}: expected 1 to 128 characters"),
        ));
    }
    Ok(())
}

/// The policy table from the request's `policy` (TOML text or a JSON object).
///
/// # Errors
/// [`ServiceError::Invalid`] naming `policy`.
pub fn policy_table(v: &Value) -> ServiceResult<toml::Table> {
    let bad = |m: String| ServiceError::invalid("policy", m);
    match v {
        Value::String(s) => s
            .parse::<toml::Table>()
            .map_err(|e| bad(format!("policy: not a TOML table ({})", e.message().trim()))),
        Value::Object(_) => toml::Table::try_from(v)
            .map_err(|e| bad(format!("policy: not representable as a TOML table ({e})"))),
        other => Err(bad(format!(
            "policy = {other}: expected a TOML table as text (\"kind = \\\"adac_ucb\\\"\\nrho = 0.5\") or a JSON object"
        ))),
    }
}

/// The session of a policy table with the service's rules: a reward outside the boundary is
/// refused (`boundary = "reject"` unless the table says otherwise, where the kind takes the key),
/// and deployment-grade noise unless the table says `noise = "simulation"` (kinds without a
/// deployment path need that explicitly). Which keys a kind takes, and whether it is private and
/// deploys, is the registry's record ([`registry::PolicyEntry::takes_in`],
/// [`dpbandits::config::AlgorithmInfo::deployable`]): the table is parsed once (twice only for a
/// private kind configured at its non-private limit, e.g. `rho = inf`, with no `noise`: its
/// refusal of the deployment path is answered by serving it as is, then refused below unless
/// `allow_non_private`).
pub(super) fn build_session(
    mut t: toml::Table,
    req: &CreateRequest,
    seed: u64,
) -> ServiceResult<(Session, Problem)> {
    let kind = take_kind(&mut t)?;
    let entry = registry::policy(&kind)
        .map_err(|e| ServiceError::invalid("policy.kind", format!("policy.kind: {e}")))?;
    let problem = req.problem(entry.setting())?;
    // A trial's rewards are data: one outside the boundary is refused (naming `reward`), not
    // clipped, unless the table asks for `boundary = "clip"` (kinds without a `boundary` key keep
    // their own: the non-private kinds reject at the numeric boundary anyway).
    if !t.contains_key("boundary") && entry.takes_in("boundary", &t) {
        t.insert("boundary".into(), toml::Value::String("reject".into()));
    }
    let session = build_with_noise(entry, &kind, t, &problem, seed)?;
    if !is_private(&session)? && !req.allow_non_private {
        return Err(ServiceError::invalid(
            "policy.kind",
            format!(
                "policy.kind = {kind:?}: not private (no guarantee); set allow_non_private = true to serve it"
            ),
        ));
    }
    Ok((session, problem))
}

/// The table's `kind` (removed from it), refused naming `policy.kind` when missing or not a
/// string.
fn take_kind(t: &mut toml::Table) -> ServiceResult<String> {
    match t.remove("kind") {
        Some(toml::Value::String(k)) => Ok(k),
        Some(v) => Err(ServiceError::invalid(
            "policy.kind",
            format!("policy.kind = {v}: expected a string"),
        )),
        None => Err(ServiceError::invalid(
            "policy.kind",
            "policy.kind = (missing): expected a registry kind (`dpbandits list`)",
        )),
    }
}

/// A refusal of building the session: one of a problem key (e.g. `delta` outside (0, 1))
/// names that key; any other, the policy table.
fn policy_refusal(setting: Setting, e: dpbandits::Error) -> ServiceError {
    let problem_keys = Problem::keys(setting);
    match &e {
        dpbandits::Error::Param { field, .. }
            if problem_keys
                .iter()
                .any(|k| field == k || field.starts_with(&format!("{k}["))) =>
        {
            core_error(e, "policy")
        }
        _ => ServiceError::invalid("policy", format!("policy: {e}")),
    }
}

/// The session of table `t` with the service's noise rule: the table's own `noise` as given
/// (`"simulation"` dropped for kinds without the key); otherwise deployment-grade for a kind
/// that deploys, a refusal naming `policy.noise` for a private kind that does not, and the
/// table as is for a non-private kind.
fn build_with_noise(
    entry: &registry::PolicyEntry,
    kind: &str,
    mut t: toml::Table,
    problem: &Problem,
    seed: u64,
) -> ServiceResult<Session> {
    let bad = |e| policy_refusal(entry.setting(), e);
    let build = |t: toml::Table| Session::new(kind, t, problem, seed);
    let explicit = t.get("noise").cloned();
    match explicit.as_ref().and_then(|v| v.as_str()) {
        Some("simulation") if !entry.takes_in("noise", &t) => {
            t.remove("noise");
            build(t).map_err(bad)
        }
        _ if explicit.is_some() => build(t).map_err(bad),
        _ if entry.info.deployable() => {
            let mut dep = t.clone();
            dep.insert("noise".into(), toml::Value::String("deployment".into()));
            match build(dep) {
                Ok(s) => Ok(s),
                // The non-private limit of a private kind (`rho = inf`) has no deployment path:
                // served as is (then refused by the caller unless `allow_non_private`).
                Err(e) if matches!(&e, dpbandits::Error::Param { field, .. } if field == "noise") =>
                {
                    let plain = build(t).map_err(bad)?;
                    if is_private(&plain)? {
                        return Err(bad(e));
                    }
                    Ok(plain)
                }
                Err(e) => Err(bad(e)),
            }
        }
        _ if entry.info.private => Err(ServiceError::invalid(
            "policy.noise",
            format!(
                "policy.noise = (missing): kind {kind:?} has no deployment-grade noise path; \
                 set noise = \"simulation\" explicitly to serve it with simulation-grade noise \
                 (seeded floating-point noise, not fit for deployment)"
            ),
        )),
        _ => build(t).map_err(bad),
    }
}

pub(super) fn is_private(s: &Session) -> ServiceResult<bool> {
    Ok(s.guarantee().map_err(ServiceError::internal)?.is_private())
}

/// A fresh client token and its SHA-256 hash (what the database and the audit log keep).
fn new_token() -> ServiceResult<(String, String)> {
    let mut tok = [0u8; 32];
    fill_os(&mut tok)?;
    let token: String = store::hex(&tok);
    let token_hash = store::sha256_hex(token.as_bytes());
    Ok((token, token_hash))
}

/// The delayed-outcome settings of a create request against its session: `while_pending` set
/// on it, `dropout_reward` inside its boundary, `reward_deadline` positive and with a dropout
/// reward.
fn delayed_outcomes(req: &CreateRequest, session: &mut Session) -> ServiceResult<()> {
    if let Some(w) = &req.while_pending {
        dpbandits::session::WhilePending::parse(w)
            .and_then(|m| session.set_while_pending(m))
            .map_err(|e| core_error(e, "while_pending"))?;
    }
    if let Some(d) = req.dropout_reward {
        session
            .boundary()
            .single(d)
            .map_err(|e| ServiceError::invalid("dropout_reward", format!("dropout_reward: {e}")))?;
    }
    match req.reward_deadline {
        Some(x) if !(x.is_finite() && x > 0.0) => Err(ServiceError::invalid(
            "reward_deadline",
            format!("reward_deadline = {x}: expected seconds, a finite number > 0"),
        )),
        Some(_) if req.dropout_reward.is_none() => Err(ServiceError::invalid(
            "reward_deadline",
            "reward_deadline needs dropout_reward: the reward recorded for a decision abandoned at its deadline",
        )),
        _ => Ok(()),
    }
}

/// A built experiment before it is stored: what `create` writes and answers.
struct Built {
    session: Session,
    kind: String,
    label: String,
    snapshot: Vec<u8>,
    guarantee: PrivacyGuarantee,
    arms: usize,
    problem: Value,
}

/// The session of a create request, checked as the service serves it: its delayed-outcome
/// settings, a snapshot it can store, a budget the ledger can charge.
fn build(req: &CreateRequest, table: toml::Table) -> ServiceResult<Built> {
    let seed = match req.seed {
        Some(s) => s,
        None => {
            let mut b = [0u8; 8];
            fill_os(&mut b)?;
            u64::from_le_bytes(b)
        }
    };
    let (mut session, problem) = build_session(table, req, seed)?;
    delayed_outcomes(req, &mut session)?;
    let kind = session.kind().to_string();
    let label = session.label().unwrap_or(&kind).to_string();
    let snapshot = session
        .snapshot()
        .map_err(|e| ServiceError::invalid("policy", format!("policy: cannot be stored: {e}")))?;
    let guarantee = session.guarantee().map_err(ServiceError::internal)?.clone();
    if guarantee.is_private() && cost_of(&guarantee).is_none() {
        return Err(ServiceError::invalid(
            "policy.kind",
            format!("policy.kind = {kind:?}: its budget kind cannot be charged by the ledger"),
        ));
    }
    Ok(Built {
        session,
        kind,
        label,
        snapshot,
        guarantee,
        arms: arms_of(&problem),
        problem: problem_json(&problem),
    })
}

impl Service {
    /// Create an experiment; returns the response body (with the client token, shown once,
    /// and `"repeat": true` when `request_id` repeats an earlier create of the same body: the
    /// experiment is not created again and a fresh client token replaces the lost one).
    pub fn create(&mut self, req: CreateRequest) -> ServiceResult<Value> {
        check_name(&req.name)?;
        let body_hash = store::sha256_hex(
            serde_json::to_string(&req)
                .map_err(ServiceError::internal)?
                .as_bytes(),
        );
        if let Some(repeat) = self.repeated_create(&req, &body_hash)? {
            return Ok(repeat);
        }
        if self.experiments.contains_key(&req.name) {
            return Err(ServiceError::Exists { name: req.name });
        }
        let table = policy_table(&req.policy)?;
        let b = build(&req, table.clone())?;
        let (token, token_hash) = new_token()?;
        let g = serde_json::to_value(&b.guarantee).map_err(ServiceError::internal)?;
        self.store_new(&req, &b, &table, &g, &token_hash, &body_hash)?;
        let answer = json!({"experiment": req.name, "kind": b.kind, "label": b.label, "arms": b.arms,
                            "problem": b.problem, "client_token": token, "guarantee": g});
        self.experiments.insert(
            req.name.clone(),
            Experiment {
                session: b.session,
                arms: b.arms,
                problem: b.problem,
                dropout: req.dropout_reward,
                deadline: req.reward_deadline,
                token_hash: token_hash.clone(),
                guarantee: b.guarantee,
                releases: 0,
                closed: None,
                charges: 0,
                max_per_release: 0,
            },
        );
        self.set_token(&req.name, Some(&token_hash));
        Ok(answer)
    }

    /// A create whose `request_id` was seen: the same body again answers the experiment with a
    /// fresh client token (`Some`); another body is refused naming `request_id`. `None`: a new
    /// request id, or none.
    fn repeated_create(
        &mut self,
        req: &CreateRequest,
        body_hash: &str,
    ) -> ServiceResult<Option<Value>> {
        let Some(rid) = &req.request_id else {
            return Ok(None);
        };
        check_request_id(rid)?;
        let Some((name, hash)) = self.store.find_create_request(rid)? else {
            return Ok(None);
        };
        if name != req.name || hash != body_hash {
            return Err(ServiceError::invalid(
                "request_id",
                format!(
                    "request_id = {rid:?}: already created experiment {name:?} from another body; \
                     a repeated create must send the same body"
                ),
            ));
        }
        let mut v = self.rotate_token(&name, "repeated create")?;
        let e = self.experiment(&name)?;
        let o = v.as_object_mut().expect("an object");
        o.insert("kind".into(), json!(e.session.kind()));
        o.insert(
            "label".into(),
            json!(e.session.label().unwrap_or(e.session.kind())),
        );
        o.insert("arms".into(), json!(e.arms));
        o.insert("problem".into(), e.problem.clone());
        o.insert("guarantee".into(), json!(e.guarantee));
        o.insert("repeat".into(), json!(true));
        Ok(Some(v))
    }

    /// Store a new experiment: its row and its `config` audit entry, in one savepoint.
    fn store_new(
        &mut self,
        req: &CreateRequest,
        b: &Built,
        table: &toml::Table,
        g: &Value,
        token_hash: &str,
        body_hash: &str,
    ) -> ServiceResult<()> {
        let config = json!({"policy": toml::Value::Table(table.clone()).to_string(), "label": b.label,
                            "arms": b.arms, "problem": b.problem, "allow_non_private": req.allow_non_private,
                            "dropout_reward": req.dropout_reward, "reward_deadline": req.reward_deadline,
                            "while_pending": req.while_pending, "seed": req.seed.map(|_| "given")});
        let tx = self.store.begin()?;
        tx.insert_experiment(&store::NewExperiment {
            name: &req.name,
            kind: &b.kind,
            arms: b.arms,
            config: &config.to_string(),
            token_hash,
            guarantee: &g.to_string(),
            snapshot: &b.snapshot,
            create_request: req.request_id.as_deref().map(|r| (r, body_hash)),
        })?;
        tx.audit(
            &req.name,
            store::Event::Config,
            &json!({"action": store::Action::Create.name(), "format": crate::verify::LOG_FORMAT,
                    "kind": b.kind, "label": b.label, "arms": b.arms, "problem": b.problem,
                    "guarantee": g, "params": b.session.params(),
                    "while_pending": b.session.while_pending(),
                    "dropout_reward": req.dropout_reward, "reward_deadline": req.reward_deadline,
                    "token_sha256": token_hash}),
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Replace experiment `name`'s client token (admin): the old one stops working at once.
    /// Returns `{"experiment", "client_token"}`; the audit log records the rotation (not the token).
    pub fn rotate_token(&mut self, name: &str, why: &str) -> ServiceResult<Value> {
        self.experiment(name)?;
        let (token, token_hash) = new_token()?;
        let tx = self.store.begin()?;
        tx.set_token_hash(name, &token_hash)?;
        tx.audit(name,
            store::Event::Config,
            &json!({"action": store::Action::RotateToken.name(), "why": why, "token_sha256": token_hash}),
        )?;
        tx.commit()?;
        self.experiments
            .get_mut(name)
            .expect("checked above")
            .token_hash = token_hash.clone();
        self.set_token(name, Some(&token_hash));
        Ok(json!({"experiment": name, "client_token": token}))
    }
}
