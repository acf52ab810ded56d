//! Admin pages read beside the writer ([`crate::readers`]): the token check, then the read on a
//! read-only connection.

use super::{ApiError, ApiResult, Shared};
use crate::service::{Caller, ServiceError};

/// Run an admin read `f` on a read-only connection beside the writer ([`crate::readers`]):
/// the admin token is checked first (the token table, without the writer), then `f` reads
/// what is committed.
pub(crate) async fn read_page<T: Send + 'static>(
    state: &Shared,
    token: Option<String>,
    f: impl FnOnce(&rusqlite::Connection) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let caller = state
        .tokens
        .read()
        .map_err(|_| ApiError::internal("token table lock poisoned"))?
        .check(token.as_deref(), None)?;
    if caller != Caller::Admin {
        return Err(ServiceError::Unauthorized { admin: true }.into());
    }
    state.readers.read(f).await.map_err(ApiError::internal)?
}
