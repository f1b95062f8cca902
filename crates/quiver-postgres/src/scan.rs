//! The Postgres table as a DataFusion `TableProvider`, and the scan that reads it.
//!
//! Planning (`scan`) decides the tasks — one `COPY (SELECT …) TO STDOUT (FORMAT binary)` each:
//! ctid page ranges of `pages_per_task` pages (the last open-ended, since the size in pages is
//! read before the snapshot is taken), one task per small heap, partition by partition for a
//! partitioned table, one task for a view, a query, a LIMIT, or a filter the Postgres planner
//! would answer from an index. Execution deals the tasks round-robin to
//! `min(connections, tasks)` output partitions; each partition reads its tasks one after the
//! other on one connection of the query's [`SnapshotPool`], decoding straight into Arrow.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use bytes::{Buf, BytesMut};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::TableType;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, Statistics,
};
use futures::StreamExt;
use tokio::sync::mpsc::Sender;

use crate::binary_copy::{CopyFormatError, CopyParser};
use crate::catalog::{
    describe_query, describe_relation, heaps, planner_choice, server_version, Relation,
};
use crate::connection::ConnectTarget;
use crate::copy_in::PostgresSink;
use crate::decode::BatchDecoder;
use crate::error::{PostgresError, Result};
use crate::snapshot::{snapshot_for_query, QueryKey, SnapshotPool};
use crate::sql::{filter_to_sql, quote_ident};
use crate::types::{PgColumn, PgType};

/// Default pages per ctid task (DuckDB's choice: about 8 MB of heap per task).
pub const DEFAULT_PAGES_PER_TASK: u64 = 1000;

/// How a scan may read.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Heap pages per ctid-range task.
    pub pages_per_task: u64,
    /// Connections (and output partitions) per scan; `None` is the session's thread count.
    pub connections: Option<usize>,
    /// Whether filters are pushed into Postgres.
    pub filter_pushdown: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            pages_per_task: DEFAULT_PAGES_PER_TASK,
            connections: None,
            filter_pushdown: true,
        }
    }
}

/// What a [`PostgresTable`] reads.
#[derive(Debug, Clone)]
pub enum ScanSource {
    /// A table, partitioned table, view, materialized view or foreign table.
    Relation(Relation),
    /// The result of a query the user wrote, run as a subquery.
    Query(String),
}

/// A Postgres relation or query result as a DataFusion table.
#[derive(Debug)]
pub struct PostgresTable {
    target: ConnectTarget,
    source: ScanSource,
    columns: Vec<PgColumn>,
    schema: SchemaRef,
    options: ScanOptions,
    /// Whether INSERT may write (tables of an ATTACH without READ_ONLY).
    writable: bool,
}

impl PostgresTable {
    /// Describes `schema.name` on the server at `target`.
    pub async fn for_relation(
        target: ConnectTarget,
        schema: &str,
        name: &str,
        options: ScanOptions,
    ) -> Result<Self> {
        let client = target.connect().await?;
        let relation = describe_relation(&client, schema, name).await?;
        Ok(Self::new(target, ScanSource::Relation(relation), options))
    }

    /// Describes the result of `sql` on the server at `target`.
    pub async fn for_query(target: ConnectTarget, sql: &str, options: ScanOptions) -> Result<Self> {
        let sql = sql.trim().trim_end_matches(';').trim_end().to_string();
        if sql.is_empty() {
            return Err(PostgresError::InvalidArgument(
                "postgres_query: the query is empty".into(),
            ));
        }
        let client = target.connect().await?;
        let columns = describe_query(&client, &sql).await?;
        let mut table = Self::new(target, ScanSource::Query(sql), options);
        table.set_columns(columns);
        Ok(table)
    }

    /// A table over an already described relation.
    pub fn new(target: ConnectTarget, source: ScanSource, options: ScanOptions) -> Self {
        let columns = match &source {
            ScanSource::Relation(relation) => relation.columns.clone(),
            ScanSource::Query(_) => Vec::new(),
        };
        let mut table = PostgresTable {
            target,
            source,
            columns: Vec::new(),
            schema: Arc::new(Schema::empty()),
            options,
            writable: false,
        };
        table.set_columns(columns);
        table
    }

