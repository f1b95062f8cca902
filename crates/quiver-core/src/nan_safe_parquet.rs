//! Parquet scans that never trust float min/max statistics, which cannot speak for NaN.
//!
//! DataFusion and Arrow order floats totally: NaN sorts above every number (and a NaN with its
//! sign bit set below every number), and NaN equals NaN, as in Postgres. Parquet writers leave
//! NaN out of float min/max statistics (the format's rule; arrow-rs 59 writes no `nan_count`,
//! which a later format version adds), so those statistics bound a column's *numbers*, not its
//! values. DataFusion 55 trusts them anyway (apache/datafusion#15812): over a file of 100,000
//! doubles with every 50th a NaN, `count(*) WHERE f > 100000` was 0 instead of 2000, `max(f)`
//! 4406.35 instead of NaN, and `WHERE f = 'NaN'` found nothing — where the same data in memory
//! answered right. Worse, a file whose float column held only `5.0` and NaN had the column
//! replaced by the literal `5.0`.
//!
//! The statistics reach DataFusion by two channels, and both are cleaned here:
//!
//! * **per-file metadata** (row-group and page statistics, read when a file is opened: row-group
//!   and page pruning, "fully matched" row groups under a LIMIT, and the run-time filters of
//!   Top-K, hash joins and MIN/MAX): [`NanSafeReaderFactory`] hands DataFusion's opener a copy
//!   of each file's metadata with the min/max of every float column removed (null counts kept)
//!   and its page index made unloadable;
//! * **file-level statistics** (computed when a listing table is planned: whole-file pruning,
//!   MIN/MAX answered from statistics, constant columns, filter bounds, sort elimination across
//!   files): [`NanSafeParquetFormat`] makes their float min/max, sum and distinct count
//!   `Absent` — not `Inexact(NULL)`, which the multi-file ordering check takes as evidence.
//!
//! Integer, decimal, string and temporal columns keep every statistic, so pruning and
//! `count(*)` from metadata work as before. Every Parquet scan quiver plans goes through
//! [`NanSafeParquetFormat`]: files by path, database segments, and (registered as the
//! session's `parquet` format) `CREATE EXTERNAL TABLE` and `COPY`.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow::datatypes::{DataType, Schema, SchemaRef};
use async_trait::async_trait;
use bytes::Bytes;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{internal_datafusion_err, GetExt, Result, Statistics};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::parquet::{ParquetFormat, ParquetFormatFactory};
use datafusion::datasource::file_format::{FileFormat, FileFormatFactory, FileMeta};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{
    FileScanConfig, FileScanConfigBuilder, FileSinkConfig, FileSource, ParquetFileReaderFactory,
    ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::object_store::{ObjectMeta, ObjectStore};
use datafusion::physical_expr::LexRequirement;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::ExecutionPlan;
use futures::future::BoxFuture;
use futures::FutureExt;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::basic::{LogicalType, Type as PhysicalType};
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::statistics::Statistics as ParquetStatistics;

/// A [`ParquetFormat`] whose scans never use float min/max statistics (see the module docs).
#[derive(Debug)]
pub struct NanSafeParquetFormat {
    inner: ParquetFormat,
}

impl NanSafeParquetFormat {
    /// Wraps `inner`.
    pub fn new(inner: ParquetFormat) -> NanSafeParquetFormat {
        NanSafeParquetFormat { inner }
    }
}

#[async_trait]
impl FileFormat for NanSafeParquetFormat {
    fn get_ext(&self) -> String {
        self.inner.get_ext()
    }

    fn get_ext_with_compression(&self, compression: &FileCompressionType) -> Result<String> {
        self.inner.get_ext_with_compression(compression)
    }

    fn compression_type(&self) -> Option<FileCompressionType> {
        self.inner.compression_type()
    }

    async fn infer_schema(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        objects: &[ObjectMeta],
    ) -> Result<SchemaRef> {
        self.inner.infer_schema(state, store, objects).await
    }

    async fn infer_stats(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<Statistics> {
        let mut statistics = self
            .inner
            .infer_stats(state, store, Arc::clone(&table_schema), object)
            .await?;
        forget_float_bounds(&mut statistics, &table_schema);
        Ok(statistics)
    }

    async fn infer_ordering(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<Option<datafusion::physical_expr::LexOrdering>> {
        self.inner
            .infer_ordering(state, store, table_schema, object)
            .await
    }

    async fn infer_stats_and_ordering(
        &self,
        state: &dyn Session,
        store: &Arc<dyn ObjectStore>,
        table_schema: SchemaRef,
        object: &ObjectMeta,
    ) -> Result<FileMeta> {
        let mut meta = self
            .inner
            .infer_stats_and_ordering(state, store, Arc::clone(&table_schema), object)
            .await?;
        forget_float_bounds(&mut meta.statistics, &table_schema);
        Ok(meta)
    }

    async fn create_physical_plan(
        &self,
        state: &dyn Session,
        conf: FileScanConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // `ParquetFormat` installs its own (caching) reader factory, overwriting any set
        // before: the wrapper goes around that one, after.
        let plan = self.inner.create_physical_plan(state, conf).await?;
        nan_safe_scan(plan)
    }

    async fn create_writer_physical_plan(
        &self,
        input: Arc<dyn ExecutionPlan>,
        state: &dyn Session,
        conf: FileSinkConfig,
        order_requirements: Option<LexRequirement>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner
            .create_writer_physical_plan(input, state, conf, order_requirements)
            .await
    }

    fn file_source(&self, table_schema: TableSchema) -> Arc<dyn FileSource> {
        self.inner.file_source(table_schema)
    }
}

/// `plan` (a Parquet `DataSourceExec`) reading its files through a [`NanSafeReaderFactory`].
fn nan_safe_scan(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let config = plan
        .downcast_ref::<DataSourceExec>()
        .and_then(|exec| exec.data_source().downcast_ref::<FileScanConfig>())
        .ok_or_else(|| internal_datafusion_err!("a Parquet scan that is not a file scan"))?;
    let source = config
        .file_source()
        .downcast_ref::<ParquetSource>()
        .ok_or_else(|| internal_datafusion_err!("a Parquet scan without a ParquetSource"))?;
    let inner = source
        .parquet_file_reader_factory()
        .cloned()
        .ok_or_else(|| internal_datafusion_err!("a Parquet scan without a reader factory"))?;
    let source = source
        .clone()
        .with_parquet_file_reader_factory(Arc::new(NanSafeReaderFactory { inner }));
    let config = FileScanConfigBuilder::from(config.clone())
        .with_source(Arc::new(source))
        .build();
    Ok(DataSourceExec::from_data_source(config))
}

/// Sets the min, max, sum and distinct count of every column holding floats to `Absent`
/// (null counts and sizes stay).
fn forget_float_bounds(statistics: &mut Statistics, schema: &Schema) {
    for (column, field) in statistics.column_statistics.iter_mut().zip(schema.fields()) {
        if holds_floats(field.data_type()) {
            column.min_value = Precision::Absent;
            column.max_value = Precision::Absent;
            column.sum_value = Precision::Absent;
            column.distinct_count = Precision::Absent;
        }
    }
}

/// Whether values of `data_type` are or contain floating-point numbers.
fn holds_floats(data_type: &DataType) -> bool {
    match data_type {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => true,
        DataType::List(field)
        | DataType::LargeList(field)
        | DataType::ListView(field)
        | DataType::LargeListView(field)
        | DataType::FixedSizeList(field, _)
        | DataType::Map(field, _) => holds_floats(field.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| holds_floats(f.data_type())),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| holds_floats(f.data_type())),
        DataType::Dictionary(_, value) => holds_floats(value),
        DataType::RunEndEncoded(_, values) => holds_floats(values.data_type()),
        _ => false,
    }
}

/// The session's `parquet` format (`CREATE EXTERNAL TABLE … STORED AS PARQUET`, `COPY`):
/// DataFusion's, wrapped in [`NanSafeParquetFormat`].
#[derive(Debug, Default)]
pub struct NanSafeParquetFormatFactory {
    inner: ParquetFormatFactory,
}

impl GetExt for NanSafeParquetFormatFactory {
    fn get_ext(&self) -> String {
        self.inner.get_ext()
    }
}

impl FileFormatFactory for NanSafeParquetFormatFactory {
    fn create(
        &self,
        state: &dyn Session,
        format_options: &HashMap<String, String>,
    ) -> Result<Arc<dyn FileFormat>> {
        let format = self.inner.create(state, format_options)?;
        Ok(wrap(format))
    }

    fn default(&self) -> Arc<dyn FileFormat> {
        wrap(self.inner.default())
    }
}

/// `format` wrapped when it is a [`ParquetFormat`] (which `ParquetFormatFactory` always makes).
fn wrap(format: Arc<dyn FileFormat>) -> Arc<dyn FileFormat> {
    match format.downcast_ref::<ParquetFormat>() {
        Some(parquet) => Arc::new(NanSafeParquetFormat::new(
            ParquetFormat::default().with_options(parquet.options().clone()),
        )),
        None => format,
    }
}

/// Readers whose metadata carries no float min/max statistics and no float page index.
#[derive(Debug)]
pub struct NanSafeReaderFactory {
    inner: Arc<dyn ParquetFileReaderFactory>,
}

impl ParquetFileReaderFactory for NanSafeReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Result<Box<dyn AsyncFileReader + Send>> {
        let inner = self
            .inner
            .create_reader(partition_index, file, metadata_size_hint, metrics)?;
        Ok(Box::new(NanSafeReader { inner }))
    }
}

struct NanSafeReader {
    inner: Box<dyn AsyncFileReader + Send>,
}

impl AsyncFileReader for NanSafeReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.inner.get_bytes(range)
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        self.inner.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let metadata = self.inner.get_metadata(options).await?;
            without_float_bounds(metadata)
        }
        .boxed()
    }
}

