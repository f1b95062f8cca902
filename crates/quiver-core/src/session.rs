//! [`Session`]: a DataFusion `SessionContext` configured the way quiver's users expect, with
//! quiver's catalogs and functions, in memory or over a persistent database directory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::DataType;
use datafusion::catalog::{
    CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider, SchemaProvider,
};
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::ParamValues;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::{Analyzer, Optimizer};
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::execute_stream;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use quiver_postgres::runtime_filter::key_list_config;

use crate::aggregate_clauses::refuse_aggregate_clauses;
use crate::database::{AccessMode, Database};
use crate::error::{QuiverError, Result};
use crate::external::{ExecuteOptions, Registrations, EXTERNAL_SCHEMA};
use crate::identifiers::resolve_names;
use crate::metrics::{instrument_scans, ScanCounters};
use crate::result::QueryResult;
use crate::settings::{Gated, GatedLogical, QuiverOptions};
use crate::statement::{parse_sql, Statement};
use crate::table_functions::register_file_functions;

/// The catalog every session starts in.
pub const DEFAULT_CATALOG: &str = "quiver";
/// The schema every session starts in; in a persistent session it is stored on disk.
pub const DEFAULT_SCHEMA: &str = "main";

/// How to open a [`Session`].
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// A persistent database directory; `None` keeps everything in memory.
    pub database: Option<PathBuf>,
    /// Open the database directory read-only (several processes may then share it).
    pub read_only: bool,
    /// Worker threads (DataFusion's target partitions); `None` uses every core.
    pub threads: Option<usize>,
    /// A memory limit in bytes for query execution (spilling or failing above it).
    pub memory_limit: Option<usize>,
}

/// A quiver session: run SQL, get streaming results.
///
/// ```no_run
/// # async fn demo() -> quiver_core::Result<()> {
/// let session = quiver_core::Session::in_memory()?;
/// let batches = session.sql("SELECT 42 AS answer").await?.collect().await?;
/// assert_eq!(batches[0].num_rows(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    ctx: SessionContext,
    database: Option<Arc<Database>>,
    warnings: Vec<String>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("session_id", &self.ctx.session_id())
            .field(
                "database",
                &self.database.as_ref().map(|d| d.dir().to_path_buf()),
            )
            .finish()
    }
}

impl Session {
    /// An in-memory session.
    pub fn in_memory() -> Result<Session> {
        Session::open_sync(&SessionOptions::default())
    }

    /// Opens a session; with [`SessionOptions::database`] it replays the stored views.
    pub async fn open(options: SessionOptions) -> Result<Session> {
        let mut session = Session::open_sync(&options)?;
        // A view whose tables were dropped since is skipped, not fatal: the database must stay
        // openable (DuckDB likewise lets a view outlive its table).
        if let Some(database) = session.database.clone() {
            for (name, sql) in database.view_definitions() {
                if let Err(error) = session.sql(&sql).await {
                    session.warnings.push(format!(
                        "view \"{name}\" of database {} could not be restored: {error}",
                        database.dir().display()
                    ));
                }
            }
        }
        Ok(session)
    }

