//! Case-insensitive names with exact-match preference, as DuckDB resolves them.
//!
//! DataFusion either lowercases unquoted identifiers (so a Parquet column `UserID` can only be
//! reached as `"UserID"`) or, with normalization off, matches them exactly (so `userid` fails).
//! quiver keeps identifiers as written and, before planning, rewrites each table and column
//! name that has no exact match to the one name that matches it ignoring case. Two names that
//! differ only by case make an unmatched spelling ambiguous, which is an error naming both.
//!
//! The same pass applies quiver's other syntax conveniences, because it already walks every
//! table reference: a quoted path as a table name (`FROM 'data/*.parquet'`) becomes a
//! `read_auto(...)` call aliased to the file's stem, table function names are matched ignoring
//! case, and `name => value` arguments become `name = value`.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use datafusion::catalog::TableProvider;
use datafusion::common::DFSchema;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, Ident, JoinConstraint, JoinOperator,
    ObjectName, ObjectNamePart, Query, SelectItem, SelectItemQualifiedWildcardKind, SetExpr,
    Statement, TableAlias, TableFactor, TableFunctionArgs, Value, Visit, VisitMut, Visitor,
    VisitorMut,
};
use std::sync::Arc;

use crate::error::{QuiverError, Result};
use crate::external::{ExternalTables, Registrations, EXTERNAL_SCHEMA};
use crate::files::{file_table, FileScan};

/// Rewrites `statement` in place so that DataFusion's exact-match planner resolves its names.
///
/// Single-part names the catalog does not know are offered to `external`; the tables it returns
/// are registered in `registrations` (which removes them again when dropped).
pub(crate) async fn resolve_names(
    ctx: &SessionContext,
    statement: &mut DFStatement,
    external: Option<&dyn ExternalTables>,
    registrations: &mut Registrations,
) -> Result<()> {
    let mut collector = Collector::default();
    collect(statement, &mut collector);

    let mut scope = Scope::default();
    for cte in &collector.ctes {
        scope.ctes.insert(cte.clone());
    }
    // A CTE read without an alias, a subquery or an UNNEST qualifies its columns by its name.
    scope
        .opaque_qualifiers
        .extend(collector.ctes.iter().chain(&collector.derived).cloned());
    scope
        .extra_columns
        .extend(collector.aliases.iter().cloned());

    prefetch_postgres_tables(ctx, &collector, &scope).await;

    // Tables: resolve their names, then their columns.
    for reference in &collector.tables {
        let Some(parts) = idents(&reference.name) else {
            continue;
        };
        if parts.len() == 1
            && !reference.python_call
            && scope.resolve_cte(&parts[0].value).is_some()
        {
            continue;
        }
        let resolved = if reference.python_call {
            None
        } else {
            resolve_table_name(ctx, &parts)?
        };
        if resolved.is_none() && reference.in_from && parts.len() == 1 {
            let written = &parts[0].value;
            let found = match external {
                Some(external) => external.lookup(written, registrations.words())?,
                None => None,
            };
            match found {
                Some(provider) => {
                    // Columns are resolved among those the statement can see.
                    let (unique, provider) = registrations.add(provider)?;
                    let catalog = ctx
                        .state_ref()
                        .read()
                        .config_options()
                        .catalog
                        .default_catalog
                        .clone();
                    scope.renames.insert(
                        reference.name.to_string(),
                        vec![catalog, EXTERNAL_SCHEMA.to_string(), unique],
                    );
                    scope
                        .externals
                        .insert(reference.name.to_string(), written.clone());
                    let qualifier = reference.alias.clone().unwrap_or_else(|| written.clone());
                    scope.add_table(&qualifier, &provider);
                    continue;
                }
                None if reference.python_call => {
                    let candidates = external.map(|e| e.candidates()).unwrap_or_default();
                    let suggestions = crate::suggest::closest(written, &candidates, 3);
                    let hint = if suggestions.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; did you mean {}?",
                            crate::suggest::quote_list(&suggestions)
                        )
                    };
                    return Err(QuiverError::Catalog(format!(
                        "Python({written}): no DataFrame, Arrow or NumPy object named \"{written}\" is in scope{hint}"
                    )));
                }
                None => {}
            }
        }
        let exact: Vec<String> = match &resolved {
            Some(names) => names.clone(),
            None => parts.iter().map(|p| p.value.clone()).collect(),
        };
        match resolved {
            Some(names) => {
                scope.renames.insert(reference.name.to_string(), names);
            }
            None if reference.in_from => {
                let wanted = parts.iter().map(|p| p.value.clone()).collect::<Vec<_>>();
                if let Some(table_ref) = table_ref_from_parts(&wanted) {
                    if let Ok(false) = ctx.table_exist(table_ref) {
                        let mut error = table_not_found(ctx, &wanted, &collector.ctes);
                        if let (Some(external), QuiverError::Catalog(message)) =
                            (external, &mut error)
                        {
                            let candidates = external.candidates();
                            if !candidates.is_empty() {
                                message.push_str(&format!(
                                    " (DataFrame-like variables in scope: {})",
                                    candidates.join(", ")
                                ));
                            }
                        }
                        return Err(error);
                    }
                }
            }
            None => {}
        }
        let table_ref = datafusion::common::TableReference::from(exact.join("."));
        let qualified: Vec<String> = exact.clone();
        if let Ok(provider) = ctx
            .table_provider(table_ref_from_parts(&qualified).unwrap_or(table_ref))
            .await
        {
            let qualifier = reference
                .alias
                .clone()
                .unwrap_or_else(|| exact.last().cloned().unwrap_or_default());
            scope.add_table(&qualifier, &provider);
        }
    }

    // Table functions and quoted paths: build the provider to learn the columns.
    if collector.functions.is_empty() {
        return apply(statement, &scope);
    }
    let state = ctx.state();
    for call in &collector.functions {
        let provider: Option<Arc<dyn TableProvider>> = match &call.path {
            Some(path) => file_table(&state, &FileScan::path(path.clone()))
                .await
                .ok()
                .map(|t| t as Arc<dyn TableProvider>),
            None => {
                let function = state
                    .table_functions()
                    .get(&call.name.to_lowercase())
                    .cloned();
                let mut exprs = Vec::with_capacity(call.args.len());
                let mut ok = true;
                for arg in &call.args {
                    match state.create_logical_expr(arg, &DFSchema::empty()) {
                        Ok(expr) => exprs.push(expr),
                        Err(_) => ok = false,
                    }
                }
                match function {
                    Some(function) if ok => function
                        .create_table_provider_with_args(
                            datafusion::catalog::TableFunctionArgs::new(&exprs, &state),
                        )
                        .ok(),
                    _ => None,
                }
            }
        };
        if let Some(provider) = provider {
            scope.add_table(&call.qualifier, &provider);
        }
    }

    apply(statement, &scope)
}

