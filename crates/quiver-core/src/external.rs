//! Tables a caller supplies for one statement: the Python package resolves a name that is not
//! in the catalog to a DataFrame or Arrow object in the caller's scope (DuckDB's "replacement
//! scans", chDB's `Python(df)`).
//!
//! The identifiers pass asks the [`ExternalTables`] for each unknown single-part table name.
//! A provider it returns is registered under a unique name in the hidden schema
//! [`EXTERNAL_SCHEMA`] for as long as the statement is being planned, and the reference is
//! rewritten to that name, aliased to the name the user wrote. Catalog tables always win over
//! external ones.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::ParamValues;

use crate::error::{QuiverError, Result};

/// The schema (in the default catalog) that holds external tables while a statement is planned.
pub const EXTERNAL_SCHEMA: &str = "__external";

/// Resolves table names that the catalog does not know.
pub trait ExternalTables: Send + Sync {
    /// The table for `name` as the user wrote it, or `None` when there is none. `words`: the
    /// statement's lowercased words when the table will be seen only through the columns they
    /// name ([`crate::narrow`]), so that a cached table need only be checked in those.
    fn lookup(
        &self,
        name: &str,
        words: Option<&HashSet<String>>,
    ) -> Result<Option<Arc<dyn TableProvider>>>;

    /// Names of the objects in scope that could have been meant, for a "not found" message.
    fn candidates(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What [`Session::execute_with`](crate::Session::execute_with) needs beyond the statement.
#[derive(Default)]
pub struct ExecuteOptions<'a> {
    /// Resolver for names the catalog does not know.
    pub external: Option<&'a dyn ExternalTables>,
    /// Values for `$name` / `$1` placeholders.
    pub params: Option<ParamValues>,
}

impl std::fmt::Debug for ExecuteOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecuteOptions")
            .field("external", &self.external.is_some())
            .field("params", &self.params)
            .finish()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The external tables registered for one statement; dropping it removes them.
pub(crate) struct Registrations {
    schema: Option<Arc<dyn SchemaProvider>>,
    names: Vec<String>,
    /// The statement's words, when its tables are registered narrowed to the columns they
    /// name ([`crate::narrow`]).
    narrow: Option<HashSet<String>>,
}

impl Registrations {
    pub(crate) fn new(
        schema: Option<Arc<dyn SchemaProvider>>,
        narrow: Option<HashSet<String>>,
    ) -> Self {
        Registrations {
            schema,
            names: Vec::new(),
            narrow,
        }
    }

    /// The statement's words, when its tables are narrowed to the columns they name.
    pub(crate) fn words(&self) -> Option<&HashSet<String>> {
        self.narrow.as_ref()
    }

    /// Registers `provider` (narrowed, if this statement's tables are) under a fresh unique
    /// name and returns that name and the provider registered.
    pub(crate) fn add(
        &mut self,
        provider: Arc<dyn TableProvider>,
    ) -> Result<(String, Arc<dyn TableProvider>)> {
        let provider = match &self.narrow {
            Some(words) => crate::narrow::NarrowTable::wrap(provider, words),
            None => provider,
        };
        let schema = self
            .schema
            .as_ref()
            .ok_or_else(|| QuiverError::Internal(format!("schema {EXTERNAL_SCHEMA} is missing")))?;
        let name = format!("t{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        schema
            .register_table(name.clone(), Arc::clone(&provider))
            .map_err(QuiverError::from)?;
        self.names.push(name.clone());
        Ok((name, provider))
    }
}

impl Drop for Registrations {
    fn drop(&mut self) {
        if let Some(schema) = &self.schema {
            for name in &self.names {
                let _ = schema.deregister_table(name);
            }
        }
    }
}
