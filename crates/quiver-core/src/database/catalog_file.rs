//! The on-disk catalog (`DIR/catalog.json`) and its atomic commit.
//!
//! The catalog is the single source of truth of a database directory: a data file exists for
//! readers only once a committed catalog lists it. A commit writes `catalog.json.tmp`, fsyncs it,
//! renames it over `catalog.json` and fsyncs the directory, so a reader (or a restart after a
//! crash) sees either the old or the new catalog, never a mixture.
//!
//! ```json
//! {
//!   "format_version": 1,
//!   "tables": [{"name": "Sales", "id": 1, "schema": "ffffffff…", "files": ["data/t1/2.parquet"], "rows": 3}],
//!   "views": [{"name": "v", "sql": "CREATE VIEW v AS SELECT 1"}],
//!   "next_id": 3
//! }
//! ```
//!
//! Schemas are stored as hex of the Arrow IPC schema message (the same encoding Parquet uses
//! for its `ARROW:schema` key), so every Arrow type round-trips exactly.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::convert::try_schema_from_ipc_buffer;
use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteOptions};
use serde::{Deserialize, Serialize};

use super::error::DatabaseError;

/// File name of the committed catalog inside the database directory.
pub(crate) const CATALOG_FILE: &str = "catalog.json";
/// File name a catalog is written under before it is renamed into place.
pub(crate) const CATALOG_TMP_FILE: &str = "catalog.json.tmp";
/// Directory (inside the database directory) holding the Parquet data files.
pub(crate) const DATA_DIR: &str = "data";
/// The catalog format this build writes, and the newest it reads.
pub(crate) const FORMAT_VERSION: u64 = 1;

/// The decoded catalog: stored tables and views.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    /// Tables in creation order.
    pub tables: Vec<TableMeta>,
    /// Views in creation order (the order they must be replayed in).
    pub views: Vec<ViewMeta>,
    /// The next unused number for a table id or a data file.
    pub next_id: u64,
}

/// One stored table.
#[derive(Debug, Clone)]
pub(crate) struct TableMeta {
    /// The name exactly as created (case preserved).
    pub name: String,
    /// Generated id; the table's files live in `data/t<id>/`.
    pub id: u64,
    /// The table's Arrow schema.
    pub schema: SchemaRef,
    /// Data files, relative to the database directory with `/` separators.
    pub files: Vec<String>,
    /// Total number of rows in `files`.
    pub rows: u64,
}

/// One stored view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ViewMeta {
    /// The name exactly as created (case preserved).
    pub name: String,
    /// The full `CREATE VIEW` statement.
    pub sql: String,
}

#[derive(Serialize, Deserialize)]
struct CatalogJson {
    format_version: u64,
    tables: Vec<TableJson>,
    views: Vec<ViewJson>,
    next_id: u64,
}

#[derive(Serialize, Deserialize)]
struct TableJson {
    name: String,
    id: u64,
    schema: String,
    files: Vec<String>,
    rows: u64,
}

#[derive(Serialize, Deserialize)]
struct ViewJson {
    name: String,
    sql: String,
}

/// Read first, so that a catalog from a newer quiver is reported as such rather than as a
/// parse error of fields this build does not know.
#[derive(Deserialize)]
struct VersionProbe {
    format_version: u64,
}

impl Catalog {
    /// The catalog of a new, empty database.
    pub fn empty() -> Self {
        Catalog {
            tables: Vec::new(),
            views: Vec::new(),
            next_id: 1,
        }
    }

    /// The table named exactly `name`.
    pub fn table(&self, name: &str) -> Option<&TableMeta> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// The table with id `id`.
    pub fn table_by_id(&self, id: u64) -> Option<&TableMeta> {
        self.tables.iter().find(|t| t.id == id)
    }

    /// The table with id `id`, for modification.
    pub fn table_by_id_mut(&mut self, id: u64) -> Option<&mut TableMeta> {
        self.tables.iter_mut().find(|t| t.id == id)
    }

    /// The view named exactly `name`.
    pub fn view(&self, name: &str) -> Option<&ViewMeta> {
        self.views.iter().find(|v| v.name == name)
    }

