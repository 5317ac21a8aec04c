//! The config room's one error: file (or `--zone` argument), line, field
//! path and message, shown as one line.

use std::fmt;
use std::path::PathBuf;

/// A configuration error. Displays as one line:
/// `project.yaml:7: sandbox.zones.data.mode: expected 'ro' or 'rw', got 'rx'`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// As given (`None` for the embedded default).
    pub file: Option<PathBuf>,
    /// The `--zone` argument at fault, as given (then `file` is `None`).
    pub arg: Option<String>,
    pub line: Option<usize>,
    /// Dotted path to the offending field; empty for YAML syntax errors.
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(
        file: Option<PathBuf>,
        line: Option<usize>,
        field: &str,
        message: impl Into<String>,
    ) -> Self {
        // One line, whatever a parser or the OS put into the text.
        let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        Self {
            file,
            arg: None,
            line,
            field: one_line(field),
            message: one_line(&message.into()),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(arg) = &self.arg {
            // A `--zone` has no file, line or field: the argument says it.
            return write!(f, "--zone {arg}: {}", self.message);
        }
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{}:{line}: ", file.display())?,
            (Some(file), None) => write!(f, "{}: ", file.display())?,
            (None, Some(line)) => write!(f, "line {line}: ")?,
            (None, None) => f.write_str("default config: ")?,
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}
