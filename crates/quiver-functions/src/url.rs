//! ClickHouse's URL functions `domain(url)` and `domainWithoutWWW(url)`.
//!
//! ```sql
//! SELECT domain('svn+ssh://some.svn-hosting.com:80/repo/trunk');   -- some.svn-hosting.com
//! SELECT domainWithoutWWW('http://www.example.com/a');            -- example.com
//! ```
//!
//! As in ClickHouse the protocol is optional (`//host/...` and `host:port/...` work), the port
//! and a `user@` prefix are dropped, and a string without a valid host gives `''` — including
//! `user:password@host` URLs, which ClickHouse (26.9) also rejects. The tests pin ClickHouse's
//! outputs, checked with chDB 4.4.0.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::DataType;
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// `domain` or `domainWithoutWWW`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Domain {
    name: &'static str,
    aliases: Vec<String>,
    without_www: bool,
    signature: Signature,
}

impl Domain {
    /// Both URL functions.
    pub fn all() -> Vec<Domain> {
        vec![
            Domain {
                name: "domain",
                aliases: vec![],
                without_www: false,
                signature: Signature::user_defined(Volatility::Immutable),
            },
            Domain {
                name: "domainWithoutWWW",
                aliases: vec!["domainwithoutwww".into()],
                without_www: true,
                signature: Signature::user_defined(Volatility::Immutable),
            },
        ]
    }
}

/// The host of `url`, or `""` when it has none.
pub fn domain_of(url: &str) -> &str {
    let mut rest = url;
    if let Some(position) = rest.find("//") {
        let scheme = &rest[..position];
        let scheme_ok = scheme.is_empty()
            || (scheme.ends_with(':')
                && scheme[..scheme.len() - 1]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic()));
        if scheme_ok {
            rest = &rest[position + 2..];
        }
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let mut host = &rest[..end];
    // User info ends at '@'; a ':' before it reads as a port, which makes the URL invalid
    // (`http://user:pw@host/` gives '' in ClickHouse, `http://user@host/` gives `host`).
    if let Some(at) = host.find('@') {
        if host[..at].contains(':') {
            return "";
        }
        host = &host[at + 1..];
    }
    if let Some(colon) = host.find(':') {
        if !host[colon + 1..].chars().all(|c| c.is_ascii_digit()) {
            return "";
        }
        host = &host[..colon];
    }
    let valid = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') || !c.is_ascii());
    if valid {
        host
    } else {
        ""
    }
}

impl ScalarUDFImpl for Domain {
    fn name(&self) -> &str {
        self.name
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [_] => Ok(vec![DataType::Utf8]),
            _ => plan_err!("{} expects one argument, a URL", self.name),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let extract = |url: &str| -> String {
            let host = domain_of(url);
            if self.without_www {
                host.strip_prefix("www.").unwrap_or(host).to_string()
            } else {
                host.to_string()
            }
        };
        match args.args.as_slice() {
            [ColumnarValue::Scalar(ScalarValue::Utf8(value))] => Ok(ColumnarValue::Scalar(
                ScalarValue::Utf8(value.as_deref().map(extract)),
            )),
            [ColumnarValue::Array(array)] if array.data_type() == &DataType::Utf8 => {
                let urls = array.as_string::<i32>();
                let mut builder = StringBuilder::with_capacity(urls.len(), urls.len() * 16);
                for url in urls.iter() {
                    match url {
                        Some(url) => builder.append_value(extract(url)),
                        None => builder.append_null(),
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(builder.finish()) as ArrayRef))
            }
            other => exec_err!(
                "{}: expected one string argument, got {} arguments",
                self.name,
                other.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::domain_of;

    #[test]
    fn domains_match_clickhouse() {
        // Outputs of ClickHouse 26.9 (chDB 4.4.0).
        let cases = [
            (
                "svn+ssh://some.svn-hosting.com:80/repo/trunk",
                "some.svn-hosting.com",
            ),
            (
                "//some.svn-hosting.com:80/repo/trunk",
                "some.svn-hosting.com",
            ),
            ("some.svn-hosting.com:80/repo/trunk", "some.svn-hosting.com"),
            ("https://clickhouse.com/docs", "clickhouse.com"),
            (
                "http://user:password@example.com:8080/path?query=value#fragment",
                "",
            ),
            ("http://user@example.com/", "example.com"),
            ("http://example.com:8080", "example.com"),
            ("example.com", "example.com"),
            ("http://EXAMPLE.com/", "EXAMPLE.com"),
            ("ftp://a_b.com/x", "a_b.com"),
            ("http://a b.com/", ""),
            ("http://example.com?q=1", "example.com"),
            ("http://example.com#f", "example.com"),
            ("mailto:x@y.com", ""),
            ("http://[::1]:80/", ""),
        ];
        for (url, host) in cases {
            assert_eq!(domain_of(url), host, "{url}");
        }
        assert_eq!(domain_of(""), "");
        assert_eq!(domain_of("not a url"), "");
    }
}
