//! One snapshot per query, shared by every scan in it, and the connections that read in it.
//!
//! The first connection a query needs begins `REPEATABLE READ READ ONLY` and runs
//! `pg_export_snapshot()`; every further connection begins the same way and imports it with
//! `SET TRANSACTION SNAPSHOT`. So all tasks of all scans of one query (self-joins, several
//! tables of one database) see the database exactly as it was at one instant, whatever commits
//! meanwhile (DuckDB's technique; PostgreSQL manual, "Snapshot Synchronization Functions").
//!
//! The exporting transaction must stay open while others import, so the exporting connection
//! stays in the pool — it reads tasks like any other — until the query's plan is dropped.
//! Scans plan on a connection of the pool too (their catalog questions then see the snapshot).
//! Connections are taken on demand and returned to the pool only after a COPY ended cleanly;
//! one dropped in the middle of a COPY (an error, LIMIT satisfied, Ctrl-C) is closed, and the
//! server is sent a cancel request so it stops the COPY at once. When the query is done its
//! transactions are rolled back and its connections kept by the target for the next query
//! ([`ConnectTarget::on_connection`]): a query over an attached database then logs in to
//! nothing, where two new backends cost it about 10 ms.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use arrow::record_batch::RecordBatch;
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio_postgres::SimpleQueryMessage;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::connection::{ConnectTarget, PgConnection};
use crate::error::{PostgresError, Result};
use crate::sql::quote_literal;

/// Identifies one query of one session against one server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueryKey {
    /// The connection target (user, host, port, database), without password.
    pub target: String,
    pub session_id: String,
    /// When the query started planning, in nanoseconds (DataFusion stamps each query).
    pub query_start: i64,
}

type Registry = Mutex<HashMap<QueryKey, Weak<SnapshotPool>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The snapshot pool of the query `key`: the one its other scans already use, or a new one.
/// Nothing connects until a scan plans or runs.
pub fn snapshot_for_query(key: QueryKey, target: &ConnectTarget) -> Arc<SnapshotPool> {
    let Ok(mut map) = registry().lock() else {
        // A poisoned registry only loses sharing, never correctness of one scan.
        return Arc::new(SnapshotPool::new(target.clone()));
    };
    map.retain(|_, pool| pool.strong_count() > 0);
    if let Some(pool) = map.get(&key).and_then(Weak::upgrade) {
        return pool;
    }
    let pool = Arc::new(SnapshotPool::new(target.clone()));
    map.insert(key, Arc::downgrade(&pool));
    pool
}

/// Ends the sessions of every query still running, for [`crate::connection::close_all`] (the
/// process is exiting): each pool's connections are closed (their transactions end with their
/// sessions), the scans reading in it stop with an error rather than end short, and it gives
/// out no more connections. A query left half-read — a Python reader nobody finished — would
/// otherwise hold its connections until the process is gone.
pub(crate) fn close_all_pools() {
    let pools: Vec<Arc<SnapshotPool>> = match registry().lock() {
        Ok(map) => map.values().filter_map(Weak::upgrade).collect(),
        Err(_) => Vec::new(),
    };
    for pool in pools {
        pool.close();
    }
}

/// Connections that all read in one exported snapshot.
pub struct SnapshotPool {
    target: ConnectTarget,
    snapshot: tokio::sync::OnceCell<String>,
    idle: Mutex<Vec<PgConnection>>,
    /// The connection whose transaction exported the snapshot. It reads nothing: a reader's
    /// connection is dropped when its COPY is abandoned (a LIMIT, Ctrl-C), and if that were
    /// the exporter, its snapshot would end with it and every later import would fail.
    exporter: Mutex<Option<PgConnection>>,
    /// How many scans of the query read exactly the same statements, by their statements.
    scans: Mutex<HashMap<String, usize>>,
    /// Reads shared by identical scans, by statements and partition (see [`Self::shared_read`]).
    shared: Mutex<HashMap<String, SharedEntry>>,
    /// Cancelled when the pool is closed ([`close_all_pools`]).
    closed: CancellationToken,
}