    fn set_columns(&mut self, columns: Vec<PgColumn>) {
        self.schema = Arc::new(Schema::new(
            columns.iter().map(PgColumn::field).collect::<Vec<_>>(),
        ));
        self.columns = columns;
    }

    /// Allows (or refuses) INSERT into this table.
    pub fn with_writes(mut self, writable: bool) -> Self {
        self.writable = writable;
        self
    }

    /// The Postgres columns, in order.
    pub fn columns(&self) -> &[PgColumn] {
        &self.columns
    }

    /// The relation read, if this is not a query.
    pub fn relation(&self) -> Option<&Relation> {
        match &self.source {
            ScanSource::Relation(relation) => Some(relation),
            ScanSource::Query(_) => None,
        }
    }

    /// The connection target.
    pub fn target(&self) -> &ConnectTarget {
        &self.target
    }

    fn describe_source(&self) -> String {
        match &self.source {
            ScanSource::Relation(relation) => relation.qualified(),
            ScanSource::Query(_) => "query".into(),
        }
    }

    /// Splits the scan into COPY tasks and estimates its rows. The catalog questions (server
    /// version, heap sizes, the planner's view of a pushed filter) go out pipelined on one
    /// connection of the query's snapshot pool, which then stays in the pool to read.
    async fn plan_tasks(
        &self,
        pool: &Arc<SnapshotPool>,
        select_list: &str,
        conditions: &[String],
        limit: Option<usize>,
    ) -> Result<TaskPlan> {
        let limit_sql = limit.map(|n| format!(" LIMIT {n}")).unwrap_or_default();
        let where_sql = |extra: Option<String>| -> String {
            let all: Vec<String> = extra
                .into_iter()
                .chain(conditions.iter().cloned())
                .collect();
            if all.is_empty() {
                String::new()
            } else {
                format!(" WHERE {}", all.join(" AND "))
            }
        };
        let copy = |from: &str, extra: Option<String>| {
            format!(
                "COPY (SELECT {select_list} FROM {from}{}{limit_sql}) TO STDOUT (FORMAT binary)",
                where_sql(extra)
            )
        };
        let single = |sql: String, mode: ScanMode| TaskPlan {
            tasks: vec![sql],
            mode,
            rows: None,
            table_rows: None,
        };
        let relation = match &self.source {
            ScanSource::Query(sql) => {
                let from = format!("({sql}) AS quiver_query");
                return Ok(single(copy(&from, None), ScanMode::Single("a query")));
            }
            ScanSource::Relation(relation) => relation,
        };
        let from = relation.qualified();
        if limit.is_some() {
            return Ok(single(copy(&from, None), ScanMode::Single("LIMIT")));
        }
        if !(relation.kind.has_pages()
            || relation.kind == crate::catalog::RelationKind::Partitioned)
        {
            return Ok(single(
                copy(&from, None),
                ScanMode::Single(relation.kind.describe()),
            ));
        }
        let connection = pool.acquire().await?;
        let client = connection.client()?;
        let select = format!("SELECT {select_list} FROM {from}{}", where_sql(None));
        let choice = async {
            if conditions.is_empty() {
                Ok(None)
            } else {
                planner_choice(client, &select).await.map(Some)
            }
        };
        let (version, heaps, choice) =
            futures::try_join!(server_version(client), heaps(client, relation), choice)?;
        drop(connection);
        let table_rows = heaps
            .iter()
            .map(|heap| heap.tuples)
            .sum::<Option<f64>>()
            .filter(|_| !heaps.is_empty());
        let rows = match &choice {
            Some(choice) => Some(choice.rows).filter(|rows| rows.is_finite()),
            None => table_rows,
        };
        let estimated = |sql: String, mode: ScanMode| TaskPlan {
            tasks: vec![sql],
            mode,
            rows,
            table_rows,
        };
        if version < 140_000 {
            // TID range scans arrived in PostgreSQL 14; before, every range would scan it all.
            return Ok(estimated(
                copy(&from, None),
                ScanMode::Single("server older than PostgreSQL 14"),
            ));
        }
        if let Some(choice) = choice {
            if choice.uses_index() && relation.kind.has_pages() {
                return Ok(estimated(
                    copy(&from, None),
                    ScanMode::Index {
                        node: choice.node,
                        rows: choice.rows,
                    },
                ));
            }
        }
        let per_task = self.options.pages_per_task.max(1);
        let mut tasks = Vec::new();
        for heap in &heaps {
            if !heap.kind.has_pages() || heap.pages <= per_task {
                tasks.push(copy(&heap.qualified, None));
                continue;
            }
            let mut start = 0;
            while start < heap.pages {
                let end = start + per_task;
                let range = if end >= heap.pages {
                    // Open-ended: the table may have grown since its size was read.
                    format!("ctid >= '({start},0)'::tid")
                } else {
                    format!("ctid >= '({start},0)'::tid AND ctid < '({end},0)'::tid")
                };
                tasks.push(copy(&heap.qualified, Some(range)));
                start = end;
            }
        }
        if tasks.is_empty() {
            // A partitioned table without partitions.
            tasks.push(copy(&from, None));
        }
        Ok(TaskPlan {
            tasks,
            mode: ScanMode::CtidRanges {
                heaps: heaps.len(),
                pages_per_task: per_task,
            },
            rows,
            table_rows,
        })
    }

