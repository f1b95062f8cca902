//! `Parquet` and `Arrow` (IPC stream): binary formats written with the arrow-rs writers.
//!
//! Parquet is zstd-compressed with row groups of at most 1 Mi rows; the writer keeps one row group
//! in memory before encoding it, as every Parquet writer must. Arrow is the IPC *stream* format
//! (what ClickHouse calls `ArrowStream` and `pyarrow.ipc.open_stream` reads), uncompressed so that
//! readers can map its buffers without decoding.
//!
//! A batch whose schema differs from the writer's only in field names, nullability or metadata is
//! relabelled with the writer's schema, so the file describes its data consistently.

use std::io::{BufWriter, Write};

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::{check_columns, BatchWriter, FormatError, OutputFormat, QueryStats};

/// The most rows in one Parquet row group.
const ROW_GROUP_ROWS: usize = 1024 * 1024;

/// Gives `batch` the writer's `schema` when it differs (arrow's writers expect one schema).
fn with_writer_schema(
    format: OutputFormat,
    schema: &SchemaRef,
    batch: &RecordBatch,
) -> Result<RecordBatch, FormatError> {
    check_columns(format, schema, batch)?;
    if batch.schema_ref() == schema {
        return Ok(batch.clone());
    }
    Ok(RecordBatch::try_new(
        schema.clone(),
        batch.columns().to_vec(),
    )?)
}

/// Writes a Parquet file.
pub(crate) struct ParquetWriter {
    schema: SchemaRef,
    writer: ArrowWriter<Box<dyn Write + Send>>,
}

impl ParquetWriter {
    pub(crate) fn try_new(
        schema: SchemaRef,
        out: Box<dyn Write + Send>,
    ) -> Result<Self, FormatError> {
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .build();
        let writer = ArrowWriter::try_new(out, schema.clone(), Some(properties))?;
        Ok(Self { schema, writer })
    }
}

impl BatchWriter for ParquetWriter {
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        let batch = with_writer_schema(OutputFormat::Parquet, &self.schema, batch)?;
        self.writer.write(&batch)?;
        Ok(())
    }

    fn finish(self: Box<Self>, _stats: &QueryStats) -> Result<(), FormatError> {
        // `into_inner` writes the last row group and the footer and hands back the output.
        let mut out = self.writer.into_inner()?;
        out.flush()?;
        Ok(())
    }
}

/// Writes the Arrow IPC stream format.
pub(crate) struct ArrowStreamWriter {
    schema: SchemaRef,
    writer: StreamWriter<BufWriter<Box<dyn Write + Send>>>,
}

impl ArrowStreamWriter {
    pub(crate) fn try_new(
        schema: SchemaRef,
        out: Box<dyn Write + Send>,
    ) -> Result<Self, FormatError> {
        let writer = StreamWriter::try_new_buffered(out, &schema)?;
        Ok(Self { schema, writer })
    }
}

impl BatchWriter for ArrowStreamWriter {
    fn write_batch(&mut self, batch: &RecordBatch) -> Result<(), FormatError> {
        let batch = with_writer_schema(OutputFormat::Arrow, &self.schema, batch)?;
        self.writer.write(&batch)?;
        Ok(())
    }

    fn finish(self: Box<Self>, _stats: &QueryStats) -> Result<(), FormatError> {
        // `into_inner` writes the end-of-stream marker.
        let mut out = self.writer.into_inner()?;
        out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};
    use arrow::compute::concat_batches;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::ipc::reader::StreamReader;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::basic::Compression;

    use super::super::test_data::{numbers, sample};
    use super::super::{format_batches, FormatOptions};
    use super::*;

    fn write(format: OutputFormat, schema: SchemaRef, batches: &[RecordBatch]) -> Vec<u8> {
        format_batches(
            format,
            schema,
            batches,
            &FormatOptions::default(),
            &QueryStats::default(),
        )
        .unwrap()
    }

    /// Parquet readers need random access: go through a temporary file.
    fn into_file(bytes: &[u8]) -> std::fs::File {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        file
    }

    #[test]
    fn parquet_round_trips_with_zstd() {
        let (schema, batch) = sample();
        let bytes = write(
            OutputFormat::Parquet,
            schema.clone(),
            &[batch.clone(), batch.clone()],
        );
        let builder = ParquetRecordBatchReaderBuilder::try_new(into_file(&bytes)).unwrap();
        let column = builder.metadata().row_group(0).column(0);
        assert!(matches!(column.compression(), Compression::ZSTD(_)));
        let read: Vec<RecordBatch> = builder.build().unwrap().map(|b| b.unwrap()).collect();
        let read = concat_batches(&read[0].schema(), &read).unwrap();
        let expected = concat_batches(&schema, &[batch.clone(), batch]).unwrap();
        assert_eq!(read.columns(), expected.columns());
        assert_eq!(read.schema().fields(), schema.fields());
    }

    #[test]
    fn parquet_without_rows_is_a_valid_file() {
        let (schema, _) = sample();
        let bytes = write(OutputFormat::Parquet, schema.clone(), &[]);
        let builder = ParquetRecordBatchReaderBuilder::try_new(into_file(&bytes)).unwrap();
        assert_eq!(builder.schema().fields(), schema.fields());
        assert_eq!(builder.metadata().file_metadata().num_rows(), 0);
    }

    #[test]
    fn arrow_stream_round_trips() {
        let (schema, batch) = sample();
        let bytes = write(
            OutputFormat::Arrow,
            schema.clone(),
            &[batch.clone(), batch.slice(1, 2)],
        );
        let reader = StreamReader::try_new(Cursor::new(bytes), None).unwrap();
        assert_eq!(reader.schema(), schema);
        let read: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        assert_eq!(read, vec![batch.clone(), batch.slice(1, 2)]);
    }

    #[test]
    fn batches_are_relabelled_with_the_writer_schema() {
        let (_, batch) = numbers(0..3);
        let nullable = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let bytes = write(OutputFormat::Arrow, nullable.clone(), &[batch]);
        let reader = StreamReader::try_new(Cursor::new(bytes), None).unwrap();
        let read: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        assert_eq!(read[0].schema(), nullable);
        let expected: ArrayRef = Arc::new(Int64Array::from(vec![0, 1, 2]));
        assert_eq!(read[0].column(0), &expected);
    }
}
