//! Splitting SQL text into statements, with the dialect extensions quiver adds on top of
//! DataFusion's parser:
//!
//! * a trailing ClickHouse `FORMAT <name>` clause (`SELECT 1 FORMAT JSONEachRow`) selects the
//!   output format of that statement;
//! * DuckDB's `COPY (query) TO 'file' (FORMAT parquet, HEADER true, DELIMITER ';')` option list,
//!   beside DataFusion's own `STORED AS … OPTIONS (…)` form.

use std::collections::HashSet;

use datafusion::sql::parser::{
    CopyToSource, CopyToStatement, DFParser, DFParserBuilder, Statement as DFStatement,
};
use datafusion::sql::sqlparser::ast::{FormatClause, Statement as SqlStatement, Value};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use crate::error::{parser_error_to_quiver, QuiverError, Result};
use crate::format::OutputFormat;

/// One parsed statement, ready for [`crate::Session::execute`].
#[derive(Debug, Clone)]
pub struct Statement {
    pub(crate) inner: DFStatement,
    /// The statement's own text, as written.
    pub text: String,
    /// The output format its `FORMAT` clause asked for, if any.
    pub format: Option<OutputFormat>,
    /// 1-based line of the statement's first token in the whole text.
    pub line: u64,
    /// ATTACH / DETACH, which quiver runs itself (`inner` is then an empty query).
    pub(crate) command: Option<crate::attach::Command>,
    /// The statement's words, lowercased ([`crate::narrow::words_of`]).
    pub(crate) words: Option<HashSet<String>>,
}

impl Statement {
    /// Whether this statement returns rows to show (a query, EXPLAIN, SHOW, DESCRIBE), as
    /// opposed to a statement run for its effect (DDL, INSERT, COPY, SET).
    pub fn returns_rows(&self) -> bool {
        if self.command.is_some() {
            return false;
        }
        match &self.inner {
            DFStatement::Statement(statement) => matches!(
                statement.as_ref(),
                SqlStatement::Query(_)
                    | SqlStatement::Explain { .. }
                    | SqlStatement::ExplainTable { .. }
                    | SqlStatement::ShowTables { .. }
                    | SqlStatement::ShowColumns { .. }
                    | SqlStatement::ShowVariable { .. }
                    | SqlStatement::ShowFunctions { .. }
            ),
            DFStatement::Explain(_) => true,
            _ => false,
        }
    }
}

/// Parses `sql` into statements. Empty statements (`;;`) are skipped.
pub fn parse_sql(sql: &str) -> Result<Vec<Statement>> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| parser_error_to_quiver(&e.to_string()))?;
    let mut statements = Vec::new();
    for chunk in split_statements(tokens) {
        let (chunk, clause_format) = take_trailing_format(chunk)?;
        let (Some(first), Some(last)) = (
            chunk.iter().find(|t| !is_trivia(&t.token)),
            chunk.iter().rev().find(|t| !is_trivia(&t.token)),
        ) else {
            continue;
        };
        let (start, end) = (first.span.start, last.span.end);
        let starts_with_copy =
            matches!(&first.token, Token::Word(word) if word.keyword == Keyword::COPY);
        let command = if crate::attach::is_command(&first.token) {
            let significant = chunk.iter().filter(|t| !is_trivia(&t.token)).cloned();
            Some(crate::attach::parse_command(significant.collect())?)
        } else {
            None
        };
        let words = match command {
            Some(_) => None,
            None => crate::narrow::words_of(&chunk),
        };
        let chunk = match command {
            // The statement runs as an empty query once the command has run.
            Some(_) => Tokenizer::new(&dialect, "SELECT NULL WHERE FALSE")
                .tokenize_with_location()
                .map_err(|e| parser_error_to_quiver(&e.to_string()))?,
            None => chunk,
        };
        let mut parser = DFParserBuilder::new(chunk)
            .with_dialect(&dialect)
            .build()
            .map_err(QuiverError::from)?;
        let mut inner = if starts_with_copy {
            parse_copy(&mut parser)?
        } else {
            parser.parse_statement().map_err(QuiverError::from)?
        };
        let next = parser.parser.peek_token();
        if next.token != Token::EOF {
            return Err(QuiverError::Parser {
                message: format!("expected end of statement, found: {}", next.token),
                line: next.span.start.line,
                column: next.span.start.column,
            });
        }
        let text = sql[byte_offset(sql, start)..byte_offset(sql, end).max(byte_offset(sql, start))]
            .trim()
            .to_string();
        let format = match take_format_clause(&mut inner)? {
            Some(format) => Some(format),
            None => clause_format,
        };
        statements.push(Statement {
            inner,
            text,
            format,
            line: start.line,
            command,
            words,
        });
    }
    Ok(statements)
}

fn is_trivia(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_))
}

