//! The `zonemount` binary: everything lives in the library's `cli` module.
fn main() -> std::process::ExitCode {
    // Linux 5.11: on an older kernel the fds it inherited stay inheritable.
    if let Err(e) = zonemount::fork::cloexec_inherited() {
        eprintln!("zonemount: warning: cannot mark inherited fds close-on-exec: {e}");
    }
    zonemount::cli::run()
}
