//! `ATTACH 'dsn' AS shop (TYPE postgres, SCHEMA 'public', READ_ONLY)`: a Postgres database as
//! a DataFusion catalog.
//!
//! The catalog `shop` holds every user schema of the database (`shop.public.orders`); the
//! attached schema (`SCHEMA`, default `public`) is also reachable as the schema `shop` of
//! quiver's default catalog, so `shop.orders` works as in DuckDB. That alias lists no table
//! names of its own — they are listed once, under the catalog — but resolves every table.
//!
//! Table names are read when attaching (DataFusion lists names synchronously); columns are read
//! the first time a table is used and kept for the life of the attachment, as DuckDB does.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::{DataFusionError, Result as DFResult};

use crate::catalog::{
    describe_relation, describe_relations, list_relations, list_schemas, Relation, RelationKind,
};
use crate::connection::ConnectTarget;
use crate::error::{PostgresError, Result};
use crate::scan::{PostgresTable, ScanOptions, ScanSource};

/// The options of an ATTACH.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// The schema reachable as `alias.table` (default `public`).
    pub schema: String,
    /// Refuse writes.
    pub read_only: bool,
    /// How scans read.
    pub scan: ScanOptions,
}

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            schema: "public".into(),
            read_only: false,
            scan: ScanOptions::default(),
        }
    }
}

/// An attached Postgres database.
#[derive(Debug)]
pub struct PostgresCatalog {
    target: ConnectTarget,
    schemas: BTreeMap<String, Arc<PostgresSchema>>,
    default_schema: String,
    options: AttachOptions,
}

/// Connects to `dsn`, reads its schemas and table names, and returns the catalog.
pub async fn attach(dsn: &str, options: AttachOptions) -> Result<Arc<PostgresCatalog>> {
    let target = ConnectTarget::parse(dsn)?;
    let client = target.connect().await?;
    let schema_names = list_schemas(&client).await?;
    if !schema_names.contains(&options.schema) {
        return Err(PostgresError::NotFound(format!(
            "PostgreSQL schema \"{}\" does not exist in {}",
            options.schema,
            target.describe()
        )));
    }
    let relations = list_relations(&client, None).await?;
    let mut tables: BTreeMap<String, Vec<(String, RelationKind)>> = schema_names
        .iter()
        .map(|s| (s.clone(), Vec::new()))
        .collect();
    for (schema, name, kind) in relations {
        tables.entry(schema).or_default().push((name, kind));
    }
    // The attach's connection stays, to describe tables as queries name them (a connection
    // per table cost each query about 10 ms per table it names: a new backend, and its catalog
    // caches cold).
    target.reuse_later(client);
    let schemas = tables
        .into_iter()
        .map(|(schema, names)| {
            let provider = PostgresSchema {
                target: target.clone(),
                schema: schema.clone(),
                names: Arc::new(Mutex::new(names)),
                tables: Mutex::new(HashMap::new()),
                options: options.scan.clone(),
                lists_names: true,
                writable: !options.read_only,
            };
            (schema, Arc::new(provider))
        })
        .collect();
    Ok(Arc::new(PostgresCatalog {
        target,
        schemas,
        default_schema: options.schema.clone(),
        options,
    }))
}

impl PostgresCatalog {
    /// Where the database is, without password.
    pub fn describe(&self) -> String {
        self.target.describe()
    }

    /// Whether the database was attached READ_ONLY.
    pub fn read_only(&self) -> bool {
        self.options.read_only
    }

    /// The attached schema as a schema of another catalog: it resolves every table but lists
    /// none, so each table is listed once.
    pub fn schema_alias(&self) -> Option<Arc<dyn SchemaProvider>> {
        let schema = self.schemas.get(&self.default_schema)?;
        Some(Arc::new(PostgresSchema {
            target: schema.target.clone(),
            schema: schema.schema.clone(),
            names: Arc::clone(&schema.names),
            tables: Mutex::new(HashMap::new()),
            options: schema.options.clone(),
            lists_names: false,
            writable: schema.writable,
        }))
    }
}

impl CatalogProvider for PostgresCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.schemas.keys().cloned().collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        self.schemas
            .get(name)
            .map(|s| Arc::clone(s) as Arc<dyn SchemaProvider>)
    }
}

/// One schema of an attached database.
#[derive(Debug)]
pub struct PostgresSchema {
    target: ConnectTarget,
    schema: String,
    /// Shared with the schema's alias in quiver's default catalog.
    names: Arc<Mutex<Vec<(String, RelationKind)>>>,
    tables: Mutex<HashMap<String, Arc<PostgresTable>>>,
    options: ScanOptions,
    lists_names: bool,
    writable: bool,
}

impl PostgresSchema {
    fn names(&self) -> Vec<(String, RelationKind)> {
        self.names.lock().map(|n| n.clone()).unwrap_or_default()
    }