    fn open_sync(options: &SessionOptions) -> Result<Session> {
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_default_catalog_and_schema(DEFAULT_CATALOG, DEFAULT_SCHEMA)
            .with_create_default_catalog_and_schema(false);
        if let Some(threads) = options.threads {
            config = config.with_target_partitions(threads.max(1));
        }
        let settings = config.options_mut();
        // Keep identifiers as written; `identifiers.rs` resolves them ignoring case.
        settings.sql_parser.enable_ident_normalization = false;
        // COPY TO 'x.parquet' and file listings should behave like DuckDB's.
        settings.execution.keep_partition_by_columns = false;
        // TIMESTAMPTZ means Timestamp(_, "UTC"), as in Postgres with timezone = 'UTC': with no
        // session zone, DataFusion makes it a naive timestamp and compares it with zoned
        // columns at the wrong instant (apache/datafusion#25166).
        settings.execution.time_zone = Some("UTC".into());
        // MIN/MAX's run-time filter prunes row groups the query's other aggregates still need
        // (apache/datafusion#24816: `SELECT min(g), max(x + 1)` over Parquet answered wrongly).
        settings.optimizer.enable_aggregate_dynamic_filter_pushdown = false;

        let mut runtime = RuntimeEnvBuilder::new();
        if let Some(limit) = options.memory_limit {
            runtime = runtime.with_memory_limit(limit, 1.0);
        }
        let runtime = runtime.build_arc().map_err(QuiverError::from)?;
        let config = config.with_option_extension(QuiverOptions::default());
        // Every quiver rule runs behind its switch (`settings.rs`): with
        // `quiver.optimizations = false` the plan is stock DataFusion's.
        //
        // Join sides by rows runs right after DataFusion's join selection, before anything
        // wires run-time filters from build to probe sides. quiver's other physical rules run
        // after DataFusion's: the small-key GROUP BY path, the GROUP BY … LIMIT key freeze, the
        // radix GROUP BY for many keys, Top-K over wide Parquet scans reading the wide
        // columns late, and filters comparing string views by their views.
        let mut rules = PhysicalOptimizer::new().rules;
        // Semantics, behind no switch: DataFusion's filter pushdown kept out of nodes whose
        // schema repeats a column name, which it would remap by name (`pushdown_guard.rs`).
        for rule in rules.iter_mut() {
            if crate::pushdown_guard::is_filter_pushdown(rule.as_ref()) {
                *rule = Arc::new(crate::pushdown_guard::GuardedFilterPushdown::new(
                    Arc::clone(rule),
                ));
            }
        }
        let after_join_selection = rules
            .iter()
            .position(|rule| rule.name() == "join_selection")
            .map_or(0, |at| at + 1);
        rules.insert(
            after_join_selection,
            Gated::new(Arc::new(crate::join_sides::RowCountJoinSides), |s| {
                s.row_count_join_sides
            }),
        );
        // Just before DataFusion turns DISTINCT aggregates into two GROUP BYs: an integer
        // COUNT(DISTINCT) under a GROUP BY becomes one table of (group, value) pairs, and the
        // mixed string cases become two GROUP BYs as well.
        let mut logical_rules = Optimizer::new().rules;
        // First of all, and behind no switch: DataFusion 55 answers most NOT IN subqueries
        // wrongly (apache/datafusion#25336, #25347, #25473); they are rewritten before its
        // set-comparison and decorrelation rules see them (`not_in_subquery.rs`).
        logical_rules.insert(0, Arc::new(crate::not_in_subquery::QuiverNotInSubquery));
        // ORDER BY keeps the keys DataFusion would drop through functional dependencies a join
        // broke (`sort_keys.rs`).
        for rule in logical_rules.iter_mut() {
            if rule.name() == crate::sort_keys::REPLACES {
                *rule = Arc::new(crate::sort_keys::ExactSortKeys);
            }
        }
        let before_single_distinct = logical_rules
            .iter()
            .position(|rule| rule.name() == "single_distinct_aggregation_to_group_by")
            .unwrap_or(logical_rules.len());
        logical_rules.insert(
            before_single_distinct,
            GatedLogical::new(
                Arc::new(crate::distinct_groups::MixedDistinctToGroupBy),
                |s| s.distinct_groups,
            ),
        );
        logical_rules.insert(
            before_single_distinct,
            GatedLogical::new(Arc::new(crate::distinct_groups::DistinctCountSets), |s| {
                s.distinct_groups
            }),
        );
        // Last: SUM/AVG of integers and COUNT(*) without the arrays DataFusion's coercions
        // and literals fill per batch, once every rule matching those aggregates by name ran.
        logical_rules.push(GatedLogical::new(
            Arc::new(crate::widen_aggregates::WidenAggregates),
            |s| s.widen_aggregates,
        ));
        // Correctness before speed, whatever the switches say: DataFusion's bounded Top-K
        // aggregation loses NaN groups.
        rules.push(Arc::new(crate::float_topk::ExactFloatTopK));
        rules.push(Gated::new(
            Arc::new(quiver_agg::SmallKeyAggregateRule::new()),
            |s| s.small_key_aggregate,
        ));
        rules.push(Gated::new(Arc::new(quiver_agg::FrozenKeysRule), |s| {
            s.frozen_group_keys
        }));
        // The radix GROUP BY holds the rows of many keys in memory and cannot spill: under a
        // memory limit DataFusion's aggregation, which can, stays.
        if options.memory_limit.is_none() {
            rules.push(Gated::new(Arc::new(quiver_agg::RadixAggregateRule), |s| {
                s.radix_aggregate
            }));
        }
        rules.push(Gated::new(Arc::new(crate::topk::TopKThresholdRule), |s| {
            s.topk_threshold
        }));
        // Our comparison kernels before the AND chains are wrapped, so each conjunct has them.
        rules.push(Gated::new(
            Arc::new(crate::literal_compare::LiteralCompareRule),
            |s| s.literal_compare,
        ));
        rules.push(Gated::new(
            Arc::new(crate::conjunction::ConjunctionFilterRule),
            |s| s.conjunction_filter,
        ));
        // Semantics, not an optimization, so behind no switch: integer literals next to UInt64
        // become UInt64 before DataFusion's type coercion would turn both into
        // Decimal128(20, 0) (`unsigned_literals.rs`), and float literals compared with a
        // decimal become the decimal they spell (`decimal_literals.rs`). Both must run before
        // `type_coercion` (`with_analyzer_rule` would append them after).
        let mut analyzer_rules = Analyzer::new().rules;
        let before_type_coercion = analyzer_rules
            .iter()
            .position(|rule| rule.name() == "type_coercion")
            .unwrap_or(analyzer_rules.len());
        analyzer_rules.splice(
            before_type_coercion..before_type_coercion,
            [
                Arc::new(crate::unsigned_literals::UnsignedLiterals) as _,
                Arc::new(crate::decimal_literals::DecimalLiterals) as _,
            ],
        );
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_analyzer_rules(analyzer_rules)
            // After type coercion: comparisons of naive timestamps with zoned constants keep
            // the cast the simplifier would drop (`zoned_casts.rs`, apache/datafusion#25095).
            .with_analyzer_rule(Arc::new(crate::zoned_casts::ShieldNaiveToZonedCasts))
            .with_optimizer_rules(logical_rules)
            .with_physical_optimizer_rules(rules)
            .build();
        // `CREATE EXTERNAL TABLE … STORED AS PARQUET` and COPY: float statistics never trusted
        // (`nan_safe_parquet.rs`). The builder ignores a second factory for one extension; this
        // replaces DataFusion's.
        let mut state = state;
        state
            .register_file_format(
                Arc::new(crate::nan_safe_parquet::NanSafeParquetFormatFactory::default()),
                true,
            )
            .map_err(QuiverError::from)?;
        let ctx = SessionContext::new_with_state(state);

        let database = match &options.database {
            Some(dir) => {
                let mode = if options.read_only {
                    AccessMode::ReadOnly
                } else {
                    AccessMode::ReadWrite
                };
                Some(Database::open(dir, mode)?)
            }
            None => None,
        };
        let schema: Arc<dyn SchemaProvider> = match &database {
            Some(database) => database.schema_provider(),
            None => Arc::new(MemorySchemaProvider::new()),
        };
        let catalog = MemoryCatalogProvider::new();
        catalog
            .register_schema(DEFAULT_SCHEMA, schema)
            .map_err(QuiverError::from)?;
        catalog
            .register_schema(EXTERNAL_SCHEMA, Arc::new(MemorySchemaProvider::new()))
            .map_err(QuiverError::from)?;
        ctx.register_catalog(DEFAULT_CATALOG, Arc::new(catalog));
        register_file_functions(&ctx);
        quiver_functions::register(&ctx);
        quiver_postgres::register_postgres_functions(&ctx);
        Ok(Session {
            ctx,
            database,
            warnings: Vec::new(),
        })
    }

