//! quiver's error type, and the one place where DataFusion's errors are classified into it.
//!
//! Every error a user can see is a [`QuiverError`]. The bindings map its variants to their own
//! error kinds (the Python exception tree, CLI exit codes) with one exhaustive `match`, so the
//! classification here decides what a user is told.

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;

use crate::database::DatabaseError;
use crate::format::FormatError;

/// Result alias used throughout quiver-core.
pub type Result<T, E = QuiverError> = std::result::Result<T, E>;

/// Everything that can go wrong in quiver, by what the user has to do about it.
#[derive(Debug, thiserror::Error)]
pub enum QuiverError {
    /// The SQL text does not parse. `line`/`column` are 1-based positions in the text that was
    /// given to [`crate::Session::sql`] (0 when the parser did not report one).
    #[error("Parser Error: {message}{}", position_suffix(*line, *column))]
    Parser {
        message: String,
        line: u64,
        column: u64,
    },
    /// A table, schema, column or function that does not exist, or a name that is ambiguous.
    #[error("Catalog Error: {0}")]
    Catalog(String),
    /// A value or argument the user supplied is not acceptable (bad option, bad path, bad type).
    #[error("Invalid Input Error: {0}")]
    InvalidInput(String),
    /// Data that cannot be converted to the requested or inferred type.
    #[error("Conversion Error: {0}")]
    Conversion(String),
    /// A file or directory that cannot be read or written; the message names the path.
    #[error("IO Error: {0}")]
    Io(String),
    /// An error from an output format writer.
    #[error("Format Error: {0}")]
    Format(#[from] FormatError),
    /// An error from a persistent database directory.
    #[error("Database Error: {0}")]
    Database(#[from] DatabaseError),
    /// The query was cancelled (Ctrl-C or an explicit cancel).
    #[error("Query cancelled")]
    Cancelled,
    /// SQL that quiver understands but does not support (yet).
    #[error("Not implemented: {0}")]
    NotImplemented(String),
    /// The query ran out of memory or another resource.
    #[error("Out of Resources Error: {0}")]
    ResourcesExhausted(String),
    /// Any other error raised while planning or running a query.
    #[error("Execution Error: {0}")]
    Execution(String),
    /// A bug in quiver or DataFusion: please report it.
    #[error("Internal Error: {0} (this is a bug, please report it)")]
    Internal(String),
}

fn position_suffix(line: u64, column: u64) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" (line {line}, column {column})")
    }
}

impl QuiverError {
    /// A short stable name of the error kind, as shown by the CLI and used by the bindings.
    pub fn kind(&self) -> &'static str {
        match self {
            QuiverError::Parser { .. } => "ParserError",
            QuiverError::Catalog(_) => "CatalogError",
            QuiverError::InvalidInput(_) => "InvalidInputError",
            QuiverError::Conversion(_) => "ConversionError",
            QuiverError::Io(_) => "IOError",
            QuiverError::Format(_) => "InvalidInputError",
            QuiverError::Database(_) => "IOError",
            QuiverError::Cancelled => "QueryCancelled",
            QuiverError::NotImplemented(_) => "NotImplementedError",
            QuiverError::ResourcesExhausted(_) => "OutOfMemoryError",
            QuiverError::Execution(_) => "ExecutionError",
            QuiverError::Internal(_) => "InternalError",
        }
    }

    /// Wraps this error so it can travel through DataFusion and be recovered unchanged by
    /// [`From<DataFusionError>`].
    pub fn into_datafusion(self) -> DataFusionError {
        DataFusionError::External(Box::new(self))
    }
}

/// Shorthand for returning an [`QuiverError::InvalidInput`] through DataFusion.
pub(crate) fn invalid_input(message: impl Into<String>) -> DataFusionError {
    QuiverError::InvalidInput(message.into()).into_datafusion()
}

impl From<DataFusionError> for QuiverError {
    fn from(error: DataFusionError) -> Self {
        classify(error, None)
    }
}

impl From<ArrowError> for QuiverError {
    fn from(error: ArrowError) -> Self {
        classify(DataFusionError::ArrowError(Box::new(error), None), None)
    }
}

