//! The error type of persistent database directories, and its one mapping into DataFusion.

use std::io;
use std::path::{Path, PathBuf};

use arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use parquet::errors::ParquetError;

/// Everything that can go wrong while opening, reading or writing a database directory.
///
/// Every message names the directory, file, table or view concerned.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// Another process (or another [`Database`](super::Database) in this process) holds a
    /// conflicting lock on the directory.
    #[error("database directory {} is in use by another quiver process", dir.display())]
    Locked {
        /// The database directory.
        dir: PathBuf,
    },
    /// A write was attempted on a database opened with [`AccessMode::ReadOnly`](super::AccessMode).
    #[error("database {} is open read-only: cannot {operation}", dir.display())]
    ReadOnly {
        /// The database directory.
        dir: PathBuf,
        /// What was attempted, e.g. `create table 'sales'`.
        operation: String,
    },
    /// A read-only open of a directory that does not hold a database.
    #[error("no quiver database at {} (a read-only open does not create one)", dir.display())]
    NotFound {
        /// The directory that was given.
        dir: PathBuf,
    },
    /// A read-write open of a non-empty directory that is not a database: quiver refuses to
    /// scatter its files among someone else's.
    #[error(
        "{} is not empty and is not a quiver database (it has no catalog.json); \
         choose an empty or new directory",
        dir.display()
    )]
    NotADatabase {
        /// The directory that was given.
        dir: PathBuf,
    },
    /// A file-system operation failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// `catalog.json` cannot be parsed or describes an impossible state.
    #[error("corrupt catalog {}: {message}", path.display())]
    CorruptCatalog {
        /// The catalog file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// `catalog.json` was written by a newer quiver.
    #[error(
        "catalog {} has format version {found}, but this quiver reads only versions up to \
         {supported}; open it with a newer quiver",
        path.display()
    )]
    UnsupportedFormatVersion {
        /// The catalog file.
        path: PathBuf,
        /// The version found in the file.
        found: u64,
        /// The newest version this build understands.
        supported: u64,
    },
    /// A table or view of that name is already stored.
    #[error("a table or view named '{name}' already exists")]
    TableExists {
        /// The name as given (case preserved).
        name: String,
    },
    /// No table of that name is stored (it may have been dropped meanwhile).
    #[error("table '{name}' does not exist")]
    TableNotFound {
        /// The name as given (case preserved).
        name: String,
    },
    /// A table handle outlived its database (the session that opened it was closed).
    #[error("table '{name}' belongs to a database that has been closed")]
    Closed {
        /// The table name.
        name: String,
    },
    /// Something other than a table or a view was registered in the database's schema.
    #[error(
        "cannot store '{name}': only tables (CREATE TABLE) and views (CREATE VIEW) can be \
         stored in a persistent database; copy other sources in with CREATE TABLE ... AS \
         SELECT, or register them in another schema"
    )]
    UnsupportedProvider {
        /// The name it was registered under.
        name: String,
    },
    /// A view registered without the SQL text that created it cannot be replayed at open.
    #[error("cannot store view '{name}': it has no SQL definition to replay when reopening")]
    ViewWithoutDefinition {
        /// The view name.
        name: String,
    },
    /// The rows to insert do not have the table's columns.
    #[error("cannot insert into table '{table}': {message}")]
    SchemaMismatch {
        /// The target table.
        table: String,
        /// Which column differs and how.
        message: String,
    },
    /// An insert mode the database does not implement (e.g. `REPLACE INTO`).
    #[error("{op} is not supported for table '{table}' in a persistent database")]
    UnsupportedInsert {
        /// The target table.
        table: String,
        /// The insert operation as DataFusion names it.
        op: String,
    },
    /// Writing a Parquet data file failed.
    #[error("Parquet error on {}: {source}", path.display())]
    Parquet {
        /// The data file being written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: ParquetError,
    },
    /// An Arrow operation failed (schema encoding, batch conversion).
    #[error("Arrow error while {context}: {source}")]
    Arrow {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: ArrowError,
    },
    /// An error raised by DataFusion, typically by the query feeding an insert.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    /// The background task writing a data file stopped without a result.
    #[error("writing a data file of table '{table}' failed: {message}")]
    Writer {
        /// The target table.
        table: String,
        /// What happened.
        message: String,
    },
}

impl DatabaseError {
    /// A `map_err` adapter for I/O errors on `path`.
    pub(crate) fn io(path: &Path) -> impl FnOnce(io::Error) -> DatabaseError + '_ {
        move |source| DatabaseError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<DatabaseError> for DataFusionError {
    /// DataFusion errors that merely passed through (the input query of an insert failed) are
    /// returned unchanged, so the user sees the original message; everything else is wrapped.
    fn from(error: DatabaseError) -> Self {
        match error {
            DatabaseError::DataFusion(inner) => inner,
            other => DataFusionError::External(Box::new(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_message_names_the_directory() {
        let error = DatabaseError::Locked {
            dir: PathBuf::from("/data/sales.db"),
        };
        assert_eq!(
            error.to_string(),
            "database directory /data/sales.db is in use by another quiver process"
        );
    }

    #[test]
    fn datafusion_errors_pass_through_unwrapped() {
        let error = DatabaseError::DataFusion(DataFusionError::Execution("boom".into()));
        let converted: DataFusionError = error.into();
        assert!(matches!(converted, DataFusionError::Execution(ref m) if m == "boom"));
    }

    #[test]
    fn other_errors_become_external() {
        let error = DatabaseError::TableNotFound { name: "T".into() };
        let converted: DataFusionError = error.into();
        assert!(matches!(converted, DataFusionError::External(_)));
        assert!(converted.to_string().contains("table 'T' does not exist"));
    }
}
