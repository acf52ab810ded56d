//! Durable, resumable, shardable runs: the run folder, its lock, its journal and its manifest.
//!
//! A run folder (`--out`) holds:
//! * `run.lock`: locked (`File::try_lock`) by the process using the folder; the OS releases it
//!   when that process dies, so a killed run never leaves a stale lock.
//! * `journal.bin` ([`super::journal`]): every finished job, appended as it completes. It is
//!   the truth about the folder: a resumed run reuses every valid record.
//! * `manifest.json`: written at the start with `status = "running"` and the list of missing
//!   jobs, rewritten (temporary name + rename) with `interrupted`, `failed` or `complete`. A
//!   folder whose process was killed still says `running`: it is never reported complete.
//! * the outputs, written into `.staging/` and renamed into the folder one by one, the manifest
//!   last, so a reader never sees a half-written file.
//!
//! # The config hash
//! FNV-1a (64 bits) of the dpbandits version, the journal format and the canonical experiment:
//! the resolved [`ExperimentSpec`] written back as TOML (the file after `--runs` / `--horizon`
//! overrides, key order as written). It contains every input of the results (master seed,
//! horizon, runs, simulation mode, checkpoints, environment, policies, figures) and nothing
//! else: not the thread count, the output folder, the shard or the limits. Two folders with the
//! same hash hold results of the same jobs. FNV is not collision-resistant against an adversary;
//! it only has to tell apart experiments a user runs into the same folder.
//!
//! # Shards
//! Shard `i/n` owns the jobs `j` with `j mod n = i` (round-robin, so each shard gets a share
//! of every configuration's cost). A shard folder holds a journal and a manifest, no summary;
//! [`load_shards`] checks a set of shard folders and returns the experiment and every job's
//! row, which a run folder for the whole experiment imports ([`RunDir::import`]).

use super::journal::{self, Header, JOURNAL};
use super::{ExperimentSpec, Outcome, Plan};
use crate::error::{Error, Result};
use crate::sim::JobSet;
use rayon::prelude::*;
use serde_json::json;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// A journalled job: `(job, row)`.
pub type JobRow = (u64, Vec<f64>);

/// The lock file of a run folder.
pub const LOCK: &str = "run.lock";
/// The manifest of a run folder.
pub const MANIFEST: &str = "manifest.json";
/// Where outputs are written before they are renamed into the folder.
pub const STAGING: &str = ".staging";

/// A deterministic part of an experiment's jobs: shard `index` of `count` owns the jobs `j`
/// with `j mod count = index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// `0..count`.
    pub index: u64,
    /// `>= 1`.
    pub count: u64,
}

