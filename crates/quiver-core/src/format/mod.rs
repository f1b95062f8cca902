//! Output formats: turning a stream of Arrow [`RecordBatch`]es into bytes for a user.
//!
//! The names and behaviour follow ClickHouse/chDB (`FORMAT JSONEachRow`, `TabSeparated`, …) and the
//! DuckDB shell (the `Pretty` box). Every writer streams: it writes each batch as it arrives, except
//! [`OutputFormat::Pretty`], which needs the column widths before it can draw anything and therefore
//! keeps at most [`FormatOptions::max_rows`] rendered rows in memory.
//!
//! ```
//! use std::sync::Arc;
//! use arrow::array::Int64Array;
//! use arrow::datatypes::{DataType, Field, Schema};
//! use arrow::record_batch::RecordBatch;
//! use quiver_core::format::{format_batches, FormatOptions, OutputFormat, QueryStats};
//!
//! let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
//! let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
//! let format: OutputFormat = "csvwithnames".parse().unwrap();
//! let bytes = format_batches(format, schema, &[batch], &FormatOptions::default(), &QueryStats::default()).unwrap();
//! assert_eq!(String::from_utf8(bytes).unwrap(), "n\n1\n2\n");
//! ```

mod binary;
mod delimited;
mod json;
mod pretty;
mod text;
mod value_text;

use std::fmt;
use std::io::Write;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use parquet::errors::ParquetError;

/// A format in which query results can be written.
///
/// Parsed case-insensitively from the ClickHouse names (and a few aliases) with [`str::parse`];
/// [`OutputFormat::name`] gives the canonical ClickHouse spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// A DuckDB-shell style box with column names and types (`PrettyCompact` is an alias).
    Pretty,
    /// RFC 4180 comma-separated values without a header row.
    Csv,
    /// RFC 4180 comma-separated values with a header row of column names.
    CsvWithNames,
    /// ClickHouse `TabSeparated`: backslash-escaped values, `\N` for NULL, no header.
    Tsv,
    /// ClickHouse `TabSeparatedWithNames`: [`OutputFormat::Tsv`] with a header row.
    TsvWithNames,
    /// ClickHouse `JSON`: one document with `meta`, `data`, `rows` and `statistics`.
    Json,
    /// Newline-delimited JSON, one object per row (`NDJSON` and `JSONLines` are aliases).
    JsonEachRow,
    /// ClickHouse `JSONCompact`: like [`OutputFormat::Json`] with each row as an array.
    JsonCompact,
    /// A GitHub-flavoured Markdown table.
    Markdown,
    /// ClickHouse `Vertical`: one `name: value` line per column, rows one after another.
    Vertical,
    /// An Apache Parquet file (zstd-compressed).
    Parquet,
    /// The Arrow IPC stream format (`ArrowStream` is an alias).
    Arrow,
    /// Consumes the result and writes nothing (useful for benchmarks).
    Null,
}

