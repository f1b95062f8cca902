//! The file table functions: DuckDB's `read_parquet`, `read_csv`, `read_json`, `read_arrow`,
//! `read_avro`, `read_orc`, and ClickHouse's `file(path [, Format])`.
//!
//! Options are passed by name, DuckDB style: `read_csv('x.csv', header = false, delim = ';')`
//! (`name => value` works too; the statement rewriter turns it into `name = value`).

use std::future::Future;
use std::sync::Arc;

use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;

use crate::error::QuiverError;
use crate::files::{arg_error, file_table, FileKind, FileScan};

/// Registers every file table function on `ctx`.
pub fn register_file_functions(ctx: &SessionContext) {
    let functions: [(&'static str, Option<FileKind>); 13] = [
        ("read_parquet", Some(FileKind::Parquet)),
        ("parquet_scan", Some(FileKind::Parquet)),
        ("read_csv", Some(FileKind::Csv)),
        ("read_csv_auto", Some(FileKind::Csv)),
        ("read_json", Some(FileKind::Json)),
        ("read_json_auto", Some(FileKind::Json)),
        ("read_ndjson", Some(FileKind::Json)),
        ("read_arrow", Some(FileKind::Arrow)),
        ("read_ipc", Some(FileKind::Arrow)),
        ("read_avro", Some(FileKind::Avro)),
        ("read_orc", Some(FileKind::Orc)),
        ("file", None),
        ("read_auto", None),
    ];
    for (name, kind) in functions {
        ctx.register_udtf(name, Arc::new(ReadFiles { name, kind }));
    }
}

/// One file table function; `kind` is `None` for `file` / `read_auto`, which infer the format
/// from the extension or take it as their second argument.
#[derive(Debug)]
struct ReadFiles {
    name: &'static str,
    kind: Option<FileKind>,
}

impl TableFunctionImpl for ReadFiles {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let scan = self.parse_args(args.exprs())?;
        let session = args.session();
        let table = block_on(file_table(session, &scan))
            .and_then(|table| table)
            .map_err(QuiverError::into_datafusion)?;
        Ok(table)
    }
}

impl ReadFiles {
    fn parse_args(&self, exprs: &[Expr]) -> DFResult<FileScan> {
        let name = self.name;
        let mut scan = FileScan {
            kind: self.kind,
            ..Default::default()
        };
        let mut positional = 0;
        for expr in exprs {
            if let Some((option, value)) = named_argument(expr) {
                self.apply_option(&mut scan, &option, &value)?;
                continue;
            }
            match positional {
                0 => scan.paths = paths_argument(name, expr)?,
                1 if self.kind.is_none() => {
                    let format = match expr {
                        Expr::Column(column) => column.name.clone(),
                        other => string_argument(name, "format", other)?,
                    };
                    let (kind, header, delimiter) =
                        FileKind::from_name(&format).map_err(QuiverError::into_datafusion)?;
                    scan.kind = Some(kind);
                    scan.header = scan.header.or(header);
                    scan.delimiter = scan.delimiter.or(delimiter);
                }
                _ => {
                    return Err(arg_error(
                        name,
                        format!("unexpected argument {expr}; options are passed by name, like header = true"),
                    ))
                }
            }
            positional += 1;
        }
        if scan.paths.is_empty() {
            return Err(arg_error(
                name,
                "expected a path, a glob or a list of paths",
            ));
        }
        Ok(scan)
    }

