//! Link libibverbs.so.1: soname, the libibverbs version nodes, and the C
//! shim that holds the entry points Rust cannot define (the IBVERBS_1.0
//! compatibility symbols and the variadic provider helpers).
//!
//! Every exported symbol carries its version through a `.symver`
//! directive next to its definition (`src/lib.rs`, `src/compat.c`); the
//! version script only declares the nodes, their order, and hides
//! everything else.

use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The version nodes of libibverbs.so.1, each with the node it extends.
const NODES: &[(&str, Option<&str>)] = &[
    ("IBVERBS_1.0", None),
    ("IBVERBS_1.1", Some("IBVERBS_1.0")),
    ("IBVERBS_1.5", Some("IBVERBS_1.1")),
    ("IBVERBS_1.6", Some("IBVERBS_1.5")),
    ("IBVERBS_1.7", Some("IBVERBS_1.6")),
    ("IBVERBS_1.8", Some("IBVERBS_1.7")),
    ("IBVERBS_1.9", Some("IBVERBS_1.8")),
    ("IBVERBS_1.10", Some("IBVERBS_1.9")),
    ("IBVERBS_1.11", Some("IBVERBS_1.10")),
    ("IBVERBS_1.12", Some("IBVERBS_1.11")),
    ("IBVERBS_1.13", Some("IBVERBS_1.12")),
    ("IBVERBS_1.14", Some("IBVERBS_1.13")),
    ("IBVERBS_PRIVATE_34", None),
    ("URDMA_PRIVATE_1", None),
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/compat.c");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));

    cc::Build::new()
        .file("src/compat.c")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .flag_if_supported("-Wmissing-prototypes")
        .cargo_metadata(false)
        .compile("urdma_compat");
    // Nothing in Rust refers to the shim: link all of it.
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static:+whole-archive=urdma_compat");

    // The IBVERBS_1.0 compatibility names must be global in their node
    // for their `name@IBVERBS_1.0` aliases to be exported.
    let shim = std::fs::read_to_string("src/compat.c").expect("src/compat.c");
    let compat = compat_names(&shim);
    let mut map = String::new();
    for (i, (node, parent)) in NODES.iter().enumerate() {
        let local = if i == 0 {
            let names: String = compat.iter().map(|n| format!("\t\t{n};\n")).collect();
            format!("\tglobal:\n{names}\tlocal: *;\n")
        } else {
            String::new()
        };
        let parent = parent.map(|p| format!(" {p}")).unwrap_or_default();
        let _ = writeln!(map, "{node} {{\n{local}}}{parent};");
    }
    let map_path = out.join("libibverbs.map");
    std::fs::write(&map_path, map).expect("cannot write the version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}

/// Names the shim binds to IBVERBS_1.0: each `COMPAT_*(name);` line and
/// each one-line `SYMVER(impl, name, "IBVERBS_1.0");`.
fn compat_names(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Lines of macro definitions (continued, or pasting tokens) are skipped.
    let in_macro = |l: &&str| l.ends_with('\\') || l.contains("##");
    for line in src.lines().map(str::trim).filter(|l| !in_macro(l)) {
        let inner = |l: &str| {
            l.split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(a, _)| a.to_string())
        };
        if line.starts_with("COMPAT_") && line.ends_with(");") {
            if let Some(n) = inner(line) {
                out.push(n.trim().to_string());
            }
        } else if line.starts_with("SYMVER(") && line.contains("\"IBVERBS_1.0\"") {
            if let Some(args) = inner(line) {
                if let Some(n) = args.split(',').nth(1) {
                    out.push(n.trim().to_string());
                }
            }
        }
    }
    out
}