fn table_ref_from_parts(parts: &[String]) -> Option<datafusion::common::TableReference> {
    use datafusion::common::TableReference;
    match parts {
        [table] => Some(TableReference::bare(table.as_str())),
        [schema, table] => Some(TableReference::partial(schema.as_str(), table.as_str())),
        [catalog, schema, table] => Some(TableReference::full(
            catalog.as_str(),
            schema.as_str(),
            table.as_str(),
        )),
        _ => None,
    }
}

fn idents(name: &ObjectName) -> Option<Vec<Ident>> {
    name.0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => Some(ident.clone()),
            ObjectNamePart::Function(_) => None,
        })
        .collect()
}

/// Picks `wanted` from `candidates`: the exact spelling if present, else the one candidate
/// equal ignoring case. `Ok(None)` when nothing matches.
pub(crate) fn pick<'a>(
    what: &str,
    wanted: &str,
    candidates: impl Iterator<Item = &'a String> + Clone,
) -> Result<Option<String>> {
    if candidates.clone().any(|c| c == wanted) {
        return Ok(Some(wanted.to_string()));
    }
    let lower = wanted.to_lowercase();
    let matches: BTreeSet<&String> = candidates.filter(|c| c.to_lowercase() == lower).collect();
    match matches.len() {
        0 => Ok(None),
        1 => Ok(matches.into_iter().next().cloned()),
        _ => {
            let names: Vec<String> = matches.into_iter().cloned().collect();
            Err(QuiverError::Catalog(format!(
                "{what} \"{wanted}\" is ambiguous: it matches {} which differ only by case; \
                 write the exact name in double quotes",
                crate::suggest::quote_list(&names)
            )))
        }
    }
}

