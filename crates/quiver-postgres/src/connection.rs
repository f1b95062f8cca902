//! Connection strings and connections.
//!
//! A connection string is what libpq accepts: `key=value` pairs (`host=/tmp port=5432
//! dbname=shop`) or a `postgresql://user@host:port/db?option=value` URI (both parsed by
//! `tokio_postgres::Config`). What it leaves out comes from the environment as libpq reads it —
//! `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGAPPNAME`, `PGOPTIONS`,
//! `PGCONNECT_TIMEOUT` — then libpq's defaults: the Unix socket directory, port 5432, the OS
//! user, a database named after the user. Without a password from the string or `PGPASSWORD`,
//! the password file is read as libpq reads it ([`crate::passfile`]: `passfile=`,
//! `PGPASSFILE`, `~/.pgpass`). TLS follows `sslmode` and its files as libpq does
//! ([`crate::tls`]), and so does `channel_binding` (or `PGCHANNELBINDING`). `service=` (or
//! `PGSERVICE`) reads a section of a service file ([`crate::service`]), whose values come after
//! the string's and before the environment's.
//!
//! A password is never shown: [`ConnectTarget::describe`] is the only way a target is printed.
//!
//! quiver opens the socket itself (each host in turn, a Unix socket directory or TCP) and hands
//! it to tokio-postgres wrapped in a [`TapStream`], so COPY data can be read off it directly
//! (see [`crate::tap`]). `hostaddr`, TCP keepalive settings and `target_session_attrs` are
//! not applied.

use std::collections::HashMap;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::{ChannelBinding, Host, SslMode as PgSsl};
use tokio_postgres::{Client, Config, Statement};
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;

use crate::error::{PostgresError, Result};
use crate::options::{option, take_options};
use crate::passfile;
use crate::service;
use crate::tap::{CopyTap, TapStream};
use crate::tls::{self, SslMode, TlsSettings};

/// Where to connect, fully resolved (string, environment, defaults).
///
/// Clones share the target's idle connections ([`ConnectTarget::on_connection`]): an attached
/// database keeps one target for all its queries, so its queries reuse each other's
/// connections instead of logging in again (a new backend costs Postgres a fork and the login
/// several milliseconds, more than a point query takes). Connections are shared only between
/// clones, never between targets parsed separately — two strings that differ only in their
/// password must not share a logged-in connection.
#[derive(Clone)]
pub struct ConnectTarget {
    config: Config,
    tls: TlsSettings,
    /// Per host (in `config`'s order), the password file's entry, when the password comes
    /// from the file and its entries differ by host (libpq looks one up per host); else empty,
    /// and `config` holds the one password.
    host_passwords: Vec<Option<String>>,
    idle: Arc<IdleConnections>,
}

/// How many idle connections a target keeps at most (DuckDB's scanner keeps up to 8 or the
/// number of threads); a connection given back beyond that is closed.
const MAX_IDLE: usize = 16;

/// How long a connection may stay idle before it is closed rather than reused (servers and
/// proxies often close idle sessions themselves after a few minutes).
const IDLE_LIMIT: Duration = Duration::from_secs(120);

/// A target's connections between queries: logged in, outside any transaction, not in COPY.
#[derive(Default)]
struct IdleConnections {
    connections: Mutex<Vec<(PgConnection, Instant)>>,
}

impl IdleConnections {
    /// The most recently used live connection; stale and closed ones are dropped (closed).
    fn take(&self) -> Option<PgConnection> {
        let mut connections = self.connections.lock().ok()?;
        Self::prune(&mut connections);
        connections.pop().map(|(connection, _)| connection)
    }

    fn put(&self, connection: PgConnection) {
        if connection.is_closed() {
            return;
        }
        if let Ok(mut connections) = self.connections.lock() {
            Self::prune(&mut connections);
            if connections.len() < MAX_IDLE {
                connections.push((connection, Instant::now()));
            }
        }
    }

    fn prune_all(&self) {
        if let Ok(mut connections) = self.connections.lock() {
            Self::prune(&mut connections);
        }
    }

    /// Drops (closes) the connections the server closed and those idle too long.
    fn prune(connections: &mut Vec<(PgConnection, Instant)>) {
        connections
            .retain(|(connection, since)| !connection.is_closed() && since.elapsed() < IDLE_LIMIT);
    }

    /// A new store, known to [`close_all`].
    fn registered() -> Arc<Self> {
        let store = Arc::new(IdleConnections::default());
        if let Ok(mut stores) = STORES.lock() {
            stores.retain(|store| store.strong_count() > 0);
            stores.push(Arc::downgrade(&store));
        }
        store
    }

    /// Closes every connection in the store.
    fn close(&self) {
        let closing = match self.connections.lock() {
            Ok(mut connections) => std::mem::take(&mut *connections),
            Err(_) => Vec::new(),
        };
        drop(closing);
    }
}

/// Every target's idle connections, for [`close_all`].
static STORES: Mutex<Vec<std::sync::Weak<IdleConnections>>> = Mutex::new(Vec::new());

