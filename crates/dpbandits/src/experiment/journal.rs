//! The journal: an append-only file of finished jobs, the truth about a run folder.
//!
//! # Format (`journal.bin`, little endian)
//! * Header, written once to a temporary name, fsync'd and renamed (so it is whole or absent;
//!   for a new run on a thread of its own, see [`start`]):
//!   magic `DPBJRNL1`, shard index `u64`, shard count `u64`, config hash `u64`, total jobs
//!   `u64`, length `u32` + the canonical experiment (TOML, see [`super::durable::config_hash`]),
//!   then a CRC-32 of all of the above.
//! * Records, one per finished job: job index `u64`, value count `u32`, the values as their exact
//!   IEEE-754 bits (`u64` each, so reloaded rows are bit-identical, NaN payloads included), then
//!   a CRC-32 of the record.
//!
//! CRC-32 (`crc32fast`, hardware-accelerated) detects every burst error up to 32 bits and any
//! torn write with probability `1 - 2^-32`; it is not a defence against tampering, which is not
//! the threat here (crashes and kills are). Reading stops at the first record that is short or
//! fails its checksum: a torn tail is discarded, never trusted, and the file is cut back to the
//! last good record before appending.
//!
//! # Cost
//! Records are handed to the OS in batches: one `write` when [`FLUSH_INTERVAL`] has passed since
//! the last one or [`FLUSH_BYTES`] are pending, and always before an fsync and when the run
//! stops (so a SIGKILL, which does not lose the OS's page cache, loses at most the jobs of the
//! last 20 ms, which `--resume` recomputes). The file is fsync'd (`sync_data`) at most every
//! [`SYNC_INTERVAL`] and when the run stops, so both costs per second are bounded whatever the
//! job rate (fig4a: 1300 jobs in 40 ms; one `write` per job cost +29%, see docs/perf.md). A power
//! loss loses at most the records of the last interval (they are recomputed on resume). The
//! final fsync runs on a thread of its own ([`Writer::sync_in_background`]) while the outputs
//! are written, and is joined before the manifest may say `complete`.

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// File name of the journal in a run folder.
pub const JOURNAL: &str = "journal.bin";
const MAGIC: &[u8; 8] = b"DPBJRNL1";
/// Longest time between two fsyncs of the journal while jobs finish.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(500);
/// Longest time a finished job's record waits in memory before it is written to the OS.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// Pending bytes that trigger a write before [`FLUSH_INTERVAL`].
pub const FLUSH_BYTES: usize = 1 << 20;

/// Time spent in journal writers of this process (appending, writing, fsyncing), for the
/// `journal_cost` benchmark.
static BUSY_NANOS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Total time this process has spent in [`Writer::append`], [`Writer::flush`] and
/// [`Writer::sync`] (the journal's own cost, without the run folder's bookkeeping).
pub fn time_spent() -> Duration {
    Duration::from_nanos(BUSY_NANOS.load(std::sync::atomic::Ordering::Relaxed))
}

fn charge(start: Instant) {
    let n = start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
    BUSY_NANOS.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

/// What the journal's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Shard index (0 for an unsharded run).
    pub shard_index: u64,
    /// Shard count (1 for an unsharded run).
    pub shard_count: u64,
    /// Config hash of the experiment.
    pub config_hash: u64,
    /// Jobs of the whole experiment (all shards).
    pub jobs: u64,
    /// The canonical experiment (the resolved spec as TOML).
    pub spec_json: String,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        path: path.display().to_string(),
        error: e,
    }
}

impl Header {
    fn bytes(&self) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for x in [
            self.shard_index,
            self.shard_count,
            self.config_hash,
            self.jobs,
        ] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(&(self.spec_json.len() as u32).to_le_bytes());
        b.extend_from_slice(self.spec_json.as_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }
}

/// A journal read back: its header, its valid records in file order, and the length of the
/// valid prefix (header + whole records with good checksums).
#[derive(Debug)]
pub struct Contents {
    /// The header.
    pub header: Header,
    /// `(job, values)` of every valid record, in file order.
    pub records: Vec<(u64, Vec<f64>)>,
    /// Bytes of the valid prefix.
    pub valid_len: u64,
    /// Whether bytes after the valid prefix were discarded (a torn or corrupt tail).
    pub discarded_tail: bool,
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if b.len() < n {
        return None;
    }
    let (h, t) = b.split_at(n);
    *b = t;
    Some(h)
}

fn u64_at(b: &mut &[u8]) -> Option<u64> {
    take(b, 8).map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
}

fn u32_at(b: &mut &[u8]) -> Option<u32> {
    take(b, 4).map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
}