    /// DataFusion's view of the scan's output: the row estimate of [`TaskPlan`], each column's
    /// NULL fraction and distinct count from `pg_stats`, and a byte size from the Arrow widths.
    /// Its join selection puts the smaller side on the build side and joins small inputs
    /// without repartitioning only when it has these; without them it keeps the SQL's order,
    /// which in TPC-H builds hash tables of all of lineitem.
    fn statistics(&self, projection: &[usize], plan: &TaskPlan) -> Statistics {
        let schema = Schema::new(
            projection
                .iter()
                .filter_map(|i| self.columns.get(*i))
                .map(PgColumn::field)
                .collect::<Vec<_>>(),
        );
        let mut statistics = Statistics::new_unknown(&schema);
        let Some(rows) = plan.rows.filter(|rows| *rows >= 0.0) else {
            return statistics;
        };
        let estimates = self
            .relation()
            .map(|relation| relation.estimates.as_slice())
            .unwrap_or_default();
        let mut width = 0.0;
        for (column, index) in statistics.column_statistics.iter_mut().zip(projection) {
            let estimate = estimates.get(*index).copied().unwrap_or_default();
            let Some(pg_column) = self.columns.get(*index) else {
                continue;
            };
            let column_width = arrow_width(&pg_column.pg_type, estimate.avg_width);
            width += column_width;
            column.byte_size = Precision::Inexact((column_width * rows) as usize);
            if let Some(null_frac) = estimate.null_frac {
                column.null_count = Precision::Inexact((null_frac * rows) as usize);
            }
            let table_rows = plan.table_rows.unwrap_or(rows);
            if let Some(distinct) = estimate.distinct(table_rows) {
                column.distinct_count = Precision::Inexact(distinct.min(rows.max(1.0)) as usize);
            }
        }
        statistics.num_rows = Precision::Inexact(rows as usize);
        statistics.total_byte_size = Precision::Inexact((width * rows) as usize);
        statistics
    }
}

/// The tasks of one scan and what the server estimates it returns.
#[derive(Debug)]
struct TaskPlan {
    tasks: Vec<String>,
    mode: ScanMode,
    /// Rows the scan returns: the planner's estimate under the pushed filter, else the
    /// table's `reltuples`; `None` when unknown (views, queries, LIMIT, never analyzed).
    rows: Option<f64>,
    /// Rows in the whole relation (`reltuples`), which Postgres's negative `n_distinct` scales.
    table_rows: Option<f64>,
}

