//! Joins pushed into Postgres as one query, when its planner expects to win.
//!
//! A scan of a Postgres table always costs the server at least a sequential read of the table
//! (ctid ranges are sequential scans), and then every row that survives the pushed filters
//! crosses the socket. Postgres itself can often do far better on a join: an index nested
//! loop touches a few thousand rows of a table of millions. DuckDB's scanner never lets it;
//! its users ask for it. So before DataFusion optimizes a query, every largest subtree that
//! reads only tables of one database, through operators and functions Postgres evaluates as
//! quiver does, is written back to SQL ([DataFusion's unparser]) and shown to the server's
//! planner with `EXPLAIN`. When the planner's cost for the whole subtree is below its cost
//! for sequentially reading every table the subtree names, the subtree becomes one scan of
//! that query. Otherwise nothing changes.
//!
//! The comparison is the server's own, in its own units, and fails safe: any subtree the
//! unparser or the server's planner refuses stays in quiver.
//!
//! What is never pushed, because Postgres would answer differently: references to columns of
//! `char(n)` (padding), unconstrained `numeric` (read as text), enums, JSON, time zones,
//! arrays and the other types quiver reads as text; `ILIKE`, `upper`/`lower` (the server folds
//! case by its locale), `TRY_CAST`, window functions and any function outside a short list of
//! ones with the same meaning in both; string ordering (`<`, `min`, `ORDER BY` inside) unless
//! the database's collation is `C`. The output columns are cast to quiver's types on the
//! server, so a pushed subtree returns the types it would have had. A top-level
//! `ORDER BY`/`LIMIT` stays in quiver, where the order of the result is kept. `ATTACH ...
//! (QUERY_PUSHDOWN false)` and `postgres_scan` (without `_pushdown`) turn it off.
//!
//! Not counted: quiver's own work after the read (a pushed subtree that Postgres estimates
//! below the reads but runs slower, like TPC-H Q9 here, is a loss) and `citext`, which quiver
//! reads as text but Postgres compares without case.
//!
//! [DataFusion's unparser]: datafusion::sql::unparser

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, Result as DFResult, ScalarValue, TableReference};
use datafusion::logical_expr::expr::{AggregateFunction, ScalarFunction};
use datafusion::logical_expr::{
    cast, Distinct, Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder, Operator, Projection,
    SubqueryAlias, TableScan, TableScanBuilder,
};
use datafusion::sql::unparser::dialect::PostgreSqlDialect;
use datafusion::sql::unparser::Unparser;
use futures::future::try_join_all;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::catalog::{describe_query, Relation};
use crate::connection::ConnectTarget;
use crate::copy_in::pg_type_for;
use crate::error::PostgresError;
use crate::scan::{PostgresTable, ScanOptions};
use crate::sql::quote_ident;
use crate::types::PgType;

/// Scalar functions Postgres computes as DataFusion does, under the same name.
const FUNCTIONS: &[&str] = &[
    "abs",
    "btrim",
    "ceil",
    "char_length",
    "character_length",
    "coalesce",
    "date_part",
    "floor",
    "left",
    "length",
    "ltrim",
    "nullif",
    "replace",
    "right",
    "rtrim",
    "strpos",
    "substr",
    "substring",
    "trim",
];

/// Aggregates Postgres computes as DataFusion does.
const AGGREGATES: &[&str] = &["avg", "count", "max", "min", "sum"];

/// The alias of the pushed query's scan in quiver's plan.
const PUSHED: &str = "quiver_pushed";

/// What a pushable subtree reads.
#[derive(Default)]
struct Candidate {
    /// The database, once a scan is seen.
    target: Option<ConnectTarget>,
    options: ScanOptions,
    /// Every relation the subtree names, once per mention.
    relations: Vec<Relation>,
    /// Column names of types Postgres compares differently; pushable only if never referenced.
    unsafe_columns: HashSet<String>,
    referenced: HashSet<String>,
    /// Whether strings are ordered somewhere (then the collation must be `C`).
    orders_strings: bool,
}

impl Candidate {
    /// The relations named, each once, in the order first named.
    fn tables(&self) -> Vec<String> {
        let mut tables: Vec<String> = Vec::new();
        for name in self.relations.iter().map(Relation::qualified) {
            if !tables.contains(&name) {
                tables.push(name);
            }
        }
        tables
    }
}

