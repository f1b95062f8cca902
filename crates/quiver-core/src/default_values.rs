//! `DEFAULT` among the rows of `INSERT … VALUES`, which DataFusion's planner reads as a column
//! named "DEFAULT" (and fails to find).
//!
//! A column that is `DEFAULT` in every row is taken out of the statement's column list and out
//! of every row, so the table fills it exactly as it fills a column an INSERT does not name: an
//! attached Postgres table leaves it to Postgres (`nextval` of a serial, an identity, `now()`:
//! see `quiver_postgres::column_default`), a quiver table uses its declared default. A column
//! that is `DEFAULT` in some rows only gets NULL there when the table declares no default for
//! it, NULL being that column's default; with a declared default it is refused, naming the
//! column: one `COPY` cannot leave a column to the server in some rows and not others, and a
//! wrong value is worse than an error.

use arrow::datatypes::Schema;
use datafusion::common::TableReference;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, ObjectName, ObjectNamePart, SetExpr, Statement, TableObject, Value,
};

use crate::error::{QuiverError, Result};
use crate::identifiers::pick;

/// Rewrites the `DEFAULT`s of an `INSERT … VALUES` statement as the module says; any other
/// statement is left alone.
pub(crate) async fn rewrite(ctx: &SessionContext, statement: &mut DFStatement) -> Result<()> {
    let DFStatement::Statement(inner) = statement else {
        return Ok(());
    };
    let Statement::Insert(insert) = inner.as_mut() else {
        return Ok(());
    };
    let Some(SetExpr::Values(values)) = insert.source.as_deref_mut().map(|q| q.body.as_mut())
    else {
        return Ok(());
    };
    if !values
        .rows
        .iter()
        .flat_map(|row| &row.content)
        .any(is_default)
    {
        return Ok(());
    }
    let TableObject::TableName(name) = &insert.table else {
        return Ok(());
    };
    let Some(reference) = table_reference(name) else {
        return Ok(());
    };
    // An unknown table: DataFusion's planner reports it.
    let Ok(provider) = ctx.table_provider(reference.clone()).await else {
        return Ok(());
    };
    if insert.columns.is_empty() {
        insert.columns = provider
            .schema()
            .fields()
            .iter()
            .map(|field| ObjectName::from(vec![Ident::with_quote('"', field.name())]))
            .collect();
    }
    let width = insert.columns.len();
    if values.rows.iter().any(|row| row.content.len() != width) {
        return Ok(()); // the planner reports the mismatch
    }
    // Every named column must exist, the ones about to be dropped included: an unknown name is
    // the planner's error to report, not a column to leave out.
    let schema = provider.schema();
    let Some(fields) = insert
        .columns
        .iter()
        .map(|column| field_named(&schema, column))
        .collect::<Option<Vec<String>>>()
    else {
        return Ok(());
    };
    let mut keep = vec![true; width];
    for (column, kept) in keep.iter_mut().enumerate() {
        let defaults = values
            .rows
            .iter()
            .filter(|row| is_default(&row.content[column]))
            .count();
        if defaults == 0 {
            continue;
        }
        if defaults == values.rows.len() {
            *kept = false;
            continue;
        }
        let field = &fields[column];
        if provider.get_column_default(field).is_some() {
            return Err(QuiverError::NotImplemented(format!(
                "column \"{field}\" of {reference} is DEFAULT in some VALUES rows and given in \
                 others; a column with a declared default can be left to it only in every row \
                 of one INSERT (split the INSERT, or name the columns you give)"
            )));
        }
        for row in &mut values.rows {
            if is_default(&row.content[column]) {
                row.content[column] = Expr::Value(Value::Null.into());
            }
        }
    }
    if !keep.contains(&true) {
        return Err(QuiverError::NotImplemented(format!(
            "every value of this INSERT INTO {reference} is DEFAULT; give at least one column \
             a value"
        )));
    }
    let mut kept = keep.iter().copied();
    insert.columns.retain(|_| kept.next().unwrap_or(true));
    for row in &mut values.rows {
        let mut kept = keep.iter().copied();
        row.content.retain(|_| kept.next().unwrap_or(true));
    }
    Ok(())
}

/// The bare keyword `DEFAULT` (a quoted `"DEFAULT"` is a name).
fn is_default(expr: &Expr) -> bool {
    matches!(expr, Expr::Identifier(ident)
        if ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("default"))
}

/// The schema's name for an INSERT's column, matched as [`crate::identifiers`] matches names
/// (`None` when it has none, or several).
fn field_named(schema: &Schema, column: &ObjectName) -> Option<String> {
    let Some(ObjectNamePart::Identifier(ident)) = column.0.last() else {
        return None;
    };
    let names: Vec<&String> = schema.fields().iter().map(|field| field.name()).collect();
    pick("column", &ident.value, names.into_iter())
        .ok()
        .flatten()
}

/// The table an INSERT names (already resolved to exact names by [`crate::identifiers`]).
fn table_reference(name: &ObjectName) -> Option<TableReference> {
    let parts: Option<Vec<&str>> = name
        .0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => Some(ident.value.as_str()),
            ObjectNamePart::Function(_) => None,
        })
        .collect();
    match parts?.as_slice() {
        [table] => Some(TableReference::bare(*table)),
        [schema, table] => Some(TableReference::partial(*schema, *table)),
        [catalog, schema, table] => Some(TableReference::full(*catalog, *schema, *table)),
        _ => None,
    }
}