impl Shard {
    /// The whole experiment (`0/1`).
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Parse `i/n` (`0 <= i < n`).
    ///
    /// # Errors
    /// Anything else, naming `--shard` and the value.
    pub fn parse(s: &str) -> Result<Shard> {
        let bad = || {
            Error::param(
                "--shard",
                s,
                "i/n with integers 0 <= i < n (e.g. 0/3, 1/3, 2/3)",
            )
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (u64, u64) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether job `job` belongs to this shard.
    pub fn owns(&self, job: u64) -> bool {
        job % self.count == self.index
    }

    /// Number of the `total` jobs this shard owns.
    pub fn len(&self, total: u64) -> u64 {
        total / self.count + u64::from(total % self.count > self.index)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The canonical experiment: the resolved spec written back as TOML (TOML, unlike JSON, keeps
/// `inf` and `nan`, so it parses back to the same spec).
///
/// # Errors
/// A spec that cannot be serialized (not expected).
pub fn canonical(spec: &ExperimentSpec) -> Result<String> {
    toml::to_string(spec).map_err(|e| Error::Config(format!("canonical experiment: {e}")))
}

/// The config hash of a canonical experiment (see the module docs).
pub fn config_hash(canonical: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let prefix = format!("dpbandits {} journal 1\n", env!("CARGO_PKG_VERSION"));
    for b in prefix.bytes().chain(canonical.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The status a manifest reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// A process is (or was, if it was killed) working on the folder.
    Running,
    /// Every job is journalled and the outputs are written.
    Complete,
    /// Some jobs failed (their errors are in the manifest); the others are kept.
    Failed,
    /// Stopped by SIGINT/SIGTERM; resume with `--resume`.
    Interrupted,
}

impl Status {
    /// `running`, `complete`, `failed`, `interrupted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Complete => "complete",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
        }
    }
}

/// What to do with a folder that already holds a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Existing {
    /// Reuse the journal of a run of the same experiment (and shard).
    pub resume: bool,
    /// Clear a dpbandits folder (any experiment) and start over.
    pub force: bool,
}

/// How a [`RunDir::run`] ended.
#[derive(Debug)]
pub enum Finished {
    /// Unsharded: every job ran or failed; outputs written (status complete or failed).
    Outputs {
        /// The runs of every cell.
        outcome: Outcome,
        /// The files written, in the folder.
        files: Vec<PathBuf>,
    },
    /// A shard: its jobs are journalled (status complete, or failed with the failed jobs).
    Shard {
        /// Jobs of the shard.
        jobs: u64,
        /// The errors of failed jobs, `(job, error)`.
        errors: Vec<(u64, String)>,
    },
    /// Stopped by the stop flag before every job ran (status interrupted).
    Interrupted {
        /// Jobs journalled so far (of this shard).
        done: u64,
        /// Jobs of the shard.
        jobs: u64,
    },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        path: path.display().to_string(),
        error: e,
    }
}

/// Write `bytes` to `path` through `<path>.tmp`, fsync and rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = journal::tmp_name(path);
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    if let Ok(f) = File::open(&tmp) {
        let _ = f.sync_all();
    }
    std::fs::rename(&tmp, path).map_err(io(path))?;
    journal::sync_dir(path);
    Ok(())
}

/// `[[first, last], ...]`: the jobs of `jobs` as inclusive ranges.
fn ranges(jobs: impl Iterator<Item = u64>) -> Vec<[u64; 2]> {
    let mut out: Vec<[u64; 2]> = vec![];
    for j in jobs {
        match out.last_mut() {
            Some(r) if r[1] + 1 == j => r[1] = j,
            _ => out.push([j, j]),
        }
    }
    out
}

/// A locked run folder with the journalled results of its shard.
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    _lock: File,
    shard: Shard,
    hash: u64,
    total: u64,
    results: Vec<Option<Vec<f64>>>,
    writer: journal::Writer,
    /// Jobs reused from the journal.
    pub reused: u64,
    /// Whether a torn or corrupt journal tail was discarded.
    pub discarded_tail: bool,
}