/// Cancelled by [`close_all`]: the signal for work on the process's connections that no
/// snapshot pool owns (an INSERT's or a CREATE TABLE AS's write). Such work takes the current
/// token as it starts ([`exiting`]); `close_all` cancels it and leaves none, so work started
/// after a close gets a new one and runs on.
static EXITING: Mutex<Option<CancellationToken>> = Mutex::new(None);

/// The token [`close_all`] cancels next.
pub(crate) fn exiting() -> CancellationToken {
    match EXITING.lock() {
        Ok(mut token) => token.get_or_insert_with(CancellationToken::new).clone(),
        // A poisoned lock only loses the early end at exit, never the work itself.
        Err(_) => CancellationToken::new(),
    }
}

/// How many connection threads are running ([`ConnectTarget::connect`]), and the signal that
/// one ended.
static THREADS: Mutex<usize> = Mutex::new(0);
static THREAD_ENDED: Condvar = Condvar::new();

/// Counts a connection thread from before it is spawned until it ends.
struct ThreadCount;

impl ThreadCount {
    fn start() -> Self {
        if let Ok(mut threads) = THREADS.lock() {
            *threads += 1;
        }
        ThreadCount
    }
}

impl Drop for ThreadCount {
    fn drop(&mut self) {
        if let Ok(mut threads) = THREADS.lock() {
            *threads = threads.saturating_sub(1);
        }
        THREAD_ENDED.notify_all();
    }
}

/// Ends every Postgres session quiver keeps, as a client should before its process exits:
/// closes the connections of the queries still running (their scans stop with an error, see
/// [`crate::snapshot::close_all_pools`]; their writes too, rolled back, see [`exiting`]) and
/// the idle connections of every target (a query's transactions end first, and their
/// connections are closed as they come back), then waits up to `limit` for the connection
/// threads to end. A connection's thread sends the server its Terminate message as it ends;
/// without that the server logs each session of the process as lost ("unexpected EOF on
/// client connection", "with an open transaction" when a query's rollback had not run yet)
/// and counts it in `pg_stat_database.sessions_abandoned`. Returns whether every connection
/// ended in time. Targets stay usable: their next query connects again.
pub fn close_all(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    if let Ok(mut shared) = SHARED.lock() {
        shared.clear();
    }
    crate::snapshot::close_all_pools();
    if let Some(token) = EXITING.lock().ok().and_then(|mut token| token.take()) {
        token.cancel();
    }
    loop {
        let stores: Vec<Arc<IdleConnections>> = match STORES.lock() {
            Ok(stores) => stores.iter().filter_map(std::sync::Weak::upgrade).collect(),
            Err(_) => Vec::new(),
        };
        for store in stores {
            store.close();
        }
        let Ok(threads) = THREADS.lock() else {
            return false;
        };
        if *threads == 0 {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        // Short waits: a rollback that ends gives its connection back to a store, to close.
        let wait = (deadline - now).min(Duration::from_millis(5));
        if THREAD_ENDED.wait_timeout(threads, wait).is_err() {
            return false;
        }
    }
}

/// The targets of the `postgres_scan` family of functions, each with its idle connections: a
/// function call parses its connection string anew, and finds here the connections the
/// previous calls with the same string left (DuckDB's scanner keeps such a cache too).
static SHARED: Mutex<Vec<SharedTarget>> = Mutex::new(Vec::new());

/// The runtime for the Postgres work not tied to one connection: a table function's lookup,
/// handing out connections, ending transactions, cancel requests (a connection's own I/O runs
/// on its thread, see [`ConnectTarget::connect`]). It outlives the runtimes queries run on (a
/// table function's lookup runs on a runtime of its own, tests each have one).
pub(crate) fn io_runtime() -> Result<&'static tokio::runtime::Handle> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("quiver-postgres")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map(tokio::runtime::Runtime::handle)
        .map_err(|message| PostgresError::Server {
            what: "starting the Postgres I/O threads".into(),
            message: message.clone(),
        })
}

/// How many connection strings [`SHARED`] keeps connections for; the least recently used one
/// beyond that is forgotten, and its connections closed.
const MAX_SHARED: usize = 16;

struct SharedTarget {
    config: Config,
    tls: TlsSettings,
    host_passwords: Vec<Option<String>>,
    idle: Arc<IdleConnections>,
    used: Instant,
}

impl std::fmt::Debug for ConnectTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Directories libpq looks in for the server's Unix socket when no host is given.
const SOCKET_DIRS: [&str; 2] = ["/var/run/postgresql", "/tmp"];

/// The port of the host at `position`: its own, or the one port given for every host (the
/// parse refuses any other count), else libpq's default.
fn host_port(config: &Config, position: usize) -> u16 {
    let ports = config.get_ports();
    ports
        .get(position)
        .or(ports.first())
        .copied()
        .unwrap_or(5432)
}