    fn kind(&self, name: &str) -> Option<RelationKind> {
        let names = self.names.lock().ok()?;
        names.iter().find(|(n, _)| n == name).map(|(_, kind)| *kind)
    }

    fn cached(&self, name: &str) -> Option<Arc<PostgresTable>> {
        self.tables.lock().ok()?.get(name).cloned()
    }

    /// The table made of `relation`, kept for the life of the attachment.
    fn keep(&self, relation: Relation) -> Arc<PostgresTable> {
        let name = relation.name.clone();
        let table = Arc::new(
            PostgresTable::new(
                self.target.clone(),
                ScanSource::Relation(relation),
                self.options.clone(),
            )
            .with_writes(self.writable),
        );
        if let Ok(mut tables) = self.tables.lock() {
            tables.insert(name, Arc::clone(&table));
        }
        table
    }

    /// Describes every table of `names` not described yet in one statement, before planning
    /// asks for them one by one (each would cost the query a catalog round trip or two). Best
    /// effort: on any error nothing is kept, and the tables are described one by one as
    /// before, which reports the error.
    pub async fn prefetch(&self, names: &[String]) {
        let mut wanted: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|name| self.table_exist(name) && self.cached(name).is_none())
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.len() < 2 {
            return;
        }
        if let Ok(relations) = self.describe(&wanted).await {
            for relation in relations {
                self.keep(relation);
            }
        }
    }

    /// The relations of `names` in this schema, described on one of the target's connections
    /// ([`describe_relations`]); a name that is not there is left out.
    async fn describe(&self, names: &[&str]) -> Result<Vec<Relation>> {
        self.target
            .with_connection(|connection| async move {
                let relations = describe_relations(&connection, &self.schema, names).await;
                (connection, relations)
            })
            .await
    }
}

#[async_trait]
impl SchemaProvider for PostgresSchema {
    fn table_names(&self) -> Vec<String> {
        if self.lists_names {
            self.names().into_iter().map(|(name, _)| name).collect()
        } else {
            Vec::new()
        }
    }

    async fn table(&self, name: &str) -> DFResult<Option<Arc<dyn TableProvider>>> {
        if let Some(table) = self.cached(name) {
            return Ok(Some(table));
        }
        if !self.table_exist(name) {
            return Ok(None);
        }
        match self.describe(&[name]).await {
            // None: dropped on the server since the attach.
            Ok(mut relations) => Ok(relations
                .pop()
                .map(|relation| self.keep(relation) as Arc<dyn TableProvider>)),
            Err(error) => Err(DataFusionError::from(error)),
        }
    }

    /// Answered from the names read at ATTACH, without describing the table (SHOW TABLES and
    /// information_schema ask this of every table).
    async fn table_type(&self, name: &str) -> DFResult<Option<TableType>> {
        Ok(self.kind(name).map(|kind| match kind {
            RelationKind::View | RelationKind::Foreign => TableType::View,
            _ => TableType::Base,
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.kind(name).is_some()
    }

    /// `CREATE TABLE shop.public.t AS SELECT ...`: DataFusion computes the rows into a memory
    /// table and registers it here; the table is created in Postgres and filled with one binary
    /// COPY in one transaction. (Synchronous by DataFusion's API, so it runs on a helper
    /// thread.)
    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> DFResult<Option<Arc<dyn TableProvider>>> {
        if !self.writable {
            return Err(PostgresError::ReadOnly(format!(
                "cannot create table \"{name}\": the database is attached READ_ONLY"
            ))
            .into());
        }
        let any: &dyn std::any::Any = table.as_ref();
        let Some(memory) = any.downcast_ref::<MemTable>() else {
            return Err(PostgresError::InvalidArgument(format!(
                "cannot create table \"{name}\" in PostgreSQL from a {} table; use CREATE TABLE AS",
                std::any::type_name_of_val(table.as_ref())
            ))
            .into());
        };
        let mut batches = Vec::new();
        for partition in &memory.batches {
            let partition = partition
                .try_read()
                .map_err(|_| DataFusionError::Internal("the new table's rows are locked".into()))?;
            batches.extend(partition.iter().cloned());
        }
        let target = self.target.clone();
        let schema = self.schema.clone();
        let table_schema = memory.schema();
        let created = crate::functions::block_on(async move {
            crate::copy_in::create_table_as(&target, &schema, &name, table_schema, batches)
                .await
                .map(|_| name)
        })??;
        if let Ok(mut names) = self.names.lock() {
            names.push((created, RelationKind::Table));
        }
        Ok(None)
    }
}

/// Describes one table without attaching (used by tests and tools).
pub async fn describe_table(dsn: &str, schema: &str, name: &str) -> Result<PostgresTable> {
    let target = ConnectTarget::parse(dsn)?;
    let client = target.connect().await?;
    let relation = describe_relation(&client, schema, name).await?;
    Ok(PostgresTable::new(
        target,
        crate::scan::ScanSource::Relation(relation),
        ScanOptions::default(),
    ))
}
