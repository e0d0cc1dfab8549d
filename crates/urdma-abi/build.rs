//! Generate the kernel/user ABI from `kernel/urdma_abi.h`.
//!
//! The header is the one definition: `bindgen` turns its structures,
//! enums and constants into Rust (with layout tests that pin every size
//! and offset against clang's view of the same header), and the
//! `URDMA_IOC_*` request definitions, function-like macros that bindgen
//! cannot expand, are read from the header's text here and become
//! constants computed from the generated structures (`ioctls.rs`).
//!
//! The header includes only user-space kernel headers (`<linux/types.h>`,
//! `<linux/ioctl.h>`); `URDMA_ABI_INCLUDE` adds an include directory
//! searched first.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The header, relative to this crate.
const HEADER: &str = "../../kernel/urdma_abi.h";

fn main() {
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join(HEADER);
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-env-changed=URDMA_ABI_INCLUDE");
    let mut clang_args = Vec::new();
    if let Ok(dir) = env::var("URDMA_ABI_INCLUDE") {
        clang_args.push(format!("-I{dir}"));
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header(header.to_str().expect("a UTF-8 path"))
        .clang_args(&clang_args)
        .allowlist_type("urdma_.*")
        .allowlist_var("URDMA_.*")
        // The request encoding of the target (<asm-generic/ioctl.h>, or
        // the architecture's own <asm/ioctl.h>).
        .allowlist_var("_IOC_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .generate_comments(false)
        .layout_tests(true)
        .derive_default(true)
        .derive_debug(true)
        .derive_copy(true)
        .derive_eq(true)
        .use_core()
        .generate()
        .expect(
            "bindgen could not read kernel/urdma_abi.h: install libclang-dev and linux-libc-dev",
        );
    bindings
        .write_to_file(out.join("urdma_abi.rs"))
        .expect("cannot write the generated bindings");
    let text = std::fs::read_to_string(&header).expect("cannot read kernel/urdma_abi.h");
    std::fs::write(out.join("ioctls.rs"), ioctls(&text)).expect("cannot write ioctls.rs");
}

/// The Rust constants of the header's `#define URDMA_IOC_<NAME>
/// _IO{R,W,WR}(URDMA_IOC_MAGIC, <nr>, struct <type>)` lines. Any other
/// `URDMA_IOC_*` definition but the magic number fails the build, so that
/// no request is left out.
fn ioctls(header: &str) -> String {
    let mut out = String::new();
    let mut names = Vec::new();
    for line in header.lines() {
        let Some(def) = line.trim().strip_prefix("#define") else {
            continue;
        };
        let mut words = def.split_whitespace();
        let Some(name) = words.next().filter(|n| n.starts_with("URDMA_IOC_")) else {
            continue;
        };
        if name == "URDMA_IOC_MAGIC" {
            continue;
        }
        let value: String = words.collect();
        let parsed = value.split_once('(').and_then(|(mac, args)| {
            let dir = match mac {
                "_IOW" => "_IOC_WRITE",
                "_IOR" => "_IOC_READ",
                "_IOWR" => "_IOC_READ | _IOC_WRITE",
                _ => return None,
            };
            let args = args.strip_suffix(')')?;
            let mut args = args.split(',');
            let (magic, nr, ty) = (args.next()?, args.next()?, args.next()?);
            let ty = ty.strip_prefix("struct")?;
            let nr: u32 = nr.parse().ok()?;
            (magic == "URDMA_IOC_MAGIC" && args.next().is_none()).then_some((dir, nr, ty))
        });
        let Some((dir, nr, ty)) = parsed else {
            panic!("kernel/urdma_abi.h: {name} is not _IOR/_IOW/_IOWR(URDMA_IOC_MAGIC, nr, struct type)");
        };
        let _ = writeln!(
            out,
            "/// `{name}`: `{mac}(URDMA_IOC_MAGIC, {nr}, struct {ty})`.\n\
             pub const {name}: u32 = ioc({dir}, URDMA_IOC_MAGIC, {nr}, core::mem::size_of::<{ty}>());",
            mac = value.split_once('(').map_or("", |(m, _)| m),
        );
        names.push(name);
    }
    assert!(
        !names.is_empty(),
        "kernel/urdma_abi.h defines no URDMA_IOC_* request"
    );
    let _ = writeln!(
        out,
        "/// Every `URDMA_IOC_*` request of the header: its name and number.\n\
         pub const IOCTLS: &[(&str, u32)] = &[{}];",
        names
            .iter()
            .map(|n| format!("(\"{n}\", {n})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out
}
