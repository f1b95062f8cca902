//! Persistent database directories: tables that survive a restart, stored in open formats.
//!
//! `quiver --database DIR` opens a [`Database`]; its [`SchemaProvider`] becomes the session's
//! default schema, so `CREATE TABLE`, `INSERT INTO`, `CREATE VIEW` and `DROP` write through to
//! the directory:
//!
//! ```text
//! DIR/quiver.lock             held locked while open (exclusive: read-write, shared: read-only)
//! DIR/catalog.json            tables (Arrow schema, data files, row count) and views (SQL text)
//! DIR/data/t<id>/<n>.parquet  immutable zstd Parquet files, one per CREATE/INSERT statement
//! ```
//!
//! Directories are named after generated ids, never after table names, so any name (mixed case,
//! spaces, `/`, quotes) is safe. Every write follows the same protocol: write a data file under
//! a temp name, fsync, rename; then commit a new catalog by temp file + fsync + rename (see
//! [`catalog_file`]). A statement that fails or is killed half-way therefore leaves the previous
//! state readable, and [`Database::open`] removes whatever such a failure left behind.
//!
//! Within one process, the catalog lives behind a mutex and commits are serialized; across
//! processes, the lock file admits one writer or any number of readers.

mod catalog_file;
mod error;
mod schema;
mod segment;
mod table;

#[cfg(test)]
mod test_support;

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::logical_expr::dml::InsertOp;

use self::catalog_file::{
    resolve, Catalog, TableMeta, ViewMeta, CATALOG_FILE, CATALOG_TMP_FILE, DATA_DIR,
};
pub use self::error::DatabaseError;
use self::schema::DatabaseSchema;
use self::segment::{remove_files, SegmentWriter};
pub use self::table::PersistentTable;

/// File name of the lock file inside the database directory.
const LOCK_FILE: &str = "quiver.lock";

/// How a database directory is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessMode {
    /// One process may write; it holds an exclusive lock on `DIR/quiver.lock`.
    ReadWrite,
    /// Any number of processes may read; each holds a shared lock, so no writer can open the
    /// directory meanwhile. Every write returns [`DatabaseError::ReadOnly`].
    ReadOnly,
}

/// An open database directory.
///
/// The directory stays locked until the last `Arc<Database>` is dropped; the session's schema
/// provider and every [`PersistentTable`] handed to DataFusion hold one.
pub struct Database {
    dir: PathBuf,
    mode: AccessMode,
    state: Mutex<State>,
    /// Held only for its lock, which the OS releases when the file is closed.
    _lock: File,
}

/// The mutable part of a [`Database`].
struct State {
    /// The committed catalog. Replaced only after a successful commit, so it is consistent even
    /// if a thread panicked while holding the mutex.
    catalog: Catalog,
    /// Views created or replayed in this process: the live `ViewTable`s DataFusion plans with.
    /// A stored view that has not been replayed yet is in the catalog only.
    live_views: HashMap<String, Arc<dyn TableProvider>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("dir", &self.dir)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Opens the database in `dir`.
    ///
    /// [`AccessMode::ReadWrite`] creates the directory and an empty database if missing, takes
    /// an exclusive lock on `DIR/quiver.lock`, and removes leftovers of an interrupted write
    /// (temp files, data files the catalog does not reference). [`AccessMode::ReadOnly`] needs
    /// an existing database, takes a shared lock and changes nothing.
    ///
    /// Errors: [`DatabaseError::Locked`] if another process (or another `Database` in this
    /// process) holds a conflicting lock; [`DatabaseError::CorruptCatalog`] or
    /// [`DatabaseError::UnsupportedFormatVersion`] for an unreadable catalog;
    /// [`DatabaseError::NotADatabase`] for a non-empty directory without a catalog.
    pub fn open(dir: &Path, mode: AccessMode) -> Result<Arc<Database>, DatabaseError> {
        match mode {
            AccessMode::ReadWrite => fs::create_dir_all(dir).map_err(DatabaseError::io(dir))?,
            AccessMode::ReadOnly if !dir.is_dir() => {
                return Err(DatabaseError::NotFound {
                    dir: dir.to_path_buf(),
                })
            }
            AccessMode::ReadOnly => {}
        }
        // Absolute and symlink-free: data file paths are handed to DataFusion's object store,
        // which wants absolute paths.
        let dir = fs::canonicalize(dir).map_err(DatabaseError::io(dir))?;
        let lock = lock_directory(&dir, mode)?;
        let catalog = match (Catalog::load(&dir)?, mode) {
            (Some(catalog), _) => catalog,
            (None, AccessMode::ReadOnly) => return Err(DatabaseError::NotFound { dir }),
            (None, AccessMode::ReadWrite) => {
                ensure_only_leftovers(&dir)?;
                let catalog = Catalog::empty();
                catalog.store(&dir)?;
                catalog
            }
        };
        if mode == AccessMode::ReadWrite {
            remove_leftovers(&dir, &catalog)?;
        }
        Ok(Arc::new(Database {
            dir,
            mode,
            state: Mutex::new(State {
                catalog,
                live_views: HashMap::new(),
            }),
            _lock: lock,
        }))
    }