/// The batches of one shared read, or its error (shared: errors do not clone).
pub type SharedBatches =
    std::result::Result<Arc<Vec<RecordBatch>>, Arc<datafusion::error::DataFusionError>>;

struct SharedEntry {
    read: Shared<BoxFuture<'static, SharedBatches>>,
    /// Scans that have not taken the read yet; the entry goes when the last one takes it.
    waiting: usize,
}

impl std::fmt::Debug for SnapshotPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotPool")
            .field("target", &self.target)
            .field("snapshot", &self.snapshot.get())
            .finish()
    }
}

impl SnapshotPool {
    /// A pool for `target` that has not connected yet.
    pub fn new(target: ConnectTarget) -> Self {
        SnapshotPool {
            target,
            snapshot: tokio::sync::OnceCell::new(),
            idle: Mutex::new(Vec::new()),
            exporter: Mutex::new(None),
            scans: Mutex::new(HashMap::new()),
            shared: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
        }
    }

    /// Closes the pool's connections and stops its scans (see [`close_all_pools`]).
    fn close(&self) {
        self.closed.cancel();
        drop(self.take_connections());
    }

    /// The connections the pool holds (its idle ones and the exporter), taken out of it.
    fn take_connections(&self) -> Vec<PgConnection> {
        let mut connections = match self.idle.lock() {
            Ok(mut idle) => std::mem::take(&mut *idle),
            Err(_) => Vec::new(),
        };
        if let Ok(mut exporter) = self.exporter.lock() {
            connections.extend(exporter.take());
        }
        connections
    }

    /// Completes when the pool is closed: a scan's read races it, and stops (dropping its
    /// connection, which cancels the server's COPY) when it wins.
    pub(crate) fn closed(&self) -> WaitForCancellationFutureOwned {
        self.closed.clone().cancelled_owned()
    }

    /// Counts a planned scan that reads `statements` (see [`Self::scans_reading`]).
    pub fn register_scan(&self, statements: &str) {
        if let Ok(mut scans) = self.scans.lock() {
            *scans.entry(statements.to_string()).or_default() += 1;
        }
    }

    /// How many of the query's scans read exactly `statements`.
    pub fn scans_reading(&self, statements: &str) -> usize {
        self.scans
            .lock()
            .ok()
            .and_then(|scans| scans.get(statements).copied())
            .unwrap_or(1)
    }

    /// The read `key` that `readers` scans share: the first caller starts `read` (which runs
    /// on its own task, so it progresses whichever scan is polled), the others wait for its
    /// batches. TPC-H Q15 names the same view twice; both read one COPY.
    pub fn shared_read(
        &self,
        key: String,
        readers: usize,
        read: impl FnOnce() -> BoxFuture<'static, SharedBatches>,
    ) -> Shared<BoxFuture<'static, SharedBatches>> {
        let Ok(mut shared) = self.shared.lock() else {
            return read().shared();
        };
        let entry = shared.entry(key.clone()).or_insert_with(|| SharedEntry {
            read: read().shared(),
            waiting: readers,
        });
        let future = entry.read.clone();
        entry.waiting = entry.waiting.saturating_sub(1);
        if entry.waiting == 0 {
            shared.remove(&key);
        }
        future
    }

    /// The exported snapshot's identifier, once a scan has started.
    pub fn snapshot_id(&self) -> Option<&str> {
        self.snapshot.get().map(String::as_str)
    }

    /// A connection inside the snapshot's transaction: an idle one, or a new one.
    pub async fn acquire(self: &Arc<Self>) -> Result<PooledClient> {
        if self.closed.is_cancelled() {
            return Err(PostgresError::closed_at_exit("reading"));
        }
        let snapshot = self
            .snapshot
            .get_or_try_init(|| self.export_snapshot())
            .await?
            .clone();
        if let Some(client) = self.take_idle() {
            return Ok(PooledClient::new(client, self));
        }
        let literal = quote_literal(&snapshot).ok_or_else(|| PostgresError::Server {
            what: "importing the snapshot".into(),
            message: "the snapshot identifier is not text".into(),
        })?;
        let (client, _) = begin(
            &self.target,
            &format!(
                "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY; \
                 SET TRANSACTION SNAPSHOT {literal}"
            ),
            "importing the query's snapshot",
        )
        .await?;
        Ok(PooledClient::new(client, self))
    }

    async fn export_snapshot(&self) -> Result<String> {
        // One round trip: the transaction's start and the export in one simple query.
        let (client, messages) = begin(
            &self.target,
            "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY; \
             SELECT pg_catalog.pg_export_snapshot()",
            "exporting the snapshot",
        )
        .await?;
        let id = messages
            .iter()
            .find_map(|message| match message {
                SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
                _ => None,
            })
            .ok_or_else(|| PostgresError::Server {
                what: "exporting the snapshot".into(),
                message: "pg_export_snapshot() returned no identifier".into(),
            })?;
        if self.closed.is_cancelled() {
            return Err(PostgresError::closed_at_exit("exporting the snapshot"));
        }
        match self.exporter.lock() {
            Ok(mut exporter) => *exporter = Some(client),
            Err(_) => {
                return Err(PostgresError::Server {
                    what: "exporting the snapshot".into(),
                    message: "the connection pool's lock is poisoned".into(),
                })
            }
        }
        Ok(id)
    }

    fn take_idle(&self) -> Option<PgConnection> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(client) = idle.pop() {
            if !client.is_closed() {
                return Some(client);
            }
        }
        None
    }

    fn give_back(&self, client: PgConnection) {
        if self.closed.is_cancelled() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(client);
        }
    }
}

