//! Assertions on outcomes: errno names and C-locale texts, and checks that a
//! call or a shell command succeeded or failed with exactly the errno wanted.

use std::fmt::Debug;
use std::io;

use super::run::Out;

/// The errno of a failed call; None on success or a non-OS error.
pub fn errno_of<T>(r: &io::Result<T>) -> Option<i32> {
    r.as_ref().err().and_then(io::Error::raw_os_error)
}

/// A readable name for an errno: the library's own (as the ledger writes
/// it), or the number.
pub fn errno_name(e: i32) -> String {
    match zonemount::error::errno_name(e) {
        "EOTHER" => format!("errno {e}"),
        name => name.to_string(),
    }
}

/// The C-locale strerror text (what `sh`, coreutils, git print).
pub fn strerror(e: i32) -> String {
    let s = io::Error::from_raw_os_error(e).to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn describe_result<T: Debug>(r: &io::Result<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => match e.raw_os_error() {
            Some(n) => format!("{} ({e})", errno_name(n)),
            None => format!("non-OS error: {e}"),
        },
    }
}

/// Assert `r` failed with exactly `errno`.
#[track_caller]
pub fn assert_errno<T: Debug>(r: io::Result<T>, errno: i32) {
    assert_eq!(
        errno_of(&r),
        Some(errno),
        "expected {}, got {}",
        errno_name(errno),
        describe_result(&r)
    );
}

/// Assert `r` has the wanted outcome: `None` = success, `Some(e)` = failed
/// with `e`. Returns whether it succeeded. `ctx` names the case.
#[track_caller]
pub fn expect_outcome<T: Debug>(r: io::Result<T>, want: Option<i32>, ctx: &str) -> bool {
    match want {
        None => {
            assert!(
                r.is_ok(),
                "{ctx}: expected success, got {}",
                describe_result(&r)
            );
            true
        }
        Some(e) => {
            assert_eq!(
                errno_of(&r),
                Some(e),
                "{ctx}: expected {}, got {}",
                errno_name(e),
                describe_result(&r)
            );
            false
        }
    }
}

/// Same as [`expect_outcome`] for a shell command: on refusal the command
/// must fail and its stderr carry the strerror text of `e`.
#[track_caller]
pub fn expect_sh_outcome(out: &Out, want: Option<i32>, ctx: &str) -> bool {
    match want {
        None => {
            assert!(
                out.success(),
                "{ctx}: expected success, got {}",
                out.describe()
            );
            true
        }
        Some(e) => {
            assert_sh_errno(out, e, ctx);
            false
        }
    }
}

/// A shell command failed, and its stderr names errno `e`.
#[track_caller]
pub fn assert_sh_errno(out: &Out, e: i32, ctx: &str) {
    let text = strerror(e);
    assert!(
        !out.success() && out.stderr.contains(&text),
        "{ctx}: expected failure with {} ({text:?}), got {}",
        errno_name(e),
        out.describe()
    );
}