/// Bytes per value in Arrow: the fixed width, or for variable-width types the average from
/// `pg_stats` (else a guess) plus the 4-byte offset.
fn arrow_width(pg_type: &PgType, avg_width: Option<i32>) -> f64 {
    match pg_type {
        PgType::Bool => 1.0,
        PgType::Int2 => 2.0,
        PgType::Int4 | PgType::Float4 | PgType::Date => 4.0,
        PgType::Int8 | PgType::Float8 | PgType::Time | PgType::Timestamp | PgType::TimestampTz => {
            8.0
        }
        PgType::Numeric { .. } | PgType::Interval => 16.0,
        PgType::Enum => 4.0,
        _ => f64::from(avg_width.unwrap_or(32).max(0)) + 4.0,
    }
}

/// How a scan was split, for EXPLAIN.
#[derive(Debug, Clone)]
pub enum ScanMode {
    /// ctid page ranges over one or more heaps.
    CtidRanges { heaps: usize, pages_per_task: u64 },
    /// One task, because the Postgres planner reads the filter through an index.
    Index { node: String, rows: f64 },
    /// One task, for the reason given.
    Single(&'static str),
}

impl fmt::Display for ScanMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanMode::CtidRanges {
                heaps,
                pages_per_task,
            } => write!(
                f,
                "ctid ranges of {pages_per_task} pages over {heaps} heap{}",
                if *heaps == 1 { "" } else { "s" }
            ),
            ScanMode::Index { node, rows } => {
                write!(f, "index ({node}, {rows} rows estimated)")
            }
            ScanMode::Single(reason) => write!(f, "one task ({reason})"),
        }
    }
}

