//! The database as a DataFusion [`SchemaProvider`]: the session's default schema `main`.
//!
//! DataFusion's DDL talks to a schema through `register_table` / `deregister_table`:
//!
//! * `CREATE TABLE t AS SELECT …` and `CREATE TABLE t (cols)` collect the rows into a
//!   [`MemTable`] and register it; the rows are written as one Parquet file (none if empty) and
//!   a [`PersistentTable`](super::PersistentTable) takes its place.
//! * `CREATE VIEW v AS …` registers a [`ViewTable`]; its SQL text is stored, the `ViewTable`
//!   itself serves queries in this process.
//! * `DROP TABLE` / `DROP VIEW` deregister; `CREATE OR REPLACE` is a deregister followed by a
//!   register (`SessionContext::create_memory_table` / `create_view`), i.e. two commits.
//!
//! Anything else registered here (a CSV listing table, a stream) is refused: it could not be
//! reopened from the directory alone.

use std::sync::Arc;

use arrow::array::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider, TableProvider};
use datafusion::datasource::ViewTable;
use datafusion::error::Result;

use super::error::DatabaseError;
use super::Database;

/// The [`SchemaProvider`] of a [`Database`]; see the module documentation.
#[derive(Debug)]
pub(crate) struct DatabaseSchema {
    db: Arc<Database>,
}

impl DatabaseSchema {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        DatabaseSchema { db }
    }
}

#[async_trait]
impl SchemaProvider for DatabaseSchema {
    fn table_names(&self) -> Vec<String> {
        self.db.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self.db.provider(name))
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(view) = table.downcast_ref::<ViewTable>() {
            let definition = view.definition().map(String::as_str);
            self.db.store_view(&name, definition, Arc::clone(&table))?;
        } else if let Some(memory) = table.downcast_ref::<MemTable>() {
            let batches = mem_table_batches(&name, memory)?;
            self.db.create_table(&name, memory.schema(), &batches)?;
        } else {
            return Err(DatabaseError::UnsupportedProvider { name }.into());
        }
        // Like `MemorySchemaProvider`: nothing was replaced (an existing name is an error).
        Ok(None)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self.db.drop_table_or_view(name)?)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.exists(name)
    }
}

