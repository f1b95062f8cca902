//! External tables seen through only the columns a query can name.
//!
//! DataFusion's planning costs grow with the width of the tables it plans over: every analyzer
//! and optimizer pass rebuilds schemas, and a 105-column DataFrame (ClickBench's `hits`) makes a
//! `SELECT count(*)` spend most of its time there. Projection pushdown trims the scan, but only
//! after those passes. So when a query has no wildcard, each table a caller supplies for it
//! ([`crate::external`]) is registered through [`NarrowTable`], which shows DataFusion only the
//! columns whose names appear, ignoring case, among the query's words. A query can only reach a
//! column by writing its name, so the rest cannot matter; anything that expands to every column
//! (`*`, `t.*`, `TABLE t`, `NATURAL JOIN`) turns the narrowing off, and so does any statement
//! but a query. A query that fails to plan is planned again without narrowing, so its error
//! lists every column.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, Statistics};
use datafusion::datasource::TableType;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArguments, Query, SelectItem, SetExpr,
    Statement, Visit, Visitor,
};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

/// `words` (the statement's own, from [`words_of`]) when `statement` is a query whose external
/// tables may be narrowed to the columns those words name; `None` when it is not a query or
/// names every column of some table without writing their names.
pub(crate) fn query_words(
    statement: &DFStatement,
    words: Option<&HashSet<String>>,
) -> Option<HashSet<String>> {
    let DFStatement::Statement(inner) = statement else {
        return None;
    };
    let Statement::Query(_) = inner.as_ref() else {
        return None;
    };
    let mut wildcards = Wildcards(false);
    let _ = inner.visit(&mut wildcards);
    if wildcards.0 {
        return None;
    }
    words.cloned()
}

/// The words among `tokens`, lowercased; `None` for an unquoted NATURAL (a join on every
/// shared column). Taken from the tokens the statement was parsed from, so that planning
/// need not print and tokenize it again.
pub(crate) fn words_of(tokens: &[TokenWithSpan]) -> Option<HashSet<String>> {
    let mut words = HashSet::new();
    for token in tokens {
        if let Token::Word(word) = &token.token {
            if word.quote_style.is_none() && word.keyword == Keyword::NATURAL {
                return None;
            }
            words.insert(word.value.to_lowercase());
        }
    }
    Some(words)
}

/// Finds whatever expands to all of a table's columns.
struct Wildcards(bool);

impl Visitor for Wildcards {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if expands_columns(&query.body) {
            self.0 = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &SqlExpr) -> ControlFlow<()> {
        let expands = match expr {
            SqlExpr::Wildcard(_) | SqlExpr::QualifiedWildcard(..) => true,
            // `count(*)` counts rows; `f(t.*)` takes every column of t.
            SqlExpr::Function(function) => match &function.args {
                FunctionArguments::List(list) => list.args.iter().any(|arg| {
                    let value = match arg {
                        FunctionArg::Named { arg, .. }
                        | FunctionArg::ExprNamed { arg, .. }
                        | FunctionArg::Unnamed(arg) => arg,
                    };
                    matches!(value, FunctionArgExpr::QualifiedWildcard(_))
                }),
                _ => false,
            },
            _ => false,
        };
        if expands {
            self.0 = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

fn expands_columns(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(select) => select.projection.iter().any(|item| {
            matches!(
                item,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        }),
        SetExpr::Query(query) => expands_columns(&query.body),
        SetExpr::SetOperation { left, right, .. } => {
            expands_columns(left) || expands_columns(right)
        }
        SetExpr::Table(_) => true,
        _ => false,
    }
}

/// A table provider showing only some of another's columns (in the same order); scans ask the
/// inner provider for the same columns by their own positions.
#[derive(Debug)]
pub(crate) struct NarrowTable {
    inner: Arc<dyn TableProvider>,
    /// The inner positions of the columns shown.
    columns: Vec<usize>,
    schema: SchemaRef,
}

impl NarrowTable {
    /// `provider` narrowed to the columns whose lowercased names are in `words`, or `provider`
    /// itself when that would keep every column.
    pub(crate) fn wrap(
        provider: Arc<dyn TableProvider>,
        words: &HashSet<String>,
    ) -> Arc<dyn TableProvider> {
        let schema = provider.schema();
        let columns: Vec<usize> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, field)| words.contains(&field.name().to_lowercase()))
            .map(|(index, _)| index)
            .collect();
        if columns.len() == schema.fields().len() {
            return provider;
        }
        let fields: Vec<_> = columns
            .iter()
            .map(|&index| Arc::clone(&schema.fields()[index]))
            .collect();
        let narrowed = Schema::new_with_metadata(fields, schema.metadata().clone());
        Arc::new(NarrowTable {
            inner: provider,
            columns,
            schema: Arc::new(narrowed),
        })
    }

    fn inner_projection(
        &self,
        projection: Option<&Vec<usize>>,
    ) -> datafusion::common::Result<Vec<usize>> {
        match projection {
            None => Ok(self.columns.clone()),
            Some(projection) => projection
                .iter()
                .map(|&index| {
                    self.columns.get(index).copied().ok_or_else(|| {
                        DataFusionError::Internal(format!(
                            "projection index {index} of a {}-column table",
                            self.columns.len()
                        ))
                    })
                })
                .collect(),
        }
    }
}

#[async_trait]
impl TableProvider for NarrowTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let projection = self.inner_projection(projection)?;
        self.inner
            .scan(state, Some(&projection), filters, limit)
            .await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut statistics = self.inner.statistics()?;
        let columns = std::mem::take(&mut statistics.column_statistics);
        if columns.len() != self.inner.schema().fields().len() {
            statistics.column_statistics = Statistics::unknown_column(&self.schema);
            return Some(statistics);
        }
        statistics.column_statistics = self
            .columns
            .iter()
            .map(|&index| columns[index].clone())
            .collect();
        Some(statistics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statement::parse_sql;

    fn words(sql: &str) -> Option<Vec<String>> {
        let mut statements = parse_sql(sql).ok()?;
        let statement = statements.pop()?;
        let mut words: Vec<String> = query_words(&statement.inner, statement.words.as_ref())?
            .into_iter()
            .collect();
        words.sort();
        Some(words)
    }

    #[test]
    fn queries_without_wildcards_are_narrowed_to_their_words() {
        let found = words("SELECT \"UserID\", count(*) FROM hits WHERE Url LIKE '%x%' GROUP BY 1")
            .expect("narrowed");
        for word in ["userid", "url", "hits", "count"] {
            assert!(found.contains(&word.to_string()), "{word} in {found:?}");
        }
        assert!(words("SELECT a FROM t JOIN u USING (k) ORDER BY a").is_some());
        for sql in [
            "SELECT * FROM t",
            "SELECT t.* FROM t",
            "SELECT a FROM (SELECT * FROM t)",
            "SELECT a FROM t WHERE a IN (SELECT * FROM u)",
            "SELECT a FROM t UNION ALL SELECT * FROM u",
            "SELECT * EXCLUDE (a) FROM t",
            "SELECT a FROM t NATURAL JOIN u",
            "SELECT struct(t.*) FROM t",
            "TABLE t",
            "DESCRIBE t",
            "INSERT INTO x SELECT a FROM t",
        ] {
            assert_eq!(words(sql), None, "{sql}");
        }
    }
}
