//! Files as tables: Parquet, CSV/TSV, JSON (NDJSON and arrays), Arrow IPC, Avro and ORC, from
//! paths, globs and lists of paths, with `.gz` / `.zst` / `.bz2` / `.xz` compression.
//!
//! Every file table is a DataFusion `ListingTable` (so projection, filter and limit pushdown,
//! statistics and parallel reads come from DataFusion) wrapped in a [`FileTable`] that names the
//! files in every error it raises: a malformed file must never produce an error that leaves the
//! user guessing which of their files is broken.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::file_format::avro::AvroFormat;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;

use crate::error::{invalid_input, QuiverError};
use crate::metrics::ErrorContextExec;
use crate::nan_safe_parquet::NanSafeParquetFormat;

/// The file formats quiver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Parquet,
    Csv,
    Json,
    Arrow,
    Avro,
    Orc,
}

impl FileKind {
    /// The format implied by a file name's extension, ignoring a compression suffix.
    pub fn from_path(path: &str) -> Option<(FileKind, Option<FileCompressionType>)> {
        let lower = path.to_lowercase();
        let (stem, compression) = split_compression(&lower);
        let extension = Path::new(stem).extension()?.to_str()?;
        let kind = match extension {
            "parquet" | "parq" | "pq" => FileKind::Parquet,
            "csv" | "tsv" | "tab" | "txt" => FileKind::Csv,
            "json" | "ndjson" | "jsonl" => FileKind::Json,
            "arrow" | "feather" | "ipc" | "arrows" => FileKind::Arrow,
            "avro" => FileKind::Avro,
            "orc" => FileKind::Orc,
            _ => return None,
        };
        Some((kind, compression))
    }

    /// A format by name: DuckDB's (`parquet`, `csv`, `json`, ...) and ClickHouse's
    /// (`CSVWithNames`, `TabSeparated`, `JSONEachRow`, ...). Returns the kind and the CSV header
    /// and delimiter the name implies.
    pub fn from_name(name: &str) -> Result<(FileKind, Option<bool>, Option<u8>), QuiverError> {
        let found = match name.to_lowercase().as_str() {
            "parquet" => (FileKind::Parquet, None, None),
            // ClickHouse's CSV has no header line; CSVWithNames has one.
            "csv" => (FileKind::Csv, Some(false), None),
            "csvwithnames" | "csvwithnamesandtypes" => (FileKind::Csv, Some(true), None),
            "tsv" | "tabseparated" => (FileKind::Csv, Some(false), Some(b'\t')),
            "tsvwithnames" | "tabseparatedwithnames" => (FileKind::Csv, Some(true), Some(b'\t')),
            "json" | "jsoneachrow" | "ndjson" | "jsonlines" | "jsonl" => {
                (FileKind::Json, None, None)
            }
            "arrow" | "arrowstream" | "ipc" | "feather" => (FileKind::Arrow, None, None),
            "avro" => (FileKind::Avro, None, None),
            "orc" => (FileKind::Orc, None, None),
            _ => {
                return Err(QuiverError::InvalidInput(format!(
                    "unknown file format \"{name}\"; valid formats are Parquet, CSV, \
                     CSVWithNames, TSV, TSVWithNames, JSON, JSONEachRow, Arrow, Avro, ORC"
                )))
            }
        };
        Ok(found)
    }

    fn name(self) -> &'static str {
        match self {
            FileKind::Parquet => "Parquet",
            FileKind::Csv => "CSV",
            FileKind::Json => "JSON",
            FileKind::Arrow => "Arrow",
            FileKind::Avro => "Avro",
            FileKind::Orc => "ORC",
        }
    }
}

fn split_compression(path: &str) -> (&str, Option<FileCompressionType>) {
    for (suffix, kind) in [
        (".gz", FileCompressionType::GZIP),
        (".gzip", FileCompressionType::GZIP),
        (".zst", FileCompressionType::ZSTD),
        (".zstd", FileCompressionType::ZSTD),
        (".bz2", FileCompressionType::BZIP2),
        (".xz", FileCompressionType::XZ),
    ] {
        if let Some(stem) = path.strip_suffix(suffix) {
            return (stem, Some(kind));
        }
    }
    (path, None)
}

