//! The Postgres table as a DataFusion `TableProvider`, and the scan that reads it.
//!
//! Planning (`scan`) decides the tasks — one `COPY (SELECT …) TO STDOUT (FORMAT binary)` each:
//! ctid page ranges of `pages_per_task` pages (the last open-ended, since the size in pages is
//! read before the snapshot is taken), one task per small heap, partition by partition for a
//! partitioned table, one task for a view, a query, a LIMIT, or a filter the Postgres planner
//! would answer from an index. Execution deals the tasks round-robin to
//! `min(connections, tasks)` output partitions; each partition reads its tasks one after the
//! other on one connection of the query's [`SnapshotPool`], decoding straight into Arrow.
//!
//! Planning also estimates the rows (the Postgres planner's estimate under the pushed filter,
//! else `reltuples`) and hands them, with `pg_stats` distinct counts, to DataFusion as
//! statistics. A partition starts its COPY on its first poll rather than at `execute`, so a
//! hash join above it has published its build side's keys by then; they are added to the
//! `WHERE` ([`crate::runtime_filter`]).

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::{Buf, BytesMut};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{TreeNodeIterator, TreeNodeRecursion};
use datafusion::datasource::sink::DataSinkExec;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::TableType;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::{RecordBatchReceiverStream, RecordBatchStreamAdapter};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, Statistics,
};
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc::Sender;

use crate::binary_copy::{CopyFormatError, CopyParser, FieldSpan};
use crate::catalog::{describe_query, describe_relation, heaps, planner_choice, Relation};
use crate::column_default::{default_marker, omit_defaulted_columns};
use crate::connection::ConnectTarget;
use crate::copy_in::PostgresSink;
use crate::decode::{BatchDecoder, ROWS_PER_PARSE};
use crate::error::{PostgresError, Result};
use crate::runtime_filter::superset_sql;
use crate::snapshot::{snapshot_for_query, PooledClient, QueryKey, SnapshotPool};
use crate::sql::{filter_to_sql, quote_ident};
use crate::tap::Pacer;
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
    /// Whether joins of this database's tables may run in Postgres as one query when its
    /// planner expects that to beat reading the tables (see [`crate::pushdown`]).
    pub query_pushdown: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            pages_per_task: DEFAULT_PAGES_PER_TASK,
            connections: None,
            filter_pushdown: true,
            query_pushdown: true,
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
    /// Per column, the marker of its server-side default (see [`crate::column_default`]).
    defaults: Vec<Expr>,
    options: ScanOptions,
    /// Whether INSERT may write (tables of an ATTACH without READ_ONLY).
    writable: bool,
    /// What EXPLAIN calls the source, when not the relation's name or "query".
    label: Option<String>,
    /// The server planner's row estimate for a query source, when quiver asked for it.
    query_rows: Option<f64>,
}