    /// Whether a table or a view is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.table(name).is_some() || self.view(name).is_some()
    }

    /// Takes the next unused number (table ids and data file numbers share one sequence).
    pub fn allocate_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Every data file the catalog references.
    pub fn referenced_files(&self) -> HashSet<&str> {
        self.tables
            .iter()
            .flat_map(|t| t.files.iter().map(String::as_str))
            .collect()
    }

    /// Reads `DIR/catalog.json`; `Ok(None)` if there is none.
    pub fn load(dir: &Path) -> Result<Option<Catalog>, DatabaseError> {
        let path = dir.join(CATALOG_FILE);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(DatabaseError::io(&path)(e)),
        };
        Self::decode(&path, &bytes).map(Some)
    }

    /// Parses and validates catalog bytes read from `path`.
    fn decode(path: &Path, bytes: &[u8]) -> Result<Catalog, DatabaseError> {
        let corrupt = |message: String| DatabaseError::CorruptCatalog {
            path: path.to_path_buf(),
            message,
        };
        let probe: VersionProbe =
            serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if probe.format_version > FORMAT_VERSION {
            return Err(DatabaseError::UnsupportedFormatVersion {
                path: path.to_path_buf(),
                found: probe.format_version,
                supported: FORMAT_VERSION,
            });
        }
        if probe.format_version == 0 {
            return Err(corrupt("format_version 0 does not exist".into()));
        }
        let json: CatalogJson =
            serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;

        let mut names = HashSet::new();
        let mut ids = HashSet::new();
        let mut files = HashSet::new();
        // Recomputed rather than trusted: a `next_id` at or below a used number would let a new
        // data file be renamed over a referenced one.
        let mut next_id = json.next_id.max(1);
        let mut tables = Vec::with_capacity(json.tables.len());
        for table in json.tables {
            if !names.insert(table.name.clone()) {
                return Err(corrupt(format!("the name '{}' is used twice", table.name)));
            }
            if !ids.insert(table.id) {
                return Err(corrupt(format!("the table id {} is used twice", table.id)));
            }
            next_id = next_id.max(table.id.saturating_add(1));
            for file in &table.files {
                check_data_file_path(file).map_err(|message| {
                    corrupt(format!(
                        "table '{}': data file '{file}' {message}",
                        table.name
                    ))
                })?;
                if !files.insert(file.clone()) {
                    return Err(corrupt(format!("the data file '{file}' is listed twice")));
                }
                if let Some(number) = file_number(file) {
                    next_id = next_id.max(number.saturating_add(1));
                }
            }
            let schema = decode_schema(&table.schema)
                .map_err(|message| corrupt(format!("table '{}': schema {message}", table.name)))?;
            tables.push(TableMeta {
                name: table.name,
                id: table.id,
                schema,
                files: table.files,
                rows: table.rows,
            });
        }
        let mut views = Vec::with_capacity(json.views.len());
        for view in json.views {
            if !names.insert(view.name.clone()) {
                return Err(corrupt(format!("the name '{}' is used twice", view.name)));
            }
            views.push(ViewMeta {
                name: view.name,
                sql: view.sql,
            });
        }
        Ok(Catalog {
            tables,
            views,
            next_id,
        })
    }

    /// Serializes the catalog as pretty-printed JSON.
    fn encode(&self) -> Result<Vec<u8>, DatabaseError> {
        let json = CatalogJson {
            format_version: FORMAT_VERSION,
            tables: self
                .tables
                .iter()
                .map(|t| {
                    Ok(TableJson {
                        name: t.name.clone(),
                        id: t.id,
                        schema: encode_schema(&t.schema).map_err(|source| {
                            DatabaseError::Arrow {
                                context: format!("encoding the schema of table '{}'", t.name),
                                source,
                            }
                        })?,
                        files: t.files.clone(),
                        rows: t.rows,
                    })
                })
                .collect::<Result<_, DatabaseError>>()?,
            views: self
                .views
                .iter()
                .map(|v| ViewJson {
                    name: v.name.clone(),
                    sql: v.sql.clone(),
                })
                .collect(),
            next_id: self.next_id,
        };
        let mut bytes = serde_json::to_vec_pretty(&json).map_err(|e| DatabaseError::Io {
            path: PathBuf::from(CATALOG_FILE),
            source: io::Error::other(e),
        })?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Commits this catalog as `DIR/catalog.json` (temp file, fsync, rename, directory fsync).
    ///
    /// On error the previous `catalog.json` is untouched and the temp file is removed.
    pub fn store(&self, dir: &Path) -> Result<(), DatabaseError> {
        let bytes = self.encode()?;
        let tmp = dir.join(CATALOG_TMP_FILE);
        let target = dir.join(CATALOG_FILE);
        let written = File::create(&tmp).and_then(|mut file| {
            file.write_all(&bytes)?;
            file.sync_all()
        });
        if let Err(e) = written {
            // Best effort: a leftover temp file is removed at the next open anyway.
            let _ = fs::remove_file(&tmp);
            return Err(DatabaseError::io(&tmp)(e));
        }
        if let Err(e) = fs::rename(&tmp, &target) {
            let _ = fs::remove_file(&tmp);
            return Err(DatabaseError::io(&target)(e));
        }
        // Once the rename succeeded the new catalog is what every reader sees, so the commit has
        // happened: reporting a failed directory fsync as a failed statement would make the
        // caller undo work (delete data files) that the visible catalog already references. A
        // directory fsync only fails when the file system itself is failing, which the next
        // write reports.
        let _ = sync_dir(dir);
        Ok(())
    }
}

