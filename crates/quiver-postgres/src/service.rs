//! Connection service files, as libpq reads them.
//!
//! `service=name` in the connection string (or `PGSERVICE`) names a section of a service file:
//! `PGSERVICEFILE`, else `~/.pg_service.conf`; when the section is not there,
//! `PGSYSCONFDIR/pg_service.conf`. A section is `[name]` followed by `key=value` lines (`#`
//! comments, blank lines ignored, no quoting: the value is the rest of the line). Its values
//! fill what the connection string leaves out, before the environment does — libpq's order.
//! A service named but found in no file is an error, as in libpq.
//!
//! quiver applies the keys it can tell apart from their defaults: `host`, `port`, `dbname`,
//! `user`, `password`, `options`, `application_name`, `connect_timeout`, and the keys it reads
//! itself (`passfile`, `channel_binding` and the TLS keys of [`crate::tls::OPTIONS`]). Any other
//! key is an error naming it, rather than being silently ignored.

use std::path::{Path, PathBuf};

use tokio_postgres::config::Host;
use tokio_postgres::Config;

use crate::error::{PostgresError, Result};

/// The keys of a service section that go to tokio-postgres's configuration.
const CLIENT_KEYS: [&str; 8] = [
    "host",
    "port",
    "dbname",
    "user",
    "password",
    "options",
    "application_name",
    "connect_timeout",
];

/// The `key=value` lines of service `name`, from the first file that has it.
pub fn lookup(name: &str, env: &impl Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>> {
    let user_file = env("PGSERVICEFILE")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|home| !home.is_empty())
                .map(|home| Path::new(&home).join(".pg_service.conf"))
        });
    let system_file = env("PGSYSCONFDIR")
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(&dir).join("pg_service.conf"));
    let mut searched = Vec::new();
    for path in user_file.into_iter().chain(system_file) {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                searched.push(path.display().to_string());
                continue;
            }
            Err(error) => {
                return Err(invalid(format!(
                    "cannot read service file \"{}\": {error}",
                    path.display()
                )))
            }
        };
        if let Some(entries) = find_service(&text, name, &path)? {
            return Ok(entries);
        }
        searched.push(path.display().to_string());
    }
    Err(invalid(format!(
        "definition of service \"{name}\" not found (searched: {})",
        if searched.is_empty() {
            "no service file: PGSERVICEFILE and HOME are unset".to_string()
        } else {
            searched.join(", ")
        }
    )))
}

/// The entries of section `name` in `text`, or `None` when it has no such section.
pub fn find_service(text: &str, name: &str, path: &Path) -> Result<Option<Vec<(String, String)>>> {
    let mut in_section = false;
    let mut found = false;
    let mut entries = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[') {
            let section = section
                .strip_suffix(']')
                .ok_or_else(|| syntax(path, number, "a section header must end with \"]\""))?;
            if found && in_section {
                break;
            }
            in_section = section == name;
            found |= in_section;
            continue;
        }
        if !in_section {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| syntax(path, number, "expected key=value"))?;
        let key = key.trim();
        if key == "service" {
            return Err(syntax(
                path,
                number,
                "nested service specifications are not supported",
            ));
        }
        entries.push((key.to_string(), value.trim_start().to_string()));
    }
    Ok(found.then_some(entries))
}

/// Applies a service's entries: client keys to `config` where it has no value yet, the rest
/// (the keys quiver reads itself, named in `own`) in front of `taken`, so that the connection
/// string's own options, found last, win.
pub fn apply(
    entries: Vec<(String, String)>,
    config: &mut Config,
    taken: &mut Vec<(String, String)>,
    own: &[&str],
) -> Result<()> {
    let mut front = Vec::new();
    for (key, value) in entries {
        if own.contains(&key.as_str()) {
            front.push((key, value));
            continue;
        }
        if !CLIENT_KEYS.contains(&key.as_str()) {
            return Err(invalid(format!(
                "service file key \"{key}\" is not supported by quiver (supported: {}, {})",
                CLIENT_KEYS.join(", "),
                own.join(", ")
            )));
        }
        let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
        let parsed: Config = format!("{key}='{quoted}'").parse().map_err(|e| {
            let shown = if key == "password" {
                "the password is malformed".to_string()
            } else {
                format!("{key}: {e}")
            };
            invalid(format!("service file: {shown}"))
        })?;
        copy_unset(&parsed, config);
    }
    front.append(taken);
    *taken = front;
    Ok(())
}

