//! A private PostgreSQL cluster for tests: `initdb` into a temp dir, started on a Unix socket in
//! that dir, `trust` auth for everyone except the role `secret_user`, whose password is checked
//! (for the authentication-failure test). The fixture database `shop` is built by
//! `tests/fixtures/shop.sql`.
//!
//! The same port also listens on 127.0.0.1 for TLS only (`hostnossl` is rejected), with a
//! server certificate for `localhost` from a test CA made with the `openssl` tool; the role
//! `cert_user` logs in there by client certificate. Without `openssl` the cluster has no TCP
//! listener and the TLS test is skipped loudly (a failure under `CI=true`).
//!
//! One cluster per test binary, started by the first test that asks. A watchdog process stops
//! it and deletes its directory when the test process exits, however it exits.
//!
//! Binaries are looked up on PATH, then in `/usr/local/bin` and `/usr/lib/postgresql/*/bin`.
//! Postgres refuses to run as root, so as root the cluster belongs to the user `postgres` and
//! is driven through `runuser`. Without `initdb` the tests are skipped with a loud message —
//! except under `CI=true`, where that is a failure (`make test` installs PostgreSQL first).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub struct PgCluster {
    pub dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
    as_root: bool,
    /// The test CA, server and client certificates (`tls/`), when `openssl` made them.
    pub tls: Option<PathBuf>,
}

const FIXTURE: &str = include_str!("../fixtures/shop.sql");

/// The shared cluster, or `None` (tests skip) when PostgreSQL is not installed.
pub fn cluster() -> Option<&'static PgCluster> {
    static CLUSTER: OnceLock<Option<PgCluster>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            let Some(bin) = find_bin_dir() else {
                if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
                    panic!("CI=true but no PostgreSQL (initdb) found: install postgresql");
                }
                eprintln!(
                    "\n*** SKIPPING PostgreSQL tests: initdb not found on PATH, in /usr/local/bin \
                     or /usr/lib/postgresql/*/bin. Install postgresql to run them. ***\n"
                );
                return None;
            };
            Some(PgCluster::start(bin))
        })
        .as_ref()
}

fn find_bin_dir() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    candidates.push("/usr/local/bin".into());
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("bin")).collect();
        versions.sort();
        candidates.extend(versions.into_iter().rev());
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
}

/// A test CA, a server certificate for `localhost` (its only name: `127.0.0.1` is not one), a
/// client certificate for `cert_user`, and a second CA that signed none of them; revocation
/// lists `empty.crl`, `revoked.crl` (the server's certificate) and `other_ca.crl`; the client's
/// key encrypted with [`CLIENT_KEY_PASSWORD`]; `None`
/// without the `openssl` tool.
/// The password of the encrypted copies of the client's key (`client_pbkdf2.key`,
/// `client_scrypt.key`, `client_legacy.key`).
pub const CLIENT_KEY_PASSWORD: &str = "key-pass-7";

fn make_certificates(dir: &Path) -> Option<PathBuf> {
    let openssl_runs = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !openssl_runs {
        if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
            panic!("CI=true but no openssl tool to make the TLS test's certificates");
        }
        eprintln!("\n*** no openssl tool: the PostgreSQL TLS test is skipped ***\n");
        return None;
    }
    std::fs::create_dir_all(dir).expect("tls dir");
    let run = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            output.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other_ca"] {
        let (key, crt) = (format!("{ca}.key"), format!("{ca}.crt"));
        let subject = format!("/CN=quiver test {ca}");
        let mut args = vec!["req", "-x509", "-days", "3650", "-subj", &subject];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &crt]);
        run(&args);
    }
    // Extensions make version 3 certificates, the only version rustls accepts.
    std::fs::write(dir.join("server.ext"), "subjectAltName=DNS:localhost\n").expect("ext");
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
    for (name, subject) in [("server", "/CN=localhost"), ("client", "/CN=cert_user")] {
        let (key, csr, crt, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        let mut args = vec!["req", "-subj", subject];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &csr]);
        run(&args);
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-days",
            "3650",
            "-CAcreateserial",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ]);
    }
    // Revocation lists (version 2, as rustls wants): the test CA's before and after revoking
    // the server's certificate, and one from the CA that signed nothing here.
    for ca in ["ca", "other_ca"] {
        let config = format!(
            "[ca]\ndefault_ca = this\n[this]\ndatabase = {ca}.index\ncrlnumber = {ca}.crlnumber\n\
             default_md = sha256\ndefault_crl_days = 3650\n"
        );
        std::fs::write(dir.join(format!("{ca}.cnf")), config).expect("ca config");
        std::fs::write(dir.join(format!("{ca}.index")), "").expect("ca index");
        std::fs::write(dir.join(format!("{ca}.crlnumber")), "01\n").expect("crl number");
    }
    let ca = |ca: &str, args: &[&str]| {
        let (config, key, crt) = (
            format!("{ca}.cnf"),
            format!("{ca}.key"),
            format!("{ca}.crt"),
        );
        let mut all = vec!["ca", "-config", &config, "-keyfile", &key, "-cert", &crt];
        all.extend(args);
        run(&all);
    };
    ca("ca", &["-gencrl", "-out", "empty.crl"]);
    ca("other_ca", &["-gencrl", "-out", "other_ca.crl"]);
    ca("ca", &["-revoke", "server.crt"]);
    ca("ca", &["-gencrl", "-out", "revoked.crl"]);
    // The client's key encrypted with a password (sslpassword): as OpenSSL 3 writes PKCS#8
    // (PBKDF2), with scrypt, and in the legacy format quiver refuses.
    let pass = format!("pass:{CLIENT_KEY_PASSWORD}");
    let topk8 = ["pkcs8", "-topk8", "-in", "client.key", "-passout", &pass];
    run(&[&topk8[..], &["-out", "client_pbkdf2.key"]].concat());
    run(&[&topk8[..], &["-scrypt", "-out", "client_scrypt.key"]].concat());
    run(&[
        "pkey",
        "-in",
        "client.key",
        "-traditional",
        "-aes256",
        "-passout",
        &pass,
        "-out",
        "client_legacy.key",
    ]);
    use std::os::unix::fs::PermissionsExt;
    for key in ["server.key", "client.key"] {
        std::fs::set_permissions(dir.join(key), std::fs::Permissions::from_mode(0o600))
            .expect("key permissions");
    }
    Some(dir.to_path_buf())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(54329)
}