/// Fsyncs a directory so that renames and new entries in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), DatabaseError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(DatabaseError::io(dir))
    }
    // Windows cannot open a directory as a file; NTFS journals renames itself.
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// The absolute path of a catalog-relative data file path (`data/t1/2.parquet`).
pub(crate) fn resolve(dir: &Path, relative: &str) -> PathBuf {
    let mut path = dir.to_path_buf();
    path.extend(relative.split('/'));
    path
}

/// Data file paths must stay inside `data/`: the catalog is trusted with nothing else.
fn check_data_file_path(file: &str) -> Result<(), &'static str> {
    let mut parts = file.split('/');
    if parts.next() != Some(DATA_DIR) {
        return Err("is not under data/");
    }
    let rest: Vec<&str> = parts.collect();
    if rest.is_empty() || rest.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Err("is not a plain relative path under data/");
    }
    if rest.iter().any(|p| p.contains('\\')) {
        return Err("contains a backslash");
    }
    Ok(())
}

/// The number `n` of a data file named `…/<n>.parquet`.
fn file_number(file: &str) -> Option<u64> {
    file.rsplit('/')
        .next()?
        .strip_suffix(".parquet")?
        .parse()
        .ok()
}

/// Hex of the length-prefixed Arrow IPC schema message.
fn encode_schema(schema: &Schema) -> Result<String, arrow::error::ArrowError> {
    let generator = IpcDataGenerator::default();
    let mut tracker = DictionaryTracker::new(true);
    let encoded = generator.schema_to_bytes_with_dictionary_tracker(
        schema,
        &mut tracker,
        &IpcWriteOptions::default(),
    );
    let message = encoded.ipc_message;
    let length = u32::try_from(message.len()).map_err(|_| {
        arrow::error::ArrowError::IpcError("schema message longer than 4 GiB".into())
    })?;
    let mut bytes = Vec::with_capacity(message.len() + 8);
    bytes.extend_from_slice(&[0xff; 4]);
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(&message);
    Ok(to_hex(&bytes))
}

