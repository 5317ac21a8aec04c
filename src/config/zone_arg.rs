//! A zone given on the command line: `--zone NAME=PATH[:ro|rw|staged]`
//! read into a [`CliZone`] (checked with the file's zones when loaded).

use super::error::ConfigError;
use super::model::Access;
use super::parse;

/// A zone given on the command line: `--zone NAME=PATH[:ro|rw|staged]`.
/// Always direct mode (PATH an existing directory, relative to the current
/// directory); without a suffix it is read-only, as a zone without `mode:`
/// in a file is; `:staged` is `rw` with `staged: true`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliZone {
    /// The argument as given, for errors.
    pub arg: String,
    pub name: String,
    pub path: String,
    pub access: Access,
    pub staged: bool,
}

impl CliZone {
    /// Parses `NAME=PATH[:ro|rw|staged]`. Whatever follows the last `:`
    /// is read as the mode unless it holds a `/`: an unknown one (`d:rx`)
    /// is an error naming the valid ones, not part of the path, so a typo
    /// never becomes a read-only zone on a path that happens to exist. A
    /// PATH that itself contains a `:` in its last part needs the mode
    /// written out (`d=./x:y:ro`, `d=./x:ro:rw`).
    pub fn parse(arg: &str) -> Result<CliZone, ConfigError> {
        let fail = |m: String| ConfigError {
            arg: Some(arg.to_owned()),
            ..ConfigError::new(None, None, "", m)
        };
        let Some((name, rest)) = arg.split_once('=') else {
            return Err(fail(
                "expected NAME=PATH[:ro|rw|staged], e.g. --zone docs=../docs:ro".to_owned(),
            ));
        };
        parse::check_name(name).map_err(fail)?;
        let (path, access, staged) = match rest.rsplit_once(':') {
            Some((p, "ro")) => (p, Access::Ro, false),
            Some((p, "rw")) => (p, Access::Rw, false),
            Some((p, "staged")) => (p, Access::Rw, true),
            Some((p, mode)) if !mode.contains('/') => {
                return Err(fail(format!(
                    "unknown mode ':{mode}' for zone '{name}': expected :ro, :rw or :staged \
                     (a PATH whose last part contains ':' needs the mode written out, \
                     e.g. --zone {name}={p}:{mode}:ro)"
                )));
            }
            _ => (rest, Access::Ro, false),
        };
        if path.is_empty() || path.contains('\0') {
            return Err(fail(format!(
                "zone '{name}' needs a directory: expected NAME=PATH[:ro|rw|staged], e.g. --zone {name}=.:rw"
            )));
        }
        Ok(CliZone {
            arg: arg.to_owned(),
            name: name.to_owned(),
            path: path.to_owned(),
            access,
            staged,
        })
    }
}