/// The password file's entry for each host, with the port [`ConnectTarget::open_socket`]
/// uses for it (libpq looks one up per host), a default socket directory matching
/// `localhost`.
fn passfile_lookup(config: &Config, path: &std::path::Path) -> Vec<Option<String>> {
    let (Some(database), Some(user)) = (config.get_dbname(), config.get_user()) else {
        return Vec::new();
    };
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let host = match host {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(dir) if SOCKET_DIRS.iter().any(|d| dir == std::path::Path::new(d)) => {
                    "localhost".to_string()
                }
                #[cfg(unix)]
                Host::Unix(dir) => dir.display().to_string(),
            };
            let lookup = passfile::Lookup {
                host: &host,
                port: host_port(config, i),
                database,
                user,
            };
            passfile::read_password(path, &lookup)
        })
        .collect()
}

impl ConnectTarget {
    /// Parses `dsn`, filling the gaps from the process environment.
    pub fn parse(dsn: &str) -> Result<ConnectTarget> {
        Self::parse_with_env(dsn, |name| std::env::var(name).ok())
    }

    /// Parses `dsn`, filling the gaps from `env` (a test seam for the environment).
    pub fn parse_with_env(dsn: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut own = vec!["passfile", "channel_binding"];
        own.extend(tls::OPTIONS);
        let mut known = own.clone();
        known.push("service");
        let (dsn, mut taken) = take_options(dsn, &known);
        let mut config = if dsn.trim().is_empty() {
            Config::new()
        } else {
            dsn.parse::<Config>()
                .map_err(|e| PostgresError::InvalidDsn(redact_parse_error(&e.to_string())))?
        };
        // A service file's values come after the string's own and before the environment's.
        let service = option(&taken, "service")
            .map(str::to_string)
            .or_else(|| env("PGSERVICE"))
            .filter(|name| !name.is_empty());
        if let Some(name) = service {
            service::apply(service::lookup(&name, &env)?, &mut config, &mut taken, &own)?;
        }
        let passfile = option(&taken, "passfile").map(str::to_string);
        let binding = option(&taken, "channel_binding")
            .map(str::to_string)
            .or_else(|| env("PGCHANNELBINDING"))
            .filter(|value| !value.is_empty());
        if let Some(text) = binding {
            config.channel_binding(parse_channel_binding(&text)?);
        }
        let tls = TlsSettings::from_options(&taken, &env)?;
        if config.get_hosts().is_empty() {
            match env("PGHOST").filter(|h| !h.is_empty()) {
                Some(hosts) => {
                    for host in hosts.split(',') {
                        add_host(&mut config, host);
                    }
                }
                None => {
                    let dir = SOCKET_DIRS
                        .iter()
                        .find(|dir| std::path::Path::new(dir).is_dir())
                        .unwrap_or(&SOCKET_DIRS[1]);
                    config.host_path(dir);
                }
            }
        }
        if config.get_ports().is_empty() {
            if let Some(ports) = env("PGPORT").filter(|p| !p.is_empty()) {
                // A list as in the string: one port per host, an empty one the default.
                for port in ports.split(',').map(str::trim) {
                    let port = if port.is_empty() {
                        5432
                    } else {
                        port.parse::<u16>().map_err(|_| {
                            PostgresError::InvalidDsn(format!(
                                "PGPORT \"{ports}\": \"{port}\" is not a port number"
                            ))
                        })?
                    };
                    config.port(port);
                }
            }
        }
        // libpq's rule: one port for every host, or one per host.
        let (hosts, ports) = (config.get_hosts().len(), config.get_ports().len());
        if ports > 1 && ports != hosts {
            return Err(PostgresError::InvalidDsn(format!(
                "could not match {ports} port numbers to {hosts} hosts"
            )));
        }
        if config.get_user().is_none() {
            let user = env("PGUSER")
                .or_else(|| env("USER"))
                .or_else(|| env("LOGNAME"))
                .ok_or_else(|| {
                    PostgresError::InvalidDsn("no user given, and PGUSER and USER are unset".into())
                })?;
            config.user(user);
        }
        if config.get_dbname().is_none() {
            match env("PGDATABASE").filter(|d| !d.is_empty()) {
                Some(db) => {
                    config.dbname(db);
                }
                None => {
                    let user = config.get_user().unwrap_or_default().to_string();
                    config.dbname(user);
                }
            }
        }
        let mut host_passwords = Vec::new();
        if config.get_password().is_none() {
            if let Some(password) = env("PGPASSWORD").filter(|p| !p.is_empty()) {
                config.password(password);
            } else if let Some(path) = passfile::location(passfile.as_deref(), &env) {
                let passwords = passfile_lookup(&config, &path);
                match passwords.first() {
                    // One password for every host: the config's, as a string's would be.
                    Some(first) if passwords.iter().all(|p| p == first) => {
                        if let Some(password) = first {
                            config.password(password.clone());
                        }
                    }
                    _ => host_passwords = passwords,
                }
            }
        }
        if config.get_options().is_none() {
            if let Some(options) = env("PGOPTIONS") {
                config.options(options);
            }
        }
        if config.get_application_name().is_none() {
            config.application_name(env("PGAPPNAME").unwrap_or_else(|| "quiver".into()));
        }
        if config.get_connect_timeout().is_none() {
            let seconds = env("PGCONNECT_TIMEOUT")
                .and_then(|s| s.trim().parse::<u64>().ok())
                .filter(|s| *s > 0)
                .unwrap_or(30);
            config.connect_timeout(Duration::from_secs(seconds));
        }
        Ok(ConnectTarget {
            config,
            tls,
            host_passwords,
            idle: IdleConnections::registered(),
        })
    }

