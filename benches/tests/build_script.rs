//! The build script stamps the commit without making cargo rebuild when only the git
//! index changes (a `git add`, a `git status` refreshing it), and still rebuilds when
//! HEAD moves, loose ref or packed.
//!
//! A scratch repository holds a tiny crate whose build script is weir-bench's own,
//! laid out as in weir (the crate one folder below the repository root); the test
//! builds it with the cargo running this test, offline (it has no dependencies).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("weir-bench-build-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let krate = root.join("stamp");
        std::fs::create_dir_all(krate.join("src")).unwrap();
        std::fs::write(
            krate.join("Cargo.toml"),
            "[package]\nname = \"stamp\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n[workspace]\n",
        )
        .unwrap();
        let build = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("build.rs")).unwrap();
        std::fs::write(krate.join("build.rs"), build).unwrap();
        std::fs::write(krate.join("src/main.rs"), "fn main() { print!(\"{}\", env!(\"WEIR_BENCH_COMMIT\")); }\n")
            .unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        let scratch = Self { root };
        scratch.git(&["init", "-q"]);
        scratch.git(&["add", "."]);
        scratch.git(&["commit", "-q", "-m", "first"]);
        scratch
    }

    fn run(&self, program: &str, args: &[&str], dir: &Path) -> Output {
        let out = Command::new(program)
            .args(args)
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", self.root.join("target"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "weir")
            .env("GIT_AUTHOR_EMAIL", "weir@example.invalid")
            .env("GIT_COMMITTER_NAME", "weir")
            .env("GIT_COMMITTER_EMAIL", "weir@example.invalid")
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    fn git(&self, args: &[&str]) -> String {
        String::from_utf8(self.run("git", args, &self.root).stdout).unwrap().trim().to_string()
    }

    /// Builds the crate; true when cargo compiled it or re-ran its build script
    /// (rather than finding it fresh).
    fn build(&self) -> bool {
        let out = self.run(env!("CARGO"), &["build", "--offline"], &self.root.join("stamp"));
        String::from_utf8_lossy(&out.stderr).contains("Compiling stamp")
    }

    fn stamped(&self) -> String {
        let exe = self.root.join("target/debug/stamp");
        String::from_utf8(self.run(exe.to_str().unwrap(), &[], &self.root).stdout).unwrap()
    }

    fn head(&self) -> String {
        self.git(&["rev-parse", "--short=12", "HEAD"])
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn index_changes_do_not_rebuild_and_commits_do() {
    let repo = Scratch::new("loose");
    assert!(repo.build());
    assert_eq!(repo.stamped(), repo.head());
    assert!(!repo.build(), "nothing changed: fresh");

    // What a busy shared checkout does all day: stage a file, ask for the status.
    std::fs::write(repo.root.join("notes.txt"), "staged, not committed\n").unwrap();
    repo.git(&["add", "notes.txt"]);
    repo.git(&["status", "--porcelain"]);
    assert!(!repo.build(), "a change to .git/index alone must not re-run the build script or relink");

    // A commit moves the branch: the stamp follows.
    repo.git(&["commit", "-q", "-m", "second"]);
    assert!(repo.build());
    assert_eq!(repo.stamped(), repo.head());
}

#[test]
fn packed_refs_and_detached_heads_are_stamped() {
    let repo = Scratch::new("packed");
    repo.git(&["pack-refs", "--all"]);
    assert!(repo.build());
    assert_eq!(repo.stamped(), repo.head(), "a packed ref");

    // A commit on a packed branch writes a loose ref next to where it would be.
    std::fs::write(repo.root.join("notes.txt"), "more\n").unwrap();
    repo.git(&["add", "notes.txt"]);
    repo.git(&["commit", "-q", "-m", "second"]);
    assert!(repo.build());
    assert_eq!(repo.stamped(), repo.head(), "a loose ref after a packed one");

    let first = repo.git(&["rev-parse", "HEAD~1"]);
    repo.git(&["checkout", "-q", "--detach", &first]);
    assert!(repo.build());
    assert_eq!(repo.stamped(), repo.head(), "a detached HEAD");
}