    /// The DataFusion context, for registering tables and functions from Rust.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Problems found while opening the session that did not stop it (views that could not be
    /// restored).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The persistent database, if the session has one.
    pub fn database(&self) -> Option<&Arc<Database>> {
        self.database.as_ref()
    }

    /// Splits `sql` into statements without running them.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        parse_sql(sql)
    }

    /// Runs every statement of `sql` in order and returns the last one's result (DuckDB's and
    /// chDB's behaviour for multi-statement strings). Empty text is an error.
    pub async fn sql(&self, sql: &str) -> Result<QueryResult> {
        let statements = self.parse(sql)?;
        let count = statements.len();
        let mut last = None;
        for (index, statement) in statements.into_iter().enumerate() {
            let result = self.execute(&statement).await?;
            if index + 1 < count {
                // Earlier statements run to completion before the next starts.
                result.collect().await?;
            } else {
                last = Some(result);
            }
        }
        last.ok_or_else(|| QuiverError::InvalidInput("no SQL statement to run".into()))
    }

    /// Plans and starts one statement. DDL and DML take effect before this returns; a query's
    /// rows stream from the returned [`QueryResult`].
    pub async fn execute(&self, statement: &Statement) -> Result<QueryResult> {
        self.execute_with(statement, ExecuteOptions::default())
            .await
    }

    /// [`Session::execute`] with tables from the caller's scope and placeholder values.
    pub async fn execute_with(
        &self,
        statement: &Statement,
        options: ExecuteOptions<'_>,
    ) -> Result<QueryResult> {
        let started = Instant::now();
        if let Some(command) = &statement.command {
            crate::attach::run_command(&self.ctx, command).await?;
        }
        let mut inner = statement.inner.clone();
        let mut words = statement.words.as_ref();
        if let Some(rewritten) = self.rewrite_show(&inner)? {
            inner = rewritten;
            words = None;
        }
        self.refuse_drop_when_read_only(&inner)?;
        refuse_transactions(&inner)?;
        let external = options.external;
        let params = options.params;
        // Dropped at the end of this function: the plan holds the providers from then on.
        let (plan, _registrations, state) = match crate::narrow::query_words(&inner, words) {
            Some(words) if external.is_some() => {
                match self
                    .plan(inner.clone(), external, params.clone(), Some(words))
                    .await
                {
                    // An unknown column: planned again over whole tables, so that the error
                    // lists (and suggests from) every column.
                    Err(QuiverError::Catalog(_)) => {
                        self.plan(inner, external, params, None).await?
                    }
                    outcome => outcome?,
                }
            }
            _ => self.plan(inner, external, params, None).await?,
        };
        let (physical, task) = match plan {
            // DDL and SET take effect in the context, which runs them.
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => {
                let frame = self
                    .ctx
                    .execute_logical_plan(plan)
                    .await
                    .map_err(QuiverError::from)?;
                let task = frame.task_ctx();
                let physical = frame
                    .create_physical_plan()
                    .await
                    .map_err(QuiverError::from)?;
                (physical, task)
            }
            // Anything else is planned in the state it was planned from, as the context
            // would in a copy of it (a copy of a SessionState costs ~18 us).
            plan => {
                let physical = state
                    .create_physical_plan(&plan)
                    .await
                    .map_err(QuiverError::from)?;
                (physical, TaskContext::from(&state))
            }
        };
        let quiver_options = QuiverOptions::of(task.session_config().options());
        let task = match key_list_config(&physical, task.session_config()) {
            Some(config) if quiver_options.enabled(|s| s.postgres_runtime_filter) => {
                task.with_session_config(config)
            }
            _ => task,
        };
        let counters = Arc::new(ScanCounters::default());
        let physical = instrument_scans(physical, &counters).map_err(QuiverError::from)?;
        let stream =
            execute_stream(Arc::clone(&physical), Arc::new(task)).map_err(QuiverError::from)?;
        Ok(QueryResult::new(
            stream,
            physical,
            counters,
            started,
            statement.format,
            statement.returns_rows(),
        ))
    }

    /// The logical plan of `statement`, with the external tables it registered (narrowed to
    /// `narrow`'s words when given), which must outlive planning, and the state it was
    /// planned in.
    async fn plan(
        &self,
        mut statement: DFStatement,
        external: Option<&dyn crate::external::ExternalTables>,
        params: Option<datafusion::common::ParamValues>,
        narrow: Option<std::collections::HashSet<String>>,
    ) -> Result<(LogicalPlan, Registrations, SessionState)> {
        let external_schema = self
            .ctx
            .catalog(DEFAULT_CATALOG)
            .and_then(|catalog| catalog.schema(EXTERNAL_SCHEMA));
        let mut registrations = Registrations::new(external_schema, narrow);
        resolve_names(&self.ctx, &mut statement, external, &mut registrations).await?;
        crate::default_values::rewrite(&self.ctx, &mut statement).await?;
        let state = self.ctx.state();
        refuse_aggregate_clauses(&state, &statement)?;
        let mut plan = state
            .statement_to_plan(statement)
            .await
            .map_err(QuiverError::from)?;
        if let Some(params) = params {
            let params = cast_values_params(&plan, params)?;
            plan = plan.with_param_values(params).map_err(QuiverError::from)?;
        }
        if QuiverOptions::of(state.config_options()).enabled(|s| s.postgres_join_pushdown) {
            plan = quiver_postgres::pushdown::push_joins(plan)
                .await
                .map_err(QuiverError::from)?;
        }
        Ok((plan, registrations, state))
    }

    /// DataFusion turns any error of a schema's `deregister_table` into "doesn't exist" (and
    /// `DROP ... IF EXISTS` into success), so a read-only database must refuse DROP up front.
    fn refuse_drop_when_read_only(&self, statement: &DFStatement) -> Result<()> {
        let (Some(database), DFStatement::Statement(inner)) = (&self.database, statement) else {
            return Ok(());
        };
        if database.mode() == AccessMode::ReadOnly {
            if let SqlStatement::Drop { object_type, .. } = inner.as_ref() {
                return Err(QuiverError::InvalidInput(format!(
                    "cannot DROP {object_type}: database {} is open read-only",
                    database.dir().display()
                )));
            }
        }
        Ok(())
    }

    /// `SHOW TABLES` lists table names, as DuckDB's does (DataFusion's lists
    /// information_schema rows).
    fn rewrite_show(&self, statement: &DFStatement) -> Result<Option<DFStatement>> {
        let DFStatement::Statement(inner) = statement else {
            return Ok(None);
        };
        if let SqlStatement::ShowTables { .. } = inner.as_ref() {
            let sql = "SELECT table_name AS name FROM information_schema.tables \
                       WHERE table_schema NOT IN ('information_schema', '__external') \
                       ORDER BY table_catalog, table_schema, table_name";
            let mut statements = parse_sql(sql)?;
            return Ok(statements.pop().map(|s| s.inner));
        }
        Ok(None)
    }
}

