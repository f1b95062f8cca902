//! Runs every `.slt` file under `test_files/` (a `harness = false` test binary).
//!
//! `cargo test -p quiver-sqllogictest --test sqllogictests -- [FILTER] [--complete]`:
//! FILTER keeps files whose name contains it; `--complete` rewrites expected results in place.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use quiver_sqllogictest::QuiverDb;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let complete = args.iter().any(|a| a == "--complete");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    // At run time, not env!(): a binary built by another checkout into the shared target
    // directory is reused as fresh, with that checkout's path baked in.
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let data_dir = root.join("data");
    let mut files: Vec<PathBuf> = match std::fs::read_dir(root.join("test_files")) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "slt"))
            .filter(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
            })
            .collect(),
        Err(error) => {
            eprintln!("cannot list test_files: {error}");
            return ExitCode::FAILURE;
        }
    };
    files.sort();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start a runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match runtime.block_on(run_file(file, &data_dir, complete)) {
            Ok(()) => {
                passed += 1;
                println!("ok      {name}");
            }
            Err(error) => {
                failed += 1;
                println!("FAILED  {name}\n{error}\n");
            }
        }
    }
    println!("sqllogictest: {passed} passed, {failed} failed");
    if failed > 0 || files.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn run_file(file: &Path, data_dir: &Path, complete: bool) -> Result<(), String> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let scratch_path = scratch.path().to_path_buf();
    let data_dir = data_dir.to_path_buf();
    let mut runner = sqllogictest::Runner::new(move || {
        let db = QuiverDb::new(&data_dir, &scratch_path);
        async move { db }
    });
    if complete {
        runner
            .update_test_file(
                file,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator,
            )
            .await
            .map_err(|e| e.to_string())
    } else {
        runner
            .run_file_async(file)
            .await
            .map_err(|e| e.display(true).to_string())
    }
}
