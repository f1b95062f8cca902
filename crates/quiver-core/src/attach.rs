//! `ATTACH` and `DETACH` of external databases (PostgreSQL), DuckDB's syntax:
//!
//! ```sql
//! ATTACH 'postgresql://app@localhost/shop' AS shop (TYPE postgres, SCHEMA 'public', READ_ONLY);
//! SELECT count(*) FROM shop.orders;          -- the attached schema
//! SELECT * FROM shop.public.orders;          -- any schema of the database
//! USE shop;                                 -- unqualified names now read shop's schema
//! USE main;                                 -- and quiver's own again
//! DETACH shop;
//! ```
//!
//! quiver parses these statements itself (DataFusion's parser has no ATTACH with options). The
//! database becomes a catalog named after the alias, and its attached schema is also a schema
//! of quiver's default catalog, so two-part names resolve as in DuckDB.
//!
//! DuckDB's older form is understood too: it makes every table and view of one Postgres schema
//! a table of a local schema, under its own name.
//!
//! ```sql
//! CALL postgres_attach('dbname=shop', source_schema='public', sink_schema='main',
//!                      overwrite=false, filter_pushdown=true);
//! SELECT count(*) FROM orders;
//! ```

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
use crate::external::EXTERNAL_SCHEMA;
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
    /// `USE name`: the schema of quiver's catalog (`main`, an attached database) that
    /// unqualified table names are looked up in.
    Use {
        name: String,
    },
    /// `CALL postgres_attach(...)`: the tables of `options.schema` registered in `sink_schema`
    /// (the session's default schema when `None`).
    PostgresAttach {
        dsn: String,
        sink_schema: Option<String>,
        overwrite: bool,
        options: AttachOptions,
    },
}

/// Whether `first` starts a statement [`parse_command`] handles.
pub(crate) fn is_command(first: &Token) -> bool {
    matches!(first, Token::Word(word)
        if matches!(word.keyword, Keyword::ATTACH | Keyword::DETACH | Keyword::CALL | Keyword::USE))
}

/// Parses `ATTACH [DATABASE] [IF NOT EXISTS] 'dsn' [AS] alias [(option [value], ...)]`,
/// `DETACH [DATABASE] [IF EXISTS] alias` or `USE name`.
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
    if p.parse_keyword(Keyword::CALL) {
        return parse_call(&mut p);
    }
    if p.parse_keyword(Keyword::USE) {
        let name = p.parse_object_name(false).map_err(err)?;
        expect_end(&mut p)?;
        let [part] = name.0.as_slice() else {
            return Err(QuiverError::NotImplemented(format!(
                "USE {name}: only a database or schema name (USE shop, USE main); a Postgres \
                 schema other than the attached one is reached by name (shop.sales.orders) or \
                 attached on its own (ATTACH … (TYPE postgres, SCHEMA 'sales'))"
            )));
        };
        let name = part
            .as_ident()
            .map(|ident| ident.value.clone())
            .ok_or_else(|| invalid(format!("USE {name}: not a name")))?;
        return Ok(Command::Use { name });
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

/// `CALL postgres_attach('dsn' [, name = value]...)`, after the CALL.
fn parse_call(p: &mut Parser<'_>) -> Result<Command> {
    let err =
        |e: datafusion::sql::sqlparser::parser::ParserError| parser_error_to_quiver(&e.to_string());
    let procedure = p.parse_identifier().map_err(err)?.value;
    if !procedure.eq_ignore_ascii_case("postgres_attach") {
        return Err(QuiverError::NotImplemented(format!(
            "CALL {procedure}: the only procedure quiver has is postgres_attach"
        )));
    }
    p.expect_token(&Token::LParen).map_err(err)?;
    let dsn = p.parse_literal_string().map_err(err)?;
    let mut options = AttachOptions {
        read_only: true,
        ..AttachOptions::default()
    };
    let mut sink_schema = None;
    let mut overwrite = false;
    while p.consume_token(&Token::Comma) {
        let key = p.parse_identifier().map_err(err)?.value.to_lowercase();
        if !p.consume_token(&Token::Eq) && !p.consume_token(&Token::RArrow) {
            return Err(invalid(format!(
                "postgres_attach's argument {key} needs a value: {key} = ..."
            )));
        }
        let value = match p.parse_value().map_err(err)?.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s,
            Value::Boolean(b) => b.to_string(),
            other => other.to_string(),
        };
        match key.as_str() {
            "source_schema" => options.schema = value,
            "sink_schema" => sink_schema = Some(value),
            "overwrite" => overwrite = parse_flag(&key, Some(value))?,
            "filter_pushdown" | "pages_per_task" | "connections" => {
                apply_option(&key, Some(value), &mut options, &mut None)?
            }
            other => {
                return Err(invalid(format!(
                    "unknown postgres_attach argument {other}; valid arguments are \
                     SOURCE_SCHEMA, SINK_SCHEMA, OVERWRITE, FILTER_PUSHDOWN, PAGES_PER_TASK, \
                     CONNECTIONS"
                )))
            }
        }
    }
    p.expect_token(&Token::RParen).map_err(err)?;
    expect_end(p)?;
    Ok(Command::PostgresAttach {
        dsn,
        sink_schema,
        overwrite,
        options,
    })
}

