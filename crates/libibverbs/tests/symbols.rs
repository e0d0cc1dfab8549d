//! The built libibverbs.so exports what libibverbs.so.1 exports: the
//! same symbols under the same versions (default and compatibility), the
//! soname, and nothing else, compared with the system's libibverbs.so.1
//! (which the build needs anyway, through libibverbs-dev).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// The cdylib: next to this test's deps directory (target/<profile>/) if
/// a build put it there, else built now into a target folder of its own
/// (`cargo test` alone does not produce the cdylib).
fn built_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let here = profile_dir.join("libibverbs.so");
    if here.exists() {
        return here;
    }
    let target = profile_dir.parent().unwrap().join("symbols-check");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "libibverbs", "--target-dir"])
        .arg(&target)
        .status()
        .expect("cannot run cargo");
    assert!(status.success(), "building libibverbs failed");
    target.join("debug/libibverbs.so")
}

/// Defined dynamic symbols as "VERSION name" ("(VERSION)" when hidden).
fn exports(lib: &Path) -> Option<BTreeSet<String>> {
    let out = Command::new("objdump").arg("-T").arg(lib).output().ok()?;
    assert!(out.status.success(), "objdump failed on {}", lib.display());
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .filter(|l| !l.contains("*UND*") && !l.contains("*ABS*"))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3 && f[f.len() - 2].contains("IBVERBS"))
                    .then(|| format!("{} {}", f[f.len() - 2], f[f.len() - 1]))
            })
            .collect(),
    )
}

fn all_defined(lib: &Path) -> Vec<String> {
    let out = Command::new("objdump").arg("-T").arg(lib).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.contains(" g ") && !l.contains("*UND*") && !l.contains("*ABS*"))
        .map(str::to_string)
        .collect()
}

#[test]
fn exports_match_libibverbs() {
    let ours = built_lib();
    assert!(ours.exists(), "{} not built", ours.display());
    let got = exports(&ours).expect("objdump (binutils) is needed for this test");
    // Every defined symbol is versioned: nothing of Rust's leaks out.
    // Beside libibverbs' nodes, a private one: the device's CM for urdma's
    // librdmacm.
    let defined = all_defined(&ours);
    let stray: Vec<&String> = defined
        .iter()
        .filter(|l| !l.contains("IBVERBS") && !l.contains("URDMA_PRIVATE_1"))
        .collect();
    assert!(stray.is_empty(), "unversioned exports: {stray:#?}");
    for f in [
        "urdma_cm_call",
        "urdma_cm_next_event",
        "urdma_cm_local_addr",
    ] {
        let found = defined
            .iter()
            .any(|l| l.ends_with(&format!("URDMA_PRIVATE_1 {f}")));
        assert!(found, "{f}@@URDMA_PRIVATE_1 missing");
    }
    assert!(!got.contains("IBVERBS_1.1 ibv_post_send"));
    assert!(got.contains("IBVERBS_1.1 ibv_get_device_list"));
    assert!(got.contains("(IBVERBS_1.0) ibv_get_device_list"));
    assert!(got.contains("IBVERBS_PRIVATE_34 verbs_register_driver_34"));
    assert!(got.contains("IBVERBS_1.11 _ibv_query_gid_ex"));

    let dynamic = Command::new("objdump")
        .arg("-p")
        .arg(&ours)
        .output()
        .unwrap();
    let p = String::from_utf8(dynamic.stdout).unwrap();
    assert!(p.contains("SONAME               libibverbs.so.1"), "{p}");
    for node in ["IBVERBS_1.0", "IBVERBS_1.14", "IBVERBS_PRIVATE_34"] {
        assert!(p.contains(node), "version node {node} missing");
    }

    assert!(
        Path::new(SYSTEM_LIB).exists(),
        "{SYSTEM_LIB} (Debian's libibverbs1) is needed for the comparison"
    );
    let want = exports(Path::new(SYSTEM_LIB)).unwrap();
    let missing: Vec<&String> = want.difference(&got).collect();
    let extra: Vec<&String> = got.difference(&want).collect();
    assert!(missing.is_empty(), "missing: {missing:#?}");
    assert!(extra.is_empty(), "not in libibverbs: {extra:#?}");
}
