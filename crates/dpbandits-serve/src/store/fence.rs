//! The fence of a PostgreSQL writer's transactions ([`super::owner`]): the check every write
//! transaction of a claimed store makes before any write (a transaction outside a batch with
//! [`fence`]; a batch as the first statement of its first round trip, through the schema's
//! `dpbandits_fence(epoch)`, whose refusal [`fenced`] reads), and the error it refuses with.

use super::sql::{Conn, args};
use anyhow::Result;

/// Inside a transaction on `conn`: lock the owner row (`FOR SHARE`) and refuse unless its epoch
/// is `epoch` (the fence of every write transaction of a PostgreSQL writer).
///
/// # Errors
/// Another node's epoch ([`Fenced`]), or database errors.
pub(super) fn fence(conn: &Conn, epoch: i64) -> Result<()> {
    let now: Option<(i64, String)> = conn.row(
        "SELECT epoch, node FROM owner WHERE id = 1 FOR SHARE",
        args![],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    match now {
        Some((e, _)) if e == epoch => Ok(()),
        Some((e, node)) => Err(Fenced {
            mine: epoch,
            now: e,
            node,
        }
        .into()),
        None => Err(Fenced {
            mine: epoch,
            now: 0,
            node: String::new(),
        }
        .into()),
    }
}

/// The [`Fenced`] error of a commit whose fence (`dpbandits_fence(mine)`, in the PostgreSQL
/// schema) found another epoch: its SQLSTATE `DPB01`, its detail `"<epoch> <node>"`. `None` for
/// any other error.
pub(super) fn fenced(e: &anyhow::Error, mine: i64) -> Option<Fenced> {
    let db = e
        .chain()
        .find_map(|c| c.downcast_ref::<postgres::Error>())?
        .as_db_error()?;
    if db.code().code() != "DPB01" {
        return None;
    }
    let detail = db.detail().unwrap_or_default();
    let (now, node) = detail.split_once(' ').unwrap_or((detail, ""));
    Some(Fenced {
        mine,
        now: now.parse().unwrap_or(0),
        node: node.to_string(),
    })
}

/// A write refused because another node claimed the database after this one (its epoch is
/// newer): this node's writes are over.
#[derive(Debug, Clone)]
pub struct Fenced {
    /// The epoch this node claimed.
    pub mine: i64,
    /// The database's epoch now.
    pub now: i64,
    /// The node that holds it.
    pub node: String,
}

impl std::fmt::Display for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fenced: this node's claim on the database (epoch {}) was taken over by node {:?} (epoch {}); it writes nothing more",
            self.mine, self.node, self.now
        )
    }
}

impl std::error::Error for Fenced {}
