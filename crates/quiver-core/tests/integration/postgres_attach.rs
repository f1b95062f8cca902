//! ATTACH of a PostgreSQL database, against the private server of quiver-postgres's test
//! harness.

use crate::support::run;

use crate::common;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use quiver_core::{QuiverError, Session};

fn count(batches: &[RecordBatch]) -> i64 {
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

/// `batches` as `psql -A -t` prints rows: cells joined by `|`, NULL empty, a row a line.
fn psql_rows(batches: &[RecordBatch]) -> String {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let options = FormatOptions::default();
    let mut lines = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            lines.push(cells.join("|"));
        }
    }
    lines.join("\n")
}

fn strings(batches: &[RecordBatch], column: usize) -> Vec<String> {
    let mut out = Vec::new();
    for batch in batches {
        let array = datafusion::arrow::compute::cast(
            batch.column(column),
            &datafusion::arrow::datatypes::DataType::Utf8,
        )
        .unwrap();
        let array = array.as_string::<i32>();
        for i in 0..array.len() {
            out.push(array.value(i).to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attach_query_show_describe_detach() {
    let Some(pg) = common::cluster() else { return };
    let session = Session::in_memory().unwrap();
    let dsn = pg.dsn("shop");
    run(
        &session,
        &format!("ATTACH '{dsn}' AS shop (TYPE postgres, SCHEMA 'public', READ_ONLY)"),
    )
    .await;

    assert_eq!(
        count(&run(&session, "SELECT count(*) FROM shop.orders").await),
        50_000
    );
    assert_eq!(
        count(&run(&session, "SELECT count(*) FROM shop.public.measurements").await),
        30_000
    );
    let cased = run(
        &session,
        "SELECT \"Name\" FROM shop.\"Other Schema\".\"Cased\" WHERE \"Id\" = 1",
    )
    .await;
    assert_eq!(strings(&cased, 0), vec!["one"]);

    // A self-join and a join of two tables read in one query.
    let joined = run(
        &session,
        "SELECT count(*) FROM shop.orders a JOIN shop.orders b ON a.id = b.id + 1 \
         JOIN shop.customer_totals c ON c.customer = a.customer",
    )
    .await;
    assert_eq!(count(&joined), 49_999);

    let tables = strings(&run(&session, "SHOW TABLES").await, 0);
    for table in [
        "orders",
        "all_types",
        "measurements",
        "big_orders",
        "we\"ird",
        "Cased",
    ] {
        assert!(tables.contains(&table.to_string()), "{table} in {tables:?}");
    }
    assert_eq!(
        tables.iter().filter(|t| *t == "orders").count(),
        1,
        "each table is listed once"
    );

    let described = run(&session, "DESCRIBE shop.orders").await;
    assert_eq!(
        strings(&described, 0),
        vec!["id", "customer", "total", "created", "note"]
    );

    let explain = strings(
        &run(&session, "EXPLAIN SELECT * FROM shop.orders WHERE id = 7").await,
        1,
    )
    .join("\n");
    assert!(explain.contains("PostgresScanExec"), "{explain}");
    assert!(!explain.contains("FilterExec"), "{explain}");

    let again = session
        .sql(&format!("ATTACH '{dsn}' AS shop (TYPE postgres)"))
        .await;
    assert!(matches!(again, Err(QuiverError::Catalog(_))), "{again:?}");
    run(
        &session,
        &format!("ATTACH IF NOT EXISTS '{dsn}' AS shop (TYPE postgres)"),
    )
    .await;

    // USE: unqualified names read the attached schema (case as DuckDB: ignored), and the
    // database in use cannot be detached.
    run(&session, "USE SHOP").await;
    assert_eq!(
        count(&run(&session, "SELECT count(*) FROM orders WHERE id <= 10").await),
        10
    );
    let in_use = session
        .sql("DETACH shop")
        .await
        .err()
        .map(|e| e.to_string());
    assert!(
        in_use
            .as_deref()
            .is_some_and(|e| e.contains("it is the database in use")),
        "{in_use:?}"
    );
    run(&session, "USE main").await;
    let local = session.sql("SELECT count(*) FROM orders").await;
    assert!(matches!(local, Err(QuiverError::Catalog(_))), "{local:?}");

    run(&session, "DETACH shop").await;
    let gone = session.sql("SELECT count(*) FROM shop.orders").await;
    assert!(matches!(gone, Err(QuiverError::Catalog(_))), "{gone:?}");
    assert!(session.sql("DETACH shop").await.is_err());
    run(&session, "DETACH IF EXISTS shop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn detach_and_dropping_the_session_close_the_connections() {
    let Some(pg) = common::cluster() else { return };
    let backends = |app: &str| {
        pg.psql(
            "shop",
            &format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'"),
        )
        .parse::<i64>()
        .unwrap()
    };
    let gone = |app: &'static str| async move {
        for _ in 0..200 {
            if backends(app) == 0 {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    };
    // A query over two tables: the attach's connection, the snapshot's exporter and readers.
    let join =
        "SELECT count(*) FROM db.orders o JOIN db.customer_totals c ON c.customer = o.customer";
    let session = Session::in_memory().unwrap();
    let dsn = format!("{} application_name=quiver_detach", pg.dsn("shop"));
    run(&session, &format!("ATTACH '{dsn}' AS db (TYPE postgres)")).await;
    run(&session, join).await;
    assert!(backends("quiver_detach") > 0);
    run(&session, "DETACH db").await;
    assert!(
        gone("quiver_detach").await,
        "a detached database's connections stay open"
    );

    let session = Session::in_memory().unwrap();
    let dsn = format!("{} application_name=quiver_dropped", pg.dsn("shop"));
    run(&session, &format!("ATTACH '{dsn}' AS db (TYPE postgres)")).await;
    run(&session, join).await;
    assert!(backends("quiver_dropped") > 0);
    drop(session);
    assert!(
        gone("quiver_dropped").await,
        "a dropped session's connections stay open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn table_functions_work_through_the_session() {
    let Some(pg) = common::cluster() else { return };
    let session = Session::in_memory().unwrap();
    let dsn = pg.dsn("shop");
    let batches = run(
        &session,
        &format!(
            "SELECT count(*) FROM postgres_scan_pushdown('{dsn}', 'public', 'orders', pages_per_task => 20) \
             WHERE customer = 5"
        ),
    )
    .await;
    assert_eq!(
        count(&batches).to_string(),
        pg.psql("shop", "SELECT count(*) FROM orders WHERE customer = 5")
    );
    let error = session
        .sql("SELECT * FROM postgres_scan('host=/nonexistent port=1 user=x password=topsecret', 'public', 't')")
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.contains("cannot connect"), "{error}");
    assert!(!error.contains("topsecret"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insert_streams_through_copy_in_one_transaction() {
    let Some(pg) = common::cluster() else { return };
    pg.psql(
        "shop",
        "CREATE TABLE sink_writes (id int PRIMARY KEY, name text, amount numeric(10, 2), day date, \
         flag bool, at timestamptz, payload bytea)",
    );
    let session = Session::in_memory().unwrap();
    let dsn = pg.dsn("shop");
    run(&session, &format!("ATTACH '{dsn}' AS rw (TYPE postgres)")).await;
    run(
        &session,
        "INSERT INTO rw.public.sink_writes (id, name, amount, day, flag, payload) \
         SELECT value, 'name ' || value, value / 4.0, DATE '2024-01-01' + CAST(value AS INT), \
                value % 2 = 0, CAST('x' AS BYTEA) \
         FROM generate_series(1, 1000)",
    )
    .await;
    assert_eq!(
        pg.psql(
            "shop",
            "SELECT count(*), sum(amount), max(day), count(*) FILTER (WHERE flag), min(name) FROM sink_writes"
        ),
        "1000|125125.00|2026-09-27|500|name 1"
    );
    // Reading back through quiver gives the same values.
    let back = run(&session, "SELECT sum(amount) FROM rw.public.sink_writes").await;
    assert_eq!(strings(&back, 0), vec!["125125.00".to_string()],);

    // A duplicate key at the end of a large insert fails it, and nothing of it is written.
    let failed = match session
        .sql(
            "INSERT INTO rw.public.sink_writes (id) \
             SELECT value FROM generate_series(1001, 60000) UNION ALL SELECT 5",
        )
        .await
    {
        Ok(result) => result.collect().await.err(),
        Err(error) => Some(error),
    };
    let failed = failed.expect("the duplicate key must fail the INSERT");
    assert!(failed.to_string().contains("duplicate key"), "{failed}");
    assert_eq!(pg.psql("shop", "SELECT count(*) FROM sink_writes"), "1000");

    // A READ_ONLY attachment refuses to write.
    run(
        &session,
        &format!("ATTACH '{dsn}' AS ro (TYPE postgres, READ_ONLY)"),
    )
    .await;
    let refused = match session
        .sql("INSERT INTO ro.public.sink_writes (id) VALUES (99999)")
        .await
    {
        Ok(result) => result.collect().await.err(),
        Err(error) => Some(error),
    };
    let refused = refused.expect("READ_ONLY must refuse");
    assert!(refused.to_string().contains("READ_ONLY"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insert_leaves_the_columns_it_omits_to_their_postgres_defaults() {
    let Some(pg) = common::cluster() else { return };
    pg.psql(
        "shop",
        "CREATE TABLE defaults_kept (id serial PRIMARY KEY, name text NOT NULL, \
         status text DEFAULT 'new', code int GENERATED ALWAYS AS IDENTITY (START WITH 100), \
         note text, at timestamptz NOT NULL DEFAULT now())",
    );
    let session = Session::in_memory().unwrap();
    let dsn = pg.dsn("shop");
    run(&session, &format!("ATTACH '{dsn}' AS dk (TYPE postgres)")).await;
    // The serial, the identity (which refuses any value), the text default and now() are
    // filled by Postgres; a column without a default is NULL.
    run(
        &session,
        "INSERT INTO dk.public.defaults_kept (name) VALUES ('a'), ('b')",
    )
    .await;
    // A named column keeps the value given, NULL included, wherever it stands in the list.
    run(
        &session,
        "INSERT INTO dk.public.defaults_kept (status, name) \
         SELECT CASE WHEN value = 1 THEN 'done' END, 'c' || value FROM generate_series(1, 2)",
    )
    .await;
    // The table's rows from `first_id` on, as id:name:status:code:note:fresh.
    let rows_from = |first_id: u32| {
        pg.psql(
            "shop",
            &format!(
                "SELECT string_agg(concat_ws(':', id, name, coalesce(status, 'NULL'), code, \
                 coalesce(note, 'NULL'), at > now() - interval '1 hour'), ',' ORDER BY id) \
                 FROM defaults_kept WHERE id >= {first_id}"
            ),
        )
    };
    assert_eq!(
        rows_from(1),
        "1:a:new:100:NULL:t,2:b:new:101:NULL:t,3:c1:done:102:NULL:t,4:c2:NULL:103:NULL:t"
    );
    // DEFAULT in VALUES, without a column list: a column DEFAULT in every row is left to
    // Postgres as an omitted one is.
    run(
        &session,
        "INSERT INTO dk.public.defaults_kept VALUES \
         (DEFAULT, 'd', 'open', DEFAULT, 'n1', DEFAULT), \
         (DEFAULT, 'e', 'held', DEFAULT, NULL, DEFAULT)",
    )
    .await;
    assert_eq!(rows_from(5), "5:d:open:104:n1:t,6:e:held:105:NULL:t");
    // Postgres's defaults are server-side: a column left to one in some rows only is refused,
    // and nothing is written.
    let error = session
        .sql(
            "INSERT INTO dk.public.defaults_kept (name, status) \
             VALUES ('f', DEFAULT), ('g', 'set')",
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.contains("column \"status\" of dk.public.defaults_kept is DEFAULT in some"),
        "{error}"
    );
    assert_eq!(pg.psql("shop", "SELECT count(*) FROM defaults_kept"), "6");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_table_as_writes_a_new_postgres_table() {
    let Some(pg) = common::cluster() else { return };
    let session = Session::in_memory().unwrap();
    let dsn = pg.dsn("shop");
    run(&session, &format!("ATTACH '{dsn}' AS ctas (TYPE postgres)")).await;
    run(
        &session,
        "CREATE TABLE ctas.public.daily_totals AS \
         SELECT created AS day, count(*) AS orders, sum(total) AS revenue, max(note) AS last_note \
         FROM ctas.public.orders GROUP BY created",
    )
    .await;
    assert_eq!(
        pg.psql(
            "shop",
            "SELECT count(*), sum(orders), sum(revenue) FROM daily_totals"
        ),
        pg.psql(
            "shop",
            "SELECT count(DISTINCT created), count(*), sum(total) FROM orders"
        )
    );
    // The new table is visible through the attachment, under both names.
    assert_eq!(
        count(&run(&session, "SELECT count(*) FROM ctas.daily_totals").await),
        366
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn call_postgres_attach_makes_a_schemas_tables_local() {
    let Some(pg) = common::cluster() else { return };
    let session = Session::in_memory().unwrap();
    let dsn = pg.dsn("shop");
    run(&session, &format!("CALL postgres_attach('{dsn}')")).await;
    assert_eq!(
        count(&run(&session, "SELECT count(*) FROM orders").await).to_string(),
        pg.psql("shop", "SELECT count(*) FROM orders")
    );
    assert_eq!(
        count(
            &run(
                &session,
                "SELECT count(*) FROM main.measurements WHERE id > 10"
            )
            .await
        )
        .to_string(),
        pg.psql("shop", "SELECT count(*) FROM measurements WHERE id > 10")
    );
    let tables = strings(&run(&session, "SHOW TABLES").await, 0);
    assert!(tables.contains(&"orders".to_string()), "{tables:?}");

    // A second call would shadow what is there: refused as a whole unless overwrite=true.
    let again = session
        .sql(&format!("CALL postgres_attach('{dsn}')"))
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        again.contains("overwrite=true") && again.contains("orders"),
        "{again}"
    );
    run(
        &session,
        &format!("CALL postgres_attach('{dsn}', overwrite=true, filter_pushdown=false)"),
    )
    .await;
    let explain = strings(
        &run(&session, "EXPLAIN SELECT * FROM orders WHERE id = 7").await,
        1,
    )
    .join("\n");
    assert!(explain.contains("FilterExec"), "{explain}");

    // Another schema into another local schema, mixed-case names kept.
    run(&session, "CREATE SCHEMA other").await;
    run(
        &session,
        &format!(
            "CALL postgres_attach('{dsn}', source_schema='Other Schema', sink_schema='other')"
        ),
    )
    .await;
    let cased = run(
        &session,
        "SELECT \"Name\" FROM other.\"Cased\" WHERE \"Id\" = 1",
    )
    .await;
    assert_eq!(strings(&cased, 0), vec!["one"]);

    for (sql, expected) in [
        (
            format!("CALL postgres_attach('{dsn}', source_schema='nope')"),
            "nope",
        ),
        (
            format!("CALL postgres_attach('{dsn}', sink_schema='nowhere')"),
            "nowhere",
        ),
    ] {
        let error = session
            .sql(&sql)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains(expected), "{sql}: {error}");
    }
}

/// `char(n)` columns read as Postgres' `::text` reads them: without the blank padding, so that
/// filters (pushed into the scan or not), joins, `LIKE`, `length` and `||` answer as Postgres
/// itself does (issue 59: TPC-H over the standard DDL returned no rows for Q3, Q5 and Q12).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn char_n_columns_answer_as_postgres_does() {
    let Some(pg) = common::cluster() else { return };
    let session = Session::in_memory().unwrap();
    let dsn = pg.dsn("shop");
    run(
        &session,
        &format!("ATTACH '{dsn}' AS shop (TYPE postgres, SCHEMA 'public', READ_ONLY)"),
    )
    .await;
    // `{s}` and `{l}` are the tables; every query means the same in both dialects. `{t}` is
    // `::text` in Postgres: LIKE alone is where Postgres does see the padding of `char(n)`
    // (its documentation, "Character Types"), and quiver, which reads the values as `::text`
    // does, matches patterns against the value without it.
    let queries = [
        "SELECT count(*) FROM {s} WHERE seg = 'BUILDING'",
        "SELECT count(*) FROM {s} WHERE seg IN ('BUILDING', 'MACHINERY') AND flag = 'R'",
        "SELECT count(*) FROM {s} WHERE seg <> 'BUILDING'",
        "SELECT count(*) FROM {s} WHERE seg{t} LIKE 'BUILD%' OR seg{t} LIKE '%ERY'",
        "SELECT count(*) FROM {s} WHERE code = ''",
        "SELECT count(*) FROM {s} WHERE seg || '|' = 'BUILDING|'",
        "SELECT sum(length(seg)), sum(length(code)) FROM {s}",
        "SELECT count(*) FROM {s} s JOIN {l} l ON s.seg = l.seg",
        "SELECT count(*) FROM {s} a JOIN {s} b ON a.seg = b.seg AND a.flag = b.flag WHERE a.id < 50",
        "SELECT CAST(seg AS VARCHAR) AS seg, count(*) FROM {s} GROUP BY 1 ORDER BY 1",
        "SELECT CAST(l.label AS VARCHAR) AS label, count(*) FROM {s} s JOIN {l} l ON s.seg = l.seg
         WHERE s.flag = 'A' GROUP BY 1 ORDER BY 1",
    ];
    for query in queries {
        let ours = query
            .replace("{s}", "shop.segments")
            .replace("{l}", "shop.segment_labels")
            .replace("{t}", "");
        let rows = psql_rows(&run(&session, &ours).await);
        let theirs = pg.psql(
            "shop",
            &query
                .replace("{s}", "segments")
                .replace("{l}", "segment_labels")
                .replace("{t}", "::text"),
        );
        assert_eq!(rows, theirs, "{query}");
    }
    // The values themselves carry no padding.
    let padded = run(
        &session,
        "SELECT count(*) FROM shop.segments WHERE seg LIKE '% ' OR code LIKE '% '",
    )
    .await;
    assert_eq!(count(&padded), 0);
}
