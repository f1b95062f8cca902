//! `ATTACH` and `DETACH` of external databases (PostgreSQL), DuckDB's syntax:
//!
//! ```sql
//! ATTACH 'postgresql://app@localhost/shop' AS shop (TYPE postgres, SCHEMA 'public', READ_ONLY);
//! SELECT count(*) FROM shop.orders;          -- the attached schema
//! SELECT * FROM shop.public.orders;          -- any schema of the database
//! DETACH shop;
//! ```
//!
//! quiver parses these statements itself (DataFusion's parser has no ATTACH with options). The
//! database becomes a catalog named after the alias, and its attached schema is also a schema
//! of quiver's default catalog, so two-part names resolve as in DuckDB.

use std::sync::Arc;

use datafusion::catalog::{CatalogProvider, MemoryCatalogProviderList};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Value;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use quiver_postgres::{AttachOptions, PostgresCatalog};

use crate::error::{parser_error_to_quiver, QuiverError, Result};
use crate::session::DEFAULT_CATALOG;

/// A statement quiver runs itself rather than through DataFusion.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    Attach {
        dsn: String,
        alias: String,
        if_not_exists: bool,
        options: AttachOptions,
    },
    Detach {
        alias: String,
        if_exists: bool,
    },
}

/// Whether `first` starts a statement [`parse_command`] handles.
pub(crate) fn is_command(first: &Token) -> bool {
    matches!(first, Token::Word(word) if matches!(word.keyword, Keyword::ATTACH | Keyword::DETACH))
}

/// Parses `ATTACH [DATABASE] [IF NOT EXISTS] 'dsn' [AS] alias [(option [value], ...)]` or
/// `DETACH [DATABASE] [IF EXISTS] alias`.
pub(crate) fn parse_command(tokens: Vec<TokenWithSpan>) -> Result<Command> {
    let dialect = GenericDialect {};
    let mut p = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let err =
        |e: datafusion::sql::sqlparser::parser::ParserError| parser_error_to_quiver(&e.to_string());
    if p.parse_keyword(Keyword::DETACH) {
        let _ = p.parse_keyword(Keyword::DATABASE);
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let alias = p.parse_identifier().map_err(err)?.value;
        expect_end(&mut p)?;
        return Ok(Command::Detach { alias, if_exists });
    }
    p.expect_keyword(Keyword::ATTACH).map_err(err)?;
    let _ = p.parse_keyword(Keyword::DATABASE);
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let dsn = p.parse_literal_string().map_err(err)?;
    let _ = p.parse_keyword(Keyword::AS);
    let alias = p.parse_identifier().map_err(err)?.value;
    let mut options = AttachOptions::default();
    let mut kind: Option<String> = None;
    if p.consume_token(&Token::LParen) {
        loop {
            let key = match p.next_token().token {
                Token::Word(word) => word.value.to_lowercase(),
                other => {
                    return Err(invalid(format!(
                        "expected an ATTACH option, found: {other}"
                    )))
                }
            };
            let value = match p.peek_token().token {
                Token::Comma | Token::RParen => None,
                Token::Word(word) => {
                    p.next_token();
                    Some(word.value)
                }
                _ => Some(match p.parse_value().map_err(err)?.value {
                    Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s,
                    other => other.to_string(),
                }),
            };
            apply_option(&key, value, &mut options, &mut kind)?;
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
        p.expect_token(&Token::RParen).map_err(err)?;
    }
    expect_end(&mut p)?;
    match kind.as_deref() {
        Some("postgres" | "postgresql") => {}
        None if looks_like_postgres(&dsn) => {}
        None => {
            return Err(invalid(
                "ATTACH needs (TYPE postgres): quiver attaches PostgreSQL databases".into(),
            ))
        }
        Some(other) => {
            return Err(QuiverError::NotImplemented(format!(
                "ATTACH of TYPE {other}; quiver attaches TYPE postgres"
            )))
        }
    }
    Ok(Command::Attach {
        dsn,
        alias,
        if_not_exists,
        options,
    })
}

fn looks_like_postgres(dsn: &str) -> bool {
    dsn.starts_with("postgres://")
        || dsn.starts_with("postgresql://")
        || dsn.contains("dbname=")
        || dsn.contains("host=")
}

fn apply_option(
    key: &str,
    value: Option<String>,
    options: &mut AttachOptions,
    kind: &mut Option<String>,
) -> Result<()> {
    let flag = |value: Option<String>| match value.as_deref().map(str::to_lowercase).as_deref() {
        None | Some("true") | Some("1") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(other) => Err(invalid(format!(
            "ATTACH option {key} must be true or false, not {other}"
        ))),
    };
    let number = |value: Option<String>| {
        value
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid(format!("ATTACH option {key} must be a positive integer")))
    };
    match key {
        "type" => *kind = value.map(|v| v.to_lowercase()),
        "schema" => {
            options.schema =
                value.ok_or_else(|| invalid("ATTACH option SCHEMA needs a name".into()))?
        }
        "read_only" => options.read_only = flag(value)?,
        "read_write" => options.read_only = !flag(value)?,
        "filter_pushdown" => options.scan.filter_pushdown = flag(value)?,
        "pages_per_task" => options.scan.pages_per_task = number(value)?,
        "connections" => options.scan.connections = Some(number(value)? as usize),
        other => {
            return Err(invalid(format!(
                "unknown ATTACH option {other}; valid options are TYPE, SCHEMA, READ_ONLY, \
                 FILTER_PUSHDOWN, PAGES_PER_TASK, CONNECTIONS"
            )))
        }
    }
    Ok(())
}

