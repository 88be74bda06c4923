//! Records the commit and compiler the benchmark binary was built from, so every
//! figure it prints names them.
//!
//! The commit is read from the files under `.git` (HEAD, then the ref it names, loose
//! or packed), without running git, and the script re-runs only when HEAD or that ref
//! moves. It does not ask whether the tree is dirty: that needs `git status`, which
//! reads (and rewrites) `.git/index`, and a build script watching the index re-ran,
//! and relinked the fat-LTO binary, after every `git add`. The binary asks git at
//! run time instead (see `report::Machine`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where git keeps HEAD (`git_dir`) and the refs (`common_dir`; they differ in a
/// linked worktree).
struct Repo {
    git_dir: PathBuf,
    common_dir: PathBuf,
}

fn find_repo(start: &Path) -> Option<Repo> {
    let dot_git = start.ancestors().map(|dir| dir.join(".git")).find(|p| p.exists())?;
    let git_dir = if dot_git.is_file() {
        // A linked worktree or a submodule: `gitdir: <path>`.
        let text = std::fs::read_to_string(&dot_git).ok()?;
        let target = text.trim().strip_prefix("gitdir:")?.trim();
        dot_git.parent()?.join(target)
    } else {
        dot_git
    };
    let common_dir = match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(text) => git_dir.join(text.trim()),
        Err(_) => git_dir.clone(),
    };
    Some(Repo { git_dir, common_dir })
}

fn watch(path: &Path) {
    // A path that does not exist would make cargo re-run the script on every build.
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// The commit HEAD points at, watching every file that decides it.
fn head_commit(repo: &Repo) -> Option<String> {
    let head_path = repo.git_dir.join("HEAD");
    watch(&head_path);
    let head = std::fs::read_to_string(&head_path).ok()?;
    let head = head.trim();
    let Some(reference) = head.strip_prefix("ref:").map(str::trim) else {
        return Some(head.to_string()); // detached
    };
    let loose = repo.common_dir.join(reference);
    let packed = repo.common_dir.join("packed-refs");
    watch(&packed);
    // The ref's folder too: a commit on a packed ref creates the loose file there.
    if let Some(folder) = loose.parent() {
        watch(folder);
    }
    if let Ok(hash) = std::fs::read_to_string(&loose) {
        return Some(hash.trim().to_string());
    }
    std::fs::read_to_string(&packed).ok()?.lines().find_map(|line| {
        let (hash, name) = line.split_once(' ')?;
        (name.trim() == reference).then(|| hash.to_string())
    })
}

fn main() {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_default();
    let commit = find_repo(&manifest)
        .and_then(|repo| head_commit(&repo))
        .filter(|hash| hash.len() >= 12 && hash.chars().all(|c| c.is_ascii_hexdigit()))
        .map_or_else(|| "unknown".to_string(), |hash| hash[..12].to_string());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc = Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(|| "unknown".into(), |out| String::from_utf8_lossy(&out.stdout).trim().to_string());
    println!("cargo:rustc-env=WEIR_BENCH_COMMIT={commit}");
    println!("cargo:rustc-env=WEIR_BENCH_RUSTC={rustc}");
    println!("cargo:rerun-if-changed=build.rs");
}
