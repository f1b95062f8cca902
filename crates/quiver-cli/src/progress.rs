//! The progress line: rows and bytes read and the rate, on stderr, for queries running longer
//! than a second; cleared when the query ends.

use std::io::Write;
use std::time::Duration;

use quiver_core::Progress;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::output::{group_digits, human_bytes};

/// Queries shorter than this never show a progress line.
const SHOW_AFTER: Duration = Duration::from_secs(1);
const REFRESH: Duration = Duration::from_millis(100);

/// A running progress display; [`ProgressLine::stop`] clears it.
#[derive(Debug)]
pub struct ProgressLine {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl ProgressLine {
    /// Starts watching `progress` in a background task.
    pub fn start(progress: Progress) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        // On the side runtime: on the query's, its timer waits for a worker to be free.
        let task = quiver_core::side::spawn(async move {
            let mut shown = false;
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(REFRESH) => {}
                }
                let elapsed = progress.elapsed();
                if elapsed < SHOW_AFTER {
                    continue;
                }
                let seconds = elapsed.as_secs_f64().max(1e-9);
                let rows = progress.rows_read();
                let bytes = progress.bytes_read();
                let line = format!(
                    "Progress: {} rows, {} ({} rows/s, {}/s) {:.1} s",
                    group_digits(rows),
                    human_bytes(bytes),
                    group_digits((rows as f64 / seconds) as u64),
                    human_bytes((bytes as f64 / seconds) as u64),
                    seconds
                );
                let mut stderr = std::io::stderr().lock();
                let _ = write!(stderr, "\r\x1b[K{line}");
                let _ = stderr.flush();
                shown = true;
            }
            if shown {
                let mut stderr = std::io::stderr().lock();
                let _ = write!(stderr, "\r\x1b[K");
                let _ = stderr.flush();
            }
        });
        ProgressLine { stop, task }
    }

    /// Stops the display and clears the line.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
