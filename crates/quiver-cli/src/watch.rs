//! Ctrl-C, watched from quiver's side runtime ([`quiver_core::side`]).
//!
//! `tokio::signal::ctrl_c()` on the query's runtime is turned by its workers between tasks:
//! while every worker runs a CPU-bound part of a query, Ctrl-C was noticed only when the query
//! ended. The listener runs on the side runtime instead and wakes the waiters on the query's
//! runtime through a [`Notify`]. If the side runtime cannot run, the waiter listens on the
//! query's runtime, as before.
//!
//! Noticing Ctrl-C is half of stopping: the query's tasks must also give their thread back,
//! which is why quiver's own sources (such as `numbers`) yield like DataFusion's.

use std::sync::OnceLock;

use tokio::sync::Notify;

static INTERRUPTS: Notify = Notify::const_new();

/// Starts the listener once; false if there is no side runtime to run it.
fn listening() -> bool {
    static LISTENING: OnceLock<bool> = OnceLock::new();
    *LISTENING.get_or_init(|| match quiver_core::side::handle() {
        Some(side) => {
            // Should listening fail, SIGINT keeps its default action: it ends the process.
            side.spawn(async {
                while tokio::signal::ctrl_c().await.is_ok() {
                    INTERRUPTS.notify_waiters();
                }
            });
            true
        }
        None => false,
    })
}

/// Completes when the user presses Ctrl-C (SIGINT), however busy the query's runtime is.
pub async fn interrupted() {
    if listening() {
        INTERRUPTS.notified().await;
    } else if tokio::signal::ctrl_c().await.is_err() {
        // No handler could be installed: SIGINT ends the process instead.
        std::future::pending::<()>().await;
    }
}
