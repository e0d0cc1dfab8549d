//! The built librdmacm.so exports what Debian's librdmacm.so.1 exports:
//! the same functions under the same versions, the soname, and nothing
//! else.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

/// The cdylib: next to this test's deps directory if a build put it
/// there, else built now into a target folder of its own.
fn built_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let here = profile_dir.join("librdmacm.so");
    if here.exists() {
        return here;
    }
    let target = profile_dir.parent().unwrap().join("rdmacm-symbols-check");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "librdmacm", "--target-dir"])
        .arg(&target)
        .status()
        .expect("cannot run cargo");
    assert!(status.success(), "building librdmacm failed");
    target.join("debug/librdmacm.so")
}

/// Defined dynamic symbols as "VERSION name".
fn defined(lib: &Path) -> BTreeSet<String> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump (binutils)");
    assert!(out.status.success(), "objdump failed on {}", lib.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.contains(" g ") && !l.contains("*UND*") && !l.contains("*ABS*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3).then(|| format!("{} {}", f[f.len() - 2], f[f.len() - 1]))
        })
        .collect()
}

#[test]
fn exports_match_librdmacm() {
    let ours = built_lib();
    let got = defined(&ours);
    assert!(got.contains("RDMACM_1.0 rdma_connect"));
    assert!(got.contains("RDMACM_1.2 rdma_establish"));
    assert!(got.contains("RDMACM_1.3 rdma_reject_ece"));
    let p = Command::new("objdump")
        .arg("-p")
        .arg(&ours)
        .output()
        .unwrap();
    let p = String::from_utf8(p.stdout).unwrap();
    assert!(p.contains("SONAME               librdmacm.so.1"), "{p}");
    assert!(
        Path::new(SYSTEM_LIB).exists(),
        "{SYSTEM_LIB} (Debian's librdmacm1) is needed for the comparison"
    );
    let theirs = defined(Path::new(SYSTEM_LIB));
    let missing: Vec<_> = theirs.difference(&got).collect();
    let extra: Vec<_> = got.difference(&theirs).collect();
    assert!(missing.is_empty(), "missing: {missing:#?}");
    assert!(extra.is_empty(), "not in Debian's library: {extra:#?}");
}
