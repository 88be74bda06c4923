//! The config loader on arbitrary text: never a panic, always a config or an error.
#![no_main]

#[path = "../src/targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::config(data));