/// Resolves a table name of 1–3 parts against the catalogs, ignoring case where no exact match
/// exists. `Ok(None)` leaves the name as written (DataFusion then reports it as not found).
fn resolve_table_name(ctx: &SessionContext, parts: &[Ident]) -> Result<Option<Vec<String>>> {
    // The few things needed, not a copy of the whole session state.
    let (default_catalog, default_schema, catalogs) = {
        let state = ctx.state_ref();
        let state = state.read();
        let defaults = &state.config_options().catalog;
        (
            defaults.default_catalog.clone(),
            defaults.default_schema.clone(),
            Arc::clone(state.catalog_list()),
        )
    };
    let (catalog_ident, schema_ident, table_ident) = match parts {
        [table] => (None, None, table),
        [schema, table] => (None, Some(schema), table),
        [catalog, schema, table] => (Some(catalog), Some(schema), table),
        _ => return Ok(None),
    };
    let catalog_name = match catalog_ident {
        None => default_catalog,
        Some(ident) => match pick("catalog", &ident.value, catalogs.catalog_names().iter())? {
            Some(name) => name,
            None => return Ok(None),
        },
    };
    let Some(catalog) = catalogs.catalog(&catalog_name) else {
        return Ok(None);
    };
    let schema_name = match schema_ident {
        None => default_schema,
        Some(ident) => match pick("schema", &ident.value, catalog.schema_names().iter())? {
            Some(name) => name,
            None => return Ok(None),
        },
    };
    let Some(schema) = catalog.schema(&schema_name) else {
        return Ok(None);
    };
    let table_names = schema.table_names();
    let Some(table_name) = pick("table", &table_ident.value, table_names.iter())? else {
        return Ok(None);
    };
    Ok(Some(match parts.len() {
        1 => vec![table_name],
        2 => vec![schema_name, table_name],
        _ => vec![catalog_name, schema_name, table_name],
    }))
}

/// The tables of attached Postgres databases that `collector` names, described in one
/// statement per schema before the loop in [`resolve_names`] asks for each (a statement naming
/// eight tables otherwise waited for eight descriptions, one after another).
async fn prefetch_postgres_tables(ctx: &SessionContext, collector: &Collector, scope: &Scope) {
    let (default_catalog, default_schema) = {
        let state = ctx.state_ref();
        let state = state.read();
        let defaults = &state.config_options().catalog;
        (
            defaults.default_catalog.clone(),
            defaults.default_schema.clone(),
        )
    };
    let mut wanted: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for reference in &collector.tables {
        let Some(parts) = idents(&reference.name) else {
            continue;
        };
        if reference.python_call
            || (parts.len() == 1 && scope.resolve_cte(&parts[0].value).is_some())
        {
            continue;
        }
        // A schema that lists no names (an attached schema's alias) resolves nothing here;
        // its tables are asked for as written, as the loop in `resolve_names` does.
        let mut names = match resolve_table_name(ctx, &parts) {
            Ok(Some(names)) => names,
            Ok(None) => parts.iter().map(|p| p.value.clone()).collect(),
            Err(_) => continue,
        };
        let Some(table) = names.pop() else {
            continue;
        };
        let schema = names.pop().unwrap_or_else(|| default_schema.clone());
        let catalog = names.pop().unwrap_or_else(|| default_catalog.clone());
        wanted.entry((catalog, schema)).or_default().push(table);
    }
    for ((catalog, schema), tables) in wanted {
        let Some(provider) = ctx.catalog(&catalog).and_then(|c| c.schema(&schema)) else {
            continue;
        };
        let any: &dyn std::any::Any = provider.as_ref();
        if let Some(postgres) = any.downcast_ref::<quiver_postgres::attach::PostgresSchema>() {
            postgres.prefetch(&tables).await;
        }
    }
}

#[derive(Default, Debug)]
struct Collector {
    tables: Vec<TableReference>,
    functions: Vec<FunctionCall>,
    ctes: Vec<String>,
    aliases: Vec<String>,
    /// The aliases of subqueries, UNNESTs and other relations that are not tables.
    derived: Vec<String>,
}

#[derive(Debug)]
struct TableReference {
    name: ObjectName,
    alias: Option<String>,
    /// Read in a FROM clause (so it must exist), rather than a DROP/INSERT target.
    in_from: bool,
    /// Written as chDB's `Python(name)`: only an external object may match.
    python_call: bool,
}

