//! Writing one immutable Parquet data file ("segment") of a table, crash-safely.
//!
//! A segment is written as `<n>.parquet.tmp`, fsynced and renamed to `<n>.parquet`; only then may
//! the caller commit a catalog that lists it. Until [`SegmentWriter::finish`] succeeds, dropping
//! the writer (on an error, or because the query was cancelled) deletes the temp file, so a
//! failed write leaves nothing behind; a crash leaves at most a `.tmp` file or an unreferenced
//! `.parquet` file, both removed by the next read-write open.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::catalog_file::sync_dir;
use super::error::DatabaseError;

/// Writes the batches of one data file; see the module documentation for the protocol.
pub(crate) struct SegmentWriter {
    final_path: PathBuf,
    tmp_path: PathBuf,
    /// `None` once closed (finished or failed).
    writer: Option<ArrowWriter<BufWriter<File>>>,
    schema: SchemaRef,
    table: String,
    rows: u64,
    /// Set once the file has been renamed into place: from then on it is not ours to delete.
    published: bool,
}

impl std::fmt::Debug for SegmentWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentWriter")
            .field("final_path", &self.final_path)
            .field("table", &self.table)
            .field("rows", &self.rows)
            .finish()
    }
}

impl SegmentWriter {
    /// Creates the temp file of the segment that will be published at `final_path`, creating
    /// the table's directory if needed.
    pub fn create(
        final_path: PathBuf,
        schema: SchemaRef,
        table: &str,
    ) -> Result<Self, DatabaseError> {
        let tmp_path = tmp_path_of(&final_path);
        if let Some(parent) = final_path.parent() {
            if !parent.is_dir() {
                fs::create_dir_all(parent).map_err(DatabaseError::io(parent))?;
                // Make the new directory entry itself durable before files in it are relied on.
                if let Some(grandparent) = parent.parent() {
                    sync_dir(grandparent)?;
                }
            }
        }
        let file = File::create(&tmp_path).map_err(DatabaseError::io(&tmp_path))?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let mut segment = SegmentWriter {
            final_path,
            tmp_path,
            writer: None,
            schema: SchemaRef::clone(&schema),
            table: table.to_string(),
            rows: 0,
            published: false,
        };
        // On error `segment` is dropped here, which deletes the temp file just created.
        let writer = ArrowWriter::try_new(BufWriter::new(file), schema, Some(properties))
            .map_err(|source| segment.parquet_error(source))?;
        segment.writer = Some(writer);
        Ok(segment)
    }

    /// Appends a batch. Its columns must have the table's types; field nullability and metadata
    /// are taken from the table schema, so inputs that differ only there are accepted.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), DatabaseError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = RecordBatch::try_new_with_options(
            SchemaRef::clone(&self.schema),
            batch.columns().to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )
        .map_err(|source| DatabaseError::Arrow {
            context: format!("converting rows for table '{}'", self.table),
            source,
        })?;
        let Some(writer) = self.writer.as_mut() else {
            return Err(self.closed_error());
        };
        if let Err(source) = writer.write(&batch) {
            return Err(self.parquet_error(source));
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Closes the file, fsyncs it and renames it into place.
    ///
    /// Returns the number of rows written, or `None` (and deletes the temp file) when no rows
    /// were written: an empty segment is never published.
    pub fn finish(mut self) -> Result<Option<u64>, DatabaseError> {
        let Some(writer) = self.writer.take() else {
            return Err(self.closed_error());
        };
        if self.rows == 0 {
            return Ok(None); // Drop removes the temp file.
        }
        let buffered = writer
            .into_inner()
            .map_err(|source| self.parquet_error(source))?;
        let file = buffered
            .into_inner()
            .map_err(|e| DatabaseError::io(&self.tmp_path)(e.into_error()))?;
        file.sync_all().map_err(DatabaseError::io(&self.tmp_path))?;
        drop(file);
        fs::rename(&self.tmp_path, &self.final_path)
            .map_err(DatabaseError::io(&self.final_path))?;
        self.published = true;
        // The segment is not referenced yet, so if this fails the caller deletes it and nothing
        // is lost.
        if let Some(parent) = self.final_path.parent() {
            sync_dir(parent)?;
        }
        Ok(Some(self.rows))
    }

    fn parquet_error(&self, source: parquet::errors::ParquetError) -> DatabaseError {
        DatabaseError::Parquet {
            path: self.tmp_path.clone(),
            source,
        }
    }

    fn closed_error(&self) -> DatabaseError {
        DatabaseError::Writer {
            table: self.table.clone(),
            message: format!("{} was already closed", self.tmp_path.display()),
        }
    }
}

impl Drop for SegmentWriter {
    fn drop(&mut self) {
        if !self.published {
            // Close the handle first (Windows cannot delete an open file). Errors are ignored:
            // a leftover temp file is removed at the next read-write open.
            drop(self.writer.take());
            let _ = fs::remove_file(&self.tmp_path);
        }
    }
}

/// Best-effort deletion of data files no longer referenced by the committed catalog; whatever
/// fails here is removed by the next read-write open.
pub(crate) fn remove_files(paths: &[PathBuf]) {
    for path in paths {
        let _ = fs::remove_file(path);
    }
}

/// `x/7.parquet` → `x/7.parquet.tmp`.
fn tmp_path_of(final_path: &Path) -> PathBuf {
    let mut name = final_path.as_os_str().to_os_string();
    name.push(".tmp");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("b", DataType::Utf8, true),
        ]))
    }

    fn batch() -> RecordBatch {
        // Nullable fields in the input: the writer takes nullability from the table schema.
        let input_schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            input_schema,
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("x"), None])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn finished_segment_is_published_and_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data").join("t1").join("2.parquet");
        let mut writer = SegmentWriter::create(path.clone(), schema(), "t").unwrap();
        writer.write(&batch()).unwrap();
        writer.write(&batch()).unwrap();
        assert_eq!(writer.finish().unwrap(), Some(4));
        assert!(!tmp_path_of(&path).exists());

        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 4);
    }

    #[test]
    fn dropped_writer_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("3.parquet");
        let mut writer = SegmentWriter::create(path.clone(), schema(), "t").unwrap();
        writer.write(&batch()).unwrap();
        assert!(tmp_path_of(&path).exists());
        drop(writer);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn empty_segment_is_not_published() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("4.parquet");
        let writer = SegmentWriter::create(path, schema(), "t").unwrap();
        assert_eq!(writer.finish().unwrap(), None);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn mistyped_batch_is_rejected_naming_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("5.parquet");
        let mut writer = SegmentWriter::create(path, schema(), "My Table").unwrap();
        let wrong = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("a", DataType::Utf8, true),
                Field::new("b", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(StringArray::from(vec!["1"])),
                Arc::new(StringArray::from(vec!["1"])),
            ],
        )
        .unwrap();
        let error = writer.write(&wrong).unwrap_err();
        assert!(error.to_string().contains("'My Table'"), "{error}");
    }
}