fn parse_flag(key: &str, value: Option<String>) -> Result<bool> {
    match value.as_deref().map(str::to_lowercase).as_deref() {
        None | Some("true") | Some("1") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(other) => Err(invalid(format!("{key} must be true or false, not {other}"))),
    }
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
    let flag = |value: Option<String>| parse_flag(&format!("ATTACH option {key}"), value);
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
        "query_pushdown" => options.scan.query_pushdown = flag(value)?,
        "pages_per_task" => options.scan.pages_per_task = number(value)?,
        "connections" => options.scan.connections = Some(number(value)? as usize),
        other => {
            return Err(invalid(format!(
                "unknown ATTACH option {other}; valid options are TYPE, SCHEMA, READ_ONLY, \
                 FILTER_PUSHDOWN, QUERY_PUSHDOWN, PAGES_PER_TASK, CONNECTIONS"
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
            if ctx.state().config_options().catalog.default_schema == *alias {
                return Err(QuiverError::Catalog(format!(
                    "cannot DETACH \"{alias}\": it is the database in use (USE main first)"
                )));
            }
            list.catalogs.remove(alias);
            if let Some(default) = ctx.catalog(DEFAULT_CATALOG) {
                default
                    .deregister_schema(alias, true)
                    .map_err(QuiverError::from)?;
            }
            Ok(())
        }
        Command::Use { name } => use_schema(ctx, name),
        Command::PostgresAttach {
            dsn,
            sink_schema,
            overwrite,
            options,
        } => postgres_attach(ctx, dsn, sink_schema.as_deref(), *overwrite, options).await,
    }
}

/// Makes `name` — a schema of quiver's catalog, matched as written, else ignoring case — the
/// one unqualified table names are looked up in, as DuckDB's `USE`.
fn use_schema(ctx: &SessionContext, name: &str) -> Result<()> {
    let catalog = ctx
        .catalog(DEFAULT_CATALOG)
        .ok_or_else(|| QuiverError::Internal("the session has no default catalog".into()))?;
    let schemas: Vec<String> = catalog
        .schema_names()
        .into_iter()
        .filter(|schema| schema != EXTERNAL_SCHEMA)
        .collect();
    let Some(schema) = crate::identifiers::pick("schema", name, schemas.iter())? else {
        let mut known: Vec<String> = schemas
            .iter()
            .map(|schema| format!("\"{schema}\""))
            .collect();
        known.sort();
        return Err(QuiverError::Catalog(format!(
            "USE {name}: no attached database or schema named \"{name}\"; there are: {}",
            known.join(", ")
        )));
    };
    let state = ctx.state_ref();
    let mut state = state.write();
    let options = state.config_mut().options_mut();
    options.catalog.default_catalog = DEFAULT_CATALOG.to_string();
    options.catalog.default_schema = schema;
    Ok(())
}

/// Registers every table and view of the Postgres schema `options.schema` in the local schema
/// `sink` under its own name. Nothing is registered when any name is taken and `overwrite`
/// is false.
async fn postgres_attach(
    ctx: &SessionContext,
    dsn: &str,
    sink: Option<&str>,
    overwrite: bool,
    options: &AttachOptions,
) -> Result<()> {
    let sink_name = match sink {
        Some(name) => name.to_string(),
        None => ctx.state().config_options().catalog.default_schema.clone(),
    };
    let sink = ctx
        .catalog(DEFAULT_CATALOG)
        .and_then(|catalog| catalog.schema(&sink_name))
        .ok_or_else(|| {
            QuiverError::Catalog(format!(
                "postgres_attach: no local schema named \"{sink_name}\" to attach into"
            ))
        })?;
    let catalog = quiver_postgres::attach(dsn, options.clone())
        .await
        .map_err(|e| QuiverError::from(e.into_datafusion()))?;
    let source = catalog.schema(&options.schema).ok_or_else(|| {
        QuiverError::Internal(format!(
            "the attached database lost its schema \"{}\"",
            options.schema
        ))
    })?;
    let mut names = source.table_names();
    names.sort();
    if !overwrite {
        let taken: Vec<&str> = names
            .iter()
            .filter(|name| sink.table_exist(name))
            .map(String::as_str)
            .collect();
        if !taken.is_empty() {
            return Err(QuiverError::Catalog(format!(
                "postgres_attach: {} already exist in schema \"{sink_name}\" ({}); \
                 pass overwrite=true to replace them",
                if taken.len() == 1 {
                    "a table named so does"
                } else {
                    "tables of these names"
                },
                taken.join(", ")
            )));
        }
    }
    let mut tables = Vec::with_capacity(names.len());
    for name in names {
        if let Some(table) = source.table(&name).await.map_err(QuiverError::from)? {
            tables.push((name, table));
        }
    }
    for (name, table) in tables {
        if sink.table_exist(&name) {
            sink.deregister_table(&name).map_err(QuiverError::from)?;
        }
        sink.register_table(name, table)
            .map_err(QuiverError::from)?;
    }
    Ok(())
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
            "ATTACH 'dbname=shop' AS shop (TYPE postgres, SCHEMA 'sales', READ_ONLY, PAGES_PER_TASK 10, \
             QUERY_PUSHDOWN false)",
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
                assert!(!options.scan.query_pushdown);
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

    #[test]
    fn call_postgres_attach_is_parsed() {
        match parse(
            "CALL postgres_attach('dbname=shop', source_schema='sales', sink_schema => 'mirror', \
             overwrite=true, filter_pushdown=false, pages_per_task=5)",
        )
        .unwrap()
        {
            Command::PostgresAttach {
                dsn,
                sink_schema,
                overwrite,
                options,
            } => {
                assert_eq!(dsn, "dbname=shop");
                assert_eq!(sink_schema.as_deref(), Some("mirror"));
                assert!(overwrite);
                assert_eq!(options.schema, "sales");
                assert!(options.read_only);
                assert!(!options.scan.filter_pushdown);
                assert_eq!(options.scan.pages_per_task, 5);
            }
            other => panic!("unexpected {other:?}"),
        }
        match parse("CALL postgres_attach('dbname=shop')").unwrap() {
            Command::PostgresAttach {
                sink_schema,
                overwrite,
                options,
                ..
            } => {
                assert_eq!(sink_schema, None);
                assert!(!overwrite);
                assert_eq!(options.schema, "public");
            }
            other => panic!("unexpected {other:?}"),
        }
        for bad in [
            "CALL postgres_attach('dbname=shop', colour='red')",
            "CALL postgres_attach('dbname=shop', overwrite='maybe')",
            "CALL postgres_attach('dbname=shop', overwrite)",
            "CALL postgres_attach('dbname=shop'",
            "CALL postgres_attach('dbname=shop') extra",
            "CALL something_else('x')",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