/// `table "ordrs" not found; did you mean "orders"?`
fn table_not_found(ctx: &SessionContext, parts: &[String], ctes: &[String]) -> QuiverError {
    let name = parts.join(".");
    let mut candidates: Vec<String> = ctes.to_vec();
    let state = ctx.state();
    let defaults = &state.config_options().catalog;
    if let Some(schema) = state
        .catalog_list()
        .catalog(&defaults.default_catalog)
        .and_then(|catalog| catalog.schema(&defaults.default_schema))
    {
        candidates.extend(schema.table_names());
    }
    let wanted = parts.last().cloned().unwrap_or_default();
    let suggestions = crate::suggest::closest(&wanted, &candidates, 3);
    let hint = if suggestions.is_empty() {
        String::new()
    } else {
        format!(
            "; did you mean {}?",
            crate::suggest::quote_list(&suggestions)
        )
    };
    QuiverError::Catalog(format!("table \"{name}\" not found{hint}"))
}

#[derive(Debug)]
struct FunctionCall {
    name: String,
    /// The arguments as SQL text, named ones as `name = value`.
    args: Vec<String>,
    /// For a quoted path used as a table name.
    path: Option<String>,
    qualifier: String,
}

fn collect(statement: &DFStatement, collector: &mut Collector) {
    match statement {
        DFStatement::Statement(inner) => {
            let _ = inner.visit(collector);
            if let Statement::Drop { names, .. } = inner.as_ref() {
                for name in names {
                    collector.tables.push(TableReference {
                        name: name.clone(),
                        alias: None,
                        in_from: false,
                        python_call: false,
                    });
                }
            }
        }
        DFStatement::CopyTo(copy) => match &copy.source {
            CopyToSource::Relation(name) => collector.tables.push(TableReference {
                name: name.clone(),
                alias: None,
                in_from: true,
                python_call: false,
            }),
            CopyToSource::Query(query) => {
                let _ = query.visit(collector);
            }
        },
        DFStatement::Explain(explain) => collect(&explain.statement, collector),
        _ => {}
    }
}

fn file_stem(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split('.').next().unwrap_or(name);
    if stem.is_empty() || stem.contains(['*', '?', '[']) {
        "file".to_string()
    } else {
        stem.to_string()
    }
}

fn function_arg_sql(arg: &FunctionArg) -> String {
    match option_argument(arg) {
        Some(named) => named.to_string(),
        None => arg.to_string(),
    }
}

/// A table function option, `name => value` or DuckDB's `name = value`, as
/// `named_struct('name', value)`: DataFusion plans table function arguments against an empty
/// schema, where a bare `name` would be an unknown column. The file functions read it back.
fn option_argument(arg: &FunctionArg) -> Option<FunctionArg> {
    // A bare word as a positional argument is a name, not a column: `file('x', CSV)`.
    if let FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(ident))) = arg {
        return Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(
            Value::SingleQuotedString(ident.value.clone()).into(),
        ))));
    }
    let (name, value) = match arg {
        FunctionArg::Named {
            name,
            arg: FunctionArgExpr::Expr(value),
            ..
        } => (name.value.clone(), value.clone()),
        FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        })) => match left.as_ref() {
            Expr::Identifier(ident) => (ident.value.clone(), right.as_ref().clone()),
            _ => return None,
        },
        _ => return None,
    };
    // An unquoted word as the value (`format = array`, `file(p, CSV)`) is a string.
    let value = match value {
        Expr::Identifier(ident) => Expr::Value(Value::SingleQuotedString(ident.value).into()),
        other => other,
    };
    let call = format!(
        "named_struct('{}', {value})",
        name.to_lowercase().replace('\'', "''")
    );
    let parsed = datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::GenericDialect {},
    )
    .try_with_sql(&call)
    .and_then(|mut parser| parser.parse_expr())
    .ok()?;
    Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(parsed)))
}