/// How to read a set of files: what the table functions' arguments say.
#[derive(Debug, Clone, Default)]
pub struct FileScan {
    /// Paths, globs or directories. Relative paths are relative to the working directory.
    pub paths: Vec<String>,
    /// The format; `None` infers it from the first path's extension.
    pub kind: Option<FileKind>,
    /// CSV: whether the first line holds column names (default true).
    pub header: Option<bool>,
    /// CSV: the field delimiter (default `,`, or tab for `.tsv`).
    pub delimiter: Option<u8>,
    /// CSV: the quote character (default `"`).
    pub quote: Option<u8>,
    /// CSV: the escape character (default none: quotes are doubled).
    pub escape: Option<u8>,
    /// CSV: a string that reads as NULL (default: the empty field).
    pub null_string: Option<String>,
    /// JSON: `true` for one JSON array of objects, `false` for NDJSON (default: sniffed).
    pub json_array: Option<bool>,
    /// Compression; `None` infers it from the extension.
    pub compression: Option<FileCompressionType>,
    /// Rows read to infer a CSV/JSON schema (default 1000... DataFusion's setting).
    pub sample_rows: Option<usize>,
}

impl FileScan {
    /// A scan of one path with everything inferred.
    pub fn path(path: impl Into<String>) -> Self {
        FileScan {
            paths: vec![path.into()],
            ..Default::default()
        }
    }

    /// How errors name these files: `'a.csv'`, or `'a.csv', 'b.csv'`.
    pub fn label(&self) -> String {
        let quoted: Vec<String> = self.paths.iter().map(|p| format!("'{p}'")).collect();
        quoted.join(", ")
    }
}

fn is_glob(path: &str) -> bool {
    path.contains(['*', '?', '['])
}

fn expand_home(path: &str) -> String {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest).to_string_lossy().into_owned(),
        _ => path.to_string(),
    }
}

/// Builds the table for `scan`: checks that the paths exist, infers format, compression and
/// schema, and returns a [`FileTable`].
pub async fn file_table(
    state: &dyn Session,
    scan: &FileScan,
) -> Result<Arc<FileTable>, QuiverError> {
    if scan.paths.is_empty() {
        return Err(QuiverError::InvalidInput(
            "no file path given: pass a path, a glob or a list of paths".into(),
        ));
    }
    let label = scan.label();
    let mut urls: Vec<(String, ListingTableUrl)> = Vec::with_capacity(scan.paths.len());
    for raw in &scan.paths {
        let path = expand_home(raw);
        if path.contains("://") && !path.starts_with("file://") {
            return Err(QuiverError::InvalidInput(format!(
                "cannot read '{raw}': only local files are supported"
            )));
        }
        if !is_glob(&path) {
            if let Err(error) = std::fs::metadata(&path) {
                return Err(QuiverError::Io(format!(
                    "cannot open file '{raw}': {error}"
                )));
            }
        }
        let url = ListingTableUrl::parse(&path)
            .map_err(|e| QuiverError::InvalidInput(format!("invalid path '{raw}': {e}")))?;
        urls.push((raw.clone(), url));
    }

    // List the files now: a glob that matches nothing, or an empty directory, is an error that
    // names the pattern rather than a confusing empty schema later.
    let mut first_file: Option<String> = None;
    for (raw, url) in &urls {
        let store = state
            .runtime_env()
            .object_store(url)
            .map_err(QuiverError::from)?;
        let mut files = url
            .list_all_files(state, store.as_ref(), "")
            .await
            .map_err(|e| QuiverError::Io(format!("cannot list '{raw}': {e}")))?;
        match files.next().await {
            Some(Ok(meta)) => {
                if first_file.is_none() {
                    first_file = Some(meta.location.to_string());
                }
            }
            Some(Err(e)) => return Err(QuiverError::Io(format!("cannot list '{raw}': {e}"))),
            None => {
                return Err(QuiverError::Io(format!("no files match '{raw}'")));
            }
        }
    }
    let first_file = first_file.unwrap_or_default();

    let inferred = FileKind::from_path(&scan.paths[0]).or_else(|| FileKind::from_path(&first_file));
    let kind = match (scan.kind, inferred) {
        (Some(kind), _) => kind,
        (None, Some((kind, _))) => kind,
        (None, None) => {
            return Err(QuiverError::InvalidInput(format!(
                "cannot tell the format of {label} from its name: use read_parquet, read_csv, \
                 read_json, read_arrow, read_avro, read_orc or file(path, 'Format')"
            )))
        }
    };
    let compression = scan
        .compression
        .or_else(|| inferred.and_then(|(_, c)| c))
        .or_else(|| split_compression(&first_file.to_lowercase()).1)
        .unwrap_or(FileCompressionType::UNCOMPRESSED);

    let (format, is_json_array) = file_format(state, scan, kind, compression, &first_file)?;
    // DataFusion 55's JSON-array reader fails on objects that span several lines (pretty-printed
    // files, the common case). Such files are read through a compacted copy, one line per array.
    let mut compacted: Option<Arc<tempfile::TempDir>> = None;
    if is_json_array && compression == FileCompressionType::UNCOMPRESSED {
        let dir = tempfile::tempdir()
            .map_err(|e| QuiverError::Io(format!("cannot create a temporary directory: {e}")))?;
        let mut copies = Vec::with_capacity(urls.len());
        for (index, (raw, _)) in urls.iter().enumerate() {
            if is_glob(raw) {
                return Err(QuiverError::NotImplemented(format!(
                    "reading JSON arrays from a glob ('{raw}'); list the files or use NDJSON"
                )));
            }
            let copy = dir.path().join(format!("{index}.json"));
            compact_json(Path::new(&expand_home(raw)), &copy)
                .map_err(|e| QuiverError::Io(format!("cannot read '{raw}': {e}")))?;
            let url = ListingTableUrl::parse(copy.to_string_lossy())
                .map_err(|e| QuiverError::Internal(e.to_string()))?;
            copies.push((raw.clone(), url));
        }
        urls = copies;
        compacted = Some(Arc::new(dir));
    }
    let options = ListingOptions::new(format).with_file_extension("");

    let schema = options
        .infer_schema(state, &urls[0].1)
        .await
        .map_err(|e| with_file_context(e, kind, &label))?;
    // arrow infers JSON objects' keys in sorted order; DuckDB keeps the file's order.
    let schema = match (kind, compression == FileCompressionType::UNCOMPRESSED) {
        (FileKind::Json, true) => match json_key_order(&first_file) {
            Some(order) => reorder_fields(&schema, &order),
            None => schema,
        },
        _ => schema,
    };
    if schema.fields().is_empty() {
        return Err(QuiverError::Io(format!(
            "{label} has no columns: is it an empty or non-{} file?",
            kind.name()
        )));
    }
    let config =
        ListingTableConfig::new_with_multi_paths(urls.into_iter().map(|(_, u)| u).collect())
            .with_listing_options(options)
            .with_schema(schema);
    let table = ListingTable::try_new(config).map_err(|e| with_file_context(e, kind, &label))?;
    Ok(Arc::new(FileTable {
        inner: Arc::new(table),
        context: format!("while reading {} file {label}", kind.name()),
        compacted,
    }))
}

