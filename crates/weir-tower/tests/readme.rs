//! Every Rust block of the README is the code of an example that `cargo test`
//! builds: the block is the example file from its first `use` on.

#[test]
fn the_readmes_rust_blocks_are_examples_that_compile() {
    let readme = include_str!("../README.md");
    let examples = [include_str!("../examples/in_your_server.rs"), include_str!("../examples/grpc.rs")];
    let bodies: Vec<&str> = examples.iter().map(|file| &file[file.find("\nuse ").expect("a `use`") + 1..]).collect();
    let mut blocks = 0;
    let mut rest = readme;
    while let Some(at) = rest.find("```rust") {
        let block = &rest[at..];
        let code_start = block.find('\n').expect("a line after the fence") + 1;
        let code_len = block[code_start..].find("```").expect("a closing fence");
        let code = &block[code_start..code_start + code_len];
        assert!(bodies.contains(&code), "a README block that is no example's code:\n{code}");
        blocks += 1;
        rest = &block[code_start + code_len + 3..];
    }
    assert_eq!(blocks, examples.len(), "each example shown once");
}