impl PostgresTable {
    /// Describes `schema.name` on the server at `target`.
    pub async fn for_relation(
        target: ConnectTarget,
        schema: &str,
        name: &str,
        options: ScanOptions,
    ) -> Result<Self> {
        let relation = target
            .with_connection(|client| async move {
                let described = describe_relation(&client, schema, name).await;
                (client, described)
            })
            .await?;
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
        let columns = target
            .with_connection(|client| async {
                let described = describe_query(&client, &sql).await;
                (client, described)
            })
            .await?;
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
            defaults: Vec::new(),
            options,
            writable: false,
            label: None,
            query_rows: None,
        };
        table.set_columns(columns);
        table
    }

    fn set_columns(&mut self, columns: Vec<PgColumn>) {
        self.schema = Arc::new(Schema::new(
            columns.iter().map(PgColumn::field).collect::<Vec<_>>(),
        ));
        self.defaults = self
            .schema
            .fields()
            .iter()
            .map(|field| default_marker(field))
            .collect();
        self.columns = columns;
    }

    /// A query quiver wrote and already described, shown in EXPLAIN as `label`, which the
    /// server's planner expects to return `rows` rows.
    pub fn for_described_query(
        target: ConnectTarget,
        sql: String,
        columns: Vec<PgColumn>,
        options: ScanOptions,
        label: String,
        rows: f64,
    ) -> Self {
        let mut table = Self::new(target, ScanSource::Query(sql), options);
        table.set_columns(columns);
        table.label = Some(label);
        table.query_rows = Some(rows);
        table
    }

    /// The scan options.
    pub fn options(&self) -> &ScanOptions {
        &self.options
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
        if let Some(label) = &self.label {
            return label.clone();
        }
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
        let copy = |from: &str, pages: Option<PageRange>| CopyTask {
            from: from.to_string(),
            pages,
        };
        let single = |sql: CopyTask, mode: ScanMode| TaskPlan {
            tasks: vec![sql],
            mode,
            rows: None,
            table_rows: None,
        };
        let relation = match &self.source {
            ScanSource::Query(sql) => {
                let from = format!("({sql}) AS quiver_query");
                let mut plan = single(copy(&from, None), ScanMode::Single("a query"));
                if conditions.is_empty() {
                    plan.rows = self.query_rows;
                }
                return Ok(plan);
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
        let select = format!(
            "SELECT {select_list} FROM {from} WHERE {}",
            conditions.join(" AND ")
        );
        let choice = async {
            if conditions.is_empty() {
                Ok(None)
            } else {
                planner_choice(client, &select).await.map(Some)
            }
        };
        let (version, heaps, choice) =
            futures::try_join!(client.server_version(), heaps(client, relation), choice)?;
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
        let estimated = |sql: CopyTask, mode: ScanMode| TaskPlan {
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
                // The last range is open-ended: the table may have grown since its size was read.
                let pages = PageRange {
                    start,
                    end: (end < heap.pages).then_some(end),
                };
                tasks.push(copy(&heap.qualified, Some(pages)));
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

/// One `COPY`: a relation (or query), and the ctid range of it to read.
#[derive(Debug, Clone)]
struct CopyTask {
    from: String,
    pages: Option<PageRange>,
}

/// Heap pages `start..end`; `end: None` reads to the end of the relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageRange {
    start: u64,
    end: Option<u64>,
}

impl PageRange {
    fn sql(&self) -> String {
        match self.end {
            Some(end) => format!(
                "ctid >= '({},0)'::tid AND ctid < '({end},0)'::tid",
                self.start
            ),
            None => format!("ctid >= '({},0)'::tid", self.start),
        }
    }
}

/// The tasks of `partition` of `partitions`: every `partitions`-th task, so that the partitions
/// share the table evenly however fast each drains; or, when the run-time filters are `large`
/// (a key list of many thousand values, which Postgres parses and hashes once per statement),
/// one contiguous block of the tasks with adjacent page ranges merged, so each partition
/// sends the list once per heap instead of once per task.
fn partition_tasks(
    tasks: &[CopyTask],
    partition: usize,
    partitions: usize,
    large: bool,
) -> Vec<CopyTask> {
    let partitions = partitions.max(1);
    if !large {
        return tasks
            .iter()
            .skip(partition)
            .step_by(partitions)
            .cloned()
            .collect();
    }
    let from = tasks.len() * partition / partitions;
    let to = tasks.len() * (partition + 1) / partitions;
    let mut merged: Vec<CopyTask> = Vec::new();
    for task in &tasks[from..to] {
        if let Some(last) = merged.last_mut() {
            if let (Some(previous), Some(next)) = (&mut last.pages, task.pages) {
                if last.from == task.from && previous.end == Some(next.start) {
                    previous.end = next.end;
                    continue;
                }
            }
        }
        merged.push(task.clone());
    }
    merged
}

/// Run-time filter SQL longer than this is sent once per partition, not once per task.
const LARGE_RUNTIME_SQL: usize = 64 * 1024;

/// The tasks of one scan and what the server estimates it returns.
#[derive(Debug)]
struct TaskPlan {
    tasks: Vec<CopyTask>,
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
        // The columns the INSERT leaves out are left to Postgres, which applies their defaults.
        let names: Vec<String> = self.columns.iter().map(|c| c.name.clone()).collect();
        let (input, omitted) = omit_defaulted_columns(input, &names)?;
        let sink = PostgresSink::new(
            self.target.clone(),
            relation.qualified(),
            self.columns.clone(),
            Arc::clone(&self.schema),
        )
        .leaving_out(&omitted)?;
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        let index = self.columns.iter().position(|c| c.name == column)?;
        self.defaults.get(index)
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
        let distinct = statistics
            .column_statistics
            .iter()
            .map(|column| column.distinct_count.get_value().copied())
            .collect();
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
                select_list,
                tasks,
                mode,
                filter: (!conditions.is_empty()).then(|| conditions.join(" AND ")),
                conditions,
                limit,
                columns,
                distinct,
                statements: String::new(),
            },
            schema,
            connections,
            pool,
            Arc::new(statistics),
        )))
    }
}

