//! Writing: Arrow batches encoded as a binary `COPY ... FROM STDIN (FORMAT binary)` stream, the
//! inverse of [`crate::decode`], and the `DataSink` that streams an INSERT into Postgres in one
//! transaction (a failure half-way rolls everything back: nothing is written).

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, IntervalMonthDayNanoType, SchemaRef, Time64MicrosecondType,
    TimestampMicrosecondType,
};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use datafusion::datasource::sink::DataSink;
use datafusion::error::Result as DFResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::{SinkExt, StreamExt};

use crate::binary_copy::SIGNATURE;
use crate::connection::ConnectTarget;
use crate::error::{PostgresError, Result};
use crate::sql::quote_ident;
use crate::types::{PgColumn, PgType};

/// Days and microseconds between the Unix and Postgres epochs.
const EPOCH_DAYS: i32 = 10_957;
const EPOCH_MICROS: i64 = 946_684_800_000_000;

/// The 19-byte header of a binary COPY stream without OIDs or extensions.
pub fn header() -> Bytes {
    let mut out = BytesMut::with_capacity(19);
    out.put_slice(SIGNATURE);
    out.put_u32(0);
    out.put_u32(0);
    out.freeze()
}

/// The end-of-data trailer.
pub fn trailer() -> Bytes {
    Bytes::from_static(&[0xff, 0xff])
}

/// Whether quiver can write a column of this type.
pub fn writable(pg_type: &PgType) -> bool {
    !matches!(pg_type, PgType::CastText | PgType::Array(_))
}

/// Encodes `batch`, whose columns already have the Arrow types of `columns`, as binary COPY
/// rows appended to `out`.
pub fn encode_batch(batch: &RecordBatch, columns: &[PgColumn], out: &mut BytesMut) -> Result<()> {
    let arrays: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(columns)
        .map(|(array, column)| match array.data_type() {
            // Enum labels travel as text.
            DataType::Dictionary(_, _) => arrow::compute::cast(array, &DataType::Utf8)
                .map_err(|e| conversion(column, e.to_string())),
            _ => Ok(Arc::clone(array)),
        })
        .collect::<Result<_>>()?;
    let fields = i16::try_from(columns.len())
        .map_err(|_| PostgresError::InvalidArgument("too many columns to write".into()))?;
    for row in 0..batch.num_rows() {
        out.put_i16(fields);
        for (array, column) in arrays.iter().zip(columns) {
            if array.is_null(row) {
                out.put_i32(-1);
            } else {
                encode_value(array, row, column, out)?;
            }
        }
    }
    Ok(())
}

fn conversion(column: &PgColumn, message: String) -> PostgresError {
    PostgresError::Conversion {
        column: column.name.clone(),
        message,
    }
}

fn put_fixed(out: &mut BytesMut, bytes: &[u8]) {
    out.put_i32(bytes.len() as i32);
    out.put_slice(bytes);
}

fn put_var(out: &mut BytesMut, bytes: &[u8], column: &PgColumn) -> Result<()> {
    let length = i32::try_from(bytes.len())
        .map_err(|_| conversion(column, "a value larger than 2 GB".into()))?;
    out.put_i32(length);
    out.put_slice(bytes);
    Ok(())
}