/// Copies what `from` sets into `to` where `to` has nothing.
fn copy_unset(from: &Config, to: &mut Config) {
    if to.get_hosts().is_empty() {
        for host in from.get_hosts() {
            match host {
                Host::Tcp(name) => {
                    to.host(name);
                }
                #[cfg(unix)]
                Host::Unix(path) => {
                    to.host_path(path);
                }
            }
        }
    }
    if to.get_ports().is_empty() {
        for &port in from.get_ports() {
            to.port(port);
        }
    }
    if let (None, Some(user)) = (to.get_user(), from.get_user()) {
        to.user(user);
    }
    if let (None, Some(password)) = (to.get_password(), from.get_password()) {
        to.password(password);
    }
    if let (None, Some(dbname)) = (to.get_dbname(), from.get_dbname()) {
        to.dbname(dbname);
    }
    if let (None, Some(options)) = (to.get_options(), from.get_options()) {
        to.options(options);
    }
    if let (None, Some(name)) = (to.get_application_name(), from.get_application_name()) {
        to.application_name(name);
    }
    if let (None, Some(&timeout)) = (to.get_connect_timeout(), from.get_connect_timeout()) {
        to.connect_timeout(timeout);
    }
}

fn invalid(message: String) -> PostgresError {
    PostgresError::InvalidDsn(message)
}

fn syntax(path: &Path, line: usize, what: &str) -> PostgresError {
    invalid(format!(
        "syntax error in service file \"{}\", line {}: {what}",
        path.display(),
        line + 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# services\n[other]\nhost=elsewhere\n\n[shop]\nhost = /run/pg\n\
                        port=6000\ndbname=shop\npassword=it's = here\nsslmode=verify-full\n\
                        [after]\nuser=nobody\n";

    #[test]
    fn a_section_s_lines_are_its_entries() {
        let entries = find_service(FILE, "shop", Path::new("f")).unwrap().unwrap();
        assert_eq!(
            entries,
            [
                ("host", "/run/pg"),
                ("port", "6000"),
                ("dbname", "shop"),
                ("password", "it's = here"),
                ("sslmode", "verify-full"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert_eq!(find_service(FILE, "missing", Path::new("f")).unwrap(), None);
        let nested = find_service("[a]\nservice=b\n", "a", Path::new("f"));
        assert!(nested.unwrap_err().to_string().contains("nested service"));
        let broken = find_service("[a\n", "a", Path::new("f"))
            .unwrap_err()
            .to_string();
        assert!(broken.contains("line 1"), "{broken}");
    }

    #[test]
    fn the_string_s_own_values_win_over_the_service_s() {
        let entries = find_service(FILE, "shop", Path::new("f")).unwrap().unwrap();
        let mut config: Config = "dbname=mine".parse().unwrap();
        let mut taken = vec![("sslmode".to_string(), "disable".to_string())];
        apply(entries, &mut config, &mut taken, &["sslmode"]).unwrap();
        assert_eq!(config.get_dbname(), Some("mine"));
        assert_eq!(config.get_ports(), &[6000]);
        assert_eq!(config.get_password(), Some(&b"it's = here"[..]));
        assert!(matches!(config.get_hosts(), [Host::Unix(path)] if path == Path::new("/run/pg")));
        assert_eq!(crate::options::option(&taken, "sslmode"), Some("disable"));
        let error = apply(
            vec![("keepalives".into(), "0".into())],
            &mut config,
            &mut Vec::new(),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("\"keepalives\" is not supported"), "{error}");
    }

    #[test]
    fn the_user_file_is_searched_before_the_system_file() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let system = dir.path().join("etc");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&system).unwrap();
        std::fs::write(home.join(".pg_service.conf"), "[a]\nport=1\n").unwrap();
        std::fs::write(system.join("pg_service.conf"), "[a]\nport=2\n[b]\nport=3\n").unwrap();
        let env = |name: &str| match name {
            "HOME" => Some(home.display().to_string()),
            "PGSYSCONFDIR" => Some(system.display().to_string()),
            _ => None,
        };
        let port = |service: &str| lookup(service, &env).map(|entries| entries[0].1.clone());
        assert_eq!(port("a").unwrap(), "1");
        assert_eq!(port("b").unwrap(), "3");
        let error = port("c").unwrap_err().to_string();
        assert!(
            error.contains("definition of service \"c\" not found"),
            "{error}"
        );
    }
}