/// Read a journal.
///
/// # Errors
/// I/O, or a header that is not a dpbandits journal (wrong magic, bad checksum).
pub fn read(path: &Path) -> Result<Contents> {
    let mut bytes = vec![];
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io(path))?;
    let bad = |what: &str| {
        Error::Config(format!(
            "{}: not a readable dpbandits journal ({what})",
            path.display()
        ))
    };
    let mut b = &bytes[..];
    if take(&mut b, 8) != Some(&MAGIC[..]) {
        return Err(bad("wrong magic bytes"));
    }
    let (Some(shard_index), Some(shard_count), Some(config_hash), Some(jobs), Some(len)) = (
        u64_at(&mut b),
        u64_at(&mut b),
        u64_at(&mut b),
        u64_at(&mut b),
        u32_at(&mut b),
    ) else {
        return Err(bad("short header"));
    };
    let spec = take(&mut b, len as usize).ok_or_else(|| bad("short header"))?;
    let header_len = bytes.len() - b.len();
    let crc = u32_at(&mut b).ok_or_else(|| bad("short header"))?;
    if crc != crc32fast::hash(&bytes[..header_len]) {
        return Err(bad("header checksum mismatch"));
    }
    let header = Header {
        shard_index,
        shard_count,
        config_hash,
        jobs,
        spec_json: String::from_utf8(spec.to_vec()).map_err(|_| bad("header is not UTF-8"))?,
    };
    let mut records = vec![];
    let mut valid_len = bytes.len() - b.len();
    loop {
        let start = b;
        let rec = (|| {
            let job = u64_at(&mut b)?;
            let n = u32_at(&mut b)? as usize;
            let vals = take(&mut b, n.checked_mul(8)?)?;
            let body_len = start.len() - b.len();
            let crc = u32_at(&mut b)?;
            (crc == crc32fast::hash(&start[..body_len])).then(|| {
                let v: Vec<f64> = vals
                    .chunks_exact(8)
                    .map(|c| f64::from_bits(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
                    .collect();
                (job, v)
            })
        })();
        match rec {
            Some(r) => {
                records.push(r);
                valid_len = bytes.len() - b.len();
            }
            None => break,
        }
    }
    Ok(Contents {
        header,
        records,
        valid_len: valid_len as u64,
        discarded_tail: valid_len < bytes.len(),
    })
}

/// Start a new journal holding `header` at `path` and return its writer at once.
///
/// The header is written to `<path>.tmp` and the writer appends through that open file. A
/// thread of its own then fsyncs the header, renames the file to `path` (so the journal is whole
/// or absent under its name) and fsyncs the folder, while the caller simulates
/// ([`Writer::after_startup`] queues more work behind it: the run folder's `running` manifest).
/// The writer joins that thread before its first fsync (and [`Writer::settle`] joins it on
/// demand), so no record is made durable ahead of its header and nothing written after it can
/// be overtaken by it.
///
/// # Errors
/// I/O writing the header (so an unwritable folder fails here, before any simulation).
pub fn start(path: &Path, header: &Header) -> Result<Writer> {
    let tmp = tmp_name(path);
    let mut f = File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(&header.bytes()).map_err(io(&tmp))?;
    let sync_handle = f.try_clone().map_err(io(&tmp))?;
    let (tmp2, target) = (tmp.clone(), path.to_path_buf());
    let startup = std::thread::spawn(move || -> Result<()> {
        sync_handle.sync_all().map_err(io(&tmp2))?;
        std::fs::rename(&tmp2, &target).map_err(io(&target))?;
        sync_dir(&target);
        Ok(())
    });
    // `File::create` opened it for writing at offset 0; the header is written, so appends go on
    // from its end.
    Ok(Writer {
        path: path.to_path_buf(),
        file: f,
        startup: Some(startup),
        last_sync: Instant::now(),
        last_flush: Instant::now(),
        dirty: false,
        buf: vec![],
        appended: 0,
    })
}

/// `<path>.tmp`.
pub fn tmp_name(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Best effort: fsync the folder holding `path`, so a rename in it is durable.
pub fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
}

/// Appends records to a journal; fsyncs at most every [`SYNC_INTERVAL`].
#[derive(Debug)]
pub struct Writer {
    path: PathBuf,
    file: File,
    last_sync: Instant,
    last_flush: Instant,
    dirty: bool,
    /// The thread that makes a new journal's header durable ([`start`]); joined before any fsync.
    startup: Option<std::thread::JoinHandle<Result<()>>>,
    /// Records not yet written to the OS.
    buf: Vec<u8>,
    /// Records appended by this writer.
    pub appended: u64,
}

impl Writer {
    /// Open the journal at `path` for appending after cutting it to `valid_len` bytes (dropping
    /// a torn tail).
    ///
    /// # Errors
    /// I/O.
    pub fn open(path: &Path, valid_len: u64) -> Result<Writer> {
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io(path))?;
        let len = f.metadata().map_err(io(path))?.len();
        if len != valid_len {
            // A torn tail is cut off durably before anything is appended after it.
            f.set_len(valid_len).map_err(io(path))?;
            f.sync_all().map_err(io(path))?;
        }
        drop(f);
        let f = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io(path))?;
        Ok(Writer {
            path: path.to_path_buf(),
            file: f,
            startup: None,
            last_sync: Instant::now(),
            last_flush: Instant::now(),
            dirty: false,
            buf: vec![],
            appended: 0,
        })
    }

    /// Wait for the start-up work of [`start`] (header durable and named, `running` manifest
    /// written); a no-op afterwards and for a reopened journal. Call it before writing anything
    /// the start-up thread also writes.
    ///
    /// # Errors
    /// That work failed (I/O), or its thread panicked.
    pub fn settle(&mut self) -> Result<()> {
        let Some(h) = self.startup.take() else {
            return Ok(());
        };
        let t0 = Instant::now();
        let r = join(h, &self.path, "start-up");
        charge(t0);
        r
    }

    /// Run `f` after the start-up work of [`start`], on its thread (at once, on this thread, for a
    /// reopened journal or once settled).
    ///
    /// # Errors
    /// `f` failed (only when it runs at once; otherwise [`Writer::settle`] reports it).
    pub fn after_startup(&mut self, f: Box<dyn FnOnce() -> Result<()> + Send>) -> Result<()> {
        match self.startup.take() {
            None => f(),
            Some(h) => {
                let path = self.path.clone();
                self.startup = Some(std::thread::spawn(move || {
                    join(h, &path, "start-up")?;
                    f()
                }));
                Ok(())
            }
        }
    }

    /// Append the record of `job`; fsync if the last one is older than [`SYNC_INTERVAL`].
    ///
    /// # Errors
    /// I/O.
    pub fn append(&mut self, job: u64, values: &[f64]) -> Result<()> {
        let t0 = Instant::now();
        let r = self.append_inner(job, values);
        charge(t0);
        r
    }

    fn append_inner(&mut self, job: u64, values: &[f64]) -> Result<()> {
        let start = self.buf.len();
        self.buf.extend_from_slice(&job.to_le_bytes());
        self.buf
            .extend_from_slice(&(values.len() as u32).to_le_bytes());
        for v in values {
            self.buf.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        let crc = crc32fast::hash(&self.buf[start..]);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.appended += 1;
        if self.buf.len() >= FLUSH_BYTES || self.last_flush.elapsed() >= FLUSH_INTERVAL {
            self.flush()?;
        }
        if self.last_sync.elapsed() >= SYNC_INTERVAL {
            self.flush()?;
            self.sync_data()?;
        }
        Ok(())
    }

    /// Write the pending records to the OS (one `write`).
    ///
    /// # Errors
    /// I/O.
    pub fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf).map_err(io(&self.path))?;
            self.buf.clear();
            self.dirty = true;
        }
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Write the pending records and fsync what was appended.
    ///
    /// # Errors
    /// I/O.
    pub fn sync(&mut self) -> Result<()> {
        let t0 = Instant::now();
        self.flush()?;
        let r = self.sync_data();
        charge(t0);
        r
    }

    /// Write the pending records and start their fsync on a thread of its own, so the caller
    /// can go on (e.g. write the outputs) while the disk works; [`PendingSync::wait`] joins it.
    /// Nothing may be appended after this (the writer is done).
    ///
    /// # Errors
    /// I/O (writing the records, or duplicating the file handle for the thread).
    pub fn sync_in_background(&mut self) -> Result<PendingSync> {
        let t0 = Instant::now();
        let r = self.start_sync();
        charge(t0);
        r
    }

    fn start_sync(&mut self) -> Result<PendingSync> {
        self.flush()?;
        self.settle()?;
        let handle = if self.dirty {
            let file = self.file.try_clone().map_err(io(&self.path))?;
            self.dirty = false;
            let path = self.path.clone();
            Some(std::thread::spawn(move || {
                file.sync_data().map_err(io(&path))
            }))
        } else {
            None
        };
        self.last_sync = Instant::now();
        Ok(PendingSync {
            path: self.path.clone(),
            handle,
        })
    }

    fn sync_data(&mut self) -> Result<()> {
        self.settle()?;
        if self.dirty {
            self.file.sync_data().map_err(io(&self.path))?;
            self.dirty = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }
}

