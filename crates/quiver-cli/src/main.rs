//! The `quiver` binary: see [`quiver_cli`].

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() -> std::process::ExitCode {
    quiver_cli::run(std::env::args_os())
}
