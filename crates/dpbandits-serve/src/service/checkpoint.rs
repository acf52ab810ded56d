//! Storing the start-up check's keyed checkpoint ([`crate::verify::startup_check`]).

use super::*;

impl Service {
    /// Store `value` as the database's checkpoint (made by the background check on a reader,
    /// the checkpoint thread) in the open batch.
    ///
    /// # Errors
    /// The write fails.
    pub fn store_checkpoint(&mut self, value: &str) -> ServiceResult<()> {
        let tx = self.store.begin()?;
        tx.set_checkpoint(value)?;
        tx.commit()?;
        Ok(())
    }
}