fn encode_value(array: &ArrayRef, row: usize, column: &PgColumn, out: &mut BytesMut) -> Result<()> {
    let wrong = || {
        conversion(
            column,
            format!("cannot write {} as {:?}", array.data_type(), column.pg_type),
        )
    };
    match (&column.pg_type, array.data_type()) {
        (PgType::Bool, DataType::Boolean) => put_fixed(out, &[array.as_boolean().value(row) as u8]),
        (PgType::Int2, DataType::Int16) => put_fixed(
            out,
            &array.as_primitive::<Int16Type>().value(row).to_be_bytes(),
        ),
        (PgType::Int4, DataType::Int32) => put_fixed(
            out,
            &array.as_primitive::<Int32Type>().value(row).to_be_bytes(),
        ),
        (PgType::Int8, DataType::Int64) => put_fixed(
            out,
            &array.as_primitive::<Int64Type>().value(row).to_be_bytes(),
        ),
        (PgType::Float4, DataType::Float32) => put_fixed(
            out,
            &array.as_primitive::<Float32Type>().value(row).to_be_bytes(),
        ),
        (PgType::Float8, DataType::Float64) => put_fixed(
            out,
            &array.as_primitive::<Float64Type>().value(row).to_be_bytes(),
        ),
        (PgType::Numeric { scale, .. }, DataType::Decimal128(_, _)) => {
            let value = array.as_primitive::<Decimal128Type>().value(row);
            let bytes = numeric_bytes(value, *scale);
            put_fixed(out, &bytes)
        }
        (PgType::Text | PgType::Bpchar | PgType::Enum, DataType::Utf8) => {
            put_var(out, array.as_string::<i32>().value(row).as_bytes(), column)?
        }
        (PgType::Jsonb, DataType::Utf8) => {
            let text = array.as_string::<i32>().value(row).as_bytes();
            let length = i32::try_from(text.len() + 1)
                .map_err(|_| conversion(column, "a value larger than 2 GB".into()))?;
            out.put_i32(length);
            out.put_u8(1);
            out.put_slice(text);
        }
        (PgType::Bytea, DataType::Binary) => {
            put_var(out, array.as_binary::<i32>().value(row), column)?
        }
        (PgType::Date, DataType::Date32) => {
            let days = array.as_primitive::<Date32Type>().value(row);
            let days = match days {
                i32::MAX | i32::MIN => days,
                days => days
                    .checked_sub(EPOCH_DAYS)
                    .ok_or_else(|| conversion(column, format!("date {days} out of range")))?,
            };
            put_fixed(out, &days.to_be_bytes())
        }
        (PgType::Time, DataType::Time64(_)) => put_fixed(
            out,
            &array
                .as_primitive::<Time64MicrosecondType>()
                .value(row)
                .to_be_bytes(),
        ),
        (PgType::Timestamp | PgType::TimestampTz, DataType::Timestamp(_, _)) => {
            let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
            let micros = match micros {
                i64::MAX | i64::MIN => micros,
                m => m
                    .checked_sub(EPOCH_MICROS)
                    .ok_or_else(|| conversion(column, format!("timestamp {m} out of range")))?,
            };
            put_fixed(out, &micros.to_be_bytes())
        }
        (PgType::Interval, DataType::Interval(_)) => {
            let value = array.as_primitive::<IntervalMonthDayNanoType>().value(row);
            if value.nanoseconds % 1000 != 0 {
                return Err(conversion(
                    column,
                    "an interval with nanoseconds; Postgres keeps microseconds".into(),
                ));
            }
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&(value.nanoseconds / 1000).to_be_bytes());
            bytes[8..12].copy_from_slice(&value.days.to_be_bytes());
            bytes[12..].copy_from_slice(&value.months.to_be_bytes());
            put_fixed(out, &bytes)
        }
        (PgType::Uuid, DataType::Utf8) => {
            let text = array.as_string::<i32>().value(row);
            let bytes = parse_uuid(text)
                .ok_or_else(|| conversion(column, format!("'{text}' is not a UUID")))?;
            put_fixed(out, &bytes)
        }
        _ => return Err(wrong()),
    }
    Ok(())
}

fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// `numeric_recv`'s input: base-10000 digits of `value` × 10^-`scale`.
pub(crate) fn numeric_bytes(value: i128, scale: i8) -> Vec<u8> {
    let negative = value < 0;
    let digits = value.unsigned_abs().to_string();
    let scale_digits = scale.max(0) as usize;
    // Split into integer and fraction digits (a negative scale appends zeros).
    let mut text = digits;
    if scale < 0 {
        text.push_str(&"0".repeat((-scale) as usize));
    }
    let padded = format!("{text:0>width$}", width = scale_digits + 1);
    let (int_part, frac_part) = padded.split_at(padded.len() - scale_digits);
    let int_pad = (4 - int_part.len() % 4) % 4;
    let int_part = format!("{}{int_part}", "0".repeat(int_pad));
    let frac_pad = (4 - frac_part.len() % 4) % 4;
    let frac_part = format!("{frac_part}{}", "0".repeat(frac_pad));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes()
            .chunks(4)
            .map(|c| c.iter().fold(0i16, |acc, d| acc * 10 + (d - b'0') as i16))
            .collect()
    };
    let mut groups = group(&int_part);
    let mut weight = groups.len() as i16 - 1;
    groups.extend(group(&frac_part));
    // Strip leading zero groups (each lowers the weight) and trailing ones.
    let leading = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..leading);
    weight -= leading as i16;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    let mut out = Vec::with_capacity(8 + 2 * groups.len());
    out.extend_from_slice(&(groups.len() as i16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(
        &(if negative && !groups.is_empty() {
            0x4000u16
        } else {
            0
        })
        .to_be_bytes(),
    );
    out.extend_from_slice(&(scale_digits as i16).to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
    out
}

/// Streams an INSERT's rows into a Postgres table with one binary COPY in one transaction.
#[derive(Debug)]
pub struct PostgresSink {
    target: ConnectTarget,
    qualified: String,
    columns: Vec<PgColumn>,
    schema: SchemaRef,
    /// The positions of the input's columns that are written (the others Postgres fills).
    written: Vec<usize>,
}

impl PostgresSink {
    /// A sink writing `columns` of the table `qualified` (`"schema"."name"`).
    pub fn new(
        target: ConnectTarget,
        qualified: String,
        columns: Vec<PgColumn>,
        schema: SchemaRef,
    ) -> Self {
        let written = (0..columns.len()).collect();
        PostgresSink {
            target,
            qualified,
            columns,
            schema,
            written,
        }
    }

    /// Leaves the columns at `omitted` out of the COPY, so that Postgres fills them with
    /// their defaults; their values in the input are ignored.
    pub fn leaving_out(mut self, omitted: &[usize]) -> Result<Self> {
        self.written.retain(|index| !omitted.contains(index));
        if self.written.is_empty() {
            return Err(PostgresError::InvalidArgument(format!(
                "an INSERT into {} must give at least one column",
                self.qualified
            )));
        }
        Ok(self)
    }

    async fn write(&self, data: SendableRecordBatchStream) -> Result<u64> {
        let columns: Vec<PgColumn> = self
            .written
            .iter()
            .filter_map(|&index| self.columns.get(index).cloned())
            .collect();
        if let Some(column) = columns.iter().find(|c| !writable(&c.pg_type)) {
            return Err(PostgresError::InvalidArgument(format!(
                "cannot write column \"{}\" of {}: quiver writes scalar types it decodes itself",
                column.name, self.qualified
            )));
        }
        let schema = Arc::new(
            self.schema
                .project(&self.written)
                .map_err(|e| PostgresError::InvalidArgument(e.to_string()))?,
        );
        let rows = data.map(|batch| {
            batch
                .and_then(|batch| Ok(batch.project(&self.written)?))
                .map_err(|e| PostgresError::InvalidArgument(e.to_string()))
        });
        TableWrite {
            target: &self.target,
            qualified: &self.qualified,
            columns: &columns,
            schema: &schema,
            what: format!("writing to {}", self.qualified),
        }
        .run("BEGIN", rows)
        .await
    }
}

/// One transaction's write into a table: where, which columns, and their Arrow types.
struct TableWrite<'a> {
    target: &'a ConnectTarget,
    qualified: &'a str,
    columns: &'a [PgColumn],
    /// The Arrow types of `columns`: each batch is cast to them before it is encoded.
    schema: &'a SchemaRef,
    /// What the write does, for its errors ("writing to …", "creating …").
    what: String,
}

impl TableWrite<'_> {
    /// Writes `batches` in one transaction: `begin` opens it (and may create the table), one
    /// binary `COPY ... FROM STDIN` streams the rows, and COMMIT ends it; returns the rows
    /// written. An error from the input, the encoding or the server returns before the
    /// COMMIT, and the connection is dropped with the transaction open: nothing is written.
    /// Closing at exit ([`crate::connection::close_all`]) ends a write the same way, at once.
    async fn run(
        &self,
        begin: &str,
        batches: impl futures::Stream<Item = Result<RecordBatch>>,
    ) -> Result<u64> {
        let exiting = crate::connection::exiting();
        tokio::select! {
            written = self.copy(begin, batches) => written,
            () = exiting.cancelled() => Err(PostgresError::closed_at_exit(self.what.as_str())),
        }
    }

    async fn copy(
        &self,
        begin: &str,
        batches: impl futures::Stream<Item = Result<RecordBatch>>,
    ) -> Result<u64> {
        let server = |e: tokio_postgres::Error| PostgresError::server(self.what.as_str(), &e);
        let client = self.target.connect().await?;
        client.batch_execute(begin).await.map_err(server)?;
        let column_list = self
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "COPY {} ({column_list}) FROM STDIN (FORMAT binary)",
            self.qualified
        );
        let sink = client
            .copy_in::<_, Bytes>(sql.as_str())
            .await
            .map_err(server)?;
        futures::pin_mut!(sink);
        sink.send(header()).await.map_err(server)?;
        futures::pin_mut!(batches);
        while let Some(batch) = batches.next().await {
            // An error from the input (or from encoding) returns early: the COPY is abandoned
            // and the connection dropped, so the transaction never commits.
            let batch = cast_batch(&batch?, self.schema, self.columns)?;
            let mut out = BytesMut::with_capacity(batch.get_array_memory_size() + 1024);
            encode_batch(&batch, self.columns, &mut out)?;
            sink.send(out.freeze()).await.map_err(server)?;
        }
        sink.send(trailer()).await.map_err(server)?;
        let rows = sink.as_mut().finish().await.map_err(server)?;
        client.batch_execute("COMMIT").await.map_err(server)?;
        Ok(rows)
    }
}