/// Turns a DataFusion error (possibly wrapped in contexts, `External` and `Shared` layers) into
/// the most specific [`QuiverError`]. `context` carries the innermost context text seen on the
/// way down (for example "while reading 'data.csv'") so the final message keeps it.
fn classify(error: DataFusionError, context: Option<String>) -> QuiverError {
    let with_context = |message: String| match &context {
        Some(context) => format!("{context}: {message}"),
        None => message,
    };
    match error {
        DataFusionError::Context(text, inner) => {
            let context = Some(match context {
                Some(outer) => format!("{outer}: {text}"),
                None => text,
            });
            classify(*inner, context)
        }
        DataFusionError::Diagnostic(_, inner) => classify(*inner, context),
        DataFusionError::Shared(shared) => match std::sync::Arc::try_unwrap(shared) {
            Ok(inner) => classify(inner, context),
            Err(shared) => QuiverError::Execution(with_context(shared.to_string())),
        },
        DataFusionError::External(boxed) => match boxed.downcast::<QuiverError>() {
            Ok(quiver) => match context {
                None => *quiver,
                Some(context) => prefix(*quiver, &context),
            },
            Err(other) => match other.downcast::<quiver_postgres::PostgresError>() {
                Ok(postgres) => classify_postgres(*postgres, context),
                Err(other) => match other.downcast::<DataFusionError>() {
                    Ok(inner) => classify(*inner, context),
                    Err(other) => match other.downcast::<ArrowError>() {
                        Ok(arrow) => classify_arrow(*arrow, context),
                        Err(other) => match other.downcast::<std::io::Error>() {
                            Ok(io) => QuiverError::Io(with_context(io.to_string())),
                            Err(other) => QuiverError::Execution(with_context(other.to_string())),
                        },
                    },
                },
            },
        },
        DataFusionError::SQL(parser_error, _) => parser_error_to_quiver(&parser_error.to_string()),
        DataFusionError::SchemaError(schema_error, _) => {
            QuiverError::Catalog(with_context(schema_error_message(&schema_error)))
        }
        DataFusionError::Plan(message) => classify_plan_message(with_context(message)),
        DataFusionError::ArrowError(arrow, _) => classify_arrow(*arrow, context),
        DataFusionError::ParquetError(parquet) => {
            QuiverError::Io(with_context(format!("invalid Parquet data: {parquet}")))
        }
        DataFusionError::ObjectStore(store) => QuiverError::Io(with_context(store.to_string())),
        DataFusionError::IoError(io) => QuiverError::Io(with_context(io.to_string())),
        DataFusionError::NotImplemented(message) => {
            QuiverError::NotImplemented(with_context(message))
        }
        DataFusionError::Configuration(message) => QuiverError::InvalidInput(with_context(message)),
        DataFusionError::ResourcesExhausted(message) => {
            QuiverError::ResourcesExhausted(with_context(message))
        }
        DataFusionError::Execution(message) => classify_execution_message(with_context(message)),
        DataFusionError::ExecutionJoin(join) => {
            if join.is_cancelled() {
                QuiverError::Cancelled
            } else {
                QuiverError::Internal(with_context(format!("a query task panicked: {join}")))
            }
        }
        DataFusionError::Collection(errors) => match errors.into_iter().next() {
            Some(first) => classify(first, context),
            None => QuiverError::Internal("an empty error collection".into()),
        },
        DataFusionError::Internal(message) => QuiverError::Internal(with_context(message)),
        DataFusionError::Substrait(message) => QuiverError::NotImplemented(message),
        DataFusionError::Ffi(message) => QuiverError::Internal(message),
    }
}

/// The Postgres scanner's errors, by what the user has to do about them.
fn classify_postgres(
    error: quiver_postgres::PostgresError,
    context: Option<String>,
) -> QuiverError {
    use quiver_postgres::PostgresErrorKind;
    let kind = error.kind();
    let message = match context {
        Some(context) => format!("{context}: {error}"),
        None => error.to_string(),
    };
    match kind {
        PostgresErrorKind::InvalidInput => QuiverError::InvalidInput(message),
        PostgresErrorKind::Catalog => QuiverError::Catalog(message),
        PostgresErrorKind::Conversion => QuiverError::Conversion(message),
        PostgresErrorKind::Io => QuiverError::Io(message),
    }
}

fn prefix(error: QuiverError, context: &str) -> QuiverError {
    match error {
        QuiverError::Catalog(m) => QuiverError::Catalog(format!("{context}: {m}")),
        QuiverError::InvalidInput(m) => QuiverError::InvalidInput(format!("{context}: {m}")),
        QuiverError::Conversion(m) => QuiverError::Conversion(format!("{context}: {m}")),
        QuiverError::Io(m) => QuiverError::Io(format!("{context}: {m}")),
        QuiverError::Execution(m) => QuiverError::Execution(format!("{context}: {m}")),
        other => other,
    }
}

