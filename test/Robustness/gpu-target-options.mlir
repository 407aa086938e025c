// Invalid GPU targets are a diagnostic and exit code 1. The NVPTX backend does
// not check them itself: an unknown chip ended in "LLVM ERROR: Cannot select"
// (abort), a feature without +/- in an assertion, a PTX version below the
// chip's minimum in a fatal error, an empty chip in an abort after the
// diagnostic.
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_xx" 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=gfx90a" 2>&1 | FileCheck %s --check-prefix=AMD
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_1000" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=" 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_90 features=garbage" 2>&1 | FileCheck %s --check-prefix=FEATURE
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_90 features=-ptx80" 2>&1 | FileCheck %s --check-prefix=MINUS
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_90 features=+ptx60" 2>&1 | FileCheck %s --check-prefix=LOWPTX
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_52 features=" 2>&1 | FileCheck %s --check-prefix=NOSHFL
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_21" 2>&1 | FileCheck %s --check-prefix=OLD
// RUN: not mlircap-opt %s --mlircap-gpu-pipeline="num-sms=0" 2>&1 | FileCheck %s --check-prefix=SMS
// Valid targets other than the default still compile.
// RUN: mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_80 features=+ptx70" | FileCheck %s --check-prefix=OK80
// RUN: mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_120 features=" | FileCheck %s --check-prefix=OK120

// NAME: error: mlircap-gpu-pipeline: invalid GPU target: chip 'sm_xx' is not an NVIDIA chip name of the form sm_<N>
// AMD: error: mlircap-gpu-pipeline: invalid GPU target: chip 'gfx90a' is not an NVIDIA chip name
// UNKNOWN: error: mlircap-gpu-pipeline: invalid GPU target: chip 'sm_1000' is not known to the NVPTX backend (known: {{.*}}sm_90{{.*}})
// EMPTY: error: mlircap-gpu-pipeline: invalid GPU target: the chip is empty
// FEATURE: error: mlircap-gpu-pipeline: invalid GPU target: feature 'garbage' is not a PTX version the NVPTX backend knows
// MINUS: error: mlircap-gpu-pipeline: invalid GPU target: feature '-ptx80' is not a PTX version
// LOWPTX: error: mlircap-gpu-pipeline: invalid GPU target: PTX version 6.0 ('+ptx60') is below the minimum 7.8 of chip 'sm_90'
// NOSHFL: error: mlircap-gpu-pipeline: invalid GPU target: PTX version 4.1 has no warp shuffles
// OLD: error: mlircap-gpu-pipeline: invalid GPU target: chip 'sm_21' has no warp shuffles
// SMS: error: mlircap-gpu-pipeline: num-sms must be in [1, 4096], got 0
// OK80: .target sm_80
// OK120: .target sm_120
// CHECK-NOT: LLVM ERROR
// CHECK-NOT: Assertion

func.func @main(%x: tensor<4x64xf32>) -> tensor<4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x64xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}
