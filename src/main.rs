//! The `zonemount` binary: everything lives in the library's `cli` module.
fn main() -> std::process::ExitCode {
    zonemount::cli::run()
}
