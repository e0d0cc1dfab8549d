//! Cross-check of the request numbers with the C macros: gcc compiles a
//! program against `kernel/urdma_abi.h` that prints every `URDMA_IOC_*`
//! as `_IOW`/`_IOWR` expand it, and each must equal the number computed
//! in Rust from the generated structure's size.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use urdma_abi::IOCTLS;

#[test]
fn gcc_agrees_with_the_request_numbers() {
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernel/urdma_abi.h");
    let mut program = format!(
        "#include <stdio.h>\n#include \"{}\"\nint main(void)\n{{\n",
        header.display()
    );
    for (name, _) in IOCTLS {
        let _ = writeln!(
            program,
            "\tprintf(\"{name} %#x\\n\", (unsigned int){name});"
        );
    }
    program.push_str("\treturn 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("urdma-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("ioctls.c"), dir.join("ioctls"));
    std::fs::write(&src, program).unwrap();
    let status = Command::new("gcc")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc is needed for the request number cross-check");
    assert!(status.success(), "gcc could not build the request program");
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let got: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let want: Vec<String> = IOCTLS
        .iter()
        .map(|(name, nr)| format!("{name} {nr:#x}"))
        .collect();
    assert_eq!(got, want);
}
