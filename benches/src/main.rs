//! `weir-bench`: see the library docs and `weir-bench --help`.

fn main() {
    let code = weir_bench::cli::main(std::env::args_os());
    std::process::exit(code);
}