fn with_file_context(error: DataFusionError, kind: FileKind, label: &str) -> QuiverError {
    QuiverError::from(DataFusionError::Context(
        format!("while reading {} file {label}", kind.name()),
        Box::new(error),
    ))
}

fn file_format(
    state: &dyn Session,
    scan: &FileScan,
    kind: FileKind,
    compression: FileCompressionType,
    first_file: &str,
) -> Result<(Arc<dyn FileFormat>, bool), QuiverError> {
    let table_options = state.default_table_options();
    let mut is_json_array = false;
    let format: Arc<dyn FileFormat> = match kind {
        FileKind::Parquet => Arc::new(NanSafeParquetFormat::new(
            ParquetFormat::default().with_options(table_options.parquet.clone()),
        )),
        FileKind::Csv => {
            let is_tsv = scan
                .paths
                .iter()
                .chain(std::iter::once(&first_file.to_string()))
                .any(|p| {
                    let lower = p.to_lowercase();
                    let stem = split_compression(&lower).0;
                    stem.ends_with(".tsv") || stem.ends_with(".tab")
                });
            let mut csv = CsvFormat::default()
                .with_options(table_options.csv.clone())
                .with_has_header(scan.header.unwrap_or(true))
                .with_delimiter(scan.delimiter.unwrap_or(if is_tsv { b'\t' } else { b',' }))
                .with_quote(scan.quote.unwrap_or(b'"'))
                .with_escape(scan.escape)
                .with_file_compression_type(compression);
            if let Some(null) = &scan.null_string {
                csv = csv.with_null_regex(Some(regex_escape(null)));
            }
            if let Some(rows) = scan.sample_rows {
                csv = csv.with_schema_infer_max_rec(rows);
            }
            Arc::new(csv)
        }
        FileKind::Json => {
            let array = match scan.json_array {
                Some(array) => array,
                None if compression == FileCompressionType::UNCOMPRESSED => {
                    sniff_json_array(first_file)
                }
                None => false,
            };
            is_json_array = array;
            let mut json = JsonFormat::default()
                .with_options(table_options.json.clone())
                .with_newline_delimited(!array)
                .with_file_compression_type(compression);
            if let Some(rows) = scan.sample_rows {
                json = json.with_schema_infer_max_rec(rows);
            }
            Arc::new(json)
        }
        FileKind::Arrow => Arc::new(ArrowFormat),
        FileKind::Avro => Arc::new(AvroFormat),
        FileKind::Orc => Arc::new(datafusion_orc::OrcFormat),
    };
    Ok((format, is_json_array))
}