/// quiver commits each statement when it completes (and each statement is atomic: in memory
/// its rows are appended at the end, in a database directory its files are published by one
/// catalog rename), but there are no multi-statement transactions. `BEGIN`, `COMMIT` and
/// `ROLLBACK` say so rather than DataFusion's "Unsupported logical plan".
fn refuse_transactions(statement: &DFStatement) -> Result<()> {
    let DFStatement::Statement(inner) = statement else {
        return Ok(());
    };
    let word = match inner.as_ref() {
        SqlStatement::StartTransaction { .. } => "BEGIN",
        SqlStatement::Commit { .. } => "COMMIT",
        SqlStatement::Rollback { .. } => "ROLLBACK",
        SqlStatement::Savepoint { .. } | SqlStatement::ReleaseSavepoint { .. } => "SAVEPOINT",
        _ => return Ok(()),
    };
    Err(QuiverError::NotImplemented(format!(
        "{word}: quiver has no multi-statement transactions; every statement commits when it \
         completes, and is atomic on its own"
    )))
}

/// A parameter that fills a VALUES row takes the type the planner inferred for its placeholder
/// (an INSERT's target column). DataFusion substitutes the value as a literal of its own type
/// and then re-infers the VALUES list's column types from the literals, without casting to the
/// table's: `INSERT INTO t VALUES ($1)` with NULL appended a column of Arrow type Null, and with
/// the text '2024-01-02' for a DATE column a Utf8 column, under a table schema that says
/// otherwise (Arrow consumers then refuse to read the table, or read 2^40 in an INT column as
/// 0). A value that does not fit its column is a `ConversionError`, as the same literal is.
fn cast_values_params(plan: &LogicalPlan, params: ParamValues) -> Result<ParamValues> {
    let mut types: HashMap<String, Option<DataType>> = HashMap::new();
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Values(values) = node {
            for expr in values.values.iter().flatten() {
                if let Expr::Placeholder(Placeholder { id, field }) = expr {
                    let data_type = field.as_ref().map(|f| f.data_type().clone());
                    types
                        .entry(id.clone())
                        // The same placeholder in two columns of different types: leave it.
                        .and_modify(|known| {
                            if *known != data_type {
                                *known = None
                            }
                        })
                        .or_insert(data_type);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(QuiverError::from)?;
    if types.is_empty() {
        return Ok(params);
    }
    let cast = |id: String, value: ScalarAndMetadata| -> Result<ScalarAndMetadata> {
        let Some(Some(data_type)) = types.get(&id) else {
            return Ok(value);
        };
        if value.value.data_type() == *data_type {
            return Ok(value);
        }
        match value.value.cast_to(data_type) {
            Ok(cast) => Ok(ScalarAndMetadata::new(cast, value.metadata)),
            Err(error) => Err(QuiverError::Conversion(format!(
                "parameter {id}: cannot cast {} to {data_type}: {error}",
                value.value
            ))),
        }
    };
    Ok(match params {
        ParamValues::List(list) => ParamValues::List(
            list.into_iter()
                .enumerate()
                .map(|(index, value)| cast(format!("${}", index + 1), value))
                .collect::<Result<_>>()?,
        ),
        ParamValues::Map(map) => ParamValues::Map(
            map.into_iter()
                .map(|(name, value)| Ok((name.clone(), cast(format!("${name}"), value)?)))
                .collect::<Result<_>>()?,
        ),
    })
}
