//! The side runtime: a current-thread tokio runtime on a thread of its own, for the timers and
//! signals that must fire while a query runs.
//!
//! tokio's timer and signal drivers are turned by a runtime's workers between tasks. While
//! every worker of the query's runtime runs a CPU-bound part of a query, none of them does: a
//! `tokio::time::sleep` or `tokio::signal::ctrl_c()` there fires only when the query ends.
//! Measured before this runtime existed: Python's first check for Ctrl-C came 3.1 s into a
//! 3.2 s query, and the CLI noticed Ctrl-C 44-55 s after it was pressed, with its progress line
//! standing still. Nothing but short waits runs here, so its drivers turn on time; a future
//! awaiting a [`JoinHandle`] of this runtime is woken from its thread, however busy the
//! awaiting runtime is.
//!
//! If the thread cannot start, everything falls back to the caller's runtime (late, as before,
//! but working).

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// The side runtime, started with the first use; `None` if it cannot run.
pub fn handle() -> Option<&'static Handle> {
    static SIDE: OnceLock<Option<Handle>> = OnceLock::new();
    SIDE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("quiver-side".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .ok()?;
        Some(handle)
    })
    .as_ref()
}

/// Runs `future` on the side runtime (on the caller's if there is none, which must then be
/// called from within a runtime).
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match handle() {
        Some(handle) => handle.spawn(future),
        None => tokio::spawn(future),
    }
}

/// Completes after `duration`, timed by the side runtime.
pub async fn sleep(duration: Duration) {
    if let Some(handle) = handle() {
        // Created inside the task: a `Sleep` is bound to the timer of the runtime it is
        // created on.
        if handle
            .spawn(async move { tokio::time::sleep(duration).await })
            .await
            .is_ok()
        {
            return;
        }
    }
    tokio::time::sleep(duration).await;
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// The starvation this runtime exists for: a current-thread runtime whose only thread is
    /// blocked by a task that never yields. A sleep on that runtime's own timer could not fire
    /// before the task ends; one timed by the side runtime wakes the waiter on time.
    #[test]
    fn a_sleep_fires_while_the_callers_runtime_is_busy() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let busy_for = Duration::from_secs(3);
        runtime.block_on(async {
            // Occupies the only worker without yielding.
            let busy = tokio::spawn(async move {
                let started = Instant::now();
                while started.elapsed() < busy_for {
                    std::hint::spin_loop();
                }
            });
            let started = Instant::now();
            sleep(Duration::from_millis(50)).await;
            let slept = started.elapsed();
            assert!(slept < Duration::from_secs(1), "slept {slept:?}");
            busy.await.unwrap();
        });
    }
}
