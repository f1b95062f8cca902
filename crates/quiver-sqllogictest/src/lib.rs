//! Runs quiver's `.slt` golden files (the `sqllogictest` format DataFusion and DuckDB use).
//!
//! Files live in `test_files/`, grouped by topic. In them:
//! * `__DATA__` is replaced by the absolute path of this crate's `data/` fixtures,
//! * `__TMP__` by a scratch directory private to the file,
//! * the runner-only statement `quiver_open <dir>` replaces the session by a new one on a
//!   persistent database directory (`quiver_open memory` goes back to memory), which is how the
//!   persistence tests "restart the process".
//!
//! Regenerate expected results with `make slt-complete` and review the diff.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use quiver_core::datafusion::arrow::array::{Array, RecordBatch};
use quiver_core::datafusion::arrow::datatypes::DataType;
use quiver_core::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use quiver_core::{QuiverError, Session, SessionOptions};
use sqllogictest::{DBOutput, DefaultColumnType};

/// One `.slt` file's database connection.
#[derive(Debug)]
pub struct QuiverDb {
    session: Session,
    data_dir: PathBuf,
    scratch: PathBuf,
}

impl QuiverDb {
    /// A fresh in-memory session; `scratch` is the file's private temporary directory.
    pub fn new(data_dir: &Path, scratch: &Path) -> Result<Self, QuiverError> {
        Ok(QuiverDb {
            session: Session::in_memory()?,
            data_dir: data_dir.to_path_buf(),
            scratch: scratch.to_path_buf(),
        })
    }

    fn substitute(&self, sql: &str) -> String {
        sql.replace("__DATA__", &self.data_dir.to_string_lossy())
            .replace("__TMP__", &self.scratch.to_string_lossy())
    }

    async fn reopen(&mut self, target: &str) -> Result<(), QuiverError> {
        // Drop the old session first so a database directory's lock is released.
        self.session = Session::in_memory()?;
        if target != "memory" {
            self.session = Session::open(SessionOptions {
                database: Some(PathBuf::from(target)),
                ..SessionOptions::default()
            })
            .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl sqllogictest::AsyncDB for QuiverDb {
    type Error = QuiverError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, QuiverError> {
        let sql = self.substitute(sql);
        if let Some(target) = sql.trim().strip_prefix("quiver_open ") {
            self.reopen(target.trim()).await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let result = self.session.sql(&sql).await?;
        let returns_rows = result.returns_rows();
        let schema = result.schema();
        let batches = result.collect().await?;
        if !returns_rows {
            let count = batches.iter().map(|b| b.num_rows() as u64).sum();
            return Ok(DBOutput::StatementComplete(count));
        }
        let types = schema
            .fields()
            .iter()
            .map(|field| column_type(field.data_type()))
            .collect();
        let mut rows = Vec::new();
        for batch in &batches {
            rows.extend(batch_rows(batch)?);
        }
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "quiver"
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

fn column_type(data_type: &DataType) -> DefaultColumnType {
    match data_type {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => DefaultColumnType::Integer,
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(_, _)
        | DataType::Decimal256(_, _) => DefaultColumnType::FloatingPoint,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DefaultColumnType::Text,
        _ => DefaultColumnType::Any,
    }
}

/// Cells as text: `NULL` for null, `(empty)` for the empty string (a bare empty cell would be
/// invisible in the file), everything else as Arrow displays it.
fn batch_rows(batch: &RecordBatch) -> Result<Vec<Vec<String>>, QuiverError> {
    let options = FormatOptions::default().with_null("NULL");
    let formatters = batch
        .columns()
        .iter()
        .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let mut cells = Vec::with_capacity(formatters.len());
        for (formatter, column) in formatters.iter().zip(batch.columns()) {
            // Trailing whitespace is invisible in the file (EXPLAIN lines end in newlines).
            let text = formatter.value(row).to_string().trim_end().to_string();
            cells.push(if text.is_empty() && !column.is_null(row) {
                "(empty)".to_string()
            } else {
                text
            });
        }
        // A cell spanning lines (EXPLAIN) becomes one row per line, as the file shows it.
        if cells.iter().any(|cell| cell.contains('\n')) {
            let joined = cells.join(" ");
            rows.extend(joined.lines().map(|line| vec![line.trim_end().to_string()]));
        } else {
            rows.push(cells);
        }
    }
    Ok(rows)
}