/// Replaces each largest subtree of `plan` that reads one Postgres database and that the
/// server's planner expects to run for less than reading its tables by a scan of that
/// subtree as a query. Errors only on a broken plan; a subtree that cannot be pushed stays.
pub async fn push_joins(plan: LogicalPlan) -> DFResult<LogicalPlan> {
    let mut reads_postgres = false;
    plan.apply_with_subqueries(|node| {
        reads_postgres |= matches!(node, LogicalPlan::TableScan(scan)
            if source_as_provider(&scan.source)
                .is_ok_and(|provider| provider.downcast_ref::<PostgresTable>().is_some()));
        Ok(if reads_postgres {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if !reads_postgres {
        return Ok(plan);
    }
    let mut candidates = Vec::new();
    find(&plan, &mut candidates);
    let mut replacements = Vec::new();
    for (subtree, candidate) in candidates {
        if let Some(replacement) = try_push(&subtree, candidate).await {
            replacements.push((subtree, replacement));
        }
    }
    if replacements.is_empty() {
        return Ok(plan);
    }
    let replaced = plan
        .transform_down(|node| {
            match replacements
                .iter()
                .position(|(subtree, _)| *subtree == node)
            {
                Some(at) => Ok(Transformed::new(
                    replacements.swap_remove(at).1,
                    true,
                    TreeNodeRecursion::Jump,
                )),
                None => Ok(Transformed::no(node)),
            }
        })?
        .data;
    // The ancestors' schemas follow their new inputs.
    Ok(replaced
        .transform_up(|node| node.recompute_schema().map(Transformed::yes))?
        .data)
}

/// Collects the largest pushable subtrees that join at least two relations.
fn find(plan: &LogicalPlan, out: &mut Vec<(LogicalPlan, Candidate)>) {
    let keeps_order = match plan {
        LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => true,
        LogicalPlan::Projection(projection) => matches!(
            projection.input.as_ref(),
            LogicalPlan::Sort(_) | LogicalPlan::Limit(_)
        ),
        _ => false,
    };
    if !keeps_order {
        if let Some(candidate) = examine(plan) {
            if candidate.relations.len() >= 2 {
                out.push((plan.clone(), candidate));
            }
            return;
        }
    }
    for input in plan.inputs() {
        find(input, out);
    }
}

/// Whether `plan`, with its subqueries, reads only one database through pushable operators.
fn examine(plan: &LogicalPlan) -> Option<Candidate> {
    let mut candidate = Candidate::default();
    let mut pushable = true;
    plan.apply_with_subqueries(|node| {
        pushable = examine_node(node, &mut candidate);
        Ok(if pushable {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    })
    .ok()?;
    (pushable
        && candidate.target.is_some()
        && candidate.referenced.is_disjoint(&candidate.unsafe_columns))
    .then_some(candidate)
}

fn examine_node(node: &LogicalPlan, candidate: &mut Candidate) -> bool {
    match node {
        LogicalPlan::TableScan(scan) => return examine_scan(scan, candidate),
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::Join(_)
        | LogicalPlan::Aggregate(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Union(_)
        | LogicalPlan::Subquery(_)
        | LogicalPlan::Distinct(Distinct::All(_)) => {}
        LogicalPlan::Sort(sort) => {
            let schema = sort.input.schema();
            if sort.expr.iter().any(|s| is_string(&s.expr, schema)) {
                candidate.orders_strings = true;
            }
        }
        _ => return false,
    }
    let schema = expression_schema(node);
    node.expressions().iter().all(|expr| {
        !expr
            .exists(|e| Ok(!examine_expr(e, &schema, candidate)))
            .unwrap_or(true)
    })
}

/// The schema a node's expressions are typed against.
fn expression_schema(node: &LogicalPlan) -> DFSchema {
    let mut schema = DFSchema::empty();
    for input in node.inputs() {
        schema.merge(input.schema());
    }
    schema
}

fn examine_scan(scan: &TableScan, candidate: &mut Candidate) -> bool {
    let Ok(provider) = source_as_provider(&scan.source) else {
        return false;
    };
    let Some(table) = provider.downcast_ref::<PostgresTable>() else {
        return false;
    };
    let Some(relation) = table.relation() else {
        return false;
    };
    if !table.options().query_pushdown || !scan.filters.is_empty() || scan.fetch.is_some() {
        return false;
    }
    match &candidate.target {
        Some(target) if target.describe() != table.target().describe() => return false,
        Some(_) => {}
        None => {
            candidate.target = Some(table.target().clone());
            candidate.options = table.options().clone();
        }
    }
    candidate.unsafe_columns.extend(
        relation
            .columns
            .iter()
            .filter(|column| !same_semantics(&column.pg_type))
            .map(|column| column.name.clone()),
    );
    candidate.relations.push(relation.clone());
    true
}

/// Types whose values Postgres compares, sorts and computes with as quiver does with what it
/// reads of them (text only where the collation is `C`).
fn same_semantics(pg_type: &PgType) -> bool {
    matches!(
        pg_type,
        PgType::Bool
            | PgType::Int2
            | PgType::Int4
            | PgType::Int8
            | PgType::Float4
            | PgType::Float8
            | PgType::Numeric { .. }
            | PgType::Text
            | PgType::Date
            | PgType::Timestamp
    )
}

fn is_string(expr: &Expr, schema: &DFSchema) -> bool {
    // An expression that cannot be typed here is treated as a string: the check only errs
    // toward keeping the subtree in quiver.
    expr.get_type(schema).map_or(true, |t| {
        matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
    })
}

fn examine_expr(expr: &Expr, schema: &DFSchema, candidate: &mut Candidate) -> bool {
    let orders_strings = &mut candidate.orders_strings;
    match expr {
        Expr::Column(column) | Expr::OuterReferenceColumn(_, column) => {
            candidate.referenced.insert(column.name.clone());
            true
        }
        Expr::Literal(value, _) => literal_pushable(value),
        Expr::Alias(_)
        | Expr::Not(_)
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::Negative(_)
        | Expr::Case(_)
        | Expr::InList(_)
        | Expr::Exists(_)
        | Expr::InSubquery(_)
        | Expr::ScalarSubquery(_) => true,
        Expr::Between(between) => {
            *orders_strings |= is_string(&between.expr, schema);
            true
        }
        // ILIKE folds case by the server's locale, quiver by Unicode.
        Expr::Like(like) => !like.case_insensitive && matches!(like.escape_char, None | Some('\\')),
        Expr::BinaryExpr(binary) => {
            use Operator::*;
            match binary.op {
                Lt | LtEq | Gt | GtEq => {
                    *orders_strings |= is_string(&binary.left, schema);
                    true
                }
                Eq | NotEq | Plus | Minus | Multiply | Divide | Modulo | And | Or
                | IsDistinctFrom | IsNotDistinctFrom | StringConcat => true,
                _ => false,
            }
        }
        Expr::Cast(c) => cast_pushable(c.field.data_type()),
        Expr::ScalarFunction(ScalarFunction { func, .. }) => FUNCTIONS.contains(&func.name()),
        Expr::AggregateFunction(AggregateFunction { func, params }) => {
            let name = func.name();
            if matches!(name, "min" | "max")
                && params
                    .args
                    .first()
                    .is_some_and(|arg| is_string(arg, schema))
            {
                *orders_strings = true;
            }
            AGGREGATES.contains(&name) && params.filter.is_none() && params.order_by.is_empty()
        }
        _ => false,
    }
}

fn literal_pushable(value: &ScalarValue) -> bool {
    matches!(
        value,
        ScalarValue::Null
            | ScalarValue::Boolean(_)
            | ScalarValue::Int8(_)
            | ScalarValue::Int16(_)
            | ScalarValue::Int32(_)
            | ScalarValue::Int64(_)
            | ScalarValue::Float32(_)
            | ScalarValue::Float64(_)
            | ScalarValue::Decimal128(..)
            | ScalarValue::Utf8(_)
            | ScalarValue::Utf8View(_)
            | ScalarValue::LargeUtf8(_)
            | ScalarValue::Date32(_)
            | ScalarValue::IntervalYearMonth(_)
            | ScalarValue::IntervalDayTime(_)
            | ScalarValue::IntervalMonthDayNano(_)
    )
}

fn cast_pushable(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Boolean
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal128(..)
            | DataType::Utf8
            | DataType::Utf8View
            | DataType::LargeUtf8
            | DataType::Date32
    )
}

/// The Postgres type a result column is cast to, so it arrives as quiver's type.
fn output_type(data_type: &DataType) -> Option<String> {
    match data_type {
        DataType::Decimal128(precision, scale) if *scale >= 0 => {
            Some(format!("numeric({precision},{scale})"))
        }
        DataType::Decimal128(..) => None,
        other => pg_type_for(other).map(|(name, _)| name.to_string()),
    }
}

/// Writes `subtree` as Postgres SQL whose columns are `c0, c1, …` of quiver's types.
fn remote_sql(subtree: &LogicalPlan) -> DFResult<Option<String>> {
    // Columns are renamed by position: the unparsed SELECT list can repeat a name.
    let fields = subtree.schema().fields();
    let names: Vec<String> = (0..fields.len())
        .map(|i| quote_ident(&format!("c{i}")))
        .collect();
    let mut casts = Vec::new();
    for (name, field) in names.iter().zip(fields) {
        let Some(pg_type) = output_type(field.data_type()) else {
            return Ok(None);
        };
        casts.push(format!("CAST({name} AS {pg_type}) AS {name}"));
    }
    let remote = subtree
        .clone()
        .transform_down_with_subqueries(|node| {
            // `FROM "schema"."name" AS "alias"`: the columns above name the alias, the one
            // the query gave or else the table's name in quiver.
            let (alias, scan) = match &node {
                LogicalPlan::SubqueryAlias(alias) => match alias.input.as_ref() {
                    LogicalPlan::TableScan(scan) => (alias.alias.table().to_string(), scan),
                    _ => return Ok(Transformed::no(node)),
                },
                LogicalPlan::TableScan(scan) => (scan.table_name.table().to_string(), scan),
                _ => return Ok(Transformed::no(node)),
            };
            let provider = source_as_provider(&scan.source)?;
            let Some(relation) = provider
                .downcast_ref::<PostgresTable>()
                .and_then(PostgresTable::relation)
            else {
                return Ok(Transformed::no(node));
            };
            let remote = TableScanBuilder::new(
                TableReference::partial(relation.schema.as_str(), relation.name.as_str()),
                Arc::clone(&scan.source),
            )
            .with_projection(scan.projection.clone())
            .build()?;
            let alias = SubqueryAlias::try_new(Arc::new(LogicalPlan::TableScan(remote)), alias)?;
            Ok(Transformed::new(
                LogicalPlan::SubqueryAlias(alias),
                true,
                TreeNodeRecursion::Jump,
            ))
        })?
        .data;
    let inner = Unparser::new(&PostgreSqlDialect {}).plan_to_sql(&remote)?;
    Ok(Some(format!(
        "SELECT {} FROM ({inner}) AS {}({})",
        casts.join(", "),
        quote_ident(PUSHED),
        names.join(", ")
    )))
}

/// Decides on `subtree` with the server and builds its replacement if it is pushed.
async fn try_push(subtree: &LogicalPlan, candidate: Candidate) -> Option<LogicalPlan> {
    let sql = remote_sql(subtree).ok()??;
    let target = candidate.target.clone()?;
    let decided = target
        .with_connection(|client| async {
            let decided = match cheaper_on_server(&client, &sql, &candidate).await {
                Some(rows) => describe_query(&client, &sql)
                    .await
                    .map(|columns| Some((rows, columns))),
                // Asking again on a new connection is right only when this one was closed.
                None if client.is_closed() => Err(PostgresError::Server {
                    what: "deciding on pushdown".into(),
                    message: "the connection was closed".into(),
                }),
                None => Ok(None),
            };
            (client, decided)
        })
        .await;
    let (rows, columns) = decided.ok()??;
    if columns.len() != subtree.schema().fields().len() {
        return None;
    }
    let label = format!(
        "query joining {} (pushed: the server's planner expects it to beat reading them)",
        candidate.tables().join(", ")
    );
    let table = PostgresTable::for_described_query(
        target,
        sql,
        columns,
        candidate.options.clone(),
        label,
        rows,
    );
    replacement(subtree, table).ok()
}

/// Asks the server's planner for the subtree's cost and for the cost of sequentially reading
/// each relation it names, all pipelined on one connection. The subtree's estimated rows when
/// it is cheaper on the server.
async fn cheaper_on_server(client: &Client, sql: &str, candidate: &Candidate) -> Option<f64> {
    let explain = format!("EXPLAIN {sql}");
    let reads: Vec<String> = candidate
        .tables()
        .iter()
        .map(|name| format!("EXPLAIN SELECT * FROM {name}"))
        .collect();
    let collation = async {
        if !candidate.orders_strings {
            return Ok(None);
        }
        client
            .simple_query("SELECT datcollate FROM pg_database WHERE datname = current_database()")
            .await
            .map(|messages| first_value(&messages))
    };
    let (query_plan, read_plans, collation) = futures::try_join!(
        client.simple_query(&explain),
        try_join_all(reads.iter().map(|sql| client.simple_query(sql))),
        collation,
    )
    .ok()?;
    if let Some(collation) = collation {
        if !matches!(collation.as_str(), "C" | "POSIX") && !collation.starts_with("C.") {
            return None;
        }
    }
    let query_line = first_value(&query_plan)?;
    let query_cost = total_cost(&query_line)?;
    // Each relation counts once, the least quiver reads: identical scans of a relation share
    // one read ([`crate::snapshot::SnapshotPool::shared_read`]), where Postgres computes a
    // subquery named twice twice (TPC-H Q15: 2.1x slower pushed).
    let mut read_cost = 0.0;
    for plan in &read_plans {
        read_cost += total_cost(&first_value(plan)?)?;
    }
    (query_cost < read_cost).then_some(estimated_rows(&query_line)?)
}

fn first_value(messages: &[SimpleQueryMessage]) -> Option<String> {
    messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
        _ => None,
    })
}

/// The total cost of the first line of text EXPLAIN output: `… (cost=0.00..123.45 rows=…`.
fn total_cost(line: &str) -> Option<f64> {
    let after = &line[line.find("(cost=")? + "(cost=".len()..];
    let total = &after[after.find("..")? + 2..];
    total[..total.find(' ')?].parse().ok()
}

/// The row estimate of the first line of text EXPLAIN output: `… rows=1234 width=…`.
fn estimated_rows(line: &str) -> Option<f64> {
    let after = &line[line.find(" rows=")? + " rows=".len()..];
    after[..after.find(' ')?].parse().ok()
}

/// A scan of `table` with the subtree's exact output schema (names, qualifiers and types).
fn replacement(subtree: &LogicalPlan, table: PostgresTable) -> DFResult<LogicalPlan> {
    let scan =
        LogicalPlanBuilder::scan(PUSHED, provider_as_source(Arc::new(table)), None)?.build()?;
    let scanned = scan.schema().clone();
    let exprs = subtree
        .schema()
        .iter()
        .enumerate()
        .map(|(i, (qualifier, field))| {
            let column = Expr::Column(Column::new(Some(PUSHED), format!("c{i}")));
            let arrives = scanned.field(i).data_type();
            let column = if arrives == field.data_type() {
                column
            } else {
                cast(column, field.data_type().clone())
            };
            column.alias_qualified(qualifier.cloned(), field.name())
        })
        .collect::<Vec<_>>();
    let plan = LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(scan))?);
    let same_types = plan
        .schema()
        .fields()
        .iter()
        .zip(subtree.schema().fields())
        .all(|(new, old)| new.data_type() == old.data_type());
    if same_types {
        Ok(plan)
    } else {
        Err(datafusion::error::DataFusionError::Plan(
            "pushed query types differ".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ColumnEstimate, RelationKind};
    use crate::scan::ScanSource;
    use crate::types::PgColumn;
    use datafusion::prelude::SessionContext;

    fn table(dsn: &str, name: &str) -> Arc<PostgresTable> {
        let column = |name: &str, pg_type: PgType| PgColumn {
            name: name.into(),
            pg_type,
        };
        let columns = vec![
            column(&format!("{name}_id"), PgType::Int4),
            column(&format!("{name}_code"), PgType::Bpchar),
            column(&format!("{name}_name"), PgType::Text),
        ];
        let relation = Relation {
            schema: "public".into(),
            name: name.into(),
            oid: 1,
            kind: RelationKind::Table,
            estimates: vec![ColumnEstimate::default(); columns.len()],
            columns,
        };
        let target = ConnectTarget::parse(dsn).unwrap();
        Arc::new(PostgresTable::new(
            target,
            ScanSource::Relation(relation),
            ScanOptions::default(),
        ))
    }

    /// The subtrees `find` would ask the server about, by their top node and tables.
    async fn candidates(sql: &str) -> Vec<String> {
        let ctx = SessionContext::new();
        for name in ["a", "b"] {
            ctx.register_table(name, table("host=/tmp user=u dbname=shop", name))
                .unwrap();
        }
        ctx.register_table("other", table("host=/tmp user=u dbname=elsewhere", "other"))
            .unwrap();
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        let mut found = Vec::new();
        find(&plan, &mut found);
        found
            .iter()
            .map(|(subtree, candidate)| {
                let tables: Vec<&str> = candidate
                    .relations
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect();
                let top = subtree.display().to_string();
                let top = top.split(':').next().unwrap_or_default().to_string();
                format!("{top} {}", tables.join(","))
            })
            .collect()
    }

    #[tokio::test]
    async fn finds_the_largest_subtree_over_one_database() {
        let join = "FROM a JOIN b ON a_id = b_id";
        assert_eq!(
            candidates(&format!("SELECT a_name, count(*) {join} GROUP BY a_name")).await,
            ["Projection a,b"]
        );
        // A top-level ORDER BY and LIMIT stay in quiver.
        assert_eq!(
            candidates(&format!("SELECT a_name {join} ORDER BY a_name LIMIT 3")).await,
            ["Projection a,b"]
        );
        // Subqueries are part of the subtree.
        assert_eq!(
            candidates("SELECT a_name FROM a WHERE a_id IN (SELECT b_id FROM b)").await,
            ["Projection b,a"]
        );
        // One table alone is the scan's business (its filters are pushed already).
        assert!(candidates("SELECT count(*) FROM a WHERE a_id > 3")
            .await
            .is_empty());
        // Local rows stay; the Postgres join below them is a candidate.
        assert_eq!(
            candidates(&format!(
                "SELECT * FROM (VALUES (1)) v(k) JOIN (SELECT a_id, b_name {join}) x ON x.a_id = v.k"
            ))
            .await,
            ["SubqueryAlias a,b"]
        );
    }

    #[tokio::test]
    async fn keeps_what_postgres_would_answer_differently() {
        let join = "FROM a JOIN b ON a_id = b_id";
        // char(n) compares without its padding in Postgres: the filter stays, the join below
        // it may go.
        let below = ["Inner Join a,b"];
        assert_eq!(
            candidates(&format!("SELECT count(*) {join} WHERE a_code = 'x'")).await,
            below
        );
        // ... while an unreferenced char(n) column does not matter.
        assert_eq!(
            candidates(&format!("SELECT count(*) {join} WHERE a_name = 'x'")).await,
            ["Projection a,b"]
        );
        // ILIKE and upper() fold case by the server's locale.
        assert_eq!(
            candidates(&format!("SELECT count(*) {join} WHERE a_name ILIKE 'x%'")).await,
            below
        );
        assert_eq!(
            candidates(&format!("SELECT upper(a_name) {join}")).await,
            below
        );
        // A join on a char(n) column is not pushed at all.
        assert!(
            candidates("SELECT count(*) FROM a JOIN b ON a_code = b_code")
                .await
                .is_empty()
        );
        // Two databases are two servers.
        assert!(
            candidates("SELECT count(*) FROM a JOIN other ON a_id = other_id")
                .await
                .is_empty()
        );
    }

    #[test]
    fn reads_the_total_cost_of_a_plan_line() {
        assert_eq!(
            total_cost("Hash Join  (cost=5.25..158555.06 rows=6001106 width=8)"),
            Some(158555.06)
        );
        assert_eq!(
            total_cost("Seq Scan on t  (cost=0.00..1.05 rows=5 width=4)"),
            Some(1.05)
        );
        assert_eq!(total_cost("Result  (cost=0.00..0.01"), None);
        assert_eq!(total_cost("nothing here"), None);
        let line = "Hash Join  (cost=5.25..158555.06 rows=6001106 width=8)";
        assert_eq!(estimated_rows(line), Some(6001106.0));
        assert_eq!(estimated_rows("Result  (cost=0.00..0.01 rows=1"), None);
    }

    #[test]
    fn result_columns_arrive_as_quivers_types() {
        assert_eq!(
            output_type(&DataType::Decimal128(38, 4)).as_deref(),
            Some("numeric(38,4)")
        );
        assert_eq!(output_type(&DataType::Int64).as_deref(), Some("int8"));
        assert_eq!(output_type(&DataType::Utf8View).as_deref(), Some("text"));
        assert_eq!(output_type(&DataType::Decimal128(10, -2)), None);
        assert_eq!(output_type(&DataType::UInt64), None);
    }
}