    /// This target with the idle connections of an earlier one that logs in alike (the same
    /// hosts, user, password, database, options and TLS files), so a function call reuses
    /// the connections of the calls before it. Connections idle too long are closed here.
    pub fn shared(mut self) -> ConnectTarget {
        let Ok(mut shared) = SHARED.lock() else {
            return self;
        };
        for target in shared.iter() {
            target.idle.prune_all();
        }
        let found = shared.iter_mut().find(|t| {
            t.config == self.config
                && t.host_passwords == self.host_passwords
                && t.tls.same_sources(&self.tls)
        });
        match found {
            Some(target) => {
                target.used = Instant::now();
                self.idle = Arc::clone(&target.idle);
            }
            None => {
                if shared.len() >= MAX_SHARED {
                    if let Some(oldest) = (0..shared.len()).min_by_key(|&i| shared[i].used) {
                        shared.swap_remove(oldest);
                    }
                }
                shared.push(SharedTarget {
                    config: self.config.clone(),
                    tls: self.tls.clone(),
                    host_passwords: self.host_passwords.clone(),
                    idle: Arc::clone(&self.idle),
                    used: Instant::now(),
                });
            }
        }
        self
    }

    /// `user@host:port/dbname`, never with the password.
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|host| match host {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let port = host_port(&self.config, 0);
        format!(
            "{}@{}:{}/{}",
            self.config.get_user().unwrap_or(""),
            hosts.join(","),
            port,
            self.config.get_dbname().unwrap_or("")
        )
    }

    /// Why a login failed. The client reports a password the server asks for and it does not
    /// have as "invalid configuration" (the reason is the error's source); say which.
    fn login_message(&self, error: &tokio_postgres::Error) -> String {
        let message = crate::error::server_message(error);
        let Some(source) = std::error::Error::source(error) else {
            return message;
        };
        if source.downcast_ref::<tls::HandshakeError>().is_some() {
            return source.to_string();
        }
        let reason = source.to_string();
        if reason.contains("did not use channel binding") {
            return "channel_binding=require, but the server logged in without channel binding \
                    (it needs TLS and a SCRAM password login; a Unix socket, sslmode=disable or \
                    a trust, md5 or certificate login has none)"
                .to_string();
        }
        let no_password =
            self.config.get_password().is_none() && self.host_passwords.iter().all(Option::is_none);
        if no_password && reason.contains("password") {
            "the server asks for a password and none was given (not in the connection \
             string, PGPASSWORD or a password file that only its owner may read)"
                .to_string()
        } else {
            format!("{message}: {reason}")
        }
    }

    /// Connects. Each connection has a thread of its own, where its socket is read and
    /// written and where a scan decodes what it reads ([`PgConnection::home`]); the thread
    /// ends when the returned client is dropped. Over TCP, TLS is used as `sslmode` says:
    /// `allow` tries a plain connection first and TLS when it fails, `prefer` falls back to a
    /// plain connection when the TLS handshake fails.
    ///
    /// A thread per connection, not a shared pool of I/O threads: a COPY stream wakes its
    /// reader for every few kilobytes, and on a shared pool each wake-up could land on another
    /// core (a `lineitem` scan over two connections on two cores: ~70,000 migrations). The
    /// socket is opened on that thread too: a tokio socket belongs to the reactor of the
    /// runtime that opened it, and a kept connection outlives the query that opened it.
    pub async fn connect(&self) -> Result<PgConnection> {
        let not_started = |e: std::io::Error| {
            self.connect_error(format!("starting the connection's thread: {e}"))
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(not_started)?;
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let target = self.clone();
        let count = ThreadCount::start();
        std::thread::Builder::new()
            .name("quiver-postgres".into())
            .spawn(move || {
                connection_thread(runtime, target, sender);
                drop(count);
            })
            .map_err(not_started)?;
        // Dropping this future (Ctrl-C) drops the receiver, which abandons the login.
        match receiver.await {
            Ok(outcome) => outcome,
            Err(_) => Err(self.connect_error("the login ended without an answer".into())),
        }
    }

    /// A failure to connect to this target, with `message` saying why.
    fn connect_error(&self, message: String) -> PostgresError {
        PostgresError::Connect {
            target: self.describe(),
            message,
        }
    }

    /// [`Self::connect`], on the current runtime, which must be `home`'s: the connection and
    /// the future that runs its I/O, which the caller must drive.
    async fn connect_here(&self, home: &tokio::runtime::Handle) -> Result<(PgConnection, IoTask)> {
        let connect_error = |message| self.connect_error(message);
        let (socket, endpoint, host) = self.open_socket().await.map_err(connect_error)?;
        let mode = match &endpoint {
            Endpoint::Unix(_) => SslMode::Disable,
            Endpoint::Tcp(..) => self.tls.mode,
        };
        let login = |socket, endpoint, host, ssl| self.login(home, socket, endpoint, host, ssl);
        let outcome = match mode {
            SslMode::Disable => login(socket, endpoint, host, PgSsl::Disable).await,
            SslMode::Allow => match login(socket, endpoint, host, PgSsl::Disable).await {
                Ok(connection) => Ok(connection),
                Err(_) => {
                    let (socket, endpoint, host) =
                        self.open_socket().await.map_err(connect_error)?;
                    login(socket, endpoint, host, PgSsl::Require).await
                }
            },
            SslMode::Prefer => match login(socket, endpoint, host, PgSsl::Prefer).await {
                Err(error) if is_handshake_failure(&error) => {
                    let (socket, endpoint, host) =
                        self.open_socket().await.map_err(connect_error)?;
                    login(socket, endpoint, host, PgSsl::Disable).await
                }
                outcome => outcome,
            },
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                login(socket, endpoint, host, PgSsl::Require).await
            }
        };
        outcome.map_err(|e| connect_error(self.login_message(&e)))
    }