    /// The database directory (absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How the directory was opened.
    pub fn mode(&self) -> AccessMode {
        self.mode
    }

    /// The schema provider the session installs as its default schema (`main`).
    pub fn schema_provider(self: &Arc<Self>) -> Arc<dyn SchemaProvider> {
        Arc::new(DatabaseSchema::new(Arc::clone(self)))
    }

    /// Stored view definitions in creation order: `(name, CREATE VIEW statement)`.
    ///
    /// The session replays them (plans each statement) after opening; a replayed definition
    /// identical to the stored one is attached without writing anything, so replay also works
    /// on a read-only database.
    pub fn view_definitions(&self) -> Vec<(String, String)> {
        self.state()
            .catalog
            .views
            .iter()
            .map(|v| (v.name.clone(), v.sql.clone()))
            .collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is only replaced after a successful commit, so a poisoned lock still
        // guards a consistent catalog.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ensure_writable(&self, operation: impl FnOnce() -> String) -> Result<(), DatabaseError> {
        match self.mode {
            AccessMode::ReadWrite => Ok(()),
            AccessMode::ReadOnly => Err(DatabaseError::ReadOnly {
                dir: self.dir.clone(),
                operation: operation(),
            }),
        }
    }

    /// Applies `change` to a copy of the catalog, stores the copy, and only then makes it the
    /// current state.
    fn commit<T>(
        &self,
        state: &mut State,
        change: impl FnOnce(&mut Catalog) -> Result<T, DatabaseError>,
    ) -> Result<T, DatabaseError> {
        let mut next = state.catalog.clone();
        let result = change(&mut next)?;
        next.store(&self.dir)?;
        state.catalog = next;
        Ok(result)
    }

    /// Allocates the catalog-relative path of a new data file of table `id`.
    fn new_segment_path(state: &mut State, table_id: u64) -> String {
        let number = state.catalog.allocate_id();
        format!("{DATA_DIR}/t{table_id}/{number}.parquet")
    }

    // ---- operations used by the schema provider and the tables -------------------------------

    /// Names of stored tables and live views, in creation order.
    fn table_names(&self) -> Vec<String> {
        let state = self.state();
        let tables = state.catalog.tables.iter().map(|t| t.name.clone());
        let views = state
            .catalog
            .views
            .iter()
            .filter(|v| state.live_views.contains_key(&v.name))
            .map(|v| v.name.clone());
        tables.chain(views).collect()
    }

    /// The live provider of a table or view, or `None` (also for a view not replayed yet).
    fn provider(self: &Arc<Self>, name: &str) -> Option<Arc<dyn TableProvider>> {
        let state = self.state();
        if let Some(table) = state.catalog.table(name) {
            return Some(Arc::new(PersistentTable::new(self, table)));
        }
        state.live_views.get(name).cloned()
    }

    fn exists(&self, name: &str) -> bool {
        let state = self.state();
        state.catalog.table(name).is_some() || state.live_views.contains_key(name)
    }

