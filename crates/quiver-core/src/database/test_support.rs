//! Test helpers: a DataFusion session whose default schema is a database, and row/file listings.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider};
use datafusion::prelude::{SessionConfig, SessionContext};

use super::Database;

/// A session like quiver's: catalog `quiver`, default schema `main` = the database.
pub(crate) fn session(db: &Arc<Database>) -> SessionContext {
    let config = SessionConfig::new().with_default_catalog_and_schema("quiver", "main");
    let ctx = SessionContext::new_with_config(config);
    let catalog = MemoryCatalogProvider::new();
    catalog
        .register_schema("main", db.schema_provider())
        .unwrap();
    ctx.register_catalog("quiver", Arc::new(catalog));
    ctx
}

/// Runs `sql` and renders each row as `col|col|…` (NULL as `NULL`).
pub(crate) async fn query(ctx: &SessionContext, sql: &str) -> Vec<String> {
    let batches = match ctx.sql(sql).await {
        Ok(df) => df.collect().await,
        Err(e) => Err(e),
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            rows.push(cells.join("|"));
        }
    }
    rows
}

/// Runs `sql`, which must fail, and returns the error message.
pub(crate) async fn query_err(ctx: &SessionContext, sql: &str) -> String {
    let result = match ctx.sql(sql).await {
        Ok(df) => df.collect().await,
        Err(e) => Err(e),
    };
    match result {
        Ok(_) => panic!("{sql}: expected an error"),
        Err(e) => e.to_string(),
    }
}

/// Every file under `dir`, relative, with `/` separators.
pub(crate) fn files_under(dir: &Path) -> BTreeSet<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &relative, out);
            } else {
                out.insert(relative);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, "", &mut out);
    out
}
