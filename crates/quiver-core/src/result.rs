//! [`QueryResult`]: a running statement's streaming output and what it has read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;

use crate::error::{QuiverError, Result};
use crate::format::{OutputFormat, QueryStats};
use crate::metrics::{storage_bytes, ScanCounters};

/// The output of one statement. Rows stream as they are produced; dropping the result cancels
/// the query.
pub struct QueryResult {
    schema: SchemaRef,
    stream: Option<SendableRecordBatchStream>,
    plan: Arc<dyn ExecutionPlan>,
    counters: Arc<ScanCounters>,
    started: Instant,
    finished: Option<Instant>,
    format: Option<OutputFormat>,
    returns_rows: bool,
}

impl std::fmt::Debug for QueryResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryResult")
            .field("schema", &self.schema)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A cheap handle for watching a running query from another task or thread (progress display).
#[derive(Debug, Clone)]
pub struct Progress {
    counters: Arc<ScanCounters>,
    started: Instant,
}

impl Progress {
    /// Rows read so far.
    pub fn rows_read(&self) -> u64 {
        self.counters.rows()
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.counters.bytes()
    }

    /// Time since the statement started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl QueryResult {
    pub(crate) fn new(
        stream: SendableRecordBatchStream,
        plan: Arc<dyn ExecutionPlan>,
        counters: Arc<ScanCounters>,
        started: Instant,
        format: Option<OutputFormat>,
        returns_rows: bool,
    ) -> Self {
        QueryResult {
            schema: stream.schema(),
            stream: Some(stream),
            plan,
            counters,
            started,
            finished: None,
            format,
            returns_rows,
        }
    }

    /// The schema of the rows.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The output format the statement's `FORMAT` clause asked for.
    pub fn format(&self) -> Option<OutputFormat> {
        self.format
    }

    /// Whether the statement is one whose rows are meant to be shown (a query, EXPLAIN, SHOW,
    /// DESCRIBE), rather than a status (DDL, INSERT, COPY).
    pub fn returns_rows(&self) -> bool {
        self.returns_rows
    }

    /// The next batch, `None` at the end.
    pub async fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        let stream = self.stream.as_mut()?;
        match stream.next().await {
            Some(Ok(batch)) => Some(Ok(batch)),
            Some(Err(error)) => {
                self.finish();
                Some(Err(QuiverError::from(error)))
            }
            None => {
                self.finish();
                None
            }
        }
    }

    fn finish(&mut self) {
        self.stream = None;
        if self.finished.is_none() {
            self.finished = Some(Instant::now());
        }
    }

    /// Reads every remaining batch.
    pub async fn collect(mut self) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next_batch().await {
            batches.push(batch?);
        }
        Ok(batches)
    }

    /// Like [`QueryResult::collect`], also returning the final statistics.
    pub async fn collect_with_stats(mut self) -> Result<(Vec<RecordBatch>, QueryStats)> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next_batch().await {
            batches.push(batch?);
        }
        let stats = self.stats();
        Ok((batches, stats))
    }

    /// A handle to watch progress while another task drains the result.
    pub fn progress(&self) -> Progress {
        Progress {
            counters: Arc::clone(&self.counters),
            started: self.started,
        }
    }

    /// Elapsed time (until the end of the stream once it ended), rows and bytes read.
    pub fn stats(&self) -> QueryStats {
        let elapsed = self
            .finished
            .unwrap_or_else(Instant::now)
            .duration_since(self.started);
        let bytes_read = if self.finished.is_some() {
            storage_bytes(&self.plan).unwrap_or_else(|| self.counters.bytes())
        } else {
            self.counters.bytes()
        };
        QueryStats {
            elapsed,
            rows_read: self.counters.rows(),
            bytes_read,
        }
    }

    /// The executed physical plan (with its metrics once the stream has ended).
    pub fn physical_plan(&self) -> &Arc<dyn ExecutionPlan> {
        &self.plan
    }
}
