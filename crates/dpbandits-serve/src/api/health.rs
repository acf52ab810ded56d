//! The health probe's two limits. Its writes: a probe within [`HEALTH_WRITE_EVERY`] of the
//! last committed probe write is answered from it (`write_age_ms`), and the probes that need a
//! write go one at a time, so an unauthenticated probe flood costs the writer one commit a
//! period and never fills its queue. Its pace: probes are answered at most
//! [`HEALTH_PER_SECOND`] a second after a burst of [`HEALTH_BURST`] (a probe over the pace
//! waits for its slot, as `limit_req` of nginx delays, and one whose slot is more than
//! [`HEALTH_MAX_WAIT`] away is refused 503 at once), so a flood of closed-loop probers costs
//! the CPU of that many answers, not of as many as two cores can parse (docs/perf.md, "Fair
//! scheduling and reads beside the writer").

use super::error::{ApiError, ApiResult};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// At most one health probe's durable write per this period.
pub const HEALTH_WRITE_EVERY: Duration = Duration::from_secs(1);

/// Health probes answered per second at most, beyond the burst (a load balancer probes a few
/// times a second; a monitoring system a few more).
pub const HEALTH_PER_SECOND: f64 = 200.0;

/// Health probes answered at once before the pace applies.
pub const HEALTH_BURST: f64 = 50.0;

/// A probe whose slot is further away than this is refused (503, `Retry-After: 1`) at once.
pub const HEALTH_MAX_WAIT: Duration = Duration::from_secs(1);

/// The newest health probe's durable write (when it committed and the experiment count then),
/// and the pace's next free slot (the "theoretical arrival time" of a generic cell rate
/// algorithm).
#[derive(Debug, Default)]
pub struct HealthCache(
    tokio::sync::Mutex<Option<(Instant, usize)>>,
    std::sync::Mutex<Option<Instant>>,
);

impl HealthCache {
    /// How long a probe arriving at `now` waits for its slot (`None`: more than
    /// [`HEALTH_MAX_WAIT`]: refused, and its slot not taken).
    fn slot(&self, now: Instant) -> Option<Duration> {
        let every = Duration::from_secs_f64(1.0 / HEALTH_PER_SECOND);
        let tolerance = every.mul_f64(HEALTH_BURST - 1.0);
        let mut tat = self
            .1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let next = tat.map_or(now, |t| t.max(now));
        let at = next.checked_sub(tolerance).unwrap_or(now).max(now);
        let wait = at - now;
        if wait > HEALTH_MAX_WAIT {
            return None;
        }
        *tat = Some(next + every);
        Some(wait)
    }

    /// Answer a probe at its pace: from the last write when it is younger than
    /// [`HEALTH_WRITE_EVERY`], else with `write` (a durable write through the writer,
    /// returning the experiment count), one probe at a time. A failed write is not remembered:
    /// the next probe writes again.
    ///
    /// # Errors
    /// `write`'s; 503 for a probe beyond the pace's [`HEALTH_MAX_WAIT`].
    pub async fn probe<F>(&self, write: impl FnOnce() -> F) -> ApiResult<Value>
    where
        F: std::future::Future<Output = ApiResult<usize>>,
    {
        match self.slot(Instant::now()) {
            None => {
                return Err(ApiError {
                    retry_after: Some(1),
                    ..ApiError::new(
                        503,
                        format!(
                            "health probes are answered at most {HEALTH_PER_SECOND} a second; retry after a second"
                        ),
                    )
                });
            }
            Some(w) if !w.is_zero() => tokio::time::sleep(w).await,
            Some(_) => {}
        }
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

    /// The pace: a burst answered at once, then one slot every 1/[`HEALTH_PER_SECOND`], and
    /// a probe whose slot is beyond [`HEALTH_MAX_WAIT`] refused without taking a slot.
    #[test]
    fn health_probes_are_paced() {
        let cache = HealthCache::default();
        let now = Instant::now();
        let burst = HEALTH_BURST as usize;
        for _ in 0..burst {
            assert_eq!(cache.slot(now), Some(Duration::ZERO));
        }
        let every = 1.0 / HEALTH_PER_SECOND;
        let w = cache.slot(now).unwrap().as_secs_f64();
        assert!((w - every).abs() < 1e-6, "{w}");
        let room = (HEALTH_MAX_WAIT.as_secs_f64() / every).round() as usize;
        let mut refused = 0;
        for _ in 0..room + 10 {
            refused += usize::from(cache.slot(now).is_none());
        }
        assert!((9..=11).contains(&refused), "{refused}");
        // Later, the pace has room again.
        let later = now + HEALTH_MAX_WAIT * 3;
        assert_eq!(cache.slot(later), Some(Duration::ZERO));
    }

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