#[async_trait]
impl TableProvider for PostgresTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        match &self.source {
            ScanSource::Relation(relation) if relation.kind.has_pages() => TableType::Base,
            ScanSource::Relation(relation)
                if relation.kind == crate::catalog::RelationKind::Partitioned =>
            {
                TableType::Base
            }
            _ => TableType::View,
        }
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|filter| {
                if self.options.filter_pushdown && filter_to_sql(filter, &self.columns).is_some() {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let relation = match &self.source {
            ScanSource::Relation(relation)
                if matches!(
                    relation.kind,
                    crate::catalog::RelationKind::Table | crate::catalog::RelationKind::Partitioned
                ) =>
            {
                relation
            }
            _ => {
                return Err(PostgresError::ReadOnly(format!(
                    "cannot INSERT into {}: only tables can be written",
                    self.describe_source()
                ))
                .into())
            }
        };
        if !self.writable {
            return Err(PostgresError::ReadOnly(format!(
                "cannot INSERT into {}: the database is attached READ_ONLY (or read through a \
                 table function); ATTACH it without READ_ONLY to write",
                relation.qualified()
            ))
            .into());
        }
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!(
                "{insert_op} into a PostgreSQL table; quiver appends (INSERT INTO)"
            )));
        }
        let sink = PostgresSink::new(
            self.target.clone(),
            relation.qualified(),
            self.columns.clone(),
            Arc::clone(&self.schema),
        );
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let columns: Vec<PgColumn> = match projection {
            Some(indices) => indices
                .iter()
                .map(|i| {
                    self.columns.get(*i).cloned().ok_or_else(|| {
                        DataFusionError::Internal(format!("projection index {i} out of range"))
                    })
                })
                .collect::<DFResult<_>>()?,
            None => self.columns.clone(),
        };
        let conditions = filters
            .iter()
            .map(|filter| {
                filter_to_sql(filter, &self.columns).ok_or_else(|| {
                    DataFusionError::Internal(format!(
                        "filter {filter} was accepted for pushdown but cannot be translated"
                    ))
                })
            })
            .collect::<DFResult<Vec<_>>>()?;
        let select_list = columns
            .iter()
            .map(|c| {
                format!(
                    "{}{}",
                    quote_ident(&c.name),
                    c.pg_type.server_cast().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let key = QueryKey {
            target: self.target.describe(),
            session_id: state.session_id().to_string(),
            query_start: state
                .execution_props()
                .query_execution_start_time
                .and_then(|t| t.timestamp_nanos_opt())
                .unwrap_or(0),
        };
        let pool = snapshot_for_query(key, &self.target);
        let plan = self
            .plan_tasks(&pool, &select_list, &conditions, limit)
            .await
            .map_err(PostgresError::into_datafusion)?;
        let all: Vec<usize>;
        let projected = match projection {
            Some(indices) => indices.as_slice(),
            None => {
                all = (0..self.columns.len()).collect();
                &all
            }
        };
        let statistics = self.statistics(projected, &plan);
        let TaskPlan { tasks, mode, .. } = plan;
        let connections = self
            .options
            .connections
            .unwrap_or_else(|| state.config().target_partitions())
            .max(1);
        let schema = Arc::new(Schema::new(
            columns.iter().map(PgColumn::field).collect::<Vec<_>>(),
        ));
        Ok(Arc::new(PostgresScanExec::new(
            ScanPlan {
                target: self.target.describe(),
                source: self.describe_source(),
                types: columns.iter().map(|c| c.pg_type.clone()).collect(),
                tasks,
                mode,
                filter: (!conditions.is_empty()).then(|| conditions.join(" AND ")),
                limit,
            },
            schema,
            connections,
            pool,
            Arc::new(statistics),
        )))
    }
}

/// Everything a [`PostgresScanExec`] needs besides its pool.
#[derive(Debug, Clone)]
struct ScanPlan {
    target: String,
    source: String,
    types: Vec<PgType>,
    tasks: Vec<String>,
    mode: ScanMode,
    filter: Option<String>,
    limit: Option<usize>,
}

/// Reads a Postgres table or query through binary COPY, in parallel on one snapshot.
#[derive(Debug)]
pub struct PostgresScanExec {
    plan: Arc<ScanPlan>,
    schema: SchemaRef,
    partitions: usize,
    pool: Arc<SnapshotPool>,
    properties: Arc<PlanProperties>,
    statistics: Arc<Statistics>,
}

impl PostgresScanExec {
    fn new(
        plan: ScanPlan,
        schema: SchemaRef,
        connections: usize,
        pool: Arc<SnapshotPool>,
        statistics: Arc<Statistics>,
    ) -> Self {
        let partitions = connections.min(plan.tasks.len()).max(1);
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        PostgresScanExec {
            plan: Arc::new(plan),
            schema,
            partitions,
            pool,
            properties: Arc::new(properties),
            statistics,
        }
    }

    /// The COPY statements this scan runs, in task order.
    pub fn tasks(&self) -> &[String] {
        &self.plan.tasks
    }
}

impl DisplayAs for PostgresScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let plan = &self.plan;
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(
                    f,
                    "PostgresScanExec: {} at {}, {}, tasks={}, connections={}",
                    plan.source,
                    plan.target,
                    plan.mode,
                    plan.tasks.len(),
                    self.partitions
                )?;
                if let Some(filter) = &plan.filter {
                    write!(f, ", filter={filter}")?;
                }
                if let Some(limit) = plan.limit {
                    write!(f, ", limit={limit}")?;
                }
                if t == DisplayFormatType::Verbose {
                    if let Some(first) = plan.tasks.first() {
                        write!(f, ", first task={first}")?;
                    }
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => {
                writeln!(f, "source={}", plan.source)?;
                writeln!(f, "mode={}", plan.mode)?;
                write!(f, "tasks={}", plan.tasks.len())
            }
        }
    }
}

impl ExecutionPlan for PostgresScanExec {
    fn name(&self) -> &str {
        "PostgresScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> DFResult<Arc<Statistics>> {
        Ok(match args.partition() {
            None => Arc::clone(&self.statistics),
            // Tasks are dealt round-robin, but ranges differ in live rows: no per-partition claim.
            Some(_) => Arc::new(Statistics::new_unknown(&self.schema)),
        })
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        if partition >= self.partitions {
            return Err(DataFusionError::Internal(format!(
                "PostgresScanExec has {} partitions, not {partition}",
                self.partitions
            )));
        }
        // Round-robin: deterministic, so executing a partition twice reads the same tasks.
        let tasks: Vec<String> = self
            .plan
            .tasks
            .iter()
            .skip(partition)
            .step_by(self.partitions)
            .cloned()
            .collect();
        let batch_size = context.session_config().batch_size().max(1);
        let mut builder = RecordBatchReceiverStream::builder(Arc::clone(&self.schema), 2);
        let tx = builder.tx();
        let reader = TaskReader {
            pool: Arc::clone(&self.pool),
            plan: Arc::clone(&self.plan),
            schema: Arc::clone(&self.schema),
            batch_size,
        };
        builder.spawn(async move {
            reader
                .run(tasks, tx)
                .await
                .map_err(PostgresError::into_datafusion)
        });
        Ok(builder.build())
    }
}

