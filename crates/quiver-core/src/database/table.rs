//! A stored table as a DataFusion [`TableProvider`]: Parquet scans and appending inserts.
//!
//! A scan reads the table's file list from the catalog at planning time and builds the same
//! plan DataFusion builds for a Parquet listing table (`ParquetFormat::create_physical_plan` over
//! a [`FileScanConfig`](datafusion::datasource::physical_plan::FileScanConfig)), so projection,
//! limit, row-group pruning, the footer cache and the physical filter pushdown all apply. Filters
//! are accepted as `Inexact`: DataFusion keeps its `FilterExec` and its filter-pushdown rule
//! moves the predicate into the Parquet scan for pruning.
//!
//! An insert is a [`DataSinkExec`] over a [`PersistentSink`], which streams the input into one
//! new data file on a blocking thread, publishes it (temp name, fsync, rename) and then commits
//! the catalog. A failing input, a failed write or a cancelled query deletes the temp file and
//! leaves the catalog as it was.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::project_schema;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::object_store::ObjectStoreExt;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;
use tokio::sync::mpsc;

use super::catalog_file::TableMeta;
use super::error::DatabaseError;
use super::segment::SegmentWriter;
use super::Database;
use crate::nan_safe_parquet::NanSafeParquetFormat;

/// A table stored in a [`Database`] directory.
///
/// Obtained from the database's schema provider; it reads the current file list at each scan,
/// so a handle stays valid across inserts (and reports [`DatabaseError::TableNotFound`] once the
/// table is dropped).
///
/// The handle holds the database weakly: logical plans keep table providers, and a view's plan
/// stored in the database would otherwise keep the database (and its directory lock) alive
/// forever. Once the database is closed, the handle reports [`DatabaseError::Closed`].
#[derive(Debug)]
pub struct PersistentTable {
    db: Weak<Database>,
    id: u64,
    name: String,
    schema: SchemaRef,
}

impl PersistentTable {
    pub(crate) fn new(db: &Arc<Database>, meta: &TableMeta) -> Self {
        PersistentTable {
            db: Arc::downgrade(db),
            id: meta.id,
            name: meta.name.clone(),
            schema: SchemaRef::clone(&meta.schema),
        }
    }

    /// The table's name, case preserved.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn database(&self) -> Result<Arc<Database>, DatabaseError> {
        self.db.upgrade().ok_or_else(|| DatabaseError::Closed {
            name: self.name.clone(),
        })
    }

    fn files(&self) -> Result<Vec<PathBuf>, DatabaseError> {
        self.database()?
            .table_files(self.id)
            .ok_or_else(|| DatabaseError::TableNotFound {
                name: self.name.clone(),
            })
    }
}