/// A scan whose output is estimated above this many bytes never buffers it to share it.
const SHARE_AT_MOST: usize = 256 * 1024 * 1024;

/// Everything a [`PostgresScanExec`] needs besides its pool.
#[derive(Debug, Clone)]
struct ScanPlan {
    target: String,
    source: String,
    types: Vec<PgType>,
    select_list: String,
    tasks: Vec<CopyTask>,
    mode: ScanMode,
    filter: Option<String>,
    /// The pushed filters, as Postgres conditions.
    conditions: Vec<String>,
    limit: Option<usize>,
    /// The columns read, in output order (runtime filters name them by position).
    columns: Vec<PgColumn>,
    /// Their distinct counts as the server's statistics estimate them, where known.
    distinct: Vec<Option<usize>>,
    /// Every task's statement (without run-time filters): scans of one query with the same
    /// statements read the same rows, and share one read.
    statements: String,
}

impl ScanPlan {
    /// The `COPY` statement of `task`, with the conditions of run-time filters added.
    fn copy_sql(&self, task: &CopyTask, runtime: &[String]) -> String {
        let range = task.pages.as_ref().map(PageRange::sql);
        let conditions: Vec<&str> = range
            .iter()
            .chain(&self.conditions)
            .chain(runtime)
            .map(String::as_str)
            .collect();
        let where_sql = if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        };
        let limit_sql = self
            .limit
            .map(|n| format!(" LIMIT {n}"))
            .unwrap_or_default();
        format!(
            "COPY (SELECT {} FROM {}{where_sql}{limit_sql}) TO STDOUT (FORMAT binary)",
            self.select_list, task.from
        )
    }
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
    /// Filters DataFusion publishes while the query runs (a hash join's build-side keys),
    /// added to the COPY when the scan starts ([`crate::runtime_filter`]).
    runtime_filters: Vec<Arc<dyn PhysicalExpr>>,
    /// `output_rows` per partition, for EXPLAIN ANALYZE.
    metrics: ExecutionPlanMetricsSet,
}

