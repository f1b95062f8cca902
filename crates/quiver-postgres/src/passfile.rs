//! The password file, as libpq reads it.
//!
//! When neither the connection string nor `PGPASSWORD` gives a password, libpq looks in a
//! password file: the `passfile` connection parameter, else `PGPASSFILE`, else `~/.pgpass`.
//! Each line is `hostname:port:database:username:password`; `#` starts a comment line; a field
//! of exactly `*` matches anything; `\:` and `\\` stand for `:` and `\`. The first line that
//! matches wins. A Unix-socket connection to the default socket directory matches `localhost`,
//! one to another directory matches that directory's path. A file that is not a regular file,
//! or that its group or others may read, is ignored, as libpq ignores it.

use std::path::{Path, PathBuf};

/// What a line of the file is matched against.
#[derive(Debug, Clone, Copy)]
pub struct Lookup<'a> {
    /// A host name, or a Unix socket directory's path.
    pub host: &'a str,
    /// The port, as written in the file.
    pub port: u16,
    /// The database name.
    pub database: &'a str,
    /// The user name.
    pub user: &'a str,
}

/// The file to read: `passfile` from the connection string, else `PGPASSFILE`, else
/// `$HOME/.pgpass`.
pub fn location(passfile: Option<&str>, env: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let named = passfile
        .map(str::to_string)
        .or_else(|| env("PGPASSFILE"))
        .filter(|path| !path.is_empty());
    match named {
        Some(path) => Some(PathBuf::from(path)),
        None => env("HOME")
            .filter(|home| !home.is_empty())
            .map(|home| Path::new(&home).join(".pgpass")),
    }
}

/// The password the file at `path` holds for `lookup`; `None` when the file is missing,
/// unreadable, open to others, or has no matching line.
pub fn read_password(path: &Path, lookup: &Lookup<'_>) -> Option<String> {
    let metadata = std::fs::metadata(path).ok()?;
    if !metadata.is_file() {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o077 != 0 {
            return None;
        }
    }
    let text = std::fs::read_to_string(path).ok()?;
    find_password(&text, lookup)
}

/// The password of the first line of `text` that matches `lookup`.
pub fn find_password(text: &str, lookup: &Lookup<'_>) -> Option<String> {
    let port = lookup.port.to_string();
    let wanted = [lookup.host, port.as_str(), lookup.database, lookup.user];
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut rest = line;
        let mut matched = true;
        for want in wanted {
            let Some((field, after)) = next_field(rest) else {
                matched = false;
                break;
            };
            if field != "*" && unescape(field) != want {
                matched = false;
                break;
            }
            rest = after;
        }
        if matched {
            return Some(unescape(rest));
        }
    }
    None
}

/// The text up to the next unescaped `:` (still escaped) and the text after it.
fn next_field(text: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ':' => return Some((&text[..at], &text[at + 1..])),
            _ => {}
        }
    }
    None
}

/// `text` with each `\x` replaced by `x`.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The `passfile` parameter taken out of a connection string (tokio-postgres does not know
/// it), and the string without it. A string this cannot read is returned unchanged, for the
/// connection-string parser to report.
pub fn take_passfile(dsn: &str) -> (String, Option<String>) {
    let trimmed = dsn.trim_start();
    if trimmed.starts_with("postgresql://") || trimmed.starts_with("postgres://") {
        return take_from_uri(dsn);
    }
    take_from_keywords(dsn)
}