impl RunDir {
    /// Create or open `dir` for `plan`'s shard `shard`: create the folder, take its lock, decide
    /// what to do with what it holds (`existing`), load the journal and write the manifest with
    /// `status = "running"`. Nothing is simulated, so an unwritable folder fails here.
    ///
    /// # Errors
    /// The folder cannot be created or written; it is locked by another run; it holds another
    /// experiment, another shard, a complete or unfinished run (without `--resume`/`--force`),
    /// or files that are not a dpbandits run.
    pub fn open(dir: &Path, plan: &Plan, shard: Shard, existing: Existing) -> Result<RunDir> {
        let jobs = JobSet::new(&plan.cells, plan.spec.runs);
        let spec_json = canonical(&plan.spec)?;
        let hash = config_hash(&spec_json);
        let total = jobs.len();
        std::fs::create_dir_all(dir).map_err(|e| Error::Io {
            path: format!("{} (the output folder)", dir.display()),
            error: e,
        })?;
        let lock_path = dir.join(LOCK);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Config(format!(
                    "{} is in use by another dpbandits process (it holds {}); wait for it to finish or choose another --out",
                    dir.display(),
                    lock_path.display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }

        let jpath = dir.join(JOURNAL);
        let here = format!("{}", dir.display());
        let mut reuse = None;
        if jpath.exists() {
            let decision = match journal::read(&jpath) {
                Err(e) => Err(format!(
                    "{here} holds a journal that cannot be read ({e}); --force clears the folder"
                )),
                Ok(c) if c.header.config_hash != hash => Err(format!(
                    "{here} holds a run of another experiment ('{}', config hash {:016x}; this one is '{}', {:016x}); --force clears it, or choose another --out",
                    spec_name(&c.header.spec_json),
                    c.header.config_hash,
                    plan.spec.name,
                    hash
                )),
                Ok(c)
                    if (c.header.shard_index, c.header.shard_count)
                        != (shard.index, shard.count) =>
                {
                    Err(format!(
                        "{here} holds shard {}/{} of this experiment, not shard {shard}; --force clears it, or choose another --out",
                        c.header.shard_index, c.header.shard_count
                    ))
                }
                Ok(c) => {
                    let status = manifest_status(&dir.join(MANIFEST));
                    if existing.resume || status.as_deref() == Some("complete") {
                        // Re-running a complete run of the same experiment is idempotent (the
                        // README's main command may be run twice): every job is journalled, so
                        // the outputs are re-written byte-identically from the journal;
                        // --force recomputes from scratch.
                        Ok(Some(c))
                    } else {
                        Err(format!(
                            "{here} holds an unfinished run of this experiment (status {}, {} of {} jobs journalled); --resume continues it, --force starts over",
                            status.as_deref().unwrap_or("unknown"),
                            c.records.len(),
                            shard.len(total)
                        ))
                    }
                }
            };
            match decision {
                Ok(c) => reuse = c,
                Err(_) if existing.force => clear(dir)?,
                Err(msg) => return Err(Error::Config(msg)),
            }
        } else {
            let foreign: Vec<String> = std::fs::read_dir(dir)
                .map_err(io(dir))?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != LOCK && n != STAGING && !n.ends_with(".tmp"))
                .collect();
            if dir.join(MANIFEST).exists() {
                if existing.force {
                    clear(dir)?;
                } else {
                    return Err(Error::Config(format!(
                        "{here} holds results of an earlier run without a journal (they cannot be checked or resumed); --force clears the folder, or choose another --out"
                    )));
                }
            } else if !foreign.is_empty() {
                return Err(Error::Config(format!(
                    "{here} is not empty and is not a dpbandits results folder (it holds {}); choose an empty or new folder",
                    foreign.join(", ")
                )));
            }
        }

        let mut results: Vec<Option<Vec<f64>>> = vec![None; total as usize];
        let fresh = reuse.is_none();
        let (valid_len, discarded_tail) = match reuse {
            Some(c) => {
                for (job, row) in c.records {
                    if job >= total || !shard.owns(job) || row.len() != jobs.width(job) {
                        return Err(Error::Config(format!(
                            "{}: record of job {job} ({} values) does not fit this experiment; --force clears the folder",
                            jpath.display(),
                            row.len()
                        )));
                    }
                    results[job as usize].get_or_insert(row);
                }
                (c.valid_len, c.discarded_tail)
            }
            None => (0, false),
        };
        let writer = if fresh {
            // The header's fsync + rename and the `running` manifest are made durable on a
            // thread while the jobs run (fig4a's whole simulation takes ~30 ms, these four
            // fsyncs ~1 ms); the writer joins it before any record is fsync'd.
            journal::start(
                &jpath,
                &Header {
                    shard_index: shard.index,
                    shard_count: shard.count,
                    config_hash: hash,
                    jobs: total,
                    spec_json,
                },
            )?
        } else {
            journal::Writer::open(&jpath, valid_len)?
        };
        let reused = results.iter().filter(|r| r.is_some()).count() as u64;
        let mut rd = RunDir {
            dir: dir.to_path_buf(),
            _lock: lock,
            shard,
            hash,
            total,
            results,
            writer,
            reused,
            discarded_tail,
        };
        let running = rd.state_text(plan, Status::Running)?;
        let mpath = dir.join(MANIFEST);
        rd.writer
            .after_startup(Box::new(move || write_atomic(&mpath, running.as_bytes())))?;
        Ok(rd)
    }

    /// Jobs of this folder's shard.
    pub fn jobs(&self) -> u64 {
        self.shard.len(self.total)
    }

    /// The config hash, as 16 hex digits.
    pub fn config_hash(&self) -> String {
        format!("{:016x}", self.hash)
    }

