//! The password file, as libpq reads it.
//!
//! When neither the connection string nor `PGPASSWORD` gives a password, libpq looks in a
//! password file: the `passfile` connection parameter, else `PGPASSFILE`, else `~/.pgpass`.
//! Each line is `hostname:port:database:username:password`; `#` starts a comment line; a field
//! of exactly `*` matches anything; `\:` and `\\` stand for `:` and `\`. The first line that
//! matches wins, looked up for each host of the connection string with that host's port (the
//! login to whichever host answers uses its own entry). A Unix-socket connection to the
//! default socket directory matches `localhost`, one to another directory matches that
//! directory's path. A file that is not a regular file, or that its group or others may read,
//! is ignored, as libpq ignores it.

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
}