impl Visitor for Collector {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.ctes.push(cte.alias.name.value.clone());
                self.aliases
                    .extend(cte.alias.columns.iter().map(|c| c.name.value.clone()));
            }
        }
        collect_select_aliases(&query.body, &mut self.aliases);
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        match factor {
            TableFactor::Table {
                name, alias, args, ..
            } => {
                let alias_name = alias.as_ref().map(|a| a.name.value.clone());
                if let Some(alias) = alias {
                    self.aliases
                        .extend(alias.columns.iter().map(|c| c.name.value.clone()));
                }
                if let Some(object) = python_call_object(name, args.as_ref()) {
                    self.tables.push(TableReference {
                        name: ObjectName::from(vec![object]),
                        alias: alias_name,
                        in_from: true,
                        python_call: true,
                    });
                    return ControlFlow::Continue(());
                }
                match (args, quoted_path(name)) {
                    (Some(args), _) => self.functions.push(FunctionCall {
                        name: name.to_string(),
                        args: args.args.iter().map(function_arg_sql).collect(),
                        path: None,
                        qualifier: alias_name.unwrap_or_else(|| format!("{name}()")),
                    }),
                    (None, Some(path)) => self.functions.push(FunctionCall {
                        name: "read_auto".into(),
                        args: Vec::new(),
                        qualifier: alias_name.unwrap_or_else(|| file_stem(&path)),
                        path: Some(path),
                    }),
                    (None, None) => self.tables.push(TableReference {
                        name: name.clone(),
                        alias: alias_name,
                        in_from: true,
                        python_call: false,
                    }),
                }
            }
            TableFactor::Derived {
                alias: Some(alias), ..
            }
            | TableFactor::UNNEST {
                alias: Some(alias), ..
            }
            | TableFactor::Function {
                alias: Some(alias), ..
            } => {
                self.derived.push(alias.name.value.clone());
                self.aliases
                    .extend(alias.columns.iter().map(|c| c.name.value.clone()));
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_statement(&mut self, statement: &Statement) -> ControlFlow<()> {
        if let Statement::Insert(insert) = statement {
            if let datafusion::sql::sqlparser::ast::TableObject::TableName(name) = &insert.table {
                self.tables.push(TableReference {
                    name: name.clone(),
                    alias: None,
                    in_from: false,
                    python_call: false,
                });
            }
        }
        if let Statement::ExplainTable { table_name, .. } = statement {
            self.tables.push(TableReference {
                name: table_name.clone(),
                alias: None,
                in_from: true,
                python_call: false,
            });
        }
        ControlFlow::Continue(())
    }
}

fn collect_select_aliases(body: &SetExpr, aliases: &mut Vec<String>) {
    match body {
        SetExpr::Select(select) => {
            for item in &select.projection {
                if let SelectItem::ExprWithAlias { alias, .. } = item {
                    aliases.push(alias.value.clone());
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            collect_select_aliases(left, aliases);
            collect_select_aliases(right, aliases);
        }
        _ => {}
    }
}

/// chDB's `Python(df)`: the object name it reads (a bare or quoted word).
fn python_call_object(name: &ObjectName, args: Option<&TableFunctionArgs>) -> Option<Ident> {
    let args = args?;
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] if ident.value.eq_ignore_ascii_case("python") => {}
        _ => return None,
    }
    match args.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(ident)))] => {
            Some(ident.clone())
        }
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value)))] => match &value.value {
            Value::SingleQuotedString(text) | Value::DoubleQuotedString(text) => {
                Some(Ident::new(text.clone()))
            }
            _ => None,
        },
        _ => None,
    }
}

/// A single-quoted table name is a path (`FROM 'data/*.parquet'`), as in DuckDB and
/// datafusion-cli.
fn quoted_path(name: &ObjectName) -> Option<String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] if ident.quote_style == Some('\'') => {
            Some(ident.value.clone())
        }
        _ => None,
    }
}

/// What the rewrite knows about the names in scope.
#[derive(Default, Debug)]
struct Scope {
    ctes: BTreeSet<String>,
    /// Original table name text → the exact parts it resolved to.
    renames: BTreeMap<String, Vec<String>>,
    /// Qualifier (alias or table name) → its columns.
    qualifiers: BTreeMap<String, Vec<String>>,
    /// Qualifiers whose columns are not listed (CTEs, subqueries, UNNESTs): their columns
    /// are among `all_columns` and `extra_columns`.
    opaque_qualifiers: BTreeSet<String>,
    /// Every column of every table in the statement, plus the aliases it defines.
    all_columns: BTreeSet<String>,
    extra_columns: BTreeSet<String>,
    /// Original table name text of an external table → the name its rows are qualified by.
    externals: BTreeMap<String, String>,
}

