//! A request's descriptors from arbitrary protobuf bytes, checked, matched and
//! answered: never a panic, bounded.
#![no_main]

#[path = "../src/targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::request(data));