/// The Postgres column type for an Arrow type, for CREATE TABLE AS.
pub fn pg_type_for(data_type: &DataType) -> Option<(&'static str, PgType)> {
    use arrow::datatypes::TimeUnit;
    Some(match data_type {
        DataType::Boolean => ("bool", PgType::Bool),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => ("int2", PgType::Int2),
        DataType::Int32 | DataType::UInt16 => ("int4", PgType::Int4),
        DataType::Int64 | DataType::UInt32 => ("int8", PgType::Int8),
        DataType::Float32 => ("float4", PgType::Float4),
        DataType::Float64 => ("float8", PgType::Float8),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ("text", PgType::Text),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => ("bytea", PgType::Bytea),
        DataType::Date32 => ("date", PgType::Date),
        DataType::Time64(TimeUnit::Microsecond) => ("time", PgType::Time),
        DataType::Timestamp(_, None) => ("timestamp", PgType::Timestamp),
        DataType::Timestamp(_, Some(_)) => ("timestamptz", PgType::TimestampTz),
        DataType::Interval(_) => ("interval", PgType::Interval),
        DataType::Dictionary(_, value) if value.is_string() => ("text", PgType::Text),
        _ => return None,
    })
}

/// `CREATE TABLE qualified AS` the rows of `batches`: the table is created and filled with one
/// binary COPY in one transaction, so a failure leaves no table behind.
pub async fn create_table_as(
    target: &ConnectTarget,
    schema: &str,
    name: &str,
    table_schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<u64> {
    let qualified = crate::sql::qualified_name(schema, name);
    let mut columns = Vec::new();
    let mut definitions = Vec::new();
    let mut fields = Vec::new();
    for field in table_schema.fields() {
        let (sql_type, pg_type, arrow_type) = match field.data_type() {
            DataType::Decimal128(p, s) if *p <= 38 && *s >= 0 => (
                format!("numeric({p}, {s})"),
                PgType::Numeric {
                    precision: *p,
                    scale: *s,
                },
                field.data_type().clone(),
            ),
            other => {
                let (sql_type, pg_type) = pg_type_for(other).ok_or_else(|| {
                    PostgresError::InvalidArgument(format!(
                        "CREATE TABLE {qualified} AS: column \"{}\" has type {other}, which quiver \
                         does not write to PostgreSQL",
                        field.name()
                    ))
                })?;
                let arrow_type = pg_type.arrow_type();
                (sql_type.to_string(), pg_type, arrow_type)
            }
        };
        definitions.push(format!("{} {sql_type}", quote_ident(field.name())));
        fields.push(arrow::datatypes::Field::new(field.name(), arrow_type, true));
        columns.push(PgColumn {
            name: field.name().clone(),
            pg_type,
        });
    }
    let target_schema: SchemaRef = Arc::new(arrow::datatypes::Schema::new(fields));
    TableWrite {
        target,
        qualified: &qualified,
        columns: &columns,
        schema: &target_schema,
        what: format!("creating {qualified}"),
    }
    .run(
        &format!(
            "BEGIN; CREATE TABLE {qualified} ({})",
            definitions.join(", ")
        ),
        futures::stream::iter(batches.into_iter().map(Ok)),
    )
    .await
}

/// Casts the input's columns to the table's Arrow types (an INSERT's values may be wider).
fn cast_batch(
    batch: &RecordBatch,
    schema: &SchemaRef,
    columns: &[PgColumn],
) -> Result<RecordBatch> {
    let arrays = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .zip(columns)
        .map(|((array, field), column)| {
            arrow::compute::cast(array, field.data_type())
                .map_err(|e| conversion(column, e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(Arc::clone(schema), arrays)
        .map_err(|e| PostgresError::InvalidArgument(e.to_string()))
}

impl DisplayAs for PostgresSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PostgresSink: COPY {} FROM STDIN (FORMAT binary) at {}",
            self.qualified,
            self.target.describe()
        )
    }
}

#[async_trait]
impl DataSink for PostgresSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> DFResult<u64> {
        self.write(data)
            .await
            .map_err(PostgresError::into_datafusion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::numeric_to_i128;

    #[test]
    fn numerics_round_trip_through_the_wire_format() {
        for (value, scale) in [
            (0i128, 2i8),
            (1_234_567, 2),
            (-5, 4),
            (100_000_000, 0),
            (99_999_999_999_999_999_999_999_999_999_999_999_i128, 10),
            (-1, 0),
            (120_000, 3),
        ] {
            let bytes = numeric_bytes(value, scale);
            assert_eq!(
                numeric_to_i128(&bytes, scale).unwrap(),
                value,
                "{value} scale {scale}"
            );
        }
    }

    #[test]
    fn uuids_parse() {
        assert_eq!(
            parse_uuid("00112233-4455-6677-8899-aabbccddeeff").unwrap()[15],
            0xff
        );
        assert!(parse_uuid("not a uuid").is_none());
    }
}