/// The rows of a freshly built [`MemTable`], without blocking the async runtime.
///
/// Its partitions sit behind `tokio::sync::RwLock`s; nobody else holds the table yet (DataFusion
/// hands it over right after building it), so `try_read` always succeeds and no `.await` (which
/// this synchronous trait method could not do) is needed.
fn mem_table_batches(name: &str, table: &MemTable) -> Result<Vec<RecordBatch>, DatabaseError> {
    let mut batches = Vec::new();
    for partition in &table.batches {
        let guard = partition.try_read().map_err(|_| DatabaseError::Writer {
            table: name.to_string(),
            message: "the in-memory rows are being modified concurrently".into(),
        })?;
        batches.extend(guard.iter().cloned());
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{files_under, query, query_err, session};
    use super::super::AccessMode;
    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    async fn ctas_survives_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            query(
                &ctx,
                "CREATE TABLE sales AS SELECT * FROM (VALUES (1, 'a', 2.5), (2, NULL, 3.0)) \
                 AS v(id, name, amount)",
            )
            .await;
            assert_eq!(
                query(&ctx, "SELECT * FROM sales ORDER BY id").await,
                vec!["1|a|2.5", "2|NULL|3.0"]
            );
        }
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        assert_eq!(
            query(&ctx, "SELECT * FROM sales ORDER BY id").await,
            vec!["1|a|2.5", "2|NULL|3.0"]
        );
        assert_eq!(query(&ctx, "SELECT count(*) FROM sales").await, vec!["2"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn create_insert_and_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            query(&ctx, "CREATE TABLE t (id INT NOT NULL, label VARCHAR)").await;
            assert_eq!(query(&ctx, "SELECT count(*) FROM t").await, vec!["0"]);
            assert_eq!(
                query(&ctx, "INSERT INTO t VALUES (1, 'one'), (2, 'two')").await,
                vec!["2"]
            );
            assert_eq!(
                query(&ctx, "INSERT INTO t SELECT id + 10, upper(label) FROM t").await,
                vec!["2"]
            );
        }
        let db = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap();
        let ctx = session(&db);
        assert_eq!(
            query(&ctx, "SELECT id, label FROM t ORDER BY id").await,
            vec!["1|one", "2|two", "11|ONE", "12|TWO"]
        );
        // Projection, filter and limit over several files.
        assert_eq!(
            query(
                &ctx,
                "SELECT label FROM t WHERE id > 10 ORDER BY id LIMIT 1"
            )
            .await,
            vec!["ONE"]
        );
        // CREATE TABLE (cols) wrote no file; each INSERT wrote one.
        assert_eq!(files_under(&tmp.path().join("data")).len(), 2);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn empty_table_has_schema_and_no_files() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            query(
                &ctx,
                "CREATE TABLE e AS SELECT 1 AS a, 'x' AS b WHERE false",
            )
            .await;
        }
        assert!(files_under(&tmp.path().join("data")).is_empty());
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        assert!(query(&ctx, "SELECT a, b FROM e").await.is_empty());
        let df = ctx.sql("SELECT * FROM e").await.unwrap();
        let names: Vec<&String> = df.schema().fields().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn drop_table_removes_its_files() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE doomed AS SELECT 1 AS a").await;
        query(&ctx, "INSERT INTO doomed VALUES (2)").await;
        query(&ctx, "CREATE TABLE kept AS SELECT 3 AS a").await;
        assert_eq!(files_under(&tmp.path().join("data")).len(), 3);
        query(&ctx, "DROP TABLE doomed").await;
        assert_eq!(files_under(&tmp.path().join("data")).len(), 1);
        assert!(query_err(&ctx, "SELECT * FROM doomed")
            .await
            .contains("doomed"));
        drop(ctx);
        drop(db);
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        assert_eq!(db.schema_provider().table_names(), vec!["kept"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn create_or_replace_table_replaces_rows() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE TABLE t AS SELECT 1 AS a").await;
        query(
            &ctx,
            "CREATE OR REPLACE TABLE t AS SELECT 2 AS a UNION ALL SELECT 3",
        )
        .await;
        assert_eq!(
            query(&ctx, "SELECT a FROM t ORDER BY a").await,
            vec!["2", "3"]
        );
        assert_eq!(files_under(&tmp.path().join("data")).len(), 1);
        assert!(query_err(&ctx, "CREATE TABLE t AS SELECT 4 AS a")
            .await
            .contains("exists"));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn views_are_stored_in_creation_order() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            query(&ctx, "CREATE TABLE t AS SELECT 1 AS a UNION ALL SELECT 2").await;
            query(&ctx, "CREATE VIEW big AS SELECT a FROM t WHERE a > 1").await;
            query(
                &ctx,
                "CREATE VIEW \"Bigger View\" AS SELECT a * 10 AS b FROM big",
            )
            .await;
            assert_eq!(
                query(&ctx, "SELECT b FROM \"Bigger View\"").await,
                vec!["20"]
            );
            assert_eq!(
                db.view_definitions(),
                vec![
                    (
                        "big".to_string(),
                        "CREATE VIEW big AS SELECT a FROM t WHERE a > 1".to_string()
                    ),
                    (
                        "Bigger View".to_string(),
                        "CREATE VIEW \"Bigger View\" AS SELECT a * 10 AS b FROM big".to_string()
                    ),
                ]
            );
        }
        // Reopen read-only and replay, as the session does: nothing is rewritten.
        let catalog_before = std::fs::read(tmp.path().join("catalog.json")).unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap();
        let ctx = session(&db);
        assert!(query_err(&ctx, "SELECT * FROM big").await.contains("big"));
        for (_, sql) in db.view_definitions() {
            query(&ctx, &sql).await;
        }
        assert_eq!(
            query(&ctx, "SELECT b FROM \"Bigger View\"").await,
            vec!["20"]
        );
        assert_eq!(
            std::fs::read(tmp.path().join("catalog.json")).unwrap(),
            catalog_before
        );
        query_err(&ctx, "DROP VIEW big").await;
        assert_eq!(query(&ctx, "SELECT a FROM big").await, vec!["2"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn drop_and_replace_view() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        query(&ctx, "CREATE VIEW v AS SELECT 1 AS x").await;
        query(&ctx, "CREATE VIEW w AS SELECT 2 AS y").await;
        query(&ctx, "CREATE OR REPLACE VIEW v AS SELECT 3 AS x").await;
        assert_eq!(query(&ctx, "SELECT x FROM v").await, vec!["3"]);
        query(&ctx, "DROP VIEW w").await;
        assert_eq!(
            db.view_definitions(),
            vec![(
                "v".to_string(),
                "CREATE OR REPLACE VIEW v AS SELECT 3 AS x".to_string()
            )]
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn read_only_rejects_writes() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            query(&session(&db), "CREATE TABLE t AS SELECT 1 AS a").await;
        }
        let db = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap();
        let ctx = session(&db);
        for sql in [
            "CREATE TABLE u AS SELECT 1 AS a",
            "CREATE VIEW v AS SELECT 1 AS a",
            "INSERT INTO t VALUES (2)",
            "CREATE OR REPLACE TABLE t AS SELECT 2 AS a",
        ] {
            let error = query_err(&ctx, sql).await;
            assert!(error.contains("is open read-only"), "{sql}: {error}");
        }
        // DataFusion's DROP replaces the provider's error with "doesn't exist" (see
        // `SessionContext::drop_table`), so only the outcome can be checked here.
        query_err(&ctx, "DROP TABLE t").await;
        assert_eq!(query(&ctx, "SELECT a FROM t").await, vec!["1"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn names_keep_case_spaces_and_slashes() {
        let tmp = tempfile::tempdir().unwrap();
        let names = [
            "MixedCase",
            "with space",
            "a/b",
            "quote\"d",
            "..",
            "Ünïcode",
        ];
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            for (i, name) in names.iter().enumerate() {
                let quoted = format!("\"{}\"", name.replace('"', "\"\""));
                query(&ctx, &format!("CREATE TABLE {quoted} AS SELECT {i} AS n")).await;
            }
            query(&ctx, "CREATE TABLE mixedcase AS SELECT 100 AS n").await;
        }
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        let mut stored = db.schema_provider().table_names();
        stored.sort();
        let mut expected: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        expected.push("mixedcase".into());
        expected.sort();
        assert_eq!(stored, expected);
        for (i, name) in names.iter().enumerate() {
            let quoted = format!("\"{}\"", name.replace('"', "\"\""));
            let sql = format!("SELECT n FROM {quoted}");
            assert_eq!(query(&ctx, &sql).await, vec![i.to_string()], "{name}");
        }
        assert_eq!(query(&ctx, "SELECT n FROM MixedCase").await, vec!["100"]);
        // Only generated ids on disk.
        for file in files_under(&tmp.path().join("data")) {
            assert!(
                file.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._".contains(c)),
                "{file}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn other_providers_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let csv = tmp.path().join("x.csv");
        std::fs::write(&csv, "a\n1\n").unwrap();
        let db = Database::open(&tmp.path().join("db"), AccessMode::ReadWrite).unwrap();
        let ctx = session(&db);
        let sql = format!(
            "CREATE EXTERNAL TABLE ext STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
            csv.display()
        );
        let error = query_err(&ctx, &sql).await;
        assert!(
            error.contains("only tables (CREATE TABLE) and views"),
            "{error}"
        );
        assert!(!db.schema_provider().table_exist("ext"));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn table_and_view_names_share_one_namespace() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let provider = db.schema_provider();
        let ctx = session(&db);
        query(&ctx, "CREATE VIEW v AS SELECT 1 AS a").await;
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("a", arrow::datatypes::DataType::Int64, true),
        ]));
        let table = Arc::new(MemTable::try_new(schema, vec![vec![]]).unwrap());
        let error = provider.register_table("v".into(), table).unwrap_err();
        assert!(error.to_string().contains("'v' already exists"), "{error}");
    }
}
