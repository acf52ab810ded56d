//! The journal: an append-only file of finished jobs, the truth about a run folder.
//!
//! # Format (`journal.bin`, little endian)
//! * Header, written once to a temporary name, fsync'd and renamed (so it is whole or absent):
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
//! loss loses at most the records of the last interval (they are recomputed on resume).

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

/// Create a journal holding only `header` at `path` (temporary name, fsync, rename).
///
/// # Errors
/// I/O.
pub fn create(path: &Path, header: &Header) -> Result<()> {
    let tmp = tmp_name(path);
    let mut f = File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(&header.bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(path);
    Ok(())
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
            last_sync: Instant::now(),
            last_flush: Instant::now(),
            dirty: false,
            buf: vec![],
            appended: 0,
        })
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

    fn sync_data(&mut self) -> Result<()> {
        if self.dirty {
            self.file.sync_data().map_err(io(&self.path))?;
            self.dirty = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }
}

impl Drop for Writer {
    /// Best effort: hand pending records to the OS (an error or a panic unwinding through the
    /// run must not lose finished jobs).
    fn drop(&mut self) {
        let _ = self.flush();
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
    fn records_round_trip_bit_exactly_and_torn_tails_are_dropped() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(JOURNAL);
        create(&p, &header()).unwrap();
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