/// The network half of the reader: runs COPY tasks on a pooled connection and hands the bytes
/// to the pure parser ([`CopyParser`]) and decoder ([`BatchDecoder`]).
struct TaskReader {
    pool: Arc<SnapshotPool>,
    plan: Arc<ScanPlan>,
    schema: SchemaRef,
    batch_size: usize,
}

/// Whether the consumer still wants batches.
enum Flow {
    Continue(usize),
    Stop,
}

type BatchSender = Sender<DFResult<arrow::record_batch::RecordBatch>>;

impl TaskReader {
    async fn run(&self, tasks: Vec<String>, tx: BatchSender) -> Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut connection = self.pool.acquire().await?;
        for sql in &tasks {
            connection.set_in_copy(true);
            let stream = connection
                .client()?
                .copy_out(sql.as_str())
                .await
                .map_err(|e| {
                    PostgresError::server(format!("starting to read {}", self.plan.source), &e)
                })?;
            futures::pin_mut!(stream);
            let mut parser = CopyParser::new(self.plan.types.len());
            let mut decoder =
                BatchDecoder::new(Arc::clone(&self.schema), &self.plan.types, self.batch_size)
                    .map_err(|e| self.conversion(0, e.to_string()))?;
            let mut pending = BytesMut::new();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    PostgresError::server(format!("reading {}", self.plan.source), &e)
                })?;
                if pending.is_empty() {
                    match self.decode(&mut parser, &mut decoder, &chunk, &tx).await? {
                        Flow::Continue(used) => pending.extend_from_slice(&chunk[used..]),
                        Flow::Stop => return Ok(()),
                    }
                } else {
                    pending.extend_from_slice(&chunk);
                    match self
                        .decode(&mut parser, &mut decoder, &pending, &tx)
                        .await?
                    {
                        Flow::Continue(used) => pending.advance(used),
                        Flow::Stop => return Ok(()),
                    }
                }
            }
            parser
                .finish(pending.len())
                .map_err(|e| self.copy_error(e))?;
            if decoder.rows() > 0 {
                let batch = decoder
                    .finish_batch()
                    .map_err(|e| self.conversion(0, e.to_string()))?;
                if tx.send(Ok(batch)).await.is_err() {
                    return Ok(());
                }
            }
            connection.set_in_copy(false);
        }
        Ok(())
    }

    /// Decodes the complete rows of `input`, sending a batch whenever one is full.
    async fn decode(
        &self,
        parser: &mut CopyParser,
        decoder: &mut BatchDecoder,
        input: &[u8],
        tx: &BatchSender,
    ) -> Result<Flow> {
        let mut offset = 0;
        loop {
            let room = self.batch_size.saturating_sub(decoder.rows()).max(1);
            let rest = input.get(offset..).unwrap_or_default();
            let used = parser
                .parse(rest, decoder, room)
                .map_err(|e| self.copy_error(e))?;
            offset += used;
            if decoder.rows() < self.batch_size {
                return Ok(Flow::Continue(offset));
            }
            let batch = decoder
                .finish_batch()
                .map_err(|e| self.conversion(0, e.to_string()))?;
            if tx.send(Ok(batch)).await.is_err() {
                return Ok(Flow::Stop);
            }
        }
    }

    fn copy_error(&self, error: CopyFormatError) -> PostgresError {
        match error {
            CopyFormatError::Value {
                row,
                column,
                message,
            } => self.conversion(column, format!("{message} (row {row} of a task)")),
            source => PostgresError::Copy {
                relation: self.plan.source.clone(),
                source,
            },
        }
    }

    fn conversion(&self, column: usize, message: String) -> PostgresError {
        let column = self
            .schema
            .fields()
            .get(column)
            .map(|f| f.name().clone())
            .unwrap_or_default();
        PostgresError::Conversion { column, message }
    }
}