    /// Gives back a connection of this target for [`ConnectTarget::on_connection`]. Only a
    /// connection outside any transaction and not in COPY may be given back: the next query
    /// must find it as a new one.
    pub fn reuse_later(&self, connection: PgConnection) {
        self.idle.put(connection);
    }

    /// Runs `work` on one of this target's idle connections, or a new one (`work` hands the
    /// connection back with its outcome), and keeps the connection for later when `work`
    /// succeeds (`work` must leave no transaction open). See [`ConnectTarget::on_connection`]
    /// for when `work` runs twice.
    pub async fn with_connection<T, F>(&self, work: impl Fn(PgConnection) -> F) -> Result<T>
    where
        F: Future<Output = (PgConnection, Result<T>)>,
    {
        let (connection, value) = self.on_connection(work).await?;
        self.reuse_later(connection);
        Ok(value)
    }

    /// Runs `work` on one of this target's idle connections, or a new one, and returns the
    /// connection with what `work` made of it. When a reused connection fails because the
    /// server closed it while idle (a restart, an idle timeout), `work` runs again on a new
    /// connection — once, so a real error is not retried. A connection whose `work` failed is
    /// closed: it may be left inside a failed transaction.
    pub async fn on_connection<T, F>(
        &self,
        work: impl Fn(PgConnection) -> F,
    ) -> Result<(PgConnection, T)>
    where
        F: Future<Output = (PgConnection, Result<T>)>,
    {
        if let Some(connection) = self.idle.take() {
            match work(connection).await {
                (connection, Ok(value)) => return Ok((connection, value)),
                (connection, Err(_)) if connection.is_closed() => {}
                (_, Err(error)) => return Err(error),
            }
        }
        let (connection, value) = work(self.connect().await?).await;
        Ok((connection, value?))
    }

    /// Logs in over `socket` (to the host at `position` in the list), with TLS as `ssl` says:
    /// the connection, whose home is `home`, and the future that runs its I/O.
    async fn login(
        &self,
        home: &tokio::runtime::Handle,
        socket: Socket,
        endpoint: Endpoint,
        position: usize,
        ssl: PgSsl,
    ) -> std::result::Result<(PgConnection, IoTask), tokio_postgres::Error> {
        let host = match &endpoint {
            Endpoint::Tcp(host, _) => host.as_str(),
            Endpoint::Unix(_) => "",
        };
        let mut config = self.config.clone();
        config.ssl_mode(ssl);
        if let Some(Some(password)) = self.host_passwords.get(position) {
            config.password(password.clone());
        }
        let tap = CopyTap::default();
        let (client, connection) = config
            .connect_raw(
                TapStream::new(socket, tap.clone()),
                self.tls.connector(host),
            )
            .await?;
        tap.start_framing();
        let io: IoTask = Box::pin(async move {
            // Errors reach the client's pending calls; nothing to do with them here.
            let _ = connection.await;
        });
        let connection = PgConnection {
            client,
            tap,
            tls: self.tls.clone(),
            endpoint,
            home: home.clone(),
            statements: Mutex::default(),
            server_version: tokio::sync::OnceCell::new(),
        };
        Ok((connection, io))
    }

    /// The first host (in the order given) that accepts a connection, and its position.
    async fn open_socket(&self) -> std::result::Result<(Socket, Endpoint, usize), String> {
        let hosts = self.config.get_hosts();
        let timeout = self.config.get_connect_timeout().copied();
        let mut last_error = "no host to connect to".to_string();
        for (i, host) in hosts.iter().enumerate() {
            let port = host_port(&self.config, i);
            let endpoint = match host {
                Host::Tcp(name) => Endpoint::Tcp(name.clone(), port),
                #[cfg(unix)]
                Host::Unix(dir) => Endpoint::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            };
            let attempt = endpoint.open();
            let opened = match timeout {
                Some(limit) => match tokio::time::timeout(limit, attempt).await {
                    Ok(opened) => opened,
                    Err(_) => Err(format!("{endpoint}: timed out after {limit:?}")),
                },
                None => attempt.await,
            };
            match opened {
                Ok(socket) => return Ok((socket, endpoint, i)),
                Err(message) => last_error = message,
            }
        }
        Err(last_error)
    }
}

