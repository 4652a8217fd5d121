//! The config file: any text through `FileSpec::parse` (TOML, then
//! validation into `Settings`). It must never panic, and what it accepts
//! must lie within the bounds the README promises.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mtls_sidecar::config::FileSpec;
use mtls_sidecar_fuzz::config::{check_settings, quoted};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match FileSpec::parse(text, Path::new("fuzz.toml")) {
        Ok(settings) => check_settings(&settings),
        Err(e) => {
            let shown = e.to_string();
            assert!(
                shown.contains("fuzz.toml"),
                "error without the file: {shown}"
            );
            // Naming the file's keys instead of the flags rewrites the
            // message, never a value it quotes from the file.
            if let Ok(spec) = toml::from_str::<FileSpec>(text) {
                if let Err(raw) = spec.validate() {
                    for quoted in quoted(&raw.to_string()) {
                        assert!(shown.contains(&quoted), "{quoted} became: {shown}");
                    }
                }
            }
        }
    }
});
