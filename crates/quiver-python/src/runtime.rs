//! One tokio runtime for the extension, and the one way Python waits for it: with the GIL
//! released, checking for Ctrl-C every 100 ms.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::time::Duration;

use futures::FutureExt;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::internal_error;

static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// The runtime that executes every query of every connection in this process.
pub fn runtime() -> PyResult<&'static Runtime> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .thread_name("quiver-worker")
                .enable_all()
                .build()
                .map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(|error| internal_error(format!("cannot start the query runtime: {error}")))
}

/// How often a waiting query looks for KeyboardInterrupt.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// Completes at the next tick. Timed by quiver's side runtime: a `tokio::time::sleep` on the
/// query's runtime is turned by its workers between tasks, and while every worker runs a
/// CPU-bound query task none does — `sum(number % 7) FROM numbers_mt(3e8)` saw its first tick
/// 3.1 s into its 3.2 s, and a shorter query could end without one (no progress shown, the
/// check for Ctrl-C not made).
async fn tick() {
    quiver_core::side::sleep(SIGNAL_POLL).await;
}

/// Runs `future` to completion with the GIL released, so other Python threads keep running.
/// A pending signal (Ctrl-C) drops the future — which cancels the query — and raises the
/// signal handler's exception (KeyboardInterrupt).
pub fn wait<F, T>(py: Python<'_>, future: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    wait_reporting(py, future, None)
}

/// Someone to tell how a running query is doing: `callback(rows_read, bytes_read, seconds,
/// done)` is called every poll once the query has run for `after`, and once with `done=True`
/// at the end if it was called before (a notebook's progress bar, a terminal's status line).
pub struct Reporter {
    pub progress: quiver_core::Progress,
    pub callback: Py<PyAny>,
    pub after: Duration,
}

impl Reporter {
    fn report(&self, py: Python<'_>, done: bool) {
        let progress = &self.progress;
        let arguments = (
            progress.rows_read(),
            progress.bytes_read(),
            progress.elapsed().as_secs_f64(),
            done,
        );
        // A failing display must not fail the query.
        let _ = self.callback.call1(py, arguments);
    }
}

/// [`wait`], telling `reporter` about the query's progress.
pub fn wait_reporting<F, T>(py: Python<'_>, future: F, reporter: Option<&Reporter>) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    let runtime = runtime()?;
    let mut reported = false;
    // A panic in the query (a bug, ours or DataFusion's, in code polled on this thread) must
    // not cross into Python as a `PanicException`, which `except Exception` does not catch.
    let future = AssertUnwindSafe(future).catch_unwind();
    let output = py.detach(|| {
        runtime.block_on(async {
            tokio::pin!(future);
            loop {
                tokio::select! {
                    output = &mut future => return output.unwrap_or_else(|panic| Err(panicked(panic))),
                    _ = tick() => {
                        Python::attach(|py| {
                            py.check_signals()?;
                            if let Some(reporter) = reporter {
                                if reporter.progress.elapsed() >= reporter.after {
                                    reporter.report(py, false);
                                    reported = true;
                                }
                            }
                            Ok::<_, PyErr>(())
                        })?;
                    }
                }
            }
        })
    });
    if let (true, Some(reporter)) = (reported, reporter) {
        reporter.report(py, true);
    }
    if output.is_err() {
        // A query that failed while Ctrl-C was pending (Python code it ran, such as a column
        // conversion, was interrupted) reports the KeyboardInterrupt.
        py.check_signals()?;
    }
    output
}

/// A panic's payload as `quiver.InternalError`.
pub fn panicked(payload: Box<dyn Any + Send>) -> PyErr {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    internal_error(format!(
        "internal error (a bug in quiver; please report it): {message}"
    ))
}
