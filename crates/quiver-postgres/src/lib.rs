//! # quiver-postgres
//!
//! quiver's PostgreSQL scanner, the design of DuckDB's Postgres scanner in Rust:
//!
//! * tables are read with `COPY (SELECT …) TO STDOUT (FORMAT binary)` and the byte stream is
//!   decoded straight into Arrow builders ([`binary_copy`] is the pure parser, [`decode`] the
//!   per-type decoders, [`types`] the type map); the bytes are taken off the socket beside
//!   tokio-postgres in large chunks rather than one message per row ([`tap`]);
//! * a scan is split into ctid page ranges read in parallel on a pool of connections that all
//!   import one exported snapshot per query ([`scan`], [`snapshot`]);
//! * projections always, and filters where Postgres evaluates them exactly as quiver would, are
//!   pushed into the generated SQL, through one quoting helper ([`sql`]); so are the key lists
//!   and ranges a hash join learns from its build side while the query runs
//!   ([`runtime_filter`]);
//! * each scan reports the server's row and distinct-count estimates as DataFusion statistics,
//!   so join order and build sides follow the data ([`scan`], [`catalog`]);
//! * a join of one database's tables that the server's planner expects to run for less than
//!   reading those tables is sent to Postgres as one query ([`pushdown`]);
//! * a database can be attached as a catalog ([`attach`]) and written to with binary
//!   `COPY ... FROM STDIN` in one transaction ([`copy_in`]).
//!
//! Connection strings are libpq's, with its PG* environment variables ([`connection`]) and its
//! TLS modes ([`tls`]).

pub mod attach;
pub mod binary_copy;
pub mod catalog;
pub mod column_default;
pub mod connection;
pub mod copy_in;
pub mod decode;
pub mod error;
pub mod functions;
pub mod options;
pub mod passfile;
pub mod pushdown;
pub mod runtime_filter;
pub mod scan;
pub mod service;
pub mod snapshot;
pub mod sql;
pub mod tap;
pub mod tls;
pub mod types;

pub use attach::{attach, AttachOptions, PostgresCatalog};
pub use connection::ConnectTarget;
pub use error::{PostgresError, PostgresErrorKind};
pub use functions::register_postgres_functions;
pub use scan::{PostgresTable, ScanOptions};