fn classify_arrow(error: ArrowError, context: Option<String>) -> QuiverError {
    let message = match &context {
        Some(context) => format!("{context}: {error}"),
        None => error.to_string(),
    };
    match error {
        ArrowError::ExternalError(inner) => match inner.downcast::<DataFusionError>() {
            Ok(df) => classify(*df, context),
            Err(inner) => match inner.downcast::<QuiverError>() {
                Ok(quiver) => *quiver,
                Err(_) => QuiverError::Execution(message),
            },
        },
        ArrowError::CastError(_) | ArrowError::ParseError(_) => QuiverError::Conversion(message),
        ArrowError::CsvError(_) | ArrowError::JsonError(_) | ArrowError::IpcError(_) => {
            QuiverError::Io(message)
        }
        ArrowError::IoError(_, _) => QuiverError::Io(message),
        ArrowError::DivideByZero => QuiverError::Execution(message),
        ArrowError::MemoryError(_) => QuiverError::ResourcesExhausted(message),
        _ => QuiverError::Execution(message),
    }
}

fn classify_plan_message(message: String) -> QuiverError {
    let lower = message.to_lowercase();
    if lower.contains("not found")
        || lower.contains("does not exist")
        || lower.contains("already exists")
        || lower.contains("ambiguous")
        || lower.contains("invalid function")
    {
        QuiverError::Catalog(message)
    } else if lower.contains("cannot cast") || lower.contains("cannot coerce") {
        QuiverError::Conversion(message)
    } else {
        QuiverError::InvalidInput(message)
    }
}

fn classify_execution_message(message: String) -> QuiverError {
    let lower = message.to_lowercase();
    if lower.contains("cannot cast") || lower.contains("cast error") {
        QuiverError::Conversion(message)
    } else if lower.contains("no such file") || lower.contains("not found") {
        QuiverError::Io(message)
    } else {
        QuiverError::Execution(message)
    }
}

/// DataFusion lists every valid field on a missing column; we name the column and suggest the
/// closest names instead (the full list of a 105-column table helps nobody).
fn schema_error_message(error: &SchemaError) -> String {
    match error {
        SchemaError::FieldNotFound {
            field,
            valid_fields,
        } => {
            let candidates: Vec<String> = valid_fields.iter().map(|c| c.name.clone()).collect();
            let mut message = format!("column \"{}\" not found", field.name);
            if let Some(relation) = &field.relation {
                message = format!("column \"{relation}.{}\" not found", field.name);
            }
            let suggestions = crate::suggest::closest(&field.name, &candidates, 3);
            if !suggestions.is_empty() {
                message.push_str(&format!(
                    "; did you mean {}?",
                    crate::suggest::quote_list(&suggestions)
                ));
            } else if !candidates.is_empty() && candidates.len() <= 12 {
                message.push_str(&format!(
                    "; the columns are {}",
                    crate::suggest::quote_list(&candidates)
                ));
            }
            message
        }
        SchemaError::AmbiguousReference { field } => format!(
            "column reference \"{}\" is ambiguous: qualify it with a table name",
            field.name
        ),
        other => other.to_string(),
    }
}

/// Converts sqlparser's `... at Line: 3, Column: 7` messages into a [`QuiverError::Parser`].
pub(crate) fn parser_error_to_quiver(raw: &str) -> QuiverError {
    let text = raw
        .trim_start_matches("sql parser error: ")
        .trim_start_matches("SQL error: ")
        .trim_start_matches("ParserError(\"")
        .trim_end_matches("\")")
        .to_string();
    let (message, line, column) = match text.rfind(" at Line: ") {
        Some(at) => {
            let position = &text[at + " at Line: ".len()..];
            let mut parts = position.split(", Column: ");
            let line = parts
                .next()
                .and_then(|l| l.trim().parse::<u64>().ok())
                .unwrap_or(0);
            let column = parts
                .next()
                .and_then(|c| {
                    c.trim()
                        .trim_end_matches(|ch: char| !ch.is_ascii_digit())
                        .parse::<u64>()
                        .ok()
                })
                .unwrap_or(0);
            (text[..at].to_string(), line, column)
        }
        None => (text, 0, 0),
    };
    QuiverError::Parser {
        message: message.replace("Expected: ", "expected "),
        line,
        column,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_positions_are_extracted() {
        let error = parser_error_to_quiver(
            "sql parser error: Expected: an SQL statement, found: SELEC at Line: 2, Column: 3",
        );
        match error {
            QuiverError::Parser {
                message,
                line,
                column,
            } => {
                assert_eq!(line, 2);
                assert_eq!(column, 3);
                assert!(message.contains("found: SELEC"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn quiver_errors_survive_a_trip_through_datafusion() {
        let wrapped = DataFusionError::Context(
            "planning".into(),
            Box::new(QuiverError::InvalidInput("bad option 'x'".into()).into_datafusion()),
        );
        let back = QuiverError::from(wrapped);
        assert!(matches!(back, QuiverError::InvalidInput(ref m) if m.contains("bad option")));
    }
}
