//! # quiver-core
//!
//! quiver's engine facade over [Apache DataFusion](https://datafusion.apache.org): a
//! [`Session`] runs SQL over files, in-memory tables and persistent databases and returns a
//! [`QueryResult`] that streams Arrow `RecordBatch`es and reports elapsed time, rows read and
//! bytes read. Both the `quiver` CLI and the Python package are thin layers over this crate.
//!
//! What quiver adds to DataFusion here:
//! * identifiers keep their case and match case-insensitively, exact match first
//!   ([`identifiers`](crate::identifiers));
//! * files as tables: `SELECT * FROM 'data/*.parquet'`, `read_csv(...)`, ClickHouse's
//!   `file(path, Format)` ([`files`], [`table_functions`]);
//! * persistent database directories of Parquet files and a JSON catalog ([`database`]);
//! * ClickHouse's output formats and `FORMAT` clause ([`format`], [`statement`]);
//! * DuckDB's `COPY … TO … (FORMAT …)` options;
//! * one typed error ([`QuiverError`]) that names what is wrong;
//! * its own planning layers, each behind a switch, all off with
//!   `SET quiver.optimizations = false` ([`settings`]).

mod aggregate_clauses;
mod attach;
pub mod conjunction;
pub mod database;
pub mod decimal_literals;
mod default_values;
pub mod distinct_groups;
pub mod error;
pub mod external;
pub mod files;
pub mod float_topk;
pub mod format;
mod identifiers;
pub mod join_sides;
pub mod literal_compare;
pub mod metrics;
pub mod nan_safe_parquet;
mod narrow;
pub mod not_in_subquery;
pub mod pushdown_guard;
pub mod result;
pub mod session;
pub mod settings;
pub mod side;
pub mod sort_keys;
pub mod statement;
pub mod suggest;
pub mod table_functions;
pub mod topk;
pub mod unsigned_literals;
pub mod widen_aggregates;
pub mod zoned_casts;

pub use datafusion;
pub use error::{QuiverError, Result};
pub use external::{ExecuteOptions, ExternalTables};
pub use format::{OutputFormat, QueryStats};
pub use result::{Progress, QueryResult};
pub use session::{Session, SessionOptions};
pub use settings::QuiverOptions;
pub use statement::Statement;

/// Ends the Postgres sessions the process keeps (attached databases' and the scan functions'
/// connections), waiting up to `limit`: for a process about to exit, so the server sees
/// clients that said goodbye rather than lost connections. See
/// [`quiver_postgres::connection::close_all`].
pub fn close_postgres_connections(limit: std::time::Duration) -> bool {
    quiver_postgres::connection::close_all(limit)
}
