//! `dpbandits backup`: a consistent, verified copy of a service database while the service runs.
//! Above the store (which reads the copy) and the verifier (which checks it).

use crate::store::{self, AuditKey};
use anyhow::{Context, Result, bail};
use std::path::Path;

/// Write a consistent copy of the database `db` to `out` while a service may be writing it
/// (`VACUUM INTO` reads one transaction's snapshot; the WAL is folded in), into a temporary name
/// beside `out`, mode 0600, verified ([`crate::verify::verify`] with `key`, when the chain is
/// keyed) and synced before it is renamed to `out`. Returns the copy's verification report.
///
/// # Errors
/// `out` exists, the copy cannot be written, or it does not verify (the temporary file is
/// removed).
pub fn backup(db: &Path, out: &Path, key: Option<&AuditKey>) -> Result<crate::verify::Report> {
    if out.exists() {
        bail!(
            "--out {}: exists (a backup never overwrites)",
            out.display()
        );
    }
    let conn = store::Store::open_read_only(db)?;
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(".tmp-backup");
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let result = (|| -> Result<crate::verify::Report> {
        conn.vacuum_into(&tmp)
            .with_context(|| format!("--db {}", crate::store::shown(db)))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        }
        let report = crate::verify::verify(&tmp, key, &crate::verify::Expect::default())
            .context("the copy does not verify")?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, out)?;
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(report)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| {
        format!(
            "backup of --db {} to --out {}",
            crate::store::shown(db),
            out.display()
        )
    })
}
