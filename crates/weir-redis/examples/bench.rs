//! Benchmark of the Redis back ends (written below).

fn main() {}
