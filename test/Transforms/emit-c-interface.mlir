// RUN: mlircap-opt %s --mlircap-emit-c-interface | FileCheck %s
// RUN: mlircap-opt %s --mlircap-emit-c-interface | mlircap-opt | FileCheck %s

// CHECK-LABEL: func.func @public_fn
// CHECK-SAME: attributes {llvm.emit_c_interface}
func.func @public_fn(%arg0: memref<4xf32>) {
  return
}

// CHECK-LABEL: func.func private @private_fn
// CHECK-NOT: llvm.emit_c_interface
func.func private @private_fn(%arg0: memref<4xf32>) {
  return
}

// CHECK-LABEL: func.func private @external
// CHECK-NOT: llvm.emit_c_interface
func.func private @external(memref<4xf32>)