/// Runs `statements` (a transaction's start, as one simple query) on one of `target`'s idle
/// connections, or on a new one (see [`ConnectTarget::on_connection`]), and returns what
/// they answered.
async fn begin(
    target: &ConnectTarget,
    statements: &str,
    what: &str,
) -> Result<(PgConnection, Vec<SimpleQueryMessage>)> {
    target
        .on_connection(|connection| async move {
            let messages = connection
                .simple_query(statements)
                .await
                .map_err(|e| PostgresError::server(what, &e));
            (connection, messages)
        })
        .await
}

impl Drop for SnapshotPool {
    /// Ends the query's transactions and gives their connections back to the target, for the
    /// next query. The rollback runs at once, on the connections' I/O runtime: a session
    /// idling in a transaction would hold back the server's vacuum.
    fn drop(&mut self) {
        let connections = self.take_connections();
        let Ok(runtime) = crate::connection::io_runtime() else {
            return;
        };
        if connections.is_empty() {
            return;
        }
        let target = self.target.clone();
        runtime.spawn(async move {
            for connection in connections {
                if connection.batch_execute("ROLLBACK").await.is_ok() {
                    target.reuse_later(connection);
                }
            }
        });
    }
}

/// A connection borrowed from a [`SnapshotPool`].
pub struct PooledClient {
    client: Option<PgConnection>,
    pool: Arc<SnapshotPool>,
    in_copy: bool,
}

impl std::fmt::Debug for PooledClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledClient")
            .field("in_copy", &self.in_copy)
            .finish()
    }
}

impl PooledClient {
    fn new(client: PgConnection, pool: &Arc<SnapshotPool>) -> Self {
        PooledClient {
            client: Some(client),
            pool: Arc::clone(pool),
            in_copy: false,
        }
    }

    /// The client, or an error if it was already given up.
    pub fn client(&self) -> Result<&PgConnection> {
        self.client.as_ref().ok_or_else(|| PostgresError::Server {
            what: "reading".into(),
            message: "the connection was closed".into(),
        })
    }

    /// Marks the start and the clean end of a COPY: a connection dropped in between is not
    /// reused (its protocol state is unknown) and its server-side COPY is cancelled.
    pub fn set_in_copy(&mut self, in_copy: bool) {
        self.in_copy = in_copy;
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if !self.in_copy {
            self.pool.give_back(client);
            return;
        }
        // Stop the server's COPY now rather than when it next fails to write to the closed
        // socket, and drop whatever of it still arrives. Best effort: without the I/O runtime
        // closing the socket is all we do.
        client.tap().abandon();
        if let Ok(handle) = crate::connection::io_runtime() {
            handle.spawn(async move {
                client.cancel().await;
            });
        }
    }
}
