// Inputs found by bench/fuzz_opt.py (--seed 3001: a truncated dense_resource blob) whose file
// metadata made the upstream parser assert ("shouldn't advance past EOF or errors"): it takes a
// resource entry's value token without checking it. mlircap-opt rejects a value that does not
// lex with a diagnostic and exits 1 instead of aborting; a well-formed resource still parses.
// RUN: printf 'module {\n}\n{-#\n  dialect_resources: {\n    builtin: {\n      r: "0x0400' | not mlircap-opt - 2>&1 | FileCheck %s --check-prefix=OPEN
// RUN: printf 'module {\n}\n{-#\n  dialect_resources: {\n    builtin: {\n      r: "0x04\n    }\n  }\n#-}\n' | not mlircap-opt - 2>&1 | FileCheck %s --check-prefix=LINE
// RUN: printf 'module {\n}\n{-#\n  dialect_resources: {\n    builtin: {\n      r: "0x04\\q"\n    }\n  }\n#-}\n' | not mlircap-opt - 2>&1 | FileCheck %s --check-prefix=ESCAPE
// RUN: printf 'module {\n}\n{-#\n  external_resources: {\n    mlir_reproducer: {\n      pipeline: $\n    }\n  }\n#-}\n' | not mlircap-opt - 2>&1 | FileCheck %s --check-prefix=CHAR
// RUN: printf 'module {\n}\n{-#\n  dialect_resources: {\n    builtin: {\n      r: // c\n' | not mlircap-opt - 2>&1 | FileCheck %s --check-prefix=EOF
// RUN: printf 'module {\n}\n{-#\n  dialect_resources: {\n    builtin: {\n      r: "0x0400000001020304", // ok\n      s: "0x0400000000"\n    }\n  }\n#-}\n' | mlircap-opt - 2>&1 | FileCheck %s --check-prefix=GOOD
// RUN: printf 'module attributes {t.a = "{-# x: { y: { z: $"} {\n}\n' | mlircap-opt - 2>&1 | FileCheck %s --check-prefix=BODY

// OPEN: <stdin>:6:10: error: a resource entry's value must be a terminated string literal, 'true' or 'false'
// LINE: <stdin>:6:10: error: a resource entry's value must be a terminated string literal
// ESCAPE: <stdin>:6:10: error: a resource entry's value must be a terminated string literal
// CHAR: <stdin>:6:17: error: a resource entry's value must be a terminated string literal
// EOF: <stdin>:7:1: error: a resource entry's value must be a terminated string literal
// GOOD-NOT: error
// GOOD: module
// BODY: module attributes {t.a = "{-# x: { y: { z: $"}