impl PostgresScanExec {
    fn new(
        mut plan: ScanPlan,
        schema: SchemaRef,
        connections: usize,
        pool: Arc<SnapshotPool>,
        statistics: Arc<Statistics>,
    ) -> Self {
        plan.statements = plan
            .tasks
            .iter()
            .map(|task| plan.copy_sql(task, &[]))
            .collect::<Vec<_>>()
            .join(";\n");
        pool.register_scan(&plan.statements);
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
            runtime_filters: Vec::new(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The COPY statements this scan runs, in task order (without run-time filters).
    pub fn tasks(&self) -> Vec<String> {
        self.plan
            .tasks
            .iter()
            .map(|task| self.plan.copy_sql(task, &[]))
            .collect()
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
                if !self.runtime_filters.is_empty() {
                    write!(f, ", runtime filters={}", self.runtime_filters.len())?;
                }
                if t == DisplayFormatType::Verbose {
                    if let Some(first) = plan.tasks.first() {
                        write!(f, ", first task={}", plan.copy_sql(first, &[]))?;
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

    /// Shows the runtime filters, so a hash join sees it has a consumer for them.
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        self.runtime_filters.iter().apply_until_stop(f)
    }

    /// Takes the filters DataFusion pushes after planning (`Post` phase: dynamic filters of
    /// hash joins, TopK and aggregates) to add to the COPY once they are known. Reported as
    /// not pushed: the scan applies a looser form, or none, so the producer keeps its own.
    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> DFResult<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let filters: Vec<Arc<dyn PhysicalExpr>> = child_pushdown_result
            .parent_filters
            .into_iter()
            .map(|result| result.filter)
            .collect();
        let unsupported = vec![PushedDown::No; filters.len()];
        if phase != FilterPushdownPhase::Post || filters.is_empty() {
            return Ok(FilterPushdownPropagation::with_parent_pushdown_result(
                unsupported,
            ));
        }
        let mut runtime_filters = self.runtime_filters.clone();
        runtime_filters.extend(filters);
        let updated = PostgresScanExec {
            plan: Arc::clone(&self.plan),
            schema: Arc::clone(&self.schema),
            partitions: self.partitions,
            pool: Arc::clone(&self.pool),
            properties: Arc::clone(&self.properties),
            statistics: Arc::clone(&self.statistics),
            runtime_filters,
            metrics: ExecutionPlanMetricsSet::new(),
        };
        Ok(
            FilterPushdownPropagation::with_parent_pushdown_result(unsupported)
                .with_updated_node(Arc::new(updated) as Arc<dyn ExecutionPlan>),
        )
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

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
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
        let batch_size = context.session_config().batch_size().max(1);
        let plan = Arc::clone(&self.plan);
        let pool = Arc::clone(&self.pool);
        let schema = Arc::clone(&self.schema);
        let filters = self.runtime_filters.clone();
        let partitions = self.partitions;
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let shareable = self
            .statistics
            .total_byte_size
            .get_value()
            .is_some_and(|bytes| *bytes <= SHARE_AT_MOST);
        // The COPY starts on the first poll, not here: a hash join polls its probe side only
        // after its build side is complete and its runtime filter published.
        let start = async move {
            let runtime: Vec<String> = filters
                .iter()
                .filter_map(|filter| superset_sql(filter, &plan.columns, &plan.distinct))
                .collect();
            // Deterministic, so executing a partition twice reads the same tasks.
            let large = runtime.iter().map(String::len).sum::<usize>() > LARGE_RUNTIME_SQL;
            let tasks: Vec<String> = partition_tasks(&plan.tasks, partition, partitions, large)
                .iter()
                .map(|task| plan.copy_sql(task, &runtime))
                .collect();
            let readers = pool.scans_reading(&plan.statements);
            if runtime.is_empty() && shareable && readers > 1 {
                return shared_stream(
                    TaskReader {
                        pool: Arc::clone(&pool),
                        plan: Arc::clone(&plan),
                        schema: Arc::clone(&schema),
                        batch_size,
                        output_rows: Count::new(),
                    },
                    tasks,
                    format!("{partition}/{partitions}:{}", plan.statements),
                    readers,
                    output_rows,
                );
            }
            let mut builder = RecordBatchReceiverStream::builder(Arc::clone(&schema), 2);
            let tx = builder.tx();
            let reader = TaskReader {
                pool,
                plan,
                schema,
                batch_size,
                output_rows,
            };
            let read = async move {
                reader
                    .run(tasks, tx)
                    .await
                    .map_err(PostgresError::into_datafusion)
            };
            // Reading and decoding run beside the connection's socket I/O, on its thread
            // (`TaskReader::run`): on another thread every chunk wakes a thread across
            // runtimes, and the I/O thread, idle between chunks, reads the socket in small
            // pieces (a lineitem scan: 3.5 s of system time instead of 0.7). Handing out the
            // connection runs on the connections' runtime, off the query's workers.
            match crate::connection::io_runtime() {
                Ok(io) => builder.spawn_on(read, io),
                Err(_) => builder.spawn(read),
            }
            builder.build()
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(start).flatten(),
        )))
    }
}

/// The partition of a scan whose statements `readers` scans of the query read alike: one of
/// them runs `tasks` into memory, on its own task, and each streams the batches.
fn shared_stream(
    reader: TaskReader,
    tasks: Vec<String>,
    key: String,
    readers: usize,
    output_rows: Count,
) -> SendableRecordBatchStream {
    let schema = Arc::clone(&reader.schema);
    let pool = Arc::clone(&reader.pool);
    let read = pool.shared_read(key, readers, move || {
        // Aborted when dropped, that is when every scan sharing the read has gone. On the
        // connections' runtime, as an unshared read is (see `execute`).
        let _io = crate::connection::io_runtime().map(|io| io.enter());
        let task = SpawnedTask::spawn(async move {
            let (tx, mut rx) = tokio::sync::mpsc::channel(2);
            let collect = async {
                let mut batches = Vec::new();
                while let Some(batch) = rx.recv().await {
                    batches.push(batch?);
                }
                Ok::<_, DataFusionError>(batches)
            };
            let (ran, batches) = tokio::join!(reader.run(tasks, tx), collect);
            ran.map_err(PostgresError::into_datafusion)?;
            Ok::<_, DataFusionError>(Arc::new(batches?))
        });
        async move {
            match task.join().await {
                Ok(result) => result.map_err(Arc::new),
                Err(e) => Err(Arc::new(DataFusionError::ExecutionJoin(Box::new(e)))),
            }
        }
        .boxed()
    });
    let batches = futures::stream::once(read).flat_map(move |result| {
        let items: Vec<DFResult<RecordBatch>> = match result {
            Ok(batches) => {
                output_rows.add(batches.iter().map(RecordBatch::num_rows).sum());
                batches.iter().cloned().map(Ok).collect()
            }
            Err(e) => vec![Err(DataFusionError::Shared(e))],
        };
        futures::stream::iter(items)
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// The network half of the reader: runs COPY tasks on a pooled connection and hands the bytes
/// to the pure parser ([`CopyParser`]) and decoder ([`BatchDecoder`]).
#[derive(Clone)]
struct TaskReader {
    pool: Arc<SnapshotPool>,
    plan: Arc<ScanPlan>,
    schema: SchemaRef,
    batch_size: usize,
    output_rows: Count,
}

/// Whether the consumer still wants batches.
enum Flow {
    Continue(usize),
    Stop,
}

type BatchSender = Sender<DFResult<arrow::record_batch::RecordBatch>>;

impl TaskReader {
    /// Reads `tasks` in turn on one connection of the pool, sending their batches to `tx`.
    /// The reading and decoding run on the connection's own thread, beside its socket I/O
    /// ([`crate::connection::PgConnection::home`]): a chunk that arrives wakes no other thread,
    /// and only whole batches cross to the query's threads.
    async fn run(&self, tasks: Vec<String>, tx: BatchSender) -> Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let connection = self.pool.acquire().await?;
        let home = connection.client()?.home().clone();
        let reader = self.clone();
        let closed = self.pool.closed();
        // Aborted when dropped: a cancelled query stops its reading (and, through the
        // connection's guard, the server's COPY). So does closing the pool at exit, whether
        // or not anyone still polls the scan.
        let read = {
            let _home = home.enter();
            SpawnedTask::spawn(async move {
                tokio::select! {
                    outcome = reader.read(connection, &tasks, tx) => outcome,
                    () = closed => Err(PostgresError::closed_at_exit(format!(
                        "reading {}",
                        reader.plan.source
                    ))),
                }
            })
        };
        match read.join().await {
            Ok(outcome) => outcome,
            Err(error) => Err(PostgresError::Server {
                what: format!("reading {}", self.plan.source),
                message: if error.is_cancelled() {
                    "the connection closed during the read".into()
                } else {
                    format!("the read failed: {error}")
                },
            }),
        }
    }

    /// [`Self::run`] on `connection`, on its thread.
    async fn read(
        &self,
        mut connection: PooledClient,
        tasks: &[String],
        tx: BatchSender,
    ) -> Result<()> {
        let widths: Vec<_> = self.plan.types.iter().map(PgType::binary_width).collect();
        for sql in tasks {
            connection.set_in_copy(true);
            let client = connection.client()?;
            let tap = client.tap().clone();
            let mut tap_open = tap.arm();
            let stream = client.copy_out(sql.as_str()).await.map_err(|e| {
                PostgresError::server(format!("starting to read {}", self.plan.source), &e)
            })?;
            futures::pin_mut!(stream);
            let mut parser = CopyParser::with_widths(&widths);
            let mut decoder =
                BatchDecoder::new(Arc::clone(&self.schema), &self.plan.types, self.batch_size)
                    .map_err(|e| self.conversion(0, e.to_string()))?;
            let mut pending = BytesMut::new();
            let mut spans = Vec::new();
            let mut pacer = Pacer::default();
            // The data arrives through the tap (see `crate::tap`); the copy stream itself
            // carries only the end or an error. Once it has ended, everything is in the tap.
            let mut ended = false;
            loop {
                let chunk = if ended {
                    match tap.try_chunk() {
                        Some(chunk) => chunk,
                        None => break,
                    }
                } else {
                    tokio::select! {
                        chunk = futures::future::poll_fn(|cx| tap.poll_chunk(cx)), if tap_open => {
                            match chunk {
                                Some(chunk) => chunk,
                                None => {
                                    tap_open = false;
                                    continue;
                                }
                            }
                        }
                        item = stream.next() => match item {
                            Some(chunk) => chunk.map_err(|e| {
                                PostgresError::server(format!("reading {}", self.plan.source), &e)
                            })?,
                            None => {
                                ended = true;
                                continue;
                            }
                        },
                    }
                };
                let flow = if pending.is_empty() {
                    let flow = self
                        .decode(&mut parser, &mut decoder, &mut spans, &chunk, &tx)
                        .await?;
                    if let Flow::Continue(used) = flow {
                        pending.extend_from_slice(&chunk[used..]);
                    }
                    flow
                } else {
                    pending.extend_from_slice(&chunk);
                    let flow = self
                        .decode(&mut parser, &mut decoder, &mut spans, &pending, &tx)
                        .await?;
                    if let Flow::Continue(used) = flow {
                        pending.advance(used);
                    }
                    flow
                };
                if let Flow::Stop = flow {
                    return Ok(());
                }
                if !ended {
                    pacer.pace(chunk.len());
                }
            }
            parser
                .finish(pending.len())
                .map_err(|e| self.copy_error(e))?;
            if decoder.rows() > 0 {
                let batch = decoder
                    .finish_batch()
                    .map_err(|e| self.conversion(0, e.to_string()))?;
                self.output_rows.add(batch.num_rows());
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
        spans: &mut Vec<FieldSpan>,
        input: &[u8],
        tx: &BatchSender,
    ) -> Result<Flow> {
        let mut offset = 0;
        loop {
            let rest = input.get(offset..).unwrap_or_default();
            offset += decoder
                .fill(parser, spans, rest, self.batch_size, ROWS_PER_PARSE)
                .map_err(|e| self.copy_error(e))?;
            if decoder.rows() < self.batch_size {
                return Ok(Flow::Continue(offset));
            }
            let batch = decoder
                .finish_batch()
                .map_err(|e| self.conversion(0, e.to_string()))?;
            self.output_rows.add(batch.num_rows());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn task(from: &str, start: u64, end: Option<u64>) -> CopyTask {
        CopyTask {
            from: from.into(),
            pages: Some(PageRange { start, end }),
        }
    }

    /// `heap:start..end` per task (`heap` alone for a whole relation).
    fn ranges(tasks: &[CopyTask]) -> Vec<String> {
        tasks
            .iter()
            .map(|t| match t.pages {
                Some(PageRange { start, end }) => format!(
                    "{}:{start}..{}",
                    t.from,
                    end.map(|e| e.to_string()).unwrap_or_default()
                ),
                None => t.from.clone(),
            })
            .collect()
    }

    #[test]
    fn large_runtime_filters_read_one_merged_range_per_partition_and_heap() {
        let tasks = vec![
            task("a", 0, Some(10)),
            task("a", 10, Some(20)),
            task("a", 20, Some(30)),
            task("a", 30, None),
            CopyTask {
                from: "b".into(),
                pages: None,
            },
            task("c", 0, Some(10)),
            task("c", 10, None),
        ];
        // Small filters: every other task, as before.
        assert_eq!(
            ranges(&partition_tasks(&tasks, 1, 2, false)),
            ["a:10..20", "a:30..", "c:0..10"]
        );
        // Large filters: contiguous halves, adjacent ranges of one heap merged.
        assert_eq!(ranges(&partition_tasks(&tasks, 0, 2, true)), ["a:0..30"]);
        assert_eq!(
            ranges(&partition_tasks(&tasks, 1, 2, true)),
            ["a:30..", "b", "c:0.."]
        );
        // Every page is read exactly once however the tasks are dealt.
        for partitions in 1..=8 {
            let dealt: usize = (0..partitions)
                .map(|p| partition_tasks(&tasks, p, partitions, false).len())
                .sum();
            assert_eq!(dealt, tasks.len());
            let merged: Vec<CopyTask> = (0..partitions)
                .flat_map(|p| partition_tasks(&tasks, p, partitions, true))
                .collect();
            let ends: Vec<_> = merged.iter().filter(|t| t.from == "a").collect();
            assert_eq!(ends.first().and_then(|t| t.pages).map(|p| p.start), Some(0));
            for pair in ends.windows(2) {
                assert_eq!(
                    pair[0].pages.and_then(|p| p.end),
                    pair[1].pages.map(|p| p.start)
                );
            }
            assert_eq!(ends.last().and_then(|t| t.pages).and_then(|p| p.end), None);
        }
    }
}
