//! The README's first example is the code of `examples/readme.rs`, which `cargo test
//! --features axum` builds: the block after its two comment lines is the example file
//! from its first `use` on.

#[test]
fn the_readmes_first_example_is_the_example_file() {
    let readme = include_str!("../README.md");
    let example = include_str!("../examples/readme.rs");
    let body = &example[example.find("\nuse ").expect("a `use`") + 1..];
    let block = &readme[readme.find("```rust,ignore\n").expect("the first example") + "```rust,ignore\n".len()..];
    let block = &block[..block.find("```").expect("a closing fence")];
    let code = block.splitn(3, '\n').nth(2).expect("two comment lines, then the code");
    assert_eq!(code, body, "README.md's first example differs from examples/readme.rs");
}
