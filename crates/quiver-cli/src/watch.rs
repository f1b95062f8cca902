//! Ctrl-C and the progress line, watched from a thread of their own.
//!
//! tokio's signal and timer drivers are turned by the runtime's workers between tasks. While
//! every worker runs a CPU-bound part of a query, none of them does, so `tokio::signal::ctrl_c()`
//! and `tokio::time::sleep` on the query's runtime fired only when the query ended: Ctrl-C did
//! not stop a long query, and its progress line stood still. (The Python package had the same
//! starvation, fixed in its `runtime.rs`.)
//!
//! The watcher is a thread running a runtime of its own that nothing else keeps busy: it
//! listens for SIGINT and wakes the waiters on the query's runtime through a [`Notify`], and
//! it runs the progress line ([`spawn`]). If the thread cannot start, both fall back to the
//! query's runtime, as before.
//!
//! Noticing Ctrl-C is half of stopping: the query's tasks must also give their thread back,
//! which is why quiver's own sources (such as `numbers`) yield like DataFusion's.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

static INTERRUPTS: Notify = Notify::const_new();

/// The watcher's runtime, started once; `None` if it cannot run.
fn watcher() -> Option<&'static Handle> {
    static WATCHER: OnceLock<Option<Handle>> = OnceLock::new();
    WATCHER
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("quiver-watch".into())
                .spawn(move || {
                    // Should listening fail, SIGINT keeps its default action: it ends the
                    // process. The runtime keeps running the tasks given to it either way.
                    runtime.block_on(async {
                        while tokio::signal::ctrl_c().await.is_ok() {
                            INTERRUPTS.notify_waiters();
                        }
                        std::future::pending::<()>().await;
                    })
                })
                .ok()?;
            Some(handle)
        })
        .as_ref()
}

/// Completes when the user presses Ctrl-C (SIGINT), however busy the query's runtime is.
pub async fn interrupted() {
    if watcher().is_some() {
        INTERRUPTS.notified().await;
    } else if tokio::signal::ctrl_c().await.is_err() {
        // No handler could be installed: SIGINT ends the process instead.
        std::future::pending::<()>().await;
    }
}

/// Runs `future` on the watcher's runtime, where its timers fire on time however busy the
/// query's runtime is.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match watcher() {
        Some(handle) => handle.spawn(future),
        None => tokio::spawn(future),
    }
}