/// `metadata` without the min/max statistics of its float columns, in every row group of the
/// file (never some: DataFusion folds the row groups that have them into file bounds), without
/// their loaded column index, and with their column index unloadable later (its offset
/// cleared). Null counts and offset indexes stay. `metadata` itself when it has no float column.
pub fn without_float_bounds(
    metadata: Arc<ParquetMetaData>,
) -> parquet::errors::Result<Arc<ParquetMetaData>> {
    let schema = metadata.file_metadata().schema_descr();
    let floats: Vec<usize> = (0..schema.num_columns())
        .filter(|&i| {
            let column = schema.column(i);
            match column.physical_type() {
                PhysicalType::FLOAT | PhysicalType::DOUBLE => true,
                PhysicalType::FIXED_LEN_BYTE_ARRAY => {
                    matches!(column.logical_type_ref(), Some(LogicalType::Float16))
                }
                _ => false,
            }
        })
        .collect();
    if floats.is_empty() {
        return Ok(metadata);
    }
    let mut builder = Arc::unwrap_or_clone(metadata).into_builder();
    let mut row_groups: Vec<RowGroupMetaData> = builder.take_row_groups();
    for row_group in &mut row_groups {
        let columns = row_group.columns_mut();
        for &i in &floats {
            let Some(column) = columns.get_mut(i) else {
                continue;
            };
            let mut cleaned = column
                .clone()
                .into_builder()
                .set_column_index_offset(None)
                .set_column_index_length(None);
            if let Some(statistics) = column.statistics() {
                cleaned = cleaned.set_statistics(without_bounds(statistics));
            }
            *column = cleaned.build()?;
        }
    }
    builder = builder.set_row_groups(row_groups);
    if let Some(mut index) = builder.take_column_index() {
        for row_group in index.iter_mut() {
            for &i in &floats {
                if let Some(entry) = row_group.get_mut(i) {
                    *entry = ColumnIndexMetaData::NONE;
                }
            }
        }
        builder = builder.set_column_index(Some(index));
    }
    Ok(Arc::new(builder.build()))
}

/// `statistics` of a float column with its null count only.
fn without_bounds(statistics: &ParquetStatistics) -> ParquetStatistics {
    let nulls = statistics.null_count_opt();
    match statistics {
        ParquetStatistics::Float(_) => ParquetStatistics::float(None, None, None, nulls, false),
        ParquetStatistics::Double(_) => ParquetStatistics::double(None, None, None, nulls, false),
        ParquetStatistics::FixedLenByteArray(_) => {
            ParquetStatistics::fixed_len_byte_array(None, None, None, nulls, false)
        }
        other => other.clone(),
    }
}
