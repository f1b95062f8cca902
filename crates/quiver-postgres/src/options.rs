//! Connection-string options that libpq knows and tokio-postgres does not (`passfile`, the TLS
//! files, the `sslmode` values beyond `disable`/`prefer`/`require`): taken out of the string
//! before tokio-postgres parses it, and applied by quiver.

/// The options named in `names` taken out of `dsn` (a libpq `key=value` string or a
/// `postgresql://` URI), with the string left without them. A later occurrence of a key
/// overrides an earlier one, as in libpq. A string this cannot read is returned unchanged,
/// for the connection-string parser to report.
pub fn take_options(dsn: &str, names: &[&str]) -> (String, Vec<(String, String)>) {
    let trimmed = dsn.trim_start();
    if trimmed.starts_with("postgresql://") || trimmed.starts_with("postgres://") {
        return take_from_uri(dsn, names);
    }
    take_from_keywords(dsn, names).unwrap_or_else(|| (dsn.to_string(), Vec::new()))
}

/// The value of the last `name` among `options`.
pub fn option<'a>(options: &'a [(String, String)], name: &str) -> Option<&'a str> {
    options
        .iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

fn take_from_uri(uri: &str, names: &[&str]) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = uri.split_once('?') else {
        return (uri.to_string(), Vec::new());
    };
    let mut taken = Vec::new();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((key, value)) if names.contains(&key) => {
                taken.push((key.to_string(), percent_decode(value)));
            }
            _ => kept.push(pair),
        }
    }
    if kept.is_empty() {
        (base.to_string(), taken)
    } else {
        (format!("{base}?{}", kept.join("&")), taken)
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
/// `\\` escapes). `None` when the string does not follow it.
fn take_from_keywords(dsn: &str, names: &[&str]) -> Option<(String, Vec<(String, String)>)> {
    let bytes = dsn.as_bytes();
    let mut taken = Vec::new();
    let mut rest = String::with_capacity(dsn.len());
    let mut copied = 0;
    let mut at = 0;
    loop {
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
            return None;
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
                    None => return None,
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
        if names.contains(&key) {
            rest.push_str(&dsn[copied..start]);
            copied = at;
            taken.push((
                key.to_string(),
                String::from_utf8_lossy(&value).into_owned(),
            ));
        }
    }
    rest.push_str(&dsn[copied..]);
    Some((rest, taken))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(dsn: &str) -> (String, Vec<(String, String)>) {
        take_options(dsn, &["passfile", "sslmode"])
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_are_taken_out_of_either_form_of_connection_string() {
        assert_eq!(
            take("host=/tmp passfile='/a b/p\\'s' dbname=shop"),
            (
                "host=/tmp  dbname=shop".to_string(),
                pairs(&[("passfile", "/a b/p's")])
            )
        );
        assert_eq!(
            take("passfile = /p/q port=5 sslmode=verify-full"),
            (
                " port=5 ".to_string(),
                pairs(&[("passfile", "/p/q"), ("sslmode", "verify-full")])
            )
        );
        assert_eq!(
            take("host=/tmp dbname=shop"),
            ("host=/tmp dbname=shop".to_string(), Vec::new())
        );
        assert_eq!(
            take("postgresql://u@h/db?passfile=%2Fa%20b&application_name=x&sslmode=allow"),
            (
                "postgresql://u@h/db?application_name=x".to_string(),
                pairs(&[("passfile", "/a b"), ("sslmode", "allow")])
            )
        );
        assert_eq!(
            take("postgres://u@h/db?passfile=/p"),
            (
                "postgres://u@h/db".to_string(),
                pairs(&[("passfile", "/p")])
            )
        );
        // The last occurrence wins.
        let (_, taken) = take("sslmode=disable sslmode=require");
        assert_eq!(option(&taken, "sslmode"), Some("require"));
        // Unreadable strings are left for the parser to reject.
        assert_eq!(take("host"), ("host".to_string(), Vec::new()));
        assert_eq!(take("a='open"), ("a='open".to_string(), Vec::new()));
    }
}