impl OutputFormat {
    /// Every format, in declaration order.
    pub const ALL: &'static [OutputFormat] = &[
        OutputFormat::Pretty,
        OutputFormat::Csv,
        OutputFormat::CsvWithNames,
        OutputFormat::Tsv,
        OutputFormat::TsvWithNames,
        OutputFormat::Json,
        OutputFormat::JsonEachRow,
        OutputFormat::JsonCompact,
        OutputFormat::Markdown,
        OutputFormat::Vertical,
        OutputFormat::Parquet,
        OutputFormat::Arrow,
        OutputFormat::Null,
    ];

    /// The canonical (ClickHouse) spelling of the format, e.g. `"JSONEachRow"`.
    pub fn name(&self) -> &'static str {
        match self {
            OutputFormat::Pretty => "Pretty",
            OutputFormat::Csv => "CSV",
            OutputFormat::CsvWithNames => "CSVWithNames",
            OutputFormat::Tsv => "TSV",
            OutputFormat::TsvWithNames => "TSVWithNames",
            OutputFormat::Json => "JSON",
            OutputFormat::JsonEachRow => "JSONEachRow",
            OutputFormat::JsonCompact => "JSONCompact",
            OutputFormat::Markdown => "Markdown",
            OutputFormat::Vertical => "Vertical",
            OutputFormat::Parquet => "Parquet",
            OutputFormat::Arrow => "Arrow",
            OutputFormat::Null => "Null",
        }
    }

    /// Whether the format produces binary (non-text) output: Parquet and Arrow.
    pub fn is_binary(&self) -> bool {
        matches!(self, OutputFormat::Parquet | OutputFormat::Arrow)
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OutputFormat {
    type Err = FormatError;

    /// Parses a format name case-insensitively. Besides the canonical names this accepts the
    /// ClickHouse/chDB aliases `TabSeparated`, `TabSeparatedWithNames`, `NDJSON`, `JSONLines`,
    /// `JSONL`, `ArrowStream` and `PrettyCompact`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        if let Some(format) = OutputFormat::ALL
            .iter()
            .find(|format| format.name().eq_ignore_ascii_case(wanted))
        {
            return Ok(*format);
        }
        let alias = match wanted.to_ascii_lowercase().as_str() {
            "tabseparated" => Some(OutputFormat::Tsv),
            "tabseparatedwithnames" => Some(OutputFormat::TsvWithNames),
            "ndjson" | "jsonlines" | "jsonl" => Some(OutputFormat::JsonEachRow),
            "arrowstream" => Some(OutputFormat::Arrow),
            "prettycompact" => Some(OutputFormat::Pretty),
            _ => None,
        };
        alias.ok_or_else(|| FormatError::UnknownFormat {
            name: s.to_string(),
            valid: OutputFormat::ALL
                .iter()
                .map(|format| format.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Execution statistics reported by formats that carry them (ClickHouse `JSON`, `JSONCompact`).
#[derive(Debug, Clone, Default)]
pub struct QueryStats {
    /// Wall-clock time the query took.
    pub elapsed: Duration,
    /// Rows read from the sources.
    pub rows_read: u64,
    /// Bytes read from the sources.
    pub bytes_read: u64,
}

/// Options for the human-oriented formats.
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// `Pretty`: the most rows to display; longer results show the first half and the last half
    /// around a row of `·`. `0` means no limit (and no bound on memory).
    pub max_rows: usize,
    /// `Pretty`: the width of the terminal in characters; wider tables drop middle columns and show
    /// a `…` column instead. `0` means no limit.
    pub max_width: usize,
    /// `Pretty`: values (and column names and types) longer than this many characters are cut and
    /// end in `…`. `0` means no limit.
    pub max_value_width: usize,
}

impl Default for FormatOptions {
    fn default() -> Self {
        Self {
            max_rows: 40,
            max_width: 120,
            max_value_width: 40,
        }
    }
}

/// Errors raised while choosing or writing an output format.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The format name is not one quiver knows.
    #[error("unknown output format '{name}'; valid formats are: {valid}")]
    UnknownFormat {
        /// The name as the user gave it.
        name: String,
        /// Every valid canonical name, comma-separated.
        valid: String,
    },
    /// A batch does not have the number of columns the writer's schema declares.
    #[error("{format} writer expected batches with {expected} columns but got one with {found}")]
    ColumnCountMismatch {
        /// The format being written.
        format: OutputFormat,
        /// The number of columns in the schema given to [`new_writer`].
        expected: usize,
        /// The number of columns in the batch.
        found: usize,
    },
    /// Writing to the output failed.
    #[error("failed to write output: {0}")]
    Io(#[from] std::io::Error),
    /// Arrow could not encode or format a value.
    #[error("failed to format result: {0}")]
    Arrow(#[from] ArrowError),
    /// The Parquet writer failed.
    #[error("failed to write Parquet output: {0}")]
    Parquet(#[from] ParquetError),
}

/// A streaming writer of query results in one [`OutputFormat`].
///
/// Call [`BatchWriter::write_batch`] for each batch as it arrives, then [`BatchWriter::finish`]
/// exactly once; `finish` writes any trailer and flushes the output.
pub trait BatchWriter: Send {
    /// Writes (or, for `Pretty`, buffers) one batch. Its columns must match the writer's schema.
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError>;

    /// Writes whatever the format needs at the end and flushes the output.
    fn finish(self: Box<Self>, stats: &QueryStats) -> Result<(), FormatError>;
}

/// Creates a writer for `format` that writes batches of `schema` to `out`.
///
/// Text formats wrap `out` in a buffer, so `out` can be an unbuffered handle such as stdout.
pub fn new_writer(
    format: OutputFormat,
    schema: SchemaRef,
    out: Box<dyn Write + Send>,
    options: &FormatOptions,
) -> Result<Box<dyn BatchWriter>, FormatError> {
    Ok(match format {
        OutputFormat::Pretty => Box::new(pretty::PrettyWriter::new(schema, out, options)),
        OutputFormat::Csv => Box::new(delimited::DelimitedWriter::csv(schema, out, false)),
        OutputFormat::CsvWithNames => Box::new(delimited::DelimitedWriter::csv(schema, out, true)),
        OutputFormat::Tsv => Box::new(delimited::DelimitedWriter::tsv(schema, out, false)),
        OutputFormat::TsvWithNames => Box::new(delimited::DelimitedWriter::tsv(schema, out, true)),
        OutputFormat::Json => Box::new(json::JsonWriter::new(
            json::JsonLayout::Document,
            schema,
            out,
        )),
        OutputFormat::JsonCompact => Box::new(json::JsonWriter::new(
            json::JsonLayout::CompactDocument,
            schema,
            out,
        )),
        OutputFormat::JsonEachRow => Box::new(json::JsonWriter::new(
            json::JsonLayout::EachRow,
            schema,
            out,
        )),
        OutputFormat::Markdown => Box::new(text::MarkdownWriter::new(schema, out)),
        OutputFormat::Vertical => Box::new(text::VerticalWriter::new(schema, out)),
        OutputFormat::Parquet => Box::new(binary::ParquetWriter::try_new(schema, out)?),
        OutputFormat::Arrow => Box::new(binary::ArrowStreamWriter::try_new(schema, out)?),
        OutputFormat::Null => Box::new(NullWriter { schema }),
    })
}

/// Writes all `batches` in `format` and returns the bytes (convenient for tests and bindings).
pub fn format_batches(
    format: OutputFormat,
    schema: SchemaRef,
    batches: &[RecordBatch],
    options: &FormatOptions,
    stats: &QueryStats,
) -> Result<Vec<u8>, FormatError> {
    let buffer = SharedBuffer::default();
    let mut writer = new_writer(format, schema, Box::new(buffer.clone()), options)?;
    for batch in batches {
        writer.write_batch(batch)?;
    }
    writer.finish(stats)?;
    Ok(buffer.take())
}

/// A `Vec<u8>` the caller can take back after handing a boxed writer to [`new_writer`].
#[derive(Debug, Clone, Default)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl SharedBuffer {
    fn take(&self) -> Vec<u8> {
        // A poisoned lock only means another writer panicked mid-write; the bytes are still ours.
        let mut bytes = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::take(&mut *bytes)
    }
}

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut bytes = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fails unless `batch` has as many columns as the writer's `schema`.
fn check_columns(
    format: OutputFormat,
    schema: &SchemaRef,
    batch: &RecordBatch,
) -> Result<(), FormatError> {
    let expected = schema.fields().len();
    let found = batch.num_columns();
    if expected == found {
        Ok(())
    } else {
        Err(FormatError::ColumnCountMismatch {
            format,
            expected,
            found,
        })
    }
}

/// `FORMAT Null`: checks the batches and discards them.
struct NullWriter {
    schema: SchemaRef,
}

impl BatchWriter for NullWriter {
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        check_columns(OutputFormat::Null, &self.schema, batch)
    }

    fn finish(self: Box<Self>, _stats: &QueryStats) -> Result<(), FormatError> {
        Ok(())
    }
}

/// Small batches shared by the tests of every format.
#[cfg(test)]
pub(crate) mod test_data {
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, Float64Array, Int64Array, ListArray, StringArray, TimestampMicrosecondArray,
    };
    use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
    use arrow::record_batch::RecordBatch;

    /// The tricky string: a comma, a quote, a tab, a newline and a pipe.
    pub const TRICKY: &str = "a,\"b\"\tc\nd|e";

    /// Columns `i` Int64, `f` Float64, `s` Utf8, `ts` Timestamp(µs), `l` List(Int64); three rows,
    /// the second all NULL except `i`.
    pub fn sample() -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new(
                "l",
                DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
                true,
            ),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![Some(1), Some(-20), None])),
            Arc::new(Float64Array::from(vec![Some(1.5), None, Some(-0.25)])),
            Arc::new(StringArray::from(vec![Some("plain"), None, Some(TRICKY)])),
            Arc::new(TimestampMicrosecondArray::from(vec![
                Some(1_700_000_000_000_000),
                None,
                Some(1_700_000_000_123_456),
            ])),
            Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
                Some(vec![Some(1), Some(2)]),
                None,
                Some(vec![Some(3), None]),
            ])),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        (schema, batch)
    }

    /// One Int64 column `n` holding `range`.
    pub fn numbers(range: std::ops::Range<i64>) -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let array: ArrayRef = Arc::new(Int64Array::from_iter_values(range));
        let batch = RecordBatch::try_new(schema.clone(), vec![array]).unwrap();
        (schema, batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_case_insensitively() {
        for format in OutputFormat::ALL {
            assert_eq!(format.name().parse::<OutputFormat>().unwrap(), *format);
            assert_eq!(
                format
                    .name()
                    .to_lowercase()
                    .parse::<OutputFormat>()
                    .unwrap(),
                *format
            );
            assert_eq!(
                format
                    .name()
                    .to_uppercase()
                    .parse::<OutputFormat>()
                    .unwrap(),
                *format
            );
        }
        assert_eq!(
            "jsoneachrow".parse::<OutputFormat>().unwrap(),
            OutputFormat::JsonEachRow
        );
    }

    #[test]
    fn parses_clickhouse_aliases() {
        let cases = [
            ("TabSeparated", OutputFormat::Tsv),
            ("tabseparatedwithnames", OutputFormat::TsvWithNames),
            ("NDJSON", OutputFormat::JsonEachRow),
            ("JSONLines", OutputFormat::JsonEachRow),
            ("ArrowStream", OutputFormat::Arrow),
            ("PrettyCompact", OutputFormat::Pretty),
        ];
        for (name, format) in cases {
            assert_eq!(name.parse::<OutputFormat>().unwrap(), format, "{name}");
        }
    }

    #[test]
    fn unknown_format_lists_every_valid_name() {
        let err = "Excel".parse::<OutputFormat>().unwrap_err();
        assert!(matches!(&err, FormatError::UnknownFormat { name, .. } if name == "Excel"));
        let message = err.to_string();
        assert!(message.contains("'Excel'"), "{message}");
        for format in OutputFormat::ALL {
            assert!(
                message.contains(format.name()),
                "{message} lacks {}",
                format.name()
            );
        }
    }

    #[test]
    fn only_parquet_and_arrow_are_binary() {
        let binary: Vec<_> = OutputFormat::ALL.iter().filter(|f| f.is_binary()).collect();
        assert_eq!(binary, [&OutputFormat::Parquet, &OutputFormat::Arrow]);
    }

    #[test]
    fn null_format_writes_nothing() {
        let (schema, batch) = test_data::sample();
        let bytes = format_batches(
            OutputFormat::Null,
            schema,
            &[batch],
            &FormatOptions::default(),
            &QueryStats::default(),
        )
        .unwrap();
        assert!(bytes.is_empty());
    }

    #[test]
    fn batch_with_wrong_column_count_is_rejected() {
        let (schema, _) = test_data::sample();
        let (_, narrow) = test_data::numbers(0..3);
        for format in OutputFormat::ALL {
            let err = format_batches(
                *format,
                schema.clone(),
                std::slice::from_ref(&narrow),
                &FormatOptions::default(),
                &QueryStats::default(),
            )
            .unwrap_err();
            assert!(
                matches!(
                    err,
                    FormatError::ColumnCountMismatch {
                        expected: 5,
                        found: 1,
                        ..
                    }
                ),
                "{format}: {err}"
            );
        }
    }
}