impl PgCluster {
    fn start(bin: PathBuf) -> PgCluster {
        let as_root = is_root();
        let dir = tempfile::Builder::new()
            .prefix("quiver-pg-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let tls = make_certificates(&dir.join("tls"));
        let cluster = PgCluster {
            dir,
            port: free_port(),
            bin,
            as_root,
            tls,
        };
        if as_root {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&cluster.dir)
                .status()
                .expect("chown");
            assert!(status.success(), "chown of the cluster dir failed");
        }
        cluster.spawn_watchdog();
        let data = cluster.data_dir();
        cluster.run_tool(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all secret_user scram-sha-256\nlocal all all trust\n\
             hostnossl all all 127.0.0.1/32 reject\n\
             hostssl all secret_user 127.0.0.1/32 scram-sha-256\n\
             hostssl all cert_user 127.0.0.1/32 cert\n\
             hostssl all all 127.0.0.1/32 trust\n",
        )
        .expect("pg_hba.conf");
        let listen = match &cluster.tls {
            Some(tls) => format!(
                "-c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file={0}/server.crt \
                 -c ssl_key_file={0}/server.key -c ssl_ca_file={0}/ca.crt",
                tls.display()
            ),
            None => "-c listen_addresses=''".to_string(),
        };
        let options = format!(
            "-p {} -k {} {listen} -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200",
            cluster.port,
            cluster.dir.display()
        );
        let log = cluster.dir.join("server.log");
        cluster.run_tool(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &options,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
        );
        cluster.psql("postgres", "CREATE DATABASE shop");
        cluster.psql("postgres", "CREATE ROLE cert_user LOGIN");
        cluster.psql_script("shop", FIXTURE);
        cluster
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn command(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        if self.as_root {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    fn run_tool(&self, tool: &str, args: &[&str]) {
        let output = self.command(tool).args(args).output().expect(tool);
        assert!(
            output.status.success(),
            "{tool} failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Stops the server and deletes its directory when this process exits.
    fn spawn_watchdog(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data_dir();
        let stop = if self.as_root {
            format!(
                "runuser -u postgres -- {} -D {} -m immediate stop",
                pg_ctl.display(),
                data.display()
            )
        } else {
            format!(
                "{} -D {} -m immediate stop",
                pg_ctl.display(),
                data.display()
            )
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            dir = self.dir.display()
        );
        let _ = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }

    /// A libpq connection string for `db` as the superuser.
    pub fn dsn(&self, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            self.dir.display(),
            self.port
        )
    }

    /// The same as a `postgresql://` URI (the socket directory as the `host` parameter).
    pub fn uri(&self, db: &str) -> String {
        format!(
            "postgresql://postgres@localhost:{}/{db}?host={}",
            self.port,
            self.dir.display()
        )
    }

    /// Runs SQL through psql and returns its unaligned, tuples-only output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let psql = if self.bin.join("psql").is_file() {
            self.bin.join("psql")
        } else {
            PathBuf::from("psql")
        };
        let output = Command::new(psql)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", db])
            .args(["-c", sql])
            .output()
            .expect("psql");
        assert!(
            output.status.success(),
            "psql failed on {sql}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    fn psql_script(&self, db: &str, script: &str) {
        let path = self.dir.join("fixture.sql");
        std::fs::write(&path, script).expect("write fixture");
        let psql = if self.bin.join("psql").is_file() {
            self.bin.join("psql")
        } else {
            PathBuf::from("psql")
        };
        let output = Command::new(psql)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                db,
                "-f",
            ])
            .arg(&path)
            .output()
            .expect("psql");
        assert!(
            output.status.success(),
            "fixture failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