/// The future that runs a connection's I/O, on the connection's thread.
type IoTask = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// The body of a connection's thread ([`ConnectTarget::connect`]): logs in, hands the
/// connection to `sender`, and runs its I/O until the client is dropped or the server closes
/// the connection. Tasks spawned on the thread's runtime ([`PgConnection::home`]) run beside
/// the I/O; when it ends they are dropped, and their `JoinHandle`s report them cancelled.
fn connection_thread(
    runtime: tokio::runtime::Runtime,
    target: ConnectTarget,
    mut sender: tokio::sync::oneshot::Sender<Result<PgConnection>>,
) {
    let home = runtime.handle().clone();
    runtime.block_on(async move {
        let outcome = tokio::select! {
            outcome = target.connect_here(&home) => outcome,
            // The caller went away (Ctrl-C during the login): abandon it.
            () = sender.closed() => return,
        };
        // The thread must not keep the target: its idle connections would keep this one, and
        // this thread, alive after the target's last owner (a detached database) is gone.
        drop(target);
        match outcome {
            Ok((connection, io)) => {
                // A caller gone in the meantime gets nothing: the connection is dropped here,
                // which ends its I/O at once.
                if sender.send(Ok(connection)).is_ok() {
                    io.await;
                }
            }
            Err(error) => {
                let _ = sender.send(Err(error));
            }
        }
    });
}

/// An open connection: the tokio-postgres client, the tap its COPY data can be read from, and
/// where it goes (for cancel requests, which need a connection of their own).
pub struct PgConnection {
    client: Client,
    tap: CopyTap,
    /// How the connection did TLS: a cancel request goes the same way (libpq before 17 sent
    /// it in the clear, and with it the key that lets anyone on the path cancel).
    tls: TlsSettings,
    endpoint: Endpoint,
    /// The runtime of the connection's own thread, where its socket is polled: a scan reads
    /// and decodes its COPY there, so a chunk wakes no other thread.
    home: tokio::runtime::Handle,
    /// The catalog statements prepared on this connection, by their text: a kept connection
    /// asks its next query's catalog questions in one round trip instead of two.
    statements: Mutex<HashMap<&'static str, Statement>>,
    /// `server_version_num`, once asked (a connection's server does not change).
    server_version: tokio::sync::OnceCell<i64>,
}

impl std::fmt::Debug for PgConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgConnection({})", self.endpoint)
    }
}

impl PgConnection {
    pub fn tap(&self) -> &CopyTap {
        &self.tap
    }

    /// The runtime of the connection's thread (see [`ConnectTarget::connect`]).
    pub fn home(&self) -> &tokio::runtime::Handle {
        &self.home
    }

    /// Asks the server to cancel what this connection is running (best effort), encrypted as
    /// the connection is: the request asks for TLS when the login did (the token keeps the
    /// login's `sslmode`).
    pub async fn cancel(&self) {
        let token = self.client.cancel_token();
        let host = match &self.endpoint {
            Endpoint::Tcp(host, _) => host.as_str(),
            Endpoint::Unix(_) => "",
        };
        if let Ok(socket) = self.endpoint.open().await {
            let socket = TapStream::new(socket, CopyTap::default());
            let _ = token
                .cancel_query_raw(socket, self.tls.connector(host))
                .await;
        }
    }

    /// `sql` prepared on this connection: once, then from the connection's cache. For
    /// statements over the system catalogs only (a cached plan of a user's table could go
    /// stale when the table changes).
    pub async fn prepared(
        &self,
        sql: &'static str,
    ) -> std::result::Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self
            .statements
            .lock()
            .ok()
            .and_then(|s| s.get(sql).cloned())
        {
            return Ok(statement);
        }
        let statement = self.client.prepare(sql).await?;
        if let Ok(mut statements) = self.statements.lock() {
            statements.insert(sql, statement.clone());
        }
        Ok(statement)
    }

    /// The server's `server_version_num` (e.g. 160004), asked once per connection.
    pub async fn server_version(&self) -> Result<i64> {
        self.server_version
            .get_or_try_init(|| async {
                let failed = |e: tokio_postgres::Error| {
                    PostgresError::server("reading the server version", &e)
                };
                let statement = self
                    .prepared("SELECT current_setting('server_version_num')::int8")
                    .await
                    .map_err(failed)?;
                let row = self
                    .client
                    .query_one(&statement, &[])
                    .await
                    .map_err(failed)?;
                Ok(row.get(0))
            })
            .await
            .copied()
    }
}

