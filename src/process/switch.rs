//! The environment's on/off switches (`MTLS_SIDECAR_MALLOC_TRIM`,
//! `MTLS_SIDECAR_RELEASE_STARTUP`), read one way: a setting is off when it
//! says `off`, `0`, `false` or `no`, in any case and with spaces around it,
//! and on otherwise (unset included), so the same word means the same thing
//! on every switch.

/// Whether `setting` (the variable's value, `None` when unset) turns its
/// feature off.
pub fn is_off(setting: Option<&str>) -> bool {
    setting.is_some_and(|s| {
        matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "off" | "0" | "false" | "no"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::is_off;

    #[test]
    fn only_an_off_word_turns_a_switch_off() {
        for off in ["off", "0", "false", "no", " OFF ", "False", "NO\n"] {
            assert!(is_off(Some(off)), "{off:?}");
        }
        for on in [
            None,
            Some("on"),
            Some("1"),
            Some(""),
            Some("offf"),
            Some("true"),
        ] {
            assert!(!is_off(on), "{on:?}");
        }
    }
}