fn expect_end(p: &mut Parser<'_>) -> Result<()> {
    let next = p.peek_token();
    if next.token != Token::EOF {
        return Err(QuiverError::Parser {
            message: format!("expected end of statement, found: {}", next.token),
            line: next.span.start.line,
            column: next.span.start.column,
        });
    }
    Ok(())
}

fn invalid(message: String) -> QuiverError {
    QuiverError::InvalidInput(message)
}

/// Runs an ATTACH or DETACH against the session's catalogs.
pub(crate) async fn run_command(ctx: &SessionContext, command: &Command) -> Result<()> {
    match command {
        Command::Attach {
            dsn,
            alias,
            if_not_exists,
            options,
        } => {
            if ctx.catalog(alias).is_some() {
                if *if_not_exists {
                    return Ok(());
                }
                return Err(QuiverError::Catalog(format!(
                    "a database named \"{alias}\" is already attached"
                )));
            }
            let default = ctx
                .catalog(DEFAULT_CATALOG)
                .ok_or_else(|| QuiverError::Internal("the default catalog is missing".into()))?;
            if default.schema(alias).is_some() {
                return Err(QuiverError::Catalog(format!(
                    "cannot attach as \"{alias}\": a schema of that name exists"
                )));
            }
            let catalog = quiver_postgres::attach(dsn, options.clone())
                .await
                .map_err(|e| QuiverError::from(e.into_datafusion()))?;
            if let Some(alias_schema) = catalog.schema_alias() {
                default
                    .register_schema(alias, alias_schema)
                    .map_err(QuiverError::from)?;
            }
            ctx.register_catalog(alias, catalog as Arc<dyn CatalogProvider>);
            Ok(())
        }
        Command::Detach { alias, if_exists } => {
            let attached = ctx
                .catalog(alias)
                .map(|c| c.downcast_ref::<PostgresCatalog>().is_some())
                .unwrap_or(false);
            if !attached {
                if *if_exists {
                    return Ok(());
                }
                return Err(QuiverError::Catalog(format!(
                    "no attached database named \"{alias}\""
                )));
            }
            let state = ctx.state();
            let list = state
                .catalog_list()
                .downcast_ref::<MemoryCatalogProviderList>()
                .ok_or_else(|| {
                    QuiverError::Internal("the session's catalog list cannot remove".into())
                })?;
            list.catalogs.remove(alias);
            if let Some(default) = ctx.catalog(DEFAULT_CATALOG) {
                default
                    .deregister_schema(alias, true)
                    .map_err(QuiverError::from)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn parse(sql: &str) -> Result<Command> {
        let tokens = Tokenizer::new(&GenericDialect {}, sql)
            .tokenize_with_location()
            .unwrap()
            .into_iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_)))
            .collect();
        parse_command(tokens)
    }

    #[test]
    fn attach_options_are_parsed() {
        let command = parse(
            "ATTACH 'dbname=shop' AS shop (TYPE postgres, SCHEMA 'sales', READ_ONLY, PAGES_PER_TASK 10)",
        )
        .unwrap();
        match command {
            Command::Attach {
                dsn,
                alias,
                options,
                ..
            } => {
                assert_eq!(dsn, "dbname=shop");
                assert_eq!(alias, "shop");
                assert_eq!(options.schema, "sales");
                assert!(options.read_only);
                assert_eq!(options.scan.pages_per_task, 10);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            parse("DETACH DATABASE IF EXISTS shop").unwrap(),
            Command::Detach {
                if_exists: true,
                ..
            }
        ));
        assert!(parse("ATTACH 'x.db' AS x").is_err(), "not a Postgres DSN");
        assert!(parse("ATTACH 'dbname=x' AS x (TYPE sqlite)").is_err());
        assert!(parse("ATTACH 'dbname=x' AS x (COLOUR 'red')").is_err());
    }
}
