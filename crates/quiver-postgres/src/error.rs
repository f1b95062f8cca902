//! The scanner's error type. Every message names what is wrong (the table, the column, the
//! server's own words) and never contains a password: connection targets are shown through
//! [`crate::connection::ConnectTarget::describe`], which leaves the password out.

use datafusion::error::DataFusionError;

use crate::binary_copy::CopyFormatError;

/// Result alias of this crate.
pub type Result<T, E = PostgresError> = std::result::Result<T, E>;

/// What went wrong while talking to PostgreSQL or decoding its data.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    /// The connection string does not parse, or names an option quiver does not support.
    #[error("invalid PostgreSQL connection string: {0}")]
    InvalidDsn(String),
    /// A TLS setting that cannot be applied (a missing or unreadable certificate or key file).
    #[error("PostgreSQL TLS settings: {0}")]
    Tls(String),
    /// The server could not be reached, or refused the login.
    #[error("cannot connect to PostgreSQL at {target}: {message}")]
    Connect { target: String, message: String },
    /// A schema, table or view that does not exist on the server.
    #[error("{0}")]
    NotFound(String),
    /// An argument of a table function or an ATTACH option that is not acceptable.
    #[error("{0}")]
    InvalidArgument(String),
    /// The server reported an error while running `what`.
    #[error("PostgreSQL error while {what}: {message}")]
    Server { what: String, message: String },
    /// The binary COPY stream is malformed or ended early.
    #[error("PostgreSQL COPY stream of {relation}: {source}")]
    Copy {
        relation: String,
        #[source]
        source: CopyFormatError,
    },
    /// A value that quiver cannot represent in the column's Arrow type.
    #[error("column \"{column}\": {message}")]
    Conversion { column: String, message: String },
    /// Writing to an attached database is not possible (read-only attachment, bad target).
    #[error("{0}")]
    ReadOnly(String),
}

/// The kind of a [`PostgresError`], for mapping into the engine's error classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostgresErrorKind {
    /// The user gave a bad argument or connection string.
    InvalidInput,
    /// A schema or table that does not exist.
    Catalog,
    /// A value that cannot be converted.
    Conversion,
    /// The server or the network failed.
    Io,
}

impl PostgresError {
    /// How the engine should classify this error.
    pub fn kind(&self) -> PostgresErrorKind {
        match self {
            PostgresError::InvalidDsn(_)
            | PostgresError::Tls(_)
            | PostgresError::InvalidArgument(_)
            | PostgresError::ReadOnly(_) => PostgresErrorKind::InvalidInput,
            PostgresError::NotFound(_) => PostgresErrorKind::Catalog,
            PostgresError::Conversion { .. } => PostgresErrorKind::Conversion,
            PostgresError::Connect { .. }
            | PostgresError::Server { .. }
            | PostgresError::Copy { .. } => PostgresErrorKind::Io,
        }
    }

    /// Wraps a client error raised while doing `what`; the server's message (with its detail
    /// and hint) is kept, the client's "db error:" prefix is not.
    pub(crate) fn server(what: impl Into<String>, error: &tokio_postgres::Error) -> Self {
        PostgresError::Server {
            what: what.into(),
            message: server_message(error),
        }
    }

    /// The error of work whose connection [`crate::connection::close_all`] closed (the
    /// process is exiting) while it was `what`.
    pub(crate) fn closed_at_exit(what: impl Into<String>) -> Self {
        PostgresError::Server {
            what: what.into(),
            message: "the Postgres connections were closed (the process is exiting)".into(),
        }
    }

    /// Wraps this error for DataFusion; quiver-core unwraps it again when classifying.
    pub fn into_datafusion(self) -> DataFusionError {
        DataFusionError::External(Box::new(self))
    }
}

impl From<PostgresError> for DataFusionError {
    fn from(error: PostgresError) -> Self {
        error.into_datafusion()
    }
}

/// The text of a client error: the server's message, detail and hint when the server sent one,
/// otherwise the client's description (which never includes the password).
pub(crate) fn server_message(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut message = format!("{}: {}", db.severity(), db.message());
            if let Some(detail) = db.detail() {
                message.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                message.push_str(&format!("; hint: {hint}"));
            }
            message
        }
        None => {
            let text = error.to_string();
            if error.is_closed() || text.contains("closed") {
                format!("{text} (the server closed the connection)")
            } else {
                text
            }
        }
    }
}