    fn missing(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.total).filter(|&j| self.shard.owns(j) && self.results[j as usize].is_none())
    }

    fn state(&self, plan: &Plan, status: Status) -> serde_json::Value {
        let missing = self.missing().count() as u64;
        json!({
            "status": status.as_str(),
            "experiment": plan.spec.name,
            "config_hash": self.config_hash(),
            "shard": self.shard.to_string(),
            "jobs": {
                "total": self.total,
                "in_shard": self.jobs(),
                "journalled": self.jobs() - missing,
                "missing": ranges(self.missing()),
            },
            "dpbandits_version": env!("CARGO_PKG_VERSION"),
            "resolved_spec": plan.spec,
        })
    }

    fn state_text(&self, plan: &Plan, status: Status) -> Result<String> {
        let text = serde_json::to_string_pretty(&self.state(plan, status))
            .map_err(|e| Error::Config(e.to_string()))?;
        Ok(text + "\n")
    }

    /// Write the manifest of a run that ends without outputs (after the start-up thread, which
    /// writes the `running` one).
    fn write_state(&mut self, plan: &Plan, status: Status) -> Result<()> {
        self.writer.settle()?;
        let text = self.state_text(plan, status)?;
        write_atomic(&self.dir.join(MANIFEST), text.as_bytes())
    }

    /// Put `records` (`(job, row)` of other folders, see [`load_shards`]) into this folder's
    /// journal, in job order, for the jobs it does not hold yet.
    ///
    /// # Errors
    /// A record that does not fit the plan; I/O.
    pub fn import(&mut self, plan: &Plan, mut records: Vec<(u64, Vec<f64>)>) -> Result<()> {
        let jobs = JobSet::new(&plan.cells, plan.spec.runs);
        records.sort_by_key(|r| r.0);
        for (job, row) in records {
            if job >= self.total || !self.shard.owns(job) || row.len() != jobs.width(job) {
                return Err(Error::Config(format!(
                    "record of job {job} ({} values) does not fit experiment '{}'",
                    row.len(),
                    plan.spec.name
                )));
            }
            if self.results[job as usize].is_none() {
                self.writer.append(job, &row)?;
                self.results[job as usize] = Some(row);
            }
        }
        self.writer.sync()
    }

    /// Run every job of the shard that is not journalled yet, on the current rayon pool,
    /// journalling each as it finishes; then write the outputs (unsharded) or the shard
    /// manifest. `progress` is called once per job run; `stop` is checked before each job (set
    /// it from a signal handler: the jobs already running finish and are journalled).
    ///
    /// # Errors
    /// Writing the journal or the outputs.
    pub fn run(
        mut self,
        plan: &Plan,
        progress: &(dyn Fn() + Sync),
        stop: &AtomicBool,
    ) -> Result<Finished> {
        let jobs = JobSet::new(&plan.cells, plan.spec.runs);
        let pending: Vec<u64> = self.missing().collect();
        let writer = Mutex::new(&mut self.writer);
        let failure: Mutex<Option<Error>> = Mutex::new(None);
        let abort = AtomicBool::new(false);
        let new: Vec<(u64, Option<Result<Vec<f64>>>)> = pending
            .par_iter()
            .map(|&j| {
                if stop.load(Ordering::SeqCst) || abort.load(Ordering::SeqCst) {
                    return (j, None);
                }
                let res = jobs.run(j);
                if let Ok(row) = &res {
                    let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
                    if let Err(e) = w.append(j, row) {
                        abort.store(true, Ordering::SeqCst);
                        failure
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                }
                progress();
                (j, Some(res))
            })
            .collect();
        // The last records' fsync overlaps the output writing below; it is joined before any
        // manifest can say `complete` (or `interrupted`/`failed`, which also promise a journal).
        let synced = self.writer.sync_in_background();
        let mut errors: Vec<(u64, Error)> = vec![];
        let mut not_run = 0u64;
        for (j, res) in new {
            match res {
                Some(Ok(row)) => self.results[j as usize] = Some(row),
                Some(Err(e)) => errors.push((j, e)),
                None => not_run += 1,
            }
        }
        if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
            if let Ok(pending) = synced {
                let _ = pending.wait();
            }
            let _ = self.write_state(plan, Status::Failed);
            return Err(e);
        }
        let synced = synced?;
        if not_run > 0 || self.shard.count > 1 {
            synced.wait()?;
            return self.finish_partial(plan, not_run, errors);
        }
        let failed = !errors.is_empty();
        let mut by_job: Vec<Option<Result<Vec<f64>>>> =
            self.results.iter().map(|r| r.clone().map(Ok)).collect();
        for (j, e) in errors {
            by_job[j as usize] = Some(Err(e));
        }
        let outcome = Outcome {
            cells: jobs.assemble(by_job),
        };
        let status = if failed {
            Status::Failed
        } else {
            Status::Complete
        };
        let files = self.write_outputs(plan, &outcome, status, synced)?;
        Ok(Finished::Outputs { outcome, files })
    }

    /// The end of a run that leaves no outputs: interrupted (`not_run` > 0 jobs not run), else a
    /// finished shard (its manifest).
    fn finish_partial(
        &mut self,
        plan: &Plan,
        not_run: u64,
        errors: Vec<(u64, Error)>,
    ) -> Result<Finished> {
        if not_run > 0 {
            self.write_state(plan, Status::Interrupted)?;
            return Ok(Finished::Interrupted {
                done: self.jobs() - self.missing().count() as u64,
                jobs: self.jobs(),
            });
        }
        let status = if errors.is_empty() {
            Status::Complete
        } else {
            Status::Failed
        };
        let mut state = self.state(plan, status);
        state["errors"] = errors
            .iter()
            .map(|(j, e)| json!({"job": j, "error": e.to_string()}))
            .collect();
        let text =
            serde_json::to_string_pretty(&state).map_err(|e| Error::Config(e.to_string()))?;
        write_atomic(&self.dir.join(MANIFEST), (text + "\n").as_bytes())?;
        Ok(Finished::Shard {
            jobs: self.jobs(),
            errors: errors
                .into_iter()
                .map(|(j, e)| (j, e.to_string()))
                .collect(),
        })
    }

    /// Outputs into `.staging/`, the run state added to their manifest, renamed into the folder
    /// (the manifest last, once `journal_synced` has completed: the manifest never claims a
    /// journal that a power loss could still take back).
    fn write_outputs(
        &self,
        plan: &Plan,
        outcome: &Outcome,
        status: Status,
        journal_synced: journal::PendingSync,
    ) -> Result<Vec<PathBuf>> {
        let staging = self.dir.join(STAGING);
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
        }
        let staged = super::write_outputs(plan, outcome, &staging)?;
        let mpath = staging.join(MANIFEST);
        let mut manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&mpath).map_err(io(&mpath))?)
                .map_err(|e| Error::Config(format!("{}: {e}", mpath.display())))?;
        let state = self.state(plan, status);
        for key in ["status", "config_hash", "jobs"] {
            manifest[key] = state[key].clone();
        }
        let text =
            serde_json::to_string_pretty(&manifest).map_err(|e| Error::Config(e.to_string()))?;
        std::fs::write(&mpath, text + "\n").map_err(io(&mpath))?;
        let mut files = vec![];
        let mut last = None;
        for p in staged {
            let Some(name) = p.file_name() else { continue };
            let target = self.dir.join(name);
            if name == MANIFEST {
                last = Some((p, target));
                continue;
            }
            std::fs::rename(&p, &target).map_err(io(&target))?;
            files.push(target);
        }
        journal_synced.wait()?;
        if let Some((p, target)) = last {
            // Outputs are not fsync'd one by one (a kill cannot tear a renamed file; after a
            // power loss the journal, fsync'd, rebuilds them with --resume).
            journal::sync_dir(&target);
            std::fs::rename(&p, &target).map_err(io(&target))?;
            journal::sync_dir(&target);
            files.insert(0, target);
        }
        let _ = std::fs::remove_dir_all(&staging);
        Ok(files)
    }
}

