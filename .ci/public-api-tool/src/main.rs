//! Prints the public API of a crate, as `cargo public-api --all-features --omit
//! blanket-impls` prints it: from rustdoc's JSON (nightly), every feature on, blanket
//! impls left out and auto traits kept. The one argument is the crate's rustdoc JSON
//! (a `.json` file, as `cargo +nightly doc` writes it with `--output-format json`),
//! or its manifest, whose JSON is then built here.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [manifest] = args.as_slice() else {
        eprintln!("usage: weir-public-api <the crate's rustdoc JSON, or its Cargo.toml>");
        return ExitCode::from(2);
    };
    let json = if manifest.ends_with(".json") {
        PathBuf::from(manifest)
    } else {
        match rustdoc_json::Builder::default()
            .toolchain("nightly")
            .manifest_path(manifest)
            .all_features(true)
            .silent(true)
            .build()
        {
            Ok(json) => json,
            Err(error) => {
                eprintln!("weir-public-api: rustdoc JSON of {manifest}: {error}");
                return ExitCode::FAILURE;
            }
        }
    };
    match public_api::Builder::from_rustdoc_json(&json).omit_blanket_impls(true).build() {
        Ok(api) => {
            print!("{api}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("weir-public-api: reading {}: {error}", json.display());
            ExitCode::FAILURE
        }
    }
}
