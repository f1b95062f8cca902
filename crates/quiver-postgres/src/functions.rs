//! The table functions:
//!
//! ```sql
//! SELECT * FROM postgres_scan('host=/tmp dbname=shop', 'public', 'orders');
//! SELECT * FROM postgres_scan_pushdown('dbname=shop', 'public', 'orders') WHERE id > 10;
//! SELECT * FROM postgres_query('dbname=shop', 'SELECT o.id, c.name FROM orders o JOIN customers c USING (cid)');
//! ```
//!
//! Options by name: `pages_per_task = 1000`, `connections = 4`, `filter_pushdown = true`.
//! `postgres_scan` pushes projections only (as DuckDB's does); `postgres_scan_pushdown` and
//! `postgres_query` push filters too.

use std::future::Future;
use std::sync::Arc;

use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;

use crate::connection::ConnectTarget;
use crate::error::PostgresError;
use crate::scan::{PostgresTable, ScanOptions};

/// Registers `postgres_scan`, `postgres_scan_pushdown` and `postgres_query` on `ctx`.
pub fn register_postgres_functions(ctx: &SessionContext) {
    ctx.register_udtf(
        "postgres_scan",
        Arc::new(PostgresScanFunction {
            name: "postgres_scan",
            pushdown: false,
        }),
    );
    ctx.register_udtf(
        "postgres_scan_pushdown",
        Arc::new(PostgresScanFunction {
            name: "postgres_scan_pushdown",
            pushdown: true,
        }),
    );
    ctx.register_udtf("postgres_query", Arc::new(PostgresQueryFunction));
}

#[derive(Debug)]
struct PostgresScanFunction {
    name: &'static str,
    pushdown: bool,
}

impl TableFunctionImpl for PostgresScanFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let mut options = ScanOptions {
            filter_pushdown: self.pushdown,
            query_pushdown: self.pushdown,
            ..ScanOptions::default()
        };
        let positional = parse_args(self.name, args.exprs(), &mut options)?;
        let [dsn, schema, table] = positional.as_slice() else {
            return Err(PostgresError::InvalidArgument(format!(
                "{}: expected (connection string, schema, table), got {} arguments",
                self.name,
                positional.len()
            ))
            .into());
        };
        let target = ConnectTarget::parse(dsn)?.shared();
        let table = block_on(PostgresTable::for_relation(target, schema, table, options))??;
        Ok(Arc::new(table))
    }
}

#[derive(Debug)]
struct PostgresQueryFunction;

impl TableFunctionImpl for PostgresQueryFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let mut options = ScanOptions::default();
        let positional = parse_args("postgres_query", args.exprs(), &mut options)?;
        let [dsn, sql] = positional.as_slice() else {
            return Err(PostgresError::InvalidArgument(format!(
                "postgres_query: expected (connection string, query), got {} arguments",
                positional.len()
            ))
            .into());
        };
        let target = ConnectTarget::parse(dsn)?.shared();
        let table = block_on(PostgresTable::for_query(target, sql, options))??;
        Ok(Arc::new(table))
    }
}

/// The positional string arguments; named options are applied to `options`.
fn parse_args(function: &str, exprs: &[Expr], options: &mut ScanOptions) -> DFResult<Vec<String>> {
    let mut positional = Vec::new();
    for expr in exprs {
        if let Some((name, value)) = named_argument(expr) {
            apply_option(function, options, &name, &value)?;
            continue;
        }
        match expr {
            Expr::Literal(
                ScalarValue::Utf8(Some(s))
                | ScalarValue::Utf8View(Some(s))
                | ScalarValue::LargeUtf8(Some(s)),
                _,
            ) => positional.push(s.clone()),
            // Never echo the argument: it may be a connection string with a password.
            _ => {
                return Err(PostgresError::InvalidArgument(format!(
                    "{function}: argument {} must be a string literal",
                    positional.len() + 1
                ))
                .into())
            }
        }
    }
    Ok(positional)
}

/// Applies one named option (shared by the table functions and ATTACH).
pub fn apply_option(
    function: &str,
    options: &mut ScanOptions,
    name: &str,
    value: &ScalarValue,
) -> Result<(), PostgresError> {
    let positive = || {
        match value {
            ScalarValue::Int64(Some(n)) if *n > 0 => Ok(*n as u64),
            ScalarValue::Int32(Some(n)) if *n > 0 => Ok(*n as u64),
            ScalarValue::Utf8(Some(s)) => s.trim().parse::<u64>().ok().filter(|n| *n > 0).ok_or(()),
            _ => Err(()),
        }
        .map_err(|_| {
            PostgresError::InvalidArgument(format!("{function}: {name} must be a positive integer"))
        })
    };
    match name.to_lowercase().as_str() {
        "pages_per_task" => options.pages_per_task = positive()?,
        "connections" => options.connections = Some(positive()? as usize),
        "filter_pushdown" => {
            options.filter_pushdown = match value {
                ScalarValue::Boolean(Some(b)) => *b,
                ScalarValue::Utf8(Some(s)) if s.eq_ignore_ascii_case("true") => true,
                ScalarValue::Utf8(Some(s)) if s.eq_ignore_ascii_case("false") => false,
                _ => {
                    return Err(PostgresError::InvalidArgument(format!(
                        "{function}: filter_pushdown must be true or false"
                    )))
                }
            }
        }
        other => {
            return Err(PostgresError::InvalidArgument(format!(
                "{function}: unknown option '{other}'; valid options are pages_per_task, \
                 connections, filter_pushdown"
            )))
        }
    }
    Ok(())
}

/// quiver's statement rewriter turns `name = value` arguments into `named_struct('name',
/// value)`, which the planner folds into a one-field struct literal.
fn named_argument(expr: &Expr) -> Option<(String, ScalarValue)> {
    match expr {
        Expr::Literal(ScalarValue::Struct(array), _) if array.num_columns() == 1 => {
            let name = array.fields().first()?.name().clone();
            let value = ScalarValue::try_from_array(array.column(0), 0).ok()?;
            Some((name, value))
        }
        Expr::ScalarFunction(call) if call.name() == "named_struct" => match call.args.as_slice() {
            [Expr::Literal(ScalarValue::Utf8(Some(name)), _), Expr::Literal(value, _)] => {
                Some((name.clone(), value.clone()))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Runs `future` to completion from synchronous code (DataFusion's table functions are
/// synchronous) on a scoped thread, on the runtime connections run their I/O on
/// ([`crate::connection::io_runtime`]), so it works whatever runtime (or none) the caller is on.
pub(crate) fn block_on<F>(future: F) -> Result<F::Output, PostgresError>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = crate::connection::io_runtime()?;
    std::thread::scope(|scope| {
        let handle = scope.spawn(|| runtime.block_on(future));
        match handle.join() {
            Ok(output) => Ok(output),
            Err(_) => Err(PostgresError::Server {
                what: "looking up the catalog".into(),
                message: "the lookup thread panicked".into(),
            }),
        }
    })
}
