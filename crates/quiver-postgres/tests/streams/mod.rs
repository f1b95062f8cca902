//! Reading a scan's stream, and waiting for the server to show something, in the tests of
//! this crate (apart from `common`, which the CLI's tests share and which has no DataFusion
//! and no runtime).

use arrow::array::RecordBatch;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::SessionContext;
use futures::StreamExt;

/// Starts `sql` and reads its first batch, which must come and be no error: the stream left
/// running and that batch.
pub async fn first_batch(
    ctx: &SessionContext,
    sql: &str,
) -> (SendableRecordBatchStream, RecordBatch) {
    let mut stream = ctx.sql(sql).await.unwrap().execute_stream().await.unwrap();
    let first = stream
        .next()
        .await
        .expect("a first batch")
        .expect("no error yet");
    (stream, first)
}

/// Reads `stream` on to its first error, which it must end with: the rows that came before it
/// and the error's text. A stream that ends without one fails the test (a scan cut short must
/// never look complete).
pub async fn read_to_error(stream: &mut SendableRecordBatchStream) -> (usize, String) {
    let mut rows = 0;
    while let Some(batch) = stream.next().await {
        match batch {
            Ok(batch) => rows += batch.num_rows(),
            Err(error) => return (rows, error.to_string()),
        }
    }
    panic!("the scan ended without an error after {rows} rows")
}

/// Polls `done` every 50 ms until it holds or `seconds` have passed; the caller asserts what
/// it waited for.
pub async fn wait_until(seconds: u64, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while !done() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