    fn apply_option(&self, scan: &mut FileScan, option: &str, value: &ScalarValue) -> DFResult<()> {
        let name = self.name;
        let as_bool = || match value {
            ScalarValue::Boolean(Some(b)) => Ok(*b),
            ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
                match s.to_lowercase().as_str() {
                    "true" | "1" | "yes" => Ok(true),
                    "false" | "0" | "no" => Ok(false),
                    _ => Err(arg_error(
                        name,
                        format!("{option} must be true or false, not '{s}'"),
                    )),
                }
            }
            other => Err(arg_error(
                name,
                format!("{option} must be true or false, not {other}"),
            )),
        };
        let as_string = || match value {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)) => Ok(s.clone()),
            other => Err(arg_error(
                name,
                format!("{option} must be a string, not {other}"),
            )),
        };
        let as_char = || -> DFResult<u8> {
            let text = as_string()?;
            let unescaped = match text.as_str() {
                "\\t" => "\t".to_string(),
                other => other.to_string(),
            };
            match unescaped.as_bytes() {
                [byte] => Ok(*byte),
                _ => Err(arg_error(
                    name,
                    format!("{option} must be a single one-byte character, not '{text}'"),
                )),
            }
        };
        match (self.kind, option.to_lowercase().as_str()) {
            (Some(FileKind::Csv) | None, "header") => scan.header = Some(as_bool()?),
            (Some(FileKind::Csv) | None, "delim" | "delimiter" | "sep" | "separator") => {
                scan.delimiter = Some(as_char()?)
            }
            (Some(FileKind::Csv) | None, "quote") => scan.quote = Some(as_char()?),
            (Some(FileKind::Csv) | None, "escape") => scan.escape = Some(as_char()?),
            (Some(FileKind::Csv) | None, "nullstr" | "null" | "null_string") => {
                scan.null_string = Some(as_string()?)
            }
            (Some(FileKind::Json) | None, "format") => {
                scan.json_array = match as_string()?.to_lowercase().as_str() {
                    "array" => Some(true),
                    "newline_delimited" | "ndjson" | "jsonl" => Some(false),
                    "auto" => None,
                    other => {
                        return Err(arg_error(
                            name,
                            format!(
                            "format must be 'array', 'newline_delimited' or 'auto', not '{other}'"
                        ),
                        ))
                    }
                }
            }
            (_, "compression" | "codec") => {
                scan.compression = Some(match as_string()?.to_lowercase().as_str() {
                    "gzip" | "gz" => FileCompressionType::GZIP,
                    "zstd" | "zst" => FileCompressionType::ZSTD,
                    "bzip2" | "bz2" => FileCompressionType::BZIP2,
                    "xz" => FileCompressionType::XZ,
                    "none" | "uncompressed" => FileCompressionType::UNCOMPRESSED,
                    "auto" => return Ok(()),
                    other => {
                        return Err(arg_error(
                            name,
                            format!(
                                "unknown compression '{other}'; use gzip, zstd, bzip2, xz or none"
                            ),
                        ))
                    }
                })
            }
            (Some(FileKind::Csv | FileKind::Json) | None, "sample_size" | "sample_rows") => {
                scan.sample_rows = Some(match value {
                    ScalarValue::Int64(Some(n)) if *n > 0 => *n as usize,
                    ScalarValue::Int64(Some(-1)) => usize::MAX,
                    other => {
                        return Err(arg_error(
                            name,
                            format!("sample_size must be a positive integer, not {other}"),
                        ))
                    }
                })
            }
            _ => {
                let valid = match self.kind {
                    Some(FileKind::Csv) => {
                        "header, delim, quote, escape, nullstr, compression, sample_size"
                    }
                    Some(FileKind::Json) => "format, compression, sample_size",
                    None => {
                        "header, delim, quote, escape, nullstr, format, compression, sample_size"
                    }
                    _ => "compression",
                };
                return Err(arg_error(
                    name,
                    format!("unknown option '{option}'; valid options are {valid}"),
                ));
            }
        }
        Ok(())
    }
}

/// An option: the statement rewriter turns `name = value` and `name => value` into
/// `named_struct('name', value)` (see `identifiers.rs`).
fn named_argument(expr: &Expr) -> Option<(String, ScalarValue)> {
    match expr {
        // The planner folds the constant `named_struct` into a struct literal.
        Expr::Literal(ScalarValue::Struct(array), _) if array.num_columns() == 1 => {
            let name = array.fields().first()?.name().clone();
            let value = ScalarValue::try_from_array(array.column(0), 0).ok()?;
            Some((name, value))
        }
        Expr::ScalarFunction(call) if call.name() == "named_struct" => match call.args.as_slice() {
            [Expr::Literal(ScalarValue::Utf8(Some(name)), _), value] => {
                let value = match value {
                    Expr::Literal(value, _) => value.clone(),
                    Expr::Negative(inner) => match inner.as_ref() {
                        Expr::Literal(value, _) => value.arithmetic_negate().ok()?,
                        _ => return None,
                    },
                    _ => return None,
                };
                Some((name.clone(), value))
            }
            _ => None,
        },
        _ => None,
    }
}

fn string_argument(function: &str, what: &str, expr: &Expr) -> DFResult<String> {
    match expr {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)),
            _,
        ) => Ok(s.clone()),
        other => Err(arg_error(
            function,
            format!("the {what} must be a string literal, not {other}"),
        )),
    }
}

/// A path, or a list of paths: `['a.csv', 'b.csv']`.
fn paths_argument(function: &str, expr: &Expr) -> DFResult<Vec<String>> {
    match expr {
        Expr::ScalarFunction(call) if matches!(call.name(), "make_array" | "make_list") => call
            .args
            .iter()
            .map(|arg| string_argument(function, "path", arg))
            .collect(),
        Expr::Literal(ScalarValue::List(list), _) => {
            let values = list.values();
            (0..values.len())
                .map(|i| match ScalarValue::try_from_array(values, i) {
                    Ok(
                        ScalarValue::Utf8(Some(s))
                        | ScalarValue::Utf8View(Some(s))
                        | ScalarValue::LargeUtf8(Some(s)),
                    ) => Ok(s),
                    _ => Err(arg_error(function, "a list of paths must hold strings")),
                })
                .collect()
        }
        other => Ok(vec![string_argument(function, "path", other)?]),
    }
}

/// Runs an async file-system task to completion from synchronous code (DataFusion's table
/// functions are synchronous). It runs on a scoped thread with its own single-threaded runtime,
/// so it works whatever runtime (or none) the caller is on, without blocking a runtime worker.
pub(crate) fn block_on<F>(future: F) -> Result<F::Output, QuiverError>
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        let handle = scope.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|runtime| runtime.block_on(future))
        });
        match handle.join() {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(error)) => Err(QuiverError::Internal(format!(
                "cannot start a runtime: {error}"
            ))),
            Err(_) => Err(QuiverError::Internal("a file-listing task panicked".into())),
        }
    })
}
