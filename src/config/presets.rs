//! The presets: project configs for the seed modes and authorizers that
//! zones can express, embedded so an installed binary has them. The files
//! are `config/presets/NAME.yaml` in the repository; `--preset NAME`
//! (or `--config preset:NAME`) loads the embedded copy, whose paths are
//! taken from the current directory.

/// A preset's name prefix in `--config` and in a mount's record.
pub const PREFIX: &str = "preset:";

/// One preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    pub text: &'static str,
    /// Mounting it needs `--danger`.
    pub danger: bool,
}

/// Every preset, in the README's order.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "read-only",
        text: include_str!("../../config/presets/read-only.yaml"),
        danger: false,
    },
    Preset {
        name: "workspace-write",
        text: include_str!("../../config/presets/workspace-write.yaml"),
        danger: false,
    },
    Preset {
        name: "full",
        text: include_str!("../../config/presets/full.yaml"),
        danger: true,
    },
    Preset {
        name: "sandbox",
        text: include_str!("../../config/presets/sandbox.yaml"),
        danger: false,
    },
    Preset {
        name: "permissive-sandbox",
        text: include_str!("../../config/presets/permissive-sandbox.yaml"),
        danger: false,
    },
    Preset {
        name: "auto-approve",
        text: include_str!("../../config/presets/auto-approve.yaml"),
        danger: true,
    },
    Preset {
        name: "code-unit",
        text: include_str!("../../config/presets/code-unit.yaml"),
        danger: false,
    },
];

/// The preset `--config` names (`preset:NAME`), if it names one;
/// `Err` with the known names when the name is unknown.
pub fn named(config: &std::path::Path) -> Option<Result<&'static Preset, String>> {
    let name = config.to_str()?.strip_prefix(PREFIX)?;
    Some(PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        format!(
            "unknown preset '{name}'; the presets are {}",
            names.join(", ")
        )
    }))
}
