//! The health probe's one limit on its writes: a probe within [`HEALTH_WRITE_EVERY`] of the last
//! committed probe write is answered from it (`write_age_ms`), and the probes that need a write
//! go one at a time, so an unauthenticated probe flood costs the writer one commit a period and
//! never fills its queue.

use super::error::ApiResult;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// At most one health probe's durable write per this period.
pub const HEALTH_WRITE_EVERY: Duration = Duration::from_secs(1);

/// The newest health probe's durable write: when it committed and the experiment count then.
#[derive(Debug, Default)]
pub struct HealthCache(tokio::sync::Mutex<Option<(Instant, usize)>>);

impl HealthCache {
    /// Answer a probe: from the last write when it is younger than [`HEALTH_WRITE_EVERY`], else
    /// with `write` (a durable write through the writer, returning the experiment count),
    /// one probe at a time. A failed write is not remembered: the next probe writes again.
    ///
    /// # Errors
    /// `write`'s.
    pub async fn probe<F>(&self, write: impl FnOnce() -> F) -> ApiResult<Value>
    where
        F: std::future::Future<Output = ApiResult<usize>>,
    {
        let mut last = self.0.lock().await;
        if let Some((at, experiments)) = *last
            && at.elapsed() < HEALTH_WRITE_EVERY
        {
            return Ok(json!({
                "status": "ok", "experiments": experiments, "database": "writable",
                "write_age_ms": at.elapsed().as_millis() as u64,
            }));
        }
        let experiments = write().await?;
        *last = Some((Instant::now(), experiments));
        Ok(
            json!({"status": "ok", "experiments": experiments, "database": "writable", "write_age_ms": 0}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A flood of probes makes one durable write a period; a failed write is not remembered,
    /// so the next probe writes (and fails, if the database does).
    #[test]
    fn health_probes_write_once_a_period() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let cache = Arc::new(HealthCache::default());
        let writes = Arc::new(AtomicUsize::new(0));
        let probe = |fail: bool| {
            let (cache, writes) = (cache.clone(), writes.clone());
            async move {
                cache
                    .probe(|| async move {
                        writes.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        if fail {
                            Err(super::super::ApiError::internal("the disk is full"))
                        } else {
                            Ok(3)
                        }
                    })
                    .await
            }
        };
        rt.block_on(async {
            assert!(probe(true).await.is_err());
            assert!(
                probe(true).await.is_err(),
                "a failed write is not remembered"
            );
            assert_eq!(writes.load(Ordering::SeqCst), 2);
            let flood: Vec<_> = (0..100).map(|_| tokio::spawn(probe(false))).collect();
            for p in flood {
                let v = p.await.unwrap().unwrap();
                assert_eq!(
                    (v["status"].as_str(), v["experiments"].as_u64()),
                    (Some("ok"), Some(3))
                );
            }
            assert_eq!(writes.load(Ordering::SeqCst), 3, "100 probes, one write");
        });
    }
}