impl Scope {
    fn add_table(&mut self, qualifier: &str, provider: &Arc<dyn TableProvider>) {
        let columns: Vec<String> = provider
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        self.all_columns.extend(columns.iter().cloned());
        self.qualifiers
            .entry(qualifier.to_string())
            .or_default()
            .extend(columns);
    }

    fn resolve_cte(&self, name: &str) -> Option<String> {
        pick("table", name, self.ctes.iter()).ok().flatten()
    }

    fn resolve_column(&self, ident: &mut Ident) -> Result<()> {
        let candidates = self.all_columns.iter().chain(self.extra_columns.iter());
        if let Some(found) = pick("column", &ident.value, candidates)? {
            if found != ident.value {
                ident.value = found;
                ident.quote_style = Some('"');
            }
        }
        Ok(())
    }

    /// `qualifier` respelled as the table or alias it names ignoring case, if it names one.
    fn resolve_qualifier(&self, qualifier: &mut Ident) -> Result<()> {
        let names: BTreeSet<&String> = self
            .qualifiers
            .keys()
            .chain(&self.opaque_qualifiers)
            .collect();
        if let Some(found) = pick("table", &qualifier.value, names.iter().copied())? {
            if found != qualifier.value {
                qualifier.value = found;
                qualifier.quote_style = Some('"');
            }
        }
        Ok(())
    }

    fn resolve_qualified(&self, parts: &mut [Ident]) -> Result<()> {
        let Some((column, qualifier)) = parts.split_last_mut() else {
            return Ok(());
        };
        let Some(last_qualifier) = qualifier.last_mut() else {
            return Ok(());
        };
        // A name both a table and a subquery use is one qualifier, not two.
        let names: BTreeSet<&String> = self
            .qualifiers
            .keys()
            .chain(&self.opaque_qualifiers)
            .collect();
        match pick("table", &last_qualifier.value, names.iter().copied())? {
            Some(found) => {
                if found != last_qualifier.value {
                    last_qualifier.value = found.clone();
                    last_qualifier.quote_style = Some('"');
                }
                match self.qualifiers.get(&found) {
                    Some(columns) => {
                        if let Some(exact) = pick("column", &column.value, columns.iter())? {
                            if exact != column.value {
                                column.value = exact;
                                column.quote_style = Some('"');
                            }
                        }
                        Ok(())
                    }
                    None => self.resolve_column(column),
                }
            }
            // Not a table qualifier: a column followed by struct field names.
            None => match parts.first_mut() {
                Some(first) => self.resolve_column(first),
                None => Ok(()),
            },
        }
    }
}

fn apply(statement: &mut DFStatement, scope: &Scope) -> Result<()> {
    let mut rewriter = Rewriter {
        scope,
        in_table_function: 0,
    };
    let outcome = match statement {
        DFStatement::Statement(inner) => {
            if let Statement::Drop { names, .. } = inner.as_mut() {
                for name in names.iter_mut() {
                    rewriter.rename_table(name);
                }
            }
            inner.visit(&mut rewriter)
        }
        DFStatement::CopyTo(copy) => match &mut copy.source {
            CopyToSource::Relation(name) => {
                rewriter.rename_table(name);
                ControlFlow::Continue(())
            }
            CopyToSource::Query(query) => query.visit(&mut rewriter),
        },
        DFStatement::Explain(explain) => return apply(&mut explain.statement, scope),
        _ => ControlFlow::Continue(()),
    };
    match outcome {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(error) => Err(error),
    }
}

struct Rewriter<'a> {
    scope: &'a Scope,
    /// Depth inside a table function's argument list, where names are option names, not
    /// columns.
    in_table_function: usize,
}

impl Rewriter<'_> {
    fn rename_table(&self, name: &mut ObjectName) {
        if let Some(parts) = idents(name) {
            if parts.len() == 1 {
                if let Some(cte) = self.scope.resolve_cte(&parts[0].value) {
                    if cte != parts[0].value {
                        *name = ObjectName::from(vec![Ident::with_quote('"', cte)]);
                    }
                    return;
                }
            }
        }
        if let Some(exact) = self.scope.renames.get(&name.to_string()) {
            *name = ObjectName::from(
                exact
                    .iter()
                    .map(|part| Ident::with_quote('"', part.clone()))
                    .collect::<Vec<_>>(),
            );
        }
    }
}