#[async_trait]
impl TableProvider for PersistentTable {
    fn schema(&self) -> SchemaRef {
        SchemaRef::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let files = self.files()?;
        if files.is_empty() {
            let projected = project_schema(&self.schema, projection)?;
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        let store_url = ObjectStoreUrl::local_filesystem();
        let store = state.runtime_env().object_store(&store_url)?;
        let mut group = Vec::with_capacity(files.len());
        for file in &files {
            let location = ObjectPath::from_absolute_path(file)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            let meta = store.head(&location).await?;
            group.push(PartitionedFile::new_from_meta(meta));
        }
        let format = NanSafeParquetFormat::new(
            ParquetFormat::default().with_options(state.table_options().parquet.clone()),
        );
        let source = format.file_source(TableSchema::from(self.schema()));
        // One group: DataFusion's `repartition_file_scans` splits it by byte range into
        // `target_partitions` partitions.
        let config = FileScanConfigBuilder::new(store_url, source)
            .with_file_group(FileGroup::new(group))
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .build();
        format.create_physical_plan(state, config).await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !matches!(insert_op, InsertOp::Append | InsertOp::Overwrite) {
            return Err(DatabaseError::UnsupportedInsert {
                table: self.name.clone(),
                op: insert_op.to_string(),
            }
            .into());
        }
        let db = self.database()?;
        db.ensure_writable(|| format!("insert into table '{}'", self.name))?;
        check_insert_schema(&self.name, &self.schema, &input.schema())?;
        let sink = PersistentSink {
            db,
            table_id: self.id,
            table: self.name.clone(),
            schema: self.schema(),
            op: insert_op,
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// The input of an insert must have the table's column names and types, in order; nullability
/// may differ (DataFusion checks NOT NULL columns row by row while executing the insert).
fn check_insert_schema(
    table: &str,
    expected: &Schema,
    input: &Schema,
) -> Result<(), DatabaseError> {
    let mismatch = |message: String| DatabaseError::SchemaMismatch {
        table: table.to_string(),
        message,
    };
    if expected.fields().len() != input.fields().len() {
        return Err(mismatch(format!(
            "the table has {} columns but the inserted rows have {}",
            expected.fields().len(),
            input.fields().len()
        )));
    }
    for (position, (want, got)) in expected.fields().iter().zip(input.fields()).enumerate() {
        if want.name() != got.name() {
            return Err(mismatch(format!(
                "column {} is '{}' in the table but '{}' in the inserted rows",
                position + 1,
                want.name(),
                got.name()
            )));
        }
        if !want.data_type().equals_datatype(got.data_type()) {
            return Err(mismatch(format!(
                "column '{}' has type {} in the table but {} in the inserted rows",
                want.name(),
                want.data_type(),
                got.data_type()
            )));
        }
    }
    Ok(())
}

/// Streams an insert's rows into one new data file of a table and commits it.
#[derive(Debug)]
pub(crate) struct PersistentSink {
    db: Arc<Database>,
    table_id: u64,
    table: String,
    schema: SchemaRef,
    op: InsertOp,
}

/// What the async side of an insert tells the blocking writer.
enum WriterMessage {
    Batch(RecordBatch),
    /// All rows were sent: publish the file. Without it (the sender is dropped) the writer
    /// discards the file, which is what happens on an input error or a cancelled query.
    Finish,
}

impl PersistentSink {
    async fn write(&self, mut data: SendableRecordBatchStream) -> Result<u64, DatabaseError> {
        let (segment, path) = self.db.reserve_segment(self.table_id, &self.table)?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| DatabaseError::Writer {
            table: self.table.clone(),
            message: e.to_string(),
        })?;
        // Two batches in flight: encoding overlaps with producing, memory stays bounded.
        let (sender, receiver) = mpsc::channel(2);
        let schema = SchemaRef::clone(&self.schema);
        let table = self.table.clone();
        let writer = runtime.spawn_blocking(move || write_segment(path, schema, &table, receiver));

        let mut input_error = None;
        while let Some(item) = data.next().await {
            match item {
                Ok(batch) => {
                    if sender.send(WriterMessage::Batch(batch)).await.is_err() {
                        break; // The writer failed; its error is reported below.
                    }
                }
                Err(e) => {
                    input_error = Some(e);
                    break;
                }
            }
        }
        if input_error.is_none() {
            // If the writer already failed this send fails too; its error is reported below.
            let _ = sender.send(WriterMessage::Finish).await;
        }
        drop(sender);
        // Awaited even after an input error, so the temp file is gone when the statement fails.
        let written = writer.await.map_err(|e| DatabaseError::Writer {
            table: self.table.clone(),
            message: e.to_string(),
        })?;
        if let Some(e) = input_error {
            return Err(DatabaseError::DataFusion(e));
        }
        let rows = written?;
        // The commit fsyncs; keep it off the async workers too.
        let db = Arc::clone(&self.db);
        let (table_id, table, op) = (self.table_id, self.table.clone(), self.op);
        runtime
            .spawn_blocking(move || db.commit_segment(table_id, &table, &segment, rows, op))
            .await
            .map_err(|e| DatabaseError::Writer {
                table: self.table.clone(),
                message: e.to_string(),
            })?
    }
}

/// The blocking half of an insert: writes what arrives on `receiver` to a new data file.
fn write_segment(
    path: PathBuf,
    schema: SchemaRef,
    table: &str,
    mut receiver: mpsc::Receiver<WriterMessage>,
) -> Result<Option<u64>, DatabaseError> {
    let mut writer = SegmentWriter::create(path, schema, table)?;
    loop {
        match receiver.blocking_recv() {
            Some(WriterMessage::Batch(batch)) => writer.write(&batch)?,
            Some(WriterMessage::Finish) => return writer.finish(),
            // Dropping `writer` deletes the temp file.
            None => {
                return Err(DatabaseError::Writer {
                    table: table.to_string(),
                    message: "the insert stopped before all rows were produced".into(),
                })
            }
        }
    }
}

impl DisplayAs for PersistentSink {
    fn fmt_as(
        &self,
        _format: DisplayFormatType,
        f: &mut std::fmt::Formatter<'_>,
    ) -> std::fmt::Result {
        write!(
            f,
            "PersistentTableSink: table={}, op={}",
            self.table, self.op
        )
    }
}

#[async_trait]
impl DataSink for PersistentSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        Ok(self.write(data).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{files_under, query, query_err, session};
    use super::super::AccessMode;
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field};
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

    fn int_batch(schema: &SchemaRef, values: Vec<i64>) -> RecordBatch {
        RecordBatch::try_new(
            SchemaRef::clone(schema),
            vec![Arc::new(Int64Array::from(values))],
        )
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn failing_input_stream_leaves_previous_rows_and_no_files() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE t AS SELECT CAST(1 AS BIGINT) AS a").await;
        let files_before = files_under(tmp.path());
        let catalog_before = std::fs::read(tmp.path().join("catalog.json")).unwrap();

        let provider = db.schema_provider().table("t").await.unwrap().unwrap();
        let table = provider.downcast_ref::<PersistentTable>().unwrap();
        let sink = PersistentSink {
            db: Arc::clone(&db),
            table_id: table.id,
            table: table.name.clone(),
            schema: table.schema(),
            op: InsertOp::Append,
        };
        // Two good batches reach the file, then the input fails.
        let schema = table.schema();
        let items = vec![
            Ok(int_batch(&schema, vec![2, 3])),
            Ok(int_batch(&schema, vec![4])),
            Err(DataFusionError::Execution("input failed half-way".into())),
            Ok(int_batch(&schema, vec![5])),
        ];
        let stream = RecordBatchStreamAdapter::new(schema, futures::stream::iter(items));
        let error = sink
            .write_all(Box::pin(stream), &ctx.task_ctx())
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("input failed half-way"),
            "{error}"
        );

        assert_eq!(files_under(tmp.path()), files_before);
        assert_eq!(
            std::fs::read(tmp.path().join("catalog.json")).unwrap(),
            catalog_before
        );
        assert_eq!(query(&ctx, "SELECT a FROM t").await, vec!["1"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn runtime_error_in_insert_select_keeps_previous_state() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            query(&ctx, "CREATE TABLE nums (n INT)").await;
            query(&ctx, "INSERT INTO nums VALUES (1), (2)").await;
            query(
                &ctx,
                "CREATE TABLE src AS SELECT * FROM (VALUES ('3'), ('4'), ('x')) v(s)",
            )
            .await;
            let files_before = files_under(tmp.path());
            let error = query_err(&ctx, "INSERT INTO nums SELECT CAST(s AS INT) FROM src").await;
            assert!(error.contains('x'), "{error}");
            assert_eq!(files_under(tmp.path()), files_before);
            assert_eq!(
                query(&ctx, "SELECT n FROM nums ORDER BY n").await,
                vec!["1", "2"]
            );
        }
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        assert_eq!(
            query(&ctx, "SELECT n FROM nums ORDER BY n").await,
            vec!["1", "2"]
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn insert_overwrite_replaces_the_files() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE t (a BIGINT)").await;
        query(&ctx, "INSERT INTO t VALUES (1), (2)").await;
        query(&ctx, "INSERT INTO t VALUES (3)").await;
        assert_eq!(files_under(&tmp.path().join("data")).len(), 2);
        assert_eq!(
            query(&ctx, "INSERT OVERWRITE t VALUES (9)").await,
            vec!["1"]
        );
        assert_eq!(query(&ctx, "SELECT a FROM t").await, vec!["9"]);
        assert_eq!(files_under(&tmp.path().join("data")).len(), 1);
        let catalog = std::fs::read_to_string(tmp.path().join("catalog.json")).unwrap();
        assert!(catalog.contains("\"rows\": 1"), "{catalog}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn empty_insert_writes_no_file() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE t AS SELECT 1 AS a").await;
        let before = files_under(tmp.path());
        assert_eq!(
            query(&ctx, "INSERT INTO t SELECT a FROM t WHERE a > 5").await,
            vec!["0"]
        );
        assert_eq!(files_under(tmp.path()), before);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn not_null_column_rejects_null_and_keeps_state() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE t (a INT NOT NULL)").await;
        query(&ctx, "INSERT INTO t VALUES (1)").await;
        let before = files_under(tmp.path());
        query_err(&ctx, "INSERT INTO t VALUES (NULL)").await;
        assert_eq!(files_under(tmp.path()), before);
        assert_eq!(query(&ctx, "SELECT a FROM t").await, vec!["1"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn dropped_table_handle_reports_not_found() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE t AS SELECT 1 AS a").await;
        let provider = db.schema_provider().table("t").await.unwrap().unwrap();
        query(&ctx, "DROP TABLE t").await;
        let error = provider
            .scan(&ctx.state(), None, &[], None)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("table 't' does not exist"),
            "{error}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_inserts_all_commit() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            query(&ctx, "CREATE TABLE t (a BIGINT)").await;
            let inserts: Vec<_> = (0..8)
                .map(|i| {
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        query(&ctx, &format!("INSERT INTO t VALUES ({i}), ({i})")).await
                    })
                })
                .collect();
            for insert in inserts {
                assert_eq!(insert.await.unwrap(), vec!["2"]);
            }
        }
        let db = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap();
        let ctx = session(&db);
        assert_eq!(
            query(&ctx, "SELECT count(*), count(DISTINCT a) FROM t").await,
            vec!["16|8"]
        );
        assert_eq!(files_under(&tmp.path().join("data")).len(), 8);
        let catalog = std::fs::read_to_string(tmp.path().join("catalog.json")).unwrap();
        assert!(catalog.contains("\"rows\": 16"), "{catalog}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn scan_is_a_parquet_scan_with_projection_filter_and_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE t AS SELECT 1 AS a, 'x' AS b, 2.5 AS c").await;
        query(&ctx, "INSERT INTO t VALUES (7, 'y', 1.0)").await;
        let plan = query(&ctx, "EXPLAIN SELECT b FROM t WHERE a > 5")
            .await
            .join("\n");
        assert!(plan.contains("file_type=parquet"), "{plan}");
        assert!(plan.contains("predicate=a@0 > 5"), "{plan}");
        assert!(
            plan.contains("projection=[a, b]") || plan.contains("projection=[b, a]"),
            "{plan}"
        );
        let plan = query(&ctx, "EXPLAIN SELECT * FROM t LIMIT 1")
            .await
            .join("\n");
        assert!(plan.contains("limit=1"), "{plan}");
        assert_eq!(query(&ctx, "SELECT b FROM t WHERE a > 5").await, vec!["y"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn handle_outliving_its_database_reports_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE t AS SELECT 1 AS a").await;
        let provider = db.schema_provider().table("t").await.unwrap().unwrap();
        drop(ctx);
        drop(db);
        // A session that does not hold the database (a session's state would, via its catalog).
        let state = datafusion::prelude::SessionContext::new().state();
        // The handle does not keep the directory locked...
        let reopened = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        // ...and says why it cannot scan.
        let error = provider.scan(&state, None, &[], None).await.unwrap_err();
        assert!(error.to_string().contains("has been closed"), "{error}");
        drop(reopened);
    }

    #[test]
    fn insert_schema_check_names_the_column() {
        let table = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
        ]);
        let nullable_ok = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Utf8, true),
        ]);
        check_insert_schema("t", &table, &nullable_ok).unwrap();

        let wrong_type = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int32, true),
        ]);
        let error = check_insert_schema("t", &table, &wrong_type).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot insert into table 't': column 'b' has type Utf8 in the table but Int32 in \
             the inserted rows"
        );
        let too_few = Schema::new(vec![Field::new("a", DataType::Int64, false)]);
        let error = check_insert_schema("t", &table, &too_few).unwrap_err();
        assert!(error.to_string().contains("has 2 columns"), "{error}");
    }
}
