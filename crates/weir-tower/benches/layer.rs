//! The middleware benchmark (see BENCHMARKS.md, "HTTP middleware").

fn main() {}