impl VisitorMut for Rewriter<'_> {
    type Break = QuiverError;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<QuiverError> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            // `t.*` names its table or alias ignoring case too.
            for item in select.projection.iter_mut() {
                if let SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(name),
                    _,
                ) = item
                {
                    if let [ObjectNamePart::Identifier(ident)] = name.0.as_mut_slice() {
                        if let Err(error) = self.scope.resolve_qualifier(ident) {
                            return ControlFlow::Break(error);
                        }
                    }
                }
            }
            for from in select.from.iter_mut() {
                for join in from.joins.iter_mut() {
                    let constraint = match &mut join.join_operator {
                        JoinOperator::Join(c)
                        | JoinOperator::Inner(c)
                        | JoinOperator::Left(c)
                        | JoinOperator::LeftOuter(c)
                        | JoinOperator::Right(c)
                        | JoinOperator::RightOuter(c)
                        | JoinOperator::FullOuter(c) => c,
                        _ => continue,
                    };
                    if let JoinConstraint::Using(names) = constraint {
                        for name in names.iter_mut() {
                            if let [ObjectNamePart::Identifier(ident)] = name.0.as_mut_slice() {
                                if let Err(error) = self.scope.resolve_column(ident) {
                                    return ControlFlow::Break(error);
                                }
                            }
                        }
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<QuiverError> {
        if let TableFactor::Table {
            name, alias, args, ..
        } = factor
        {
            if let Some(object) = python_call_object(name, args.as_ref()) {
                *name = ObjectName::from(vec![object]);
                *args = None;
            }
            if args.is_none() {
                if let Some(written) = self.scope.externals.get(&name.to_string()) {
                    if alias.is_none() {
                        *alias = Some(TableAlias {
                            explicit: true,
                            name: Ident::with_quote('"', written.clone()),
                            columns: Vec::new(),
                            at: None,
                        });
                    }
                }
            }
            if let Some(path) = quoted_path(name) {
                if args.is_none() {
                    *name = ObjectName::from(vec![Ident::new("read_auto")]);
                    *args = Some(TableFunctionArgs {
                        args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(
                            Value::SingleQuotedString(path.clone()).into(),
                        )))],
                        settings: None,
                    });
                    if alias.is_none() {
                        *alias = Some(TableAlias {
                            explicit: true,
                            name: Ident::with_quote('"', file_stem(&path)),
                            columns: Vec::new(),
                            at: None,
                        });
                    }
                }
            }
            match args {
                Some(args) => {
                    self.in_table_function += 1;
                    if let [ObjectNamePart::Identifier(ident)] = name.0.as_mut_slice() {
                        ident.value = ident.value.to_lowercase();
                        ident.quote_style = None;
                    }
                    for arg in args.args.iter_mut() {
                        if let Some(named) = option_argument(arg) {
                            *arg = named;
                        }
                    }
                }
                None => self.rename_table(name),
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<QuiverError> {
        if let TableFactor::Table { args: Some(_), .. } = factor {
            self.in_table_function = self.in_table_function.saturating_sub(1);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_statement(&mut self, statement: &mut Statement) -> ControlFlow<QuiverError> {
        match statement {
            Statement::Insert(insert) => {
                if let datafusion::sql::sqlparser::ast::TableObject::TableName(name) =
                    &mut insert.table
                {
                    self.rename_table(name);
                }
                for column in insert.columns.iter_mut() {
                    if let [ObjectNamePart::Identifier(ident)] = column.0.as_mut_slice() {
                        if let Err(error) = self.scope.resolve_column(ident) {
                            return ControlFlow::Break(error);
                        }
                    }
                }
            }
            Statement::ExplainTable { table_name, .. } => self.rename_table(table_name),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<QuiverError> {
        if self.in_table_function > 0 {
            return ControlFlow::Continue(());
        }
        let outcome = match expr {
            Expr::Identifier(ident) => self.scope.resolve_column(ident),
            Expr::CompoundIdentifier(parts) => self.scope.resolve_qualified(parts),
            _ => Ok(()),
        };
        match outcome {
            Ok(()) => ControlFlow::Continue(()),
            Err(error) => ControlFlow::Break(error),
        }
    }
}