fn decode_schema(hex: &str) -> Result<SchemaRef, String> {
    let bytes = from_hex(hex)?;
    try_schema_from_ipc_buffer(&bytes)
        .map(Arc::new)
        .map_err(|e| format!("cannot be decoded: {e}"))
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    fn digit(c: u8) -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!("has the non-hex character {:?}", char::from(c))),
        }
    }
    let bytes = hex.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return Err("has an odd number of hex digits".into());
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Ok((digit(pair[0])? << 4) | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, TimeUnit};

    fn sample_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("Name With Space", DataType::Utf8View, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("d", DataType::Decimal128(20, 4), true),
            Field::new_list("tags", Field::new_list_field(DataType::Utf8, true), true),
        ]))
    }

    #[test]
    fn schema_round_trips_through_hex_ipc() {
        let schema = sample_schema();
        let hex = encode_schema(&schema).unwrap();
        assert!(hex.starts_with("ffffffff"));
        assert_eq!(decode_schema(&hex).unwrap(), schema);
    }

    #[test]
    fn catalog_round_trips_through_disk() {
        let dir = tempfile::tempdir().unwrap();
        let mut catalog = Catalog::empty();
        let id = catalog.allocate_id();
        let file = catalog.allocate_id();
        catalog.tables.push(TableMeta {
            name: "Mixed Case/Name".into(),
            id,
            schema: sample_schema(),
            files: vec![format!("data/t{id}/{file}.parquet")],
            rows: 7,
        });
        catalog.views.push(ViewMeta {
            name: "v".into(),
            sql: "CREATE VIEW v AS SELECT 1".into(),
        });
        catalog.store(dir.path()).unwrap();
        assert!(!dir.path().join(CATALOG_TMP_FILE).exists());

        let loaded = Catalog::load(dir.path()).unwrap().unwrap();
        assert_eq!(loaded.next_id, 3);
        let table = loaded.table("Mixed Case/Name").unwrap();
        assert_eq!(table.schema, sample_schema());
        assert_eq!(table.files, vec!["data/t1/2.parquet".to_string()]);
        assert_eq!(table.rows, 7);
        assert_eq!(loaded.views, catalog.views);
    }

    #[test]
    fn missing_catalog_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Catalog::load(dir.path()).unwrap().is_none());
    }

    #[test]
    fn garbage_is_a_corrupt_catalog_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(CATALOG_FILE), b"{not json").unwrap();
        let error = Catalog::load(dir.path()).unwrap_err();
        assert!(matches!(error, DatabaseError::CorruptCatalog { .. }));
        assert!(error.to_string().contains("catalog.json"), "{error}");
    }

    #[test]
    fn newer_format_version_is_reported_as_such() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(CATALOG_FILE),
            br#"{"format_version": 2, "something_new": true}"#,
        )
        .unwrap();
        let error = Catalog::load(dir.path()).unwrap_err();
        assert!(
            matches!(
                error,
                DatabaseError::UnsupportedFormatVersion {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn paths_outside_data_are_rejected() {
        for bad in [
            "/etc/passwd",
            "data/../x.parquet",
            "other/x.parquet",
            "data/",
            "data//x",
        ] {
            assert!(check_data_file_path(bad).is_err(), "{bad}");
        }
        assert!(check_data_file_path("data/t1/2.parquet").is_ok());
    }

    #[test]
    fn next_id_is_raised_above_every_used_number() {
        let schema = encode_schema(&sample_schema()).unwrap();
        let json = format!(
            r#"{{"format_version":1,"next_id":1,"views":[],
                "tables":[{{"name":"t","id":4,"schema":"{schema}","files":["data/t4/9.parquet"],"rows":1}}]}}"#
        );
        let catalog = Catalog::decode(Path::new("catalog.json"), json.as_bytes()).unwrap();
        assert_eq!(catalog.next_id, 10);
    }

    #[test]
    fn duplicate_names_are_corrupt() {
        let json = r#"{"format_version":1,"next_id":1,"tables":[],
            "views":[{"name":"v","sql":"a"},{"name":"v","sql":"b"}]}"#;
        let error = Catalog::decode(Path::new("catalog.json"), json.as_bytes()).unwrap_err();
        assert!(error.to_string().contains("'v' is used twice"), "{error}");
    }

    #[test]
    fn hex_rejects_bad_input() {
        assert!(from_hex("abc").is_err());
        assert!(from_hex("zz").is_err());
        assert_eq!(from_hex("00Ff").unwrap(), vec![0, 255]);
        assert_eq!(to_hex(&[0, 255, 16]), "00ff10");
    }
}