fn spec_name(spec: &str) -> String {
    toml::from_str::<toml::Table>(spec)
        .ok()
        .and_then(|v| v.get("name")?.as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn manifest_status(path: &Path) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["status"].as_str().map(str::to_string)
}

/// Remove every file of a dpbandits folder except its lock (and the staging folder).
fn clear(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        let e = e.map_err(io(dir))?;
        let p = e.path();
        if e.file_name() == LOCK {
            continue;
        }
        if e.file_name() == STAGING {
            std::fs::remove_dir_all(&p).map_err(io(&p))?;
        } else if e.file_type().map_err(io(&p))?.is_file() {
            std::fs::remove_file(&p).map_err(io(&p))?;
        }
    }
    Ok(())
}

/// Read shard folders and check that they are the shards `0/n .. n-1/n` of one experiment, each
/// complete, together holding every job exactly once. Returns the experiment and every job's
/// row.
///
/// # Errors
/// A folder without a journal or not complete; different config hashes or shard counts; a shard
/// given twice or missing; a job missing or duplicated. Each message names the folders.
pub fn load_shards(dirs: &[PathBuf]) -> Result<(ExperimentSpec, Vec<JobRow>)> {
    if dirs.is_empty() {
        return Err(Error::param("DIR", "(none)", "at least one shard folder"));
    }
    let mut shards = vec![];
    for d in dirs {
        let jpath = d.join(JOURNAL);
        if !jpath.is_file() {
            return Err(Error::Config(format!(
                "{}: no {JOURNAL}; not a folder written by `dpbandits run --shard i/n`",
                d.display()
            )));
        }
        let c = journal::read(&jpath)?;
        let h = &c.header;
        let status = manifest_status(&d.join(MANIFEST));
        if status.as_deref() != Some("complete") {
            return Err(Error::Config(format!(
                "{} (shard {}/{}) is not complete (status {}); finish it with `dpbandits run FILE --shard {}/{} --out {} --resume`",
                d.display(),
                h.shard_index,
                h.shard_count,
                status.as_deref().unwrap_or("unknown"),
                h.shard_index,
                h.shard_count,
                d.display()
            )));
        }
        shards.push((d, c));
    }
    let (d0, c0) = &shards[0];
    for (d, c) in &shards[1..] {
        if c.header.config_hash != c0.header.config_hash {
            return Err(Error::Config(format!(
                "shards of different experiments: {} holds '{}' (config hash {:016x}), {} holds '{}' ({:016x})",
                d0.display(),
                spec_name(&c0.header.spec_json),
                c0.header.config_hash,
                d.display(),
                spec_name(&c.header.spec_json),
                c.header.config_hash
            )));
        }
        if c.header.shard_count != c0.header.shard_count {
            return Err(Error::Config(format!(
                "different shard counts: {} is shard {}/{}, {} is shard {}/{}",
                d0.display(),
                c0.header.shard_index,
                c0.header.shard_count,
                d.display(),
                c.header.shard_index,
                c.header.shard_count
            )));
        }
    }
    let n = c0.header.shard_count;
    let mut holder: Vec<Option<&Path>> = vec![None; n as usize];
    for (d, c) in &shards {
        let i = c.header.shard_index as usize;
        if let Some(other) = holder.get(i).copied().flatten() {
            return Err(Error::Config(format!(
                "shard {i}/{n} given twice: {} and {}",
                other.display(),
                d.display()
            )));
        }
        if i < holder.len() {
            holder[i] = Some(d.as_path());
        }
    }
    let missing: Vec<String> = (0..n)
        .filter(|&i| holder[i as usize].is_none())
        .map(|i| format!("{i}/{n}"))
        .collect();
    if !missing.is_empty() {
        return Err(Error::Config(format!(
            "shard{} {} missing (the {} folders given hold {})",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", "),
            shards.len(),
            shards
                .iter()
                .map(|(_, c)| format!("{}/{n}", c.header.shard_index))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let total = c0.header.jobs;
    let mut seen: Vec<Option<&Path>> = vec![None; total as usize];
    let mut records = vec![];
    for (d, c) in shards.iter() {
        let shard = Shard {
            index: c.header.shard_index,
            count: n,
        };
        for (job, row) in &c.records {
            if *job >= total || !shard.owns(*job) {
                return Err(Error::Config(format!(
                    "{}: job {job} does not belong to shard {shard}",
                    d.display()
                )));
            }
            if let Some(other) = seen[*job as usize] {
                if other == d.as_path() {
                    continue;
                }
                return Err(Error::Config(format!(
                    "job {job} is in both {} and {}",
                    other.display(),
                    d.display()
                )));
            }
            seen[*job as usize] = Some(d.as_path());
            records.push((*job, row.clone()));
        }
    }
    let absent = ranges((0..total).filter(|&j| seen[j as usize].is_none()));
    if !absent.is_empty() {
        return Err(Error::Config(format!(
            "jobs missing from the shards' journals: {}",
            absent
                .iter()
                .take(10)
                .map(|r| if r[0] == r[1] {
                    r[0].to_string()
                } else {
                    format!("{}-{}", r[0], r[1])
                })
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let spec = ExperimentSpec::from_toml(&c0.header.spec_json).map_err(|e| {
        Error::Config(format!(
            "{}: the experiment stored in the journal does not parse: {e}",
            d0.display()
        ))
    })?;
    if config_hash(&canonical(&spec)?) != c0.header.config_hash {
        return Err(Error::Config(format!(
            "{}: the stored experiment does not give back its config hash (written by another dpbandits version?)",
            d0.display()
        )));
    }
    Ok((spec, records))
}

/// Run the jobs of `shard` on the current rayon pool, without a folder or journal: `(job,
/// row)` for every job of the shard, in job order (`None` for a job skipped because `stop` was
/// set). The executor path of library users (the Python binding sends one call per shard to a
/// Ray, Dask or `concurrent.futures` worker) and [`assemble`] merges the shards' rows, so the
/// result is the one of the CLI's `--shard` + `merge`, byte-identical to a local run.
pub fn run_shard(
    plan: &Plan,
    shard: Shard,
    progress: &(dyn Fn() + Sync),
    stop: &AtomicBool,
) -> Vec<(u64, Option<Result<Vec<f64>>>)> {
    let jobs = JobSet::new(&plan.cells, plan.spec.runs);
    let mine: Vec<u64> = (0..jobs.len()).filter(|&j| shard.owns(j)).collect();
    mine.into_par_iter()
        .map(|j| {
            if stop.load(Ordering::SeqCst) {
                return (j, None);
            }
            let res = jobs.run(j);
            progress();
            (j, Some(res))
        })
        .collect()
}

/// The per-cell runs of `plan` from the `(job, row or error)` results of a set of shards
/// ([`run_shard`]), which must hold every job exactly once with the width the plan gives it.
///
/// # Errors
/// A job out of range, given twice or missing, or a row of the wrong width (naming the job).
pub fn assemble(
    plan: &Plan,
    results: Vec<(u64, std::result::Result<Vec<f64>, String>)>,
) -> Result<Outcome> {
    let jobs = JobSet::new(&plan.cells, plan.spec.runs);
    let mut by_job: Vec<Option<Result<Vec<f64>>>> = (0..jobs.len()).map(|_| None).collect();
    for (job, res) in results {
        if job >= jobs.len() {
            return Err(Error::param(
                "job",
                job,
                format!("a job of this experiment (0..{})", jobs.len()),
            ));
        }
        if by_job[job as usize].is_some() {
            return Err(Error::param("job", job, "each job once (given twice)"));
        }
        if let Ok(row) = &res
            && row.len() != jobs.width(job)
        {
            return Err(Error::param(
                "job",
                job,
                format!("a row of {} values (got {})", jobs.width(job), row.len()),
            ));
        }
        by_job[job as usize] = Some(res.map_err(Error::Config));
    }
    if let Some(j) = by_job.iter().position(Option::is_none) {
        return Err(Error::param(
            "job",
            j,
            "a result for every job (missing: the shards do not cover the experiment)",
        ));
    }
    Ok(Outcome {
        cells: jobs.assemble(by_job),
    })
}

/// Write the folder the CLI writes (`dpbandits run FILE --out dir`: journal, manifest, summary,
/// plots) from rows computed elsewhere ([`run_shard`]): the folder is opened as a whole run,
/// the rows are imported into its journal and the outputs are written from it. Returns the
/// files written.
///
/// # Errors
/// As [`RunDir::open`] (a folder holding something else), [`RunDir::import`] and the outputs.
pub fn save(
    dir: &Path,
    plan: &Plan,
    rows: Vec<JobRow>,
    existing: Existing,
) -> Result<Vec<PathBuf>> {
    let mut rd = RunDir::open(dir, plan, Shard::WHOLE, existing)?;
    rd.import(plan, rows)?;
    match rd.run(plan, &|| {}, &AtomicBool::new(false))? {
        Finished::Outputs { files, .. } => Ok(files),
        other => Err(Error::Config(format!(
            "{}: the run did not finish ({other:?})",
            dir.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_jobs() {
        for n in 1..7u64 {
            for total in 0..20u64 {
                let mut count = vec![0; total as usize];
                let mut lens = 0;
                for i in 0..n {
                    let s = Shard { index: i, count: n };
                    lens += s.len(total);
                    for j in 0..total {
                        if s.owns(j) {
                            count[j as usize] += 1;
                        }
                    }
                    assert_eq!(
                        s.len(total),
                        (0..total).filter(|&j| s.owns(j)).count() as u64
                    );
                }
                assert!(count.iter().all(|&c| c == 1));
                assert_eq!(lens, total);
            }
        }
        assert_eq!(Shard::parse("1/3").unwrap(), Shard { index: 1, count: 3 });
        for bad in ["3/3", "1", "a/3", "0/0", "-1/2"] {
            let e = Shard::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--shard") && e.contains(bad), "{e}");
        }
        assert_eq!(
            ranges([1, 2, 3, 5, 7, 8].into_iter()),
            vec![[1, 3], [5, 5], [7, 8]]
        );
    }
}