/// Splits tokens at top-level `;` (semicolons inside strings and comments are inside tokens).
fn split_statements(tokens: Vec<TokenWithSpan>) -> Vec<Vec<TokenWithSpan>> {
    let mut chunks = vec![Vec::new()];
    for token in tokens {
        if token.token == Token::SemiColon {
            chunks.push(Vec::new());
        } else if let Some(chunk) = chunks.last_mut() {
            chunk.push(token);
        }
    }
    chunks
}

/// ClickHouse's trailing `FORMAT <name>` clause, on any statement that returns rows. Taken off
/// the tokens before parsing, since sqlparser would read `FORMAT` as an alias.
fn take_trailing_format(
    mut tokens: Vec<TokenWithSpan>,
) -> Result<(Vec<TokenWithSpan>, Option<OutputFormat>)> {
    let significant: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !is_trivia(&t.token))
        .map(|(i, _)| i)
        .collect();
    let [.., before, keyword, name] = significant.as_slice() else {
        return Ok((tokens, None));
    };
    let is_format =
        matches!(&tokens[*keyword].token, Token::Word(w) if w.keyword == Keyword::FORMAT);
    let after_as = matches!(&tokens[*before].token, Token::Word(w) if w.keyword == Keyword::AS);
    let format_name = match &tokens[*name].token {
        Token::Word(word) => word.value.clone(),
        Token::SingleQuotedString(s) => s.clone(),
        _ => return Ok((tokens, None)),
    };
    if !is_format || after_as {
        return Ok((tokens, None));
    }
    let format = format_name.parse::<OutputFormat>()?;
    tokens.truncate(*keyword);
    Ok((tokens, Some(format)))
}

