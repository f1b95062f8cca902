//! One run of an operator shared by all its output partitions: the first partition to execute
//! starts it, every partition awaits it and returns its share of the batches. Both GROUP BY
//! operators work this way, since their phases need every input partition.

use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::StreamExt;

type SharedResult =
    Shared<BoxFuture<'static, std::result::Result<Arc<Vec<RecordBatch>>, Arc<DataFusionError>>>>;

/// The run, and how many output partitions have taken their handle on it.
#[derive(Default)]
pub(crate) struct SharedRun(Mutex<(Option<SharedResult>, usize)>);

impl SharedRun {
    /// Output partition `partition`'s stream of `partitions`: batches `partition`,
    /// `partition + partitions`, … of the run, which `start` begins if no partition has yet.
    pub(crate) fn execute(
        &self,
        partition: usize,
        partitions: usize,
        schema: SchemaRef,
        start: impl FnOnce() -> Result<BoxFuture<'static, Result<Vec<RecordBatch>>>>,
    ) -> Result<SendableRecordBatchStream> {
        let shared = {
            let mut guard = self.0.lock().map_err(|_| {
                DataFusionError::Internal("shared operator run: lock poisoned".into())
            })?;
            let (run, started) = &mut *guard;
            let shared = match run {
                Some(shared) => shared.clone(),
                None => {
                    let future = start()?;
                    let shared = async move { future.await.map(Arc::new).map_err(Arc::new) }
                        .boxed()
                        .shared();
                    *run = Some(shared.clone());
                    shared
                }
            };
            *started += 1;
            // Every output partition has its handle: a later execution starts afresh.
            if *started >= partitions {
                *run = None;
                *started = 0;
            }
            shared
        };
        let stream = futures::stream::once(async move {
            let batches = shared.await.map_err(DataFusionError::Shared)?;
            let mine: Vec<Result<RecordBatch>> = batches
                .iter()
                .enumerate()
                .filter(|(i, _)| i % partitions == partition)
                .map(|(_, b)| Ok(b.clone()))
                .collect();
            Ok::<_, DataFusionError>(mine)
        })
        .map(|outcome| match outcome {
            Ok(batches) => futures::stream::iter(batches),
            Err(error) => futures::stream::iter(vec![Err(error)]),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}