impl Deref for PgConnection {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for PgConnection {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// Whether a login failed in the TLS handshake (what `sslmode=prefer` falls back from).
fn is_handshake_failure(error: &tokio_postgres::Error) -> bool {
    std::error::Error::source(error)
        .is_some_and(|source| source.downcast_ref::<tls::HandshakeError>().is_some())
}

/// A server address: a Unix socket path or a TCP host and port.
#[derive(Clone, Debug)]
enum Endpoint {
    Tcp(String, u16),
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(host, port) => write!(f, "{host}:{port}"),
            Endpoint::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

impl Endpoint {
    async fn open(&self) -> std::result::Result<Socket, String> {
        match self {
            Endpoint::Tcp(host, port) => {
                let stream = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| format!("{self}: {e}"))?;
                // Small protocol messages (Bind, Execute, Sync) must not wait for Nagle.
                stream
                    .set_nodelay(true)
                    .map_err(|e| format!("{self}: {e}"))?;
                Ok(Either::Left(stream))
            }
            Endpoint::Unix(path) => UnixStream::connect(path)
                .await
                .map(Either::Right)
                .map_err(|e| format!("{self}: {e}")),
        }
    }
}

/// The two kinds of socket a server is reached through.
pub type Socket = Either<TcpStream, UnixStream>;

fn add_host(config: &mut Config, host: &str) {
    if host.starts_with('/') {
        config.host_path(host);
    } else {
        config.host(host);
    }
}

/// libpq's `channel_binding` (tokio-postgres reads it too, but not from `PGCHANNELBINDING`
/// or a service file, so quiver takes it out of the string and applies it).
fn parse_channel_binding(text: &str) -> Result<ChannelBinding> {
    match text {
        "disable" => Ok(ChannelBinding::Disable),
        "prefer" => Ok(ChannelBinding::Prefer),
        "require" => Ok(ChannelBinding::Require),
        _ => Err(PostgresError::InvalidDsn(format!(
            "channel_binding \"{text}\" is not one of disable, prefer, require"
        ))),
    }
}

/// tokio-postgres's parse errors quote the offending option; make sure a password value
/// never survives into the message.
fn redact_parse_error(message: &str) -> String {
    if message.to_lowercase().contains("password") {
        "the password option is malformed".into()
    } else {
        message.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_password_file_is_read_per_host_and_port() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(
            &path,
            "primary:5432:shop:app:first\nreplica:6432:shop:app:second\n*:*:other:app:third\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let file = path.to_str().unwrap();
        let parse =
            |dsn: &str| ConnectTarget::parse_with_env(dsn, env(&[("PGPASSFILE", file)])).unwrap();
        // Each host with its own port; one port for all hosts.
        let both = parse("host=primary,replica,nowhere port=5432,6432,5432 user=app dbname=shop");
        assert_eq!(both.config.get_password(), None);
        let expected = [Some("first".to_string()), Some("second".into()), None];
        assert_eq!(both.host_passwords, expected);
        let first_port = parse("host=primary,replica port=5432 user=app dbname=shop");
        assert_eq!(first_port.host_passwords, [Some("first".to_string()), None]);
        // One password for every host is the config's, as before.
        let same = parse("host=a,b user=app dbname=other");
        assert_eq!(same.config.get_password(), Some(&b"third"[..]));
        assert!(same.host_passwords.is_empty());
        // A password in the string wins over the file for every host.
        let given = parse("host=primary,replica port=5432,6432 user=app dbname=shop password=x");
        assert_eq!(given.config.get_password(), Some(&b"x"[..]));
        assert!(given.host_passwords.is_empty());
    }

    #[test]
    fn only_targets_that_log_in_alike_share_connections() {
        let parse = |dsn: &str| {
            ConnectTarget::parse_with_env(dsn, env(&[("HOME", "/nonexistent")]))
                .unwrap()
                .shared()
        };
        let dsn = "host=/tmp port=5433 dbname=shared_test user=app password=one sslmode=disable";
        let first = parse(dsn);
        // The same target written another way shares; a clone always does.
        let same = parse(&format!("{dsn} "));
        assert!(Arc::ptr_eq(&first.idle, &same.idle));
        assert!(Arc::ptr_eq(&first.idle, &first.clone().idle));
        for other in [
            dsn.replace("password=one", "password=two"),
            dsn.replace("user=app", "user=other"),
            dsn.replace("dbname=shared_test", "dbname=shared_test2"),
            dsn.replace("sslmode=disable", "sslmode=prefer"),
            format!("{dsn} application_name=else"),
        ] {
            assert!(!Arc::ptr_eq(&first.idle, &parse(&other).idle), "{other}");
        }
        // Parsed without `shared`, a target shares with its clones only.
        let own = ConnectTarget::parse_with_env(dsn, env(&[])).unwrap();
        assert!(!Arc::ptr_eq(&first.idle, &own.idle));
    }

    #[test]
    fn keyword_value_strings_and_uris_parse() {
        let target =
            ConnectTarget::parse_with_env("host=/tmp port=5433 dbname=shop user=app", env(&[]))
                .unwrap();
        assert_eq!(target.describe(), "app@/tmp:5433/shop");
        let target = ConnectTarget::parse_with_env(
            "postgresql://app:secret@db.example:6000/shop?application_name=x",
            env(&[]),
        )
        .unwrap();
        assert_eq!(target.describe(), "app@db.example:6000/shop");
        assert!(!format!("{target:?}").contains("secret"));
    }

    #[test]
    fn a_service_fills_gaps_before_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("services.conf");
        std::fs::write(
            &file,
            "[shop]\nhost=/run/pg\nport=6000\nuser=svc\ndbname=shop\nsslmode=disable\n",
        )
        .unwrap();
        let file = file.display().to_string();
        let vars = [
            ("PGSERVICEFILE", file.as_str()),
            ("PGUSER", "from_env"),
            ("PGPORT", "7777"),
        ];
        let target = ConnectTarget::parse_with_env("service=shop dbname=mine", env(&vars)).unwrap();
        assert_eq!(target.describe(), "svc@/run/pg:6000/mine");
        assert_eq!(target.tls.mode, SslMode::Disable);
        let with_env_service = [vars[0], ("PGSERVICE", "shop")];
        let target = ConnectTarget::parse_with_env("", env(&with_env_service)).unwrap();
        assert_eq!(target.describe(), "svc@/run/pg:6000/shop");
        let error = ConnectTarget::parse_with_env("service=nope", env(&vars))
            .unwrap_err()
            .to_string();
        assert!(error.contains("service \"nope\" not found"), "{error}");
    }

    #[test]
    fn environment_fills_what_the_string_leaves_out() {
        let target = ConnectTarget::parse_with_env(
            "dbname=shop",
            env(&[
                ("PGHOST", "/run/pg"),
                ("PGPORT", "7777"),
                ("PGUSER", "alice"),
                ("PGDATABASE", "ignored"),
                ("PGPASSWORD", "hunter2"),
            ]),
        )
        .unwrap();
        assert_eq!(target.describe(), "alice@/run/pg:7777/shop");
        assert_eq!(target.config.get_password(), Some(&b"hunter2"[..]));
        let target =
            ConnectTarget::parse_with_env("", env(&[("USER", "bob"), ("PGHOST", "h")])).unwrap();
        assert_eq!(target.describe(), "bob@h:5432/bob");
    }

    #[test]
    fn channel_binding_comes_from_the_string_a_service_or_the_environment() {
        let binding = |dsn: &str, vars: &[(&str, &str)]| {
            ConnectTarget::parse_with_env(dsn, env(vars)).map(|t| t.config.get_channel_binding())
        };
        let (host, user) = (("PGHOST", "/run/pg"), ("USER", "app"));
        assert_eq!(binding("", &[host, user]).unwrap(), ChannelBinding::Prefer);
        assert_eq!(
            binding("channel_binding=require", &[host, user]).unwrap(),
            ChannelBinding::Require
        );
        assert_eq!(
            binding("postgresql://app@db/shop?channel_binding=disable", &[]).unwrap(),
            ChannelBinding::Disable
        );
        let from_env = [host, user, ("PGCHANNELBINDING", "require")];
        assert_eq!(binding("", &from_env).unwrap(), ChannelBinding::Require);
        assert_eq!(
            binding("channel_binding=prefer", &from_env).unwrap(),
            ChannelBinding::Prefer
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("services.conf");
        std::fs::write(&file, "[bound]\nchannel_binding=require\n").unwrap();
        let file = file.display().to_string();
        let service = [host, user, ("PGSERVICEFILE", file.as_str())];
        assert_eq!(
            binding("service=bound", &service).unwrap(),
            ChannelBinding::Require
        );
        let error = binding("channel_binding=always", &[host, user])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("channel_binding \"always\" is not one of"),
            "{error}"
        );
    }

    #[test]
    fn ports_are_one_for_all_hosts_or_one_per_host() {
        let ports = |dsn: &str, vars: &[(&str, &str)]| {
            ConnectTarget::parse_with_env(dsn, env(vars))
                .map(|target| target.config.get_ports().to_vec())
                .map_err(|e| e.to_string())
        };
        assert_eq!(ports("user=app host=a,b port=6000", &[]), Ok(vec![6000]));
        assert_eq!(
            ports("user=app host=a,b,c port=1,,3", &[]),
            Ok(vec![1, 5432, 3])
        );
        // PGPORT is a list as well, as libpq reads it.
        let vars = [("PGHOST", "a,b"), ("PGPORT", "5433, 6433")];
        assert_eq!(ports("user=app", &vars), Ok(vec![5433, 6433]));
        for (dsn, vars, message) in [
            (
                "host=a,b port=1,2,3",
                &[][..],
                "could not match 3 port numbers to 2 hosts",
            ),
            (
                "host=a port=1,2",
                &[],
                "could not match 2 port numbers to 1 hosts",
            ),
            (
                "host=a,b,c",
                &vars[1..],
                "could not match 2 port numbers to 3 hosts",
            ),
            (
                "host=a,b",
                &[("PGPORT", "1,zz")],
                "PGPORT \"1,zz\": \"zz\" is not a port",
            ),
        ] {
            let error = ports(&format!("user=app {dsn}"), vars).unwrap_err();
            assert!(error.contains(message), "{dsn}: {error}");
        }
    }

    #[test]
    fn bad_strings_fail_without_showing_the_password() {
        let error = ConnectTarget::parse_with_env("password=hunter2 port=notaport", env(&[]))
            .unwrap_err()
            .to_string();
        assert!(!error.contains("hunter2"), "{error}");
        assert!(ConnectTarget::parse_with_env("host", env(&[])).is_err());
        let error = ConnectTarget::parse_with_env("host=x", env(&[("PGPORT", "zz")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("PGPORT"), "{error}");
    }
}