fn regex_escape(text: &str) -> String {
    let mut out = String::from("^");
    for ch in text.chars() {
        if "\\.+*?()|[]{}^$".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('$');
    out
}

/// Whether a JSON file holds one array (`[{...}, ...]`) rather than NDJSON: its first
/// non-whitespace byte is `[`.
fn sniff_json_array(location: &str) -> bool {
    use std::io::Read;
    let path = format!("/{}", location.trim_start_matches('/'));
    let Ok(mut file) = std::fs::File::open(&path) else {
        return false;
    };
    let mut buffer = [0u8; 512];
    let Ok(n) = file.read(&mut buffer) else {
        return false;
    };
    buffer[..n]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[')
}

/// Copies a JSON document replacing line breaks outside strings by spaces (a streaming pass,
/// constant memory).
fn compact_json(source: &Path, target: &Path) -> std::io::Result<()> {
    use std::io::{BufRead, BufReader, BufWriter, Write};
    let mut reader = BufReader::with_capacity(1 << 20, std::fs::File::open(source)?);
    let mut writer = BufWriter::with_capacity(1 << 20, std::fs::File::create(target)?);
    let (mut in_string, mut escaped) = (false, false);
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let mut out = Vec::with_capacity(chunk.len());
        for &byte in chunk {
            if in_string {
                if escaped {
                    escaped = false;
                } else if byte == b'\\' {
                    escaped = true;
                } else if byte == b'"' {
                    in_string = false;
                }
                out.push(byte);
            } else if byte == b'"' {
                in_string = true;
                out.push(byte);
            } else if byte == b'\n' || byte == b'\r' {
                out.push(b' ');
            } else {
                out.push(byte);
            }
        }
        let consumed = chunk.len();
        writer.write_all(&out)?;
        reader.consume(consumed);
    }
    writer.write_all(b"\n")?;
    writer.flush()
}

/// The keys of the first JSON object in a file (NDJSON or array), in the order written.
fn json_key_order(location: &str) -> Option<Vec<String>> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    use std::io::Read;

    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                keys.push(key);
            }
            Ok(keys)
        }
    }

    let path = format!("/{}", location.trim_start_matches('/'));
    let mut buffer = Vec::with_capacity(64 * 1024);
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_end(&mut buffer)
        .ok()?;
    let start = buffer.iter().position(|b| *b == b'{')?;
    let mut deserializer = serde_json::Deserializer::from_slice(&buffer[start..]);
    deserializer.deserialize_map(Keys).ok()
}

fn reorder_fields(schema: &SchemaRef, order: &[String]) -> SchemaRef {
    let position = |name: &str| order.iter().position(|k| k == name).unwrap_or(usize::MAX);
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.sort_by_key(|f| position(f.name()));
    Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// A file-backed table: a `ListingTable` whose scans name their files in every error.
#[derive(Debug)]
pub struct FileTable {
    inner: Arc<ListingTable>,
    context: String,
    /// Compacted copies of JSON-array files, deleted when the table is dropped.
    compacted: Option<Arc<tempfile::TempDir>>,
}

#[async_trait]
impl TableProvider for FileTable {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let plan = self
            .inner
            .scan(state, projection, filters, limit)
            .await
            .map_err(|e| DataFusionError::Context(self.context.clone(), Box::new(e)))?;
        let keep_alive = self
            .compacted
            .clone()
            .map(|dir| dir as Arc<dyn std::any::Any + Send + Sync>);
        Ok(Arc::new(
            ErrorContextExec::new(plan, self.context.clone()).with_keep_alive(keep_alive),
        ))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    fn statistics(&self) -> Option<datafusion::common::Statistics> {
        self.inner.statistics()
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Converts an error from a table-function argument into DataFusion's error type.
pub(crate) fn arg_error(function: &str, message: impl fmt::Display) -> DataFusionError {
    invalid_input(format!("{function}: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_inferred_from_extensions() {
        assert_eq!(
            FileKind::from_path("a/b.parquet").map(|x| x.0),
            Some(FileKind::Parquet)
        );
        assert_eq!(
            FileKind::from_path("x.CSV.gz").map(|x| x.0),
            Some(FileKind::Csv)
        );
        assert_eq!(
            FileKind::from_path("x.csv.gz").and_then(|x| x.1),
            Some(FileCompressionType::GZIP)
        );
        assert_eq!(
            FileKind::from_path("x.ndjson.zst").map(|x| x.0),
            Some(FileKind::Json)
        );
        assert_eq!(
            FileKind::from_path("data/*.orc").map(|x| x.0),
            Some(FileKind::Orc)
        );
        assert_eq!(FileKind::from_path("noext"), None);
    }

    #[test]
    fn clickhouse_format_names_are_understood() {
        assert!(matches!(
            FileKind::from_name("TabSeparatedWithNames"),
            Ok((FileKind::Csv, Some(true), Some(b'\t')))
        ));
        assert!(FileKind::from_name("Excel").is_err());
    }
}