/// The byte offset of a 1-based line/column (columns count characters).
fn byte_offset(sql: &str, location: Location) -> usize {
    let mut line = 1;
    let mut column = 1;
    for (offset, ch) in sql.char_indices() {
        if line == location.line && column == location.column {
            return offset;
        }
        if ch == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    sql.len()
}

fn take_format_clause(statement: &mut DFStatement) -> Result<Option<OutputFormat>> {
    let DFStatement::Statement(inner) = statement else {
        return Ok(None);
    };
    let SqlStatement::Query(query) = inner.as_mut() else {
        return Ok(None);
    };
    match query.format_clause.take() {
        None => Ok(None),
        Some(FormatClause::Null) => Ok(Some(OutputFormat::Null)),
        Some(FormatClause::Identifier(ident)) => Ok(Some(ident.value.parse::<OutputFormat>()?)),
    }
}

/// `COPY source TO 'target' [STORED AS f] [PARTITIONED BY (..)] [OPTIONS (..)] [(FORMAT f, ..)]`
fn parse_copy(parser: &mut DFParser<'_>) -> Result<DFStatement> {
    let p = &mut parser.parser;
    p.next_token(); // COPY
    let source = if p.consume_token(&Token::LParen) {
        let query = p.parse_query().map_err(parser_error)?;
        p.expect_token(&Token::RParen).map_err(parser_error)?;
        CopyToSource::Query(query)
    } else {
        CopyToSource::Relation(p.parse_object_name(true).map_err(parser_error)?)
    };
    p.expect_keyword(Keyword::TO).map_err(parser_error)?;
    let target = p.parse_literal_string().map_err(parser_error)?;
    let mut stored_as: Option<String> = None;
    let mut partitioned_by: Vec<String> = Vec::new();
    let mut options: Vec<(String, Value)> = Vec::new();
    loop {
        if p.parse_keywords(&[Keyword::STORED, Keyword::AS]) {
            stored_as = Some(
                p.parse_identifier()
                    .map_err(parser_error)?
                    .value
                    .to_uppercase(),
            );
        } else if p.parse_keywords(&[Keyword::PARTITIONED, Keyword::BY]) {
            p.expect_token(&Token::LParen).map_err(parser_error)?;
            loop {
                partitioned_by.push(p.parse_identifier().map_err(parser_error)?.value);
                if !p.consume_token(&Token::Comma) {
                    break;
                }
            }
            p.expect_token(&Token::RParen).map_err(parser_error)?;
        } else if p.parse_keyword(Keyword::OPTIONS) {
            p.expect_token(&Token::LParen).map_err(parser_error)?;
            loop {
                let key = option_key(p.next_token().token)?;
                let value = p.parse_value().map_err(parser_error)?.value;
                options.push((key, value));
                if !p.consume_token(&Token::Comma) {
                    break;
                }
            }
            p.expect_token(&Token::RParen).map_err(parser_error)?;
        } else if p.consume_token(&Token::LParen) || p.parse_keyword(Keyword::WITH) {
            // DuckDB: `(FORMAT parquet, HEADER true, DELIMITER ';', COMPRESSION zstd)`.
            let _ = p.consume_token(&Token::LParen);
            loop {
                let key = option_key(p.next_token().token)?.to_lowercase();
                let value = match p.peek_token().token {
                    Token::Comma | Token::RParen => Value::Boolean(true),
                    Token::Word(ref word) if word.quote_style.is_none() => {
                        let word = word.value.clone();
                        p.next_token();
                        match word.to_lowercase().as_str() {
                            "true" => Value::Boolean(true),
                            "false" => Value::Boolean(false),
                            _ => Value::SingleQuotedString(word),
                        }
                    }
                    _ => p.parse_value().map_err(parser_error)?.value,
                };
                apply_duckdb_copy_option(
                    &key,
                    value,
                    &mut stored_as,
                    &mut partitioned_by,
                    &mut options,
                )?;
                if !p.consume_token(&Token::Comma) {
                    break;
                }
            }
            p.expect_token(&Token::RParen).map_err(parser_error)?;
        } else {
            break;
        }
    }
    Ok(DFStatement::CopyTo(CopyToStatement {
        source,
        target,
        partitioned_by,
        stored_as,
        options,
    }))
}

fn apply_duckdb_copy_option(
    key: &str,
    value: Value,
    stored_as: &mut Option<String>,
    partitioned_by: &mut Vec<String>,
    options: &mut Vec<(String, Value)>,
) -> Result<()> {
    let text = match &value {
        Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
        other => other.to_string(),
    };
    match key {
        "format" => {
            let format = match text.to_lowercase().as_str() {
                "parquet" => "PARQUET",
                "csv" => "CSV",
                "json" | "ndjson" | "jsoneachrow" => "JSON",
                "arrow" | "ipc" | "feather" => "ARROW",
                other => {
                    return Err(QuiverError::InvalidInput(format!(
                        "COPY cannot write format \"{other}\"; use parquet, csv, json or arrow"
                    )))
                }
            };
            *stored_as = Some(format.to_string());
        }
        "header" => options.push((
            "format.has_header".into(),
            Value::SingleQuotedString(text.to_lowercase()),
        )),
        "delimiter" | "delim" | "sep" => {
            options.push(("format.delimiter".into(), Value::SingleQuotedString(text)))
        }
        "quote" => options.push(("format.quote".into(), Value::SingleQuotedString(text))),
        "compression" | "codec" => options.push((
            "format.compression".into(),
            Value::SingleQuotedString(text.to_lowercase()),
        )),
        "row_group_size" => options.push(("format.max_row_group_size".into(), value)),
        "partition_by" => partitioned_by.push(text),
        other => {
            return Err(QuiverError::InvalidInput(format!(
                "unknown COPY option \"{other}\"; valid options are FORMAT, HEADER, DELIMITER, \
                 QUOTE, COMPRESSION, ROW_GROUP_SIZE, PARTITION_BY"
            )))
        }
    }
    Ok(())
}

fn option_key(token: Token) -> Result<String> {
    match token {
        Token::Word(word) => Ok(word.value),
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Ok(s),
        other => Err(QuiverError::Parser {
            message: format!("expected an option name, found: {other}"),
            line: 0,
            column: 0,
        }),
    }
}

fn parser_error(error: datafusion::sql::sqlparser::parser::ParserError) -> QuiverError {
    parser_error_to_quiver(&error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_statements_and_keeps_their_text() -> Result<()> {
        let statements = parse_sql("SELECT 1;\n\n  SELECT 'a;b' AS x ;;")?;
        assert_eq!(statements.len(), 2);
        assert_eq!(statements[0].text, "SELECT 1");
        assert_eq!(statements[1].text, "SELECT 'a;b' AS x");
        assert_eq!(statements[1].line, 3);
        Ok(())
    }

    #[test]
    fn format_clause_selects_the_output_format() -> Result<()> {
        let statements = parse_sql("SELECT 1 FORMAT JSONEachRow")?;
        assert_eq!(statements[0].format, Some(OutputFormat::JsonEachRow));
        assert!(parse_sql("SELECT 1 FORMAT Excel").is_err());
        Ok(())
    }

    #[test]
    fn duckdb_copy_options_are_understood() -> Result<()> {
        let statements =
            parse_sql("COPY (SELECT 1) TO 'x.csv' (FORMAT csv, HEADER false, DELIMITER ';')")?;
        match &statements[0].inner {
            DFStatement::CopyTo(copy) => {
                assert_eq!(copy.stored_as.as_deref(), Some("CSV"));
                assert_eq!(copy.options.len(), 2);
            }
            other => panic!("unexpected {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn syntax_errors_report_line_and_column() {
        match parse_sql("SELECT 1;\nSELEC 2") {
            Err(QuiverError::Parser { line, column, .. }) => {
                assert_eq!((line, column), (2, 1));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