    /// Stores a new table holding `batches` (written as one data file, none if empty).
    ///
    /// Called from DataFusion's synchronous `register_table`, so the file is written on the
    /// calling thread: the rows are already in memory (DataFusion materializes `CREATE TABLE
    /// AS` before registering), and writing them locally costs about what producing them did.
    fn create_table(
        &self,
        name: &str,
        schema: SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<(), DatabaseError> {
        self.ensure_writable(|| format!("create table '{name}'"))?;
        let (id, segment) = {
            let mut state = self.state();
            if state.catalog.contains(name) || state.live_views.contains_key(name) {
                return Err(DatabaseError::TableExists { name: name.into() });
            }
            let id = state.catalog.allocate_id();
            (id, Self::new_segment_path(&mut state, id))
        };
        let segment_path = resolve(&self.dir, &segment);
        let (files, rows) = if batches.iter().all(|b| b.num_rows() == 0) {
            // No rows, no file: the table is its schema alone.
            (Vec::new(), 0)
        } else {
            let mut writer =
                SegmentWriter::create(segment_path.clone(), SchemaRef::clone(&schema), name)?;
            for batch in batches {
                writer.write(batch)?;
            }
            match writer.finish()? {
                Some(rows) => (vec![segment], rows),
                None => (Vec::new(), 0),
            }
        };
        let written = files.clone();

        let mut state = self.state();
        let committed = if state.catalog.contains(name) || state.live_views.contains_key(name) {
            Err(DatabaseError::TableExists { name: name.into() })
        } else {
            self.commit(&mut state, |catalog| {
                catalog.tables.push(TableMeta {
                    name: name.to_string(),
                    id,
                    schema,
                    files,
                    rows,
                });
                Ok(())
            })
        };
        drop(state);
        if committed.is_err() && !written.is_empty() {
            remove_files(&[segment_path]);
        }
        committed
    }

    /// Stores a view (or attaches the live provider of a stored view being replayed).
    fn store_view(
        &self,
        name: &str,
        definition: Option<&str>,
        provider: Arc<dyn TableProvider>,
    ) -> Result<(), DatabaseError> {
        let sql =
            definition.ok_or_else(|| DatabaseError::ViewWithoutDefinition { name: name.into() })?;
        let mut state = self.state();
        if state.catalog.table(name).is_some() || state.live_views.contains_key(name) {
            return Err(DatabaseError::TableExists { name: name.into() });
        }
        match state.catalog.view(name) {
            // Replay at open: the definition is already stored.
            Some(stored) if stored.sql == sql => {}
            // A stored view that could not be replayed is redefined in place.
            Some(_) => {
                self.ensure_writable(|| format!("redefine view '{name}'"))?;
                self.commit(&mut state, |catalog| {
                    if let Some(view) = catalog.views.iter_mut().find(|v| v.name == name) {
                        view.sql = sql.to_string();
                    }
                    Ok(())
                })?;
            }
            None => {
                self.ensure_writable(|| format!("create view '{name}'"))?;
                self.commit(&mut state, |catalog| {
                    catalog.views.push(ViewMeta {
                        name: name.to_string(),
                        sql: sql.to_string(),
                    });
                    Ok(())
                })?;
            }
        }
        state.live_views.insert(name.to_string(), provider);
        Ok(())
    }

    /// Drops a table (then deletes its files) or a view; `Ok(None)` if neither exists.
    fn drop_table_or_view(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<Option<Arc<dyn TableProvider>>, DatabaseError> {
        let mut state = self.state();
        if let Some(table) = state.catalog.table(name) {
            self.ensure_writable(|| format!("drop table '{name}'"))?;
            let provider: Arc<dyn TableProvider> = Arc::new(PersistentTable::new(self, table));
            let id = table.id;
            let files: Vec<PathBuf> = table.files.iter().map(|f| resolve(&self.dir, f)).collect();
            self.commit(&mut state, |catalog| {
                catalog.tables.retain(|t| t.id != id);
                Ok(())
            })?;
            drop(state);
            remove_files(&files);
            let _ = fs::remove_dir(self.dir.join(DATA_DIR).join(format!("t{id}")));
            return Ok(Some(provider));
        }
        if state.catalog.view(name).is_some() {
            self.ensure_writable(|| format!("drop view '{name}'"))?;
            self.commit(&mut state, |catalog| {
                catalog.views.retain(|v| v.name != name);
                Ok(())
            })?;
            return Ok(state.live_views.remove(name));
        }
        Ok(None)
    }

    /// The absolute paths of the data files of table `id`, or `None` if it was dropped.
    fn table_files(&self, table_id: u64) -> Option<Vec<PathBuf>> {
        let state = self.state();
        let table = state.catalog.table_by_id(table_id)?;
        Some(table.files.iter().map(|f| resolve(&self.dir, f)).collect())
    }

    /// Reserves a data file for an insert into table `id`: `(catalog path, absolute path)`.
    fn reserve_segment(
        &self,
        table_id: u64,
        name: &str,
    ) -> Result<(String, PathBuf), DatabaseError> {
        self.ensure_writable(|| format!("insert into table '{name}'"))?;
        let mut state = self.state();
        if state.catalog.table_by_id(table_id).is_none() {
            return Err(DatabaseError::TableNotFound { name: name.into() });
        }
        let segment = Self::new_segment_path(&mut state, table_id);
        let path = resolve(&self.dir, &segment);
        Ok((segment, path))
    }

    /// Commits a published data file of `rows` rows (`None`: nothing was written) into table
    /// `id`. On failure the file is deleted and the catalog is unchanged.
    fn commit_segment(
        &self,
        table_id: u64,
        name: &str,
        segment: &str,
        rows: Option<u64>,
        op: InsertOp,
    ) -> Result<u64, DatabaseError> {
        let segment_path = resolve(&self.dir, segment);
        if rows.is_none() && op == InsertOp::Append {
            return Ok(0);
        }
        let mut state = self.state();
        let replaced = self.commit(&mut state, |catalog| {
            let table = catalog
                .table_by_id_mut(table_id)
                .ok_or_else(|| DatabaseError::TableNotFound { name: name.into() })?;
            let new_files: Vec<String> = rows.iter().map(|_| segment.to_string()).collect();
            Ok(match op {
                InsertOp::Overwrite => {
                    table.rows = rows.unwrap_or(0);
                    std::mem::replace(&mut table.files, new_files)
                }
                _ => {
                    table.rows += rows.unwrap_or(0);
                    table.files.extend(new_files);
                    Vec::new()
                }
            })
        });
        drop(state);
        match replaced {
            Ok(old_files) => {
                let old: Vec<PathBuf> = old_files.iter().map(|f| resolve(&self.dir, f)).collect();
                remove_files(&old);
                Ok(rows.unwrap_or(0))
            }
            Err(e) => {
                if rows.is_some() {
                    remove_files(&[segment_path]);
                }
                Err(e)
            }
        }
    }
}

/// Opens `DIR/quiver.lock` and locks it (exclusive for read-write, shared for read-only).
fn lock_directory(dir: &Path, mode: AccessMode) -> Result<File, DatabaseError> {
    let path = dir.join(LOCK_FILE);
    let file = match mode {
        AccessMode::ReadWrite => OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path),
        // A read-only open creates nothing, except the lock file of a database copied without it.
        AccessMode::ReadOnly => match File::open(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && dir.join(CATALOG_FILE).is_file() => {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(DatabaseError::NotFound {
                    dir: dir.to_path_buf(),
                })
            }
            other => other,
        },
    }
    .map_err(DatabaseError::io(&path))?;
    let locked = match mode {
        AccessMode::ReadWrite => file.try_lock(),
        AccessMode::ReadOnly => file.try_lock_shared(),
    };
    match locked {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(DatabaseError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(DatabaseError::io(&path)(e)),
    }
}

/// A directory without a catalog may become a database only if it is empty, or holds just what
/// an interrupted creation leaves behind.
fn ensure_only_leftovers(dir: &Path) -> Result<(), DatabaseError> {
    for entry in fs::read_dir(dir).map_err(DatabaseError::io(dir))? {
        let entry = entry.map_err(DatabaseError::io(dir))?;
        let name = entry.file_name();
        let known = [LOCK_FILE, CATALOG_TMP_FILE, DATA_DIR]
            .iter()
            .any(|k| name == std::ffi::OsStr::new(k));
        if !known {
            return Err(DatabaseError::NotADatabase {
                dir: dir.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Removes what an interrupted write leaves: `catalog.json.tmp`, and under `data/` every
/// `.tmp` or `.parquet` file the catalog does not reference, then empty directories.
///
/// Only called with the exclusive lock held, so no other writer can be mid-write.
fn remove_leftovers(dir: &Path, catalog: &Catalog) -> Result<(), DatabaseError> {
    let tmp = dir.join(CATALOG_TMP_FILE);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(DatabaseError::io(&tmp)(e)),
        _ => {}
    }
    let data = dir.join(DATA_DIR);
    if !data.is_dir() {
        return Ok(());
    }
    let referenced = catalog.referenced_files();
    remove_unreferenced(&data, DATA_DIR, &referenced)?;
    Ok(())
}

/// Recursive part of [`remove_leftovers`]; `relative` is `path` relative to the database
/// directory with `/` separators. Returns whether `path` is now empty.
fn remove_unreferenced(
    path: &Path,
    relative: &str,
    referenced: &HashSet<&str>,
) -> Result<bool, DatabaseError> {
    let mut empty = true;
    for entry in fs::read_dir(path).map_err(DatabaseError::io(path))? {
        let entry = entry.map_err(DatabaseError::io(path))?;
        let entry_path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            empty = false; // Not a name quiver creates: leave it alone.
            continue;
        };
        let entry_relative = format!("{relative}/{name}");
        let file_type = entry.file_type().map_err(DatabaseError::io(&entry_path))?;
        if file_type.is_dir() {
            if remove_unreferenced(&entry_path, &entry_relative, referenced)? {
                fs::remove_dir(&entry_path).map_err(DatabaseError::io(&entry_path))?;
            } else {
                empty = false;
            }
        } else if !referenced.contains(entry_relative.as_str())
            && (name.ends_with(".tmp") || name.ends_with(".parquet"))
        {
            fs::remove_file(&entry_path).map_err(DatabaseError::io(&entry_path))?;
        } else {
            empty = false;
        }
    }
    Ok(empty)
}

#[cfg(test)]
mod tests {
    use super::test_support::{files_under, query, session};
    use super::*;

    #[test]
    fn open_creates_an_empty_database() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new.db");
        let db = Database::open(&dir, AccessMode::ReadWrite).unwrap();
        assert_eq!(db.mode(), AccessMode::ReadWrite);
        assert!(db.dir().is_absolute());
        assert!(dir.join(CATALOG_FILE).is_file());
        assert!(dir.join(LOCK_FILE).is_file());
        assert!(db.view_definitions().is_empty());
    }

    #[test]
    fn second_read_write_open_is_locked() {
        let tmp = tempfile::tempdir().unwrap();
        let _db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let error = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap_err();
        assert!(matches!(error, DatabaseError::Locked { .. }), "{error}");
        assert!(error
            .to_string()
            .contains("is in use by another quiver process"));
    }

    #[test]
    fn read_only_open_of_a_read_write_database_is_locked() {
        let tmp = tempfile::tempdir().unwrap();
        let _db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        let error = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap_err();
        assert!(matches!(error, DatabaseError::Locked { .. }), "{error}");
    }

    #[test]
    fn two_read_only_opens_share_and_exclude_a_writer() {
        let tmp = tempfile::tempdir().unwrap();
        drop(Database::open(tmp.path(), AccessMode::ReadWrite).unwrap());
        let first = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap();
        let second = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap();
        assert_eq!(first.mode(), AccessMode::ReadOnly);
        let error = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap_err();
        assert!(matches!(error, DatabaseError::Locked { .. }), "{error}");
        drop((first, second));
        Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
    }

    #[test]
    fn lock_is_released_when_the_database_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        drop(Database::open(tmp.path(), AccessMode::ReadWrite).unwrap());
        Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
    }

    #[test]
    fn read_only_open_of_nothing_is_not_found() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing");
        let error = Database::open(&missing, AccessMode::ReadOnly).unwrap_err();
        assert!(matches!(error, DatabaseError::NotFound { .. }), "{error}");
        assert!(!missing.exists());
        let error = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap_err();
        assert!(matches!(error, DatabaseError::NotFound { .. }), "{error}");
        assert_eq!(
            fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "read-only open created files"
        );
    }

    #[test]
    fn foreign_non_empty_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
        let error = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap_err();
        assert!(
            matches!(error, DatabaseError::NotADatabase { .. }),
            "{error}"
        );
        assert!(!tmp.path().join(CATALOG_FILE).exists());
    }

    #[test]
    fn corrupt_catalog_names_its_path() {
        let tmp = tempfile::tempdir().unwrap();
        drop(Database::open(tmp.path(), AccessMode::ReadWrite).unwrap());
        fs::write(
            tmp.path().join(CATALOG_FILE),
            "{\"format_version\": 1, \"tables\": [",
        )
        .unwrap();
        let error = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap_err();
        assert!(
            matches!(error, DatabaseError::CorruptCatalog { .. }),
            "{error}"
        );
        let catalog_path = fs::canonicalize(tmp.path()).unwrap().join(CATALOG_FILE);
        assert!(
            error
                .to_string()
                .contains(&catalog_path.display().to_string()),
            "{error}"
        );
    }

    #[test]
    fn newer_catalog_version_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        drop(Database::open(tmp.path(), AccessMode::ReadWrite).unwrap());
        fs::write(
            tmp.path().join(CATALOG_FILE),
            r#"{"format_version": 99, "tables": [], "views": [], "next_id": 1}"#,
        )
        .unwrap();
        let error = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap_err();
        assert!(error.to_string().contains("format version 99"), "{error}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn open_removes_leftovers_of_interrupted_writes() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            query(&ctx, "CREATE TABLE t AS SELECT 1 AS a").await;
        }
        let kept = files_under(tmp.path());
        // What a crash can leave: temp files, a renamed but uncommitted segment, a directory
        // of a table whose creation never committed.
        fs::write(tmp.path().join(CATALOG_TMP_FILE), "{").unwrap();
        let table_dir = tmp.path().join("data").join("t1");
        fs::write(table_dir.join("77.parquet.tmp"), "partial").unwrap();
        fs::write(table_dir.join("78.parquet"), "uncommitted").unwrap();
        fs::create_dir_all(tmp.path().join("data").join("t90")).unwrap();
        fs::write(tmp.path().join("data").join("t90").join("91.parquet"), "x").unwrap();

        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        assert_eq!(files_under(tmp.path()), kept);
        assert!(!tmp.path().join("data").join("t90").exists());
        let ctx = session(&db);
        assert_eq!(query(&ctx, "SELECT a FROM t").await, vec!["1"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn views_do_not_keep_the_directory_locked() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
            let ctx = session(&db);
            query(&ctx, "CREATE TABLE t AS SELECT 1 AS a").await;
            // The view's plan holds the table's provider; the database holds the view.
            query(&ctx, "CREATE VIEW v AS SELECT a FROM t").await;
        }
        let db = Database::open(tmp.path(), AccessMode::ReadWrite).unwrap();
        assert_eq!(db.view_definitions().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn read_only_open_leaves_leftovers_alone() {
        let tmp = tempfile::tempdir().unwrap();
        drop(Database::open(tmp.path(), AccessMode::ReadWrite).unwrap());
        fs::write(tmp.path().join(CATALOG_TMP_FILE), "{").unwrap();
        let _db = Database::open(tmp.path(), AccessMode::ReadOnly).unwrap();
        assert!(tmp.path().join(CATALOG_TMP_FILE).exists());
    }
}