fn take_from_uri(uri: &str) -> (String, Option<String>) {
    let Some((base, query)) = uri.split_once('?') else {
        return (uri.to_string(), None);
    };
    let mut passfile = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("passfile", value)) => passfile = Some(percent_decode(value)),
            _ => kept.push(pair),
        }
    }
    if kept.is_empty() {
        (base.to_string(), passfile)
    } else {
        (format!("{base}?{}", kept.join("&")), passfile)
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// libpq's `key = value` syntax: values bare (backslash escapes) or single-quoted (`\'` and
/// `\\` escapes).
fn take_from_keywords(dsn: &str) -> (String, Option<String>) {
    let bytes = dsn.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if at == bytes.len() {
            break;
        }
        let start = at;
        while at < bytes.len() && bytes[at] != b'=' && !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let key = &dsn[start..at];
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if bytes.get(at) != Some(&b'=') {
            return (dsn.to_string(), None);
        }
        at += 1;
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let mut value = Vec::new();
        if bytes.get(at) == Some(&b'\'') {
            at += 1;
            loop {
                match bytes.get(at) {
                    None => return (dsn.to_string(), None),
                    Some(b'\'') => {
                        at += 1;
                        break;
                    }
                    Some(b'\\') if at + 1 < bytes.len() => {
                        value.push(bytes[at + 1]);
                        at += 2;
                    }
                    Some(&byte) => {
                        value.push(byte);
                        at += 1;
                    }
                }
            }
        } else {
            while at < bytes.len() && !bytes[at].is_ascii_whitespace() {
                if bytes[at] == b'\\' && at + 1 < bytes.len() {
                    at += 1;
                }
                value.push(bytes[at]);
                at += 1;
            }
        }
        if key == "passfile" {
            let rest = format!("{}{}", &dsn[..start], &dsn[at..]);
            return (rest, Some(String::from_utf8_lossy(&value).into_owned()));
        }
    }
    (dsn.to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(host: &'a str, port: u16, database: &'a str, user: &'a str) -> Lookup<'a> {
        Lookup {
            host,
            port,
            database,
            user,
        }
    }

    #[test]
    fn the_first_matching_line_wins_with_wildcards_and_escapes() {
        let file = "# comment\n\
                    db.example:5432:shop:app:first\n\
                    *:5432:*:app:second\n\
                    *:*:*:*:any\\:one\\\\\n\
                    local\\:host:6000:sh\\:op:u:escaped\n";
        let get = |l: Lookup<'_>| find_password(file, &l);
        assert_eq!(
            get(lookup("db.example", 5432, "shop", "app")).as_deref(),
            Some("first")
        );
        assert_eq!(
            get(lookup("other", 5432, "x", "app")).as_deref(),
            Some("second")
        );
        assert_eq!(
            get(lookup("other", 5433, "x", "app")).as_deref(),
            Some("any:one\\")
        );
        // The wildcard line comes first, so the escaped line is never reached for these.
        assert_eq!(
            get(lookup("local:host", 6000, "sh:op", "u")).as_deref(),
            Some("any:one\\")
        );
        let only_escaped = "local\\:host:6000:sh\\:op:u:pass:with:colons\r\n";
        assert_eq!(
            find_password(only_escaped, &lookup("local:host", 6000, "sh:op", "u")).as_deref(),
            Some("pass:with:colons")
        );
        assert_eq!(
            find_password(only_escaped, &lookup("localhost", 6000, "sh:op", "u")),
            None
        );
        // A line with fewer than five fields matches nothing.
        assert_eq!(find_password("h:1:d:u\n", &lookup("h", 1, "d", "u")), None);
        // An empty password is a password.
        assert_eq!(
            find_password("h:1:d:u:\n", &lookup("h", 1, "d", "u")).as_deref(),
            Some("")
        );
    }

    #[test]
    fn a_file_others_can_read_is_ignored() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:secret\n").unwrap();
        let any = lookup("h", 5432, "d", "u");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_password(&path, &any).as_deref(), Some("secret"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_password(&path, &any), None);
        assert_eq!(read_password(dir.path(), &any), None);
        assert_eq!(read_password(&dir.path().join("missing"), &any), None);
    }

    #[test]
    fn the_file_comes_from_the_string_then_the_environment_then_home() {
        let env = |name: &str| match name {
            "PGPASSFILE" => Some("/env/pass".to_string()),
            "HOME" => Some("/home/me".to_string()),
            _ => None,
        };
        assert_eq!(location(Some("/dsn/pass"), &env), Some("/dsn/pass".into()));
        assert_eq!(location(None, &env), Some("/env/pass".into()));
        let home_only = |name: &str| (name == "HOME").then(|| "/home/me".to_string());
        assert_eq!(location(None, &home_only), Some("/home/me/.pgpass".into()));
        assert_eq!(location(None, &|_: &str| None), None);
    }

    #[test]
    fn passfile_is_taken_out_of_either_form_of_connection_string() {
        assert_eq!(
            take_passfile("host=/tmp passfile='/a b/p\\'s' dbname=shop"),
            (
                "host=/tmp  dbname=shop".to_string(),
                Some("/a b/p's".into())
            )
        );
        assert_eq!(
            take_passfile("passfile = /p/q port=5"),
            (" port=5".to_string(), Some("/p/q".into()))
        );
        assert_eq!(
            take_passfile("host=/tmp dbname=shop"),
            ("host=/tmp dbname=shop".to_string(), None)
        );
        assert_eq!(
            take_passfile("postgresql://u@h/db?passfile=%2Fa%20b&application_name=x"),
            (
                "postgresql://u@h/db?application_name=x".to_string(),
                Some("/a b".into())
            )
        );
        assert_eq!(
            take_passfile("postgres://u@h/db?passfile=/p"),
            ("postgres://u@h/db".to_string(), Some("/p".into()))
        );
        // Unreadable strings are left for the parser to reject.
        assert_eq!(take_passfile("host"), ("host".to_string(), None));
        assert_eq!(take_passfile("a='open"), ("a='open".to_string(), None));
    }
}
