//! `--sandbox best-effort|require|off`: the mode the operator asks for, as
//! the command line and the config file spell it.

use serde::{Deserialize, Serialize};

/// How the sandbox is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Enforce what the kernel supports and log what that was.
    #[default]
    BestEffort,
    /// Exit 1 unless the whole rule set is enforced.
    Require,
    /// No sandbox.
    Off,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::BestEffort => "best-effort",
            SandboxMode::Require => "require",
            SandboxMode::Off => "off",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_the_config_file() {
        #[derive(Deserialize)]
        struct F {
            sandbox: SandboxMode,
        }
        let f: F = toml::from_str("sandbox = \"best-effort\"").unwrap();
        assert_eq!(f.sandbox, SandboxMode::BestEffort);
        assert!(toml::from_str::<F>("sandbox = \"maybe\"").is_err());
    }

    /// What logs and `/status` show is the mode as the operator spells it:
    /// it parses back to the same mode, from the config file and the flag.
    #[test]
    fn each_mode_is_shown_as_it_is_spelt() {
        #[derive(Deserialize)]
        struct F {
            sandbox: SandboxMode,
        }
        use clap::ValueEnum;
        for mode in SandboxMode::value_variants() {
            let f: F = toml::from_str(&format!("sandbox = \"{}\"", mode.as_str())).unwrap();
            assert_eq!(f.sandbox, *mode);
            assert_eq!(SandboxMode::from_str(mode.as_str(), false), Ok(*mode));
        }
    }
}