/// Join one of the journal's threads (`what`: its job, for the message): its result, or an I/O
/// error naming `path` if it panicked.
fn join(h: std::thread::JoinHandle<Result<()>>, path: &Path, what: &str) -> Result<()> {
    h.join().unwrap_or_else(|_| {
        Err(Error::Io {
            path: path.display().to_string(),
            error: std::io::Error::other(format!("the journal's {what} thread panicked")),
        })
    })
}

/// An fsync of the journal running on its own thread ([`Writer::sync_in_background`]).
#[derive(Debug)]
#[must_use = "the records are durable only once `wait` returns Ok"]
pub struct PendingSync {
    path: PathBuf,
    handle: Option<std::thread::JoinHandle<Result<()>>>,
}

impl PendingSync {
    /// Wait for the fsync; Ok means every record appended so far is on disk.
    ///
    /// # Errors
    /// The fsync failed (or its thread panicked).
    pub fn wait(self) -> Result<()> {
        let Some(h) = self.handle else {
            return Ok(());
        };
        let t0 = Instant::now();
        let r = join(h, &self.path, "fsync");
        charge(t0);
        r
    }
}

impl Drop for Writer {
    /// Best effort: hand pending records to the OS (an error or a panic unwinding through the
    /// run must not lose finished jobs).
    fn drop(&mut self) {
        let _ = self.flush();
        let _ = self.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            shard_index: 1,
            shard_count: 3,
            config_hash: 0xdead_beef,
            jobs: 10,
            spec_json: "{\"name\":\"x\"}".into(),
        }
    }

    #[test]
    fn a_started_journal_is_named_only_when_its_header_is_durable_and_keeps_every_record() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(JOURNAL);
        let mut w = start(&p, &header()).unwrap();
        w.append(3, &[0.25, -1.0]).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let seen = p.clone();
        w.after_startup(Box::new(move || {
            // Queued work runs after the header was fsync'd and renamed into place.
            tx.send(read(&seen).map(|c| c.header)).unwrap();
            Ok(())
        }))
        .unwrap();
        let pending = w.sync_in_background().unwrap();
        assert_eq!(rx.recv().unwrap().unwrap(), header());
        pending.wait().unwrap();
        drop(w);
        let c = read(&p).unwrap();
        assert_eq!(c.header, header());
        assert_eq!(c.records, vec![(3, vec![0.25, -1.0])]);
        assert!(!tmp_name(&p).exists());
        // A failing queued step is reported by `settle` (and so before any fsync of records).
        let p2 = d.path().join("other.bin");
        let mut w = start(&p2, &header()).unwrap();
        w.after_startup(Box::new(|| Err(Error::Config("queued step failed".into()))))
            .unwrap();
        let e = w.sync().unwrap_err().to_string();
        assert!(e.contains("queued step failed"), "{e}");
    }

    #[test]
    fn records_round_trip_bit_exactly_and_torn_tails_are_dropped() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(JOURNAL);
        let mut w = start(&p, &header()).unwrap();
        w.sync().unwrap();
        drop(w);
        let c = read(&p).unwrap();
        assert_eq!(c.header, header());
        assert!(c.records.is_empty() && !c.discarded_tail);
        let weird = [
            f64::from_bits(0x7ff8_0000_dead_beef),
            -0.0,
            1e-310,
            0.1 + 0.2,
        ];
        let mut w = Writer::open(&p, c.valid_len).unwrap();
        w.append(4, &weird).unwrap();
        w.append(7, &[1.5]).unwrap();
        w.sync().unwrap();
        drop(w);
        let c = read(&p).unwrap();
        assert_eq!(c.records.len(), 2);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&c.records[0].1), bits(&weird));
        assert_eq!(c.records[1], (7, vec![1.5]));
        let full = std::fs::read(&p).unwrap();
        // Every cut inside the last record drops exactly that record.
        let last_start = full.len() - (8 + 4 + 8 + 4);
        for cut in last_start..full.len() {
            std::fs::write(&p, &full[..cut]).unwrap();
            let c = read(&p).unwrap();
            assert_eq!(c.records.len(), 1, "cut at {cut}");
            assert_eq!(c.valid_len as usize, last_start);
            assert_eq!(c.discarded_tail, cut > last_start);
        }
        // A flipped bit in the last record is caught by its checksum.
        for i in last_start..full.len() {
            let mut b = full.clone();
            b[i] ^= 0x10;
            std::fs::write(&p, &b).unwrap();
            assert_eq!(read(&p).unwrap().records.len(), 1, "flip at {i}");
        }
        // Appending after a torn tail cuts it first.
        std::fs::write(&p, &full[..full.len() - 3]).unwrap();
        let c = read(&p).unwrap();
        let mut w = Writer::open(&p, c.valid_len).unwrap();
        w.append(9, &[2.0]).unwrap();
        w.sync().unwrap();
        let c = read(&p).unwrap();
        assert_eq!(c.records.iter().map(|r| r.0).collect::<Vec<_>>(), [4, 9]);
        assert!(!c.discarded_tail);
        // A damaged header is refused.
        let mut b = std::fs::read(&p).unwrap();
        b[10] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert!(read(&p).is_err());
    }
}
