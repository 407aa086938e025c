// Deeply nested input overflowed the parser's stack (a segfault, no
// diagnostic). mlircap-opt and the C API reject input nested more than 256
// levels deep before parsing; ordinary nesting still parses.
// RUN: %PYTHON -c "print('module {' * 5000 + '}' * 5000)" > %t.modules.mlir
// RUN: not mlircap-opt %t.modules.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: %PYTHON -c "print('func.func @f() attributes {a = ' + '[' * 20000 + ']' * 20000 + '} { return }')" > %t.attr.mlir
// RUN: not mlircap-opt %t.attr.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: %PYTHON -c "print('func.func private @f(' + 'tuple<' * 100000 + 'f32' + '>' * 100000 + ')')" > %t.type.mlir
// RUN: not mlircap-opt %t.type.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: %PYTHON -c "print('module {' * 200 + '}' * 200)" > %t.ok.mlir
// RUN: mlircap-opt %t.ok.mlir | FileCheck %s --check-prefix=OK
// Brackets in strings and comments do not count.
// RUN: mlircap-opt %s | FileCheck %s --check-prefix=STR

// DEEP: error: input nested more than 256 levels deep (regions, attributes, types); the parser would overflow its stack
// DEEP-NOT: Stack dump
// OK: module
// STR: func.func private @strings() attributes {s = "{{\(\(\(\(\(\(\(\(\(\(}}

// ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((
// ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((
// ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((
// ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((
func.func private @strings() attributes {s = "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("}
