//! Reading a scan's stream in the tests of this crate (apart from `common`, which the CLI's
//! tests share and which has no DataFusion).

use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

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
