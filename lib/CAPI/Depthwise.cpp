//===- Depthwise.cpp - the CPU plans' float32 NCHW depthwise convolution ---===//
//
// mlircap_cpu_depthwise_conv2d is a CPU plan step the runtime adds to a
// CpuProgram like a JIT-compiled kernel (runtime/cpu.py, native library
// steps): a float32 depthwise convolution in NCHW (one filter per channel,
// conv2d_depthwise_nchw_chw), with the zero padding, strides, dilations and
// the optional bias of the plan's library step. Through torch it ran on
// oneDNN's generic path for plain NCHW (1 thread, Zen 3: 1x144x24x24 3x3
// 180-340 us; a Conformer's 2x144x100 depthwise Conv1d of width 31 1.2-1.9 ms).
//
// Each (image, channel) plane is computed alone (parallel over planes through
// mlircap_parallel_for). Its input is copied, zero padded, into a scratch
// buffer split into stride h x stride w phases (phase (r, c) holds the padded
// rows r, r + sh, ... and columns c, c + sw, ...), so that every filter tap
// reads one contiguous run: the output plane, at the phases' row width. The
// run is computed in blocks of 64 (then 8) columns held in vector registers
// over all taps: bias (or 0) plus weight * input for each tap in order (kh,
// then kw), the same order at every position and thread count; then the valid
// columns are copied out. Padded zeros are multiplied too, which is exact
// unless a weight is not finite: such a channel (inf * 0 is NaN where the
// library skips the tap) takes a path over the taps inside the image only, in
// the same order. Compiled for AVX-512, AVX2+FMA and baseline x86-64 (GCC
// vector types); the best the host has is picked at the first call.
//
//===----------------------------------------------------------------------===//
#define MLIRCAP_BUILDING_CORE
#include "mlircap-c/Core.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// v8f values only live inside the functions below (always inlined): no ABI crosses them
#pragma GCC diagnostic ignored "-Wpsabi"

namespace {

struct DwConv {
  const float *x, *w, *b;
  float *y;
  int64_t n, c, h, wd, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw;
  int64_t hq, wq;     // rows and columns of a phase (ceil(padded height / sh), width / sw)
  int64_t planeWords; // floats of one phase in the scratch (hq + 1 rows and slack)
  int64_t outWords;   // floats of the scratch output
};

typedef float v8f __attribute__((vector_size(32)));

__attribute__((always_inline)) inline v8f load8(const float *p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store8(float *p, const v8f &v) { std::memcpy(p, &v, sizeof v); }

/// out[i] = bias + sum over taps t of wt[t] * src[t][i], i in [0, len) rounded up to 8 (the
/// scratch has room): blocks of 64 columns in 8 registers, then of 8.
__attribute__((always_inline)) inline void run(float *out, int64_t len, float bias, const float *wt,
                                               const float *const *src, int64_t taps) {
  int64_t i = 0;
  for (; i + 64 <= len; i += 64) {
    v8f a0 = v8f{} + bias, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t t = 0; t < taps; ++t) {
      const float *s = src[t] + i;
      v8f wv = v8f{} + wt[t];
      a0 += wv * load8(s);
      a1 += wv * load8(s + 8);
      a2 += wv * load8(s + 16);
      a3 += wv * load8(s + 24);
      a4 += wv * load8(s + 32);
      a5 += wv * load8(s + 40);
      a6 += wv * load8(s + 48);
      a7 += wv * load8(s + 56);
    }
    store8(out + i, a0);
    store8(out + i + 8, a1);
    store8(out + i + 16, a2);
    store8(out + i + 24, a3);
    store8(out + i + 32, a4);
    store8(out + i + 40, a5);
    store8(out + i + 48, a6);
    store8(out + i + 56, a7);
  }
  for (; i < len; i += 8) {
    v8f a0 = v8f{} + bias;
    for (int64_t t = 0; t < taps; ++t)
      a0 += (v8f{} + wt[t]) * load8(src[t] + i);
    store8(out + i, a0);
  }
}

/// ceil(a / b) for b > 0 and any a.
inline int64_t ceilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
/// floor(a / b) for b > 0 and any a.
inline int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// A plane whose filter has a weight that is not finite: only the taps inside the image,
/// in the same order (as the library computes it).
void planeExact(const DwConv &a, const float *x, const float *w, float *y, float bias) {
  for (int64_t oy = 0; oy < a.oh; ++oy)
    for (int64_t ox = 0; ox < a.ow; ++ox) {
      float acc = bias;
      for (int64_t ky = 0; ky < a.kh; ++ky) {
        int64_t iy = oy * a.sh - a.ph + ky * a.dh;
        if (iy < 0 || iy >= a.h)
          continue;
        for (int64_t kx = 0; kx < a.kw; ++kx) {
          int64_t ix = ox * a.sw - a.pw + kx * a.dw;
          if (ix >= 0 && ix < a.wd)
            acc += w[ky * a.kw + kx] * x[iy * a.wd + ix];
        }
      }
      y[oy * a.ow + ox] = acc;
    }
}

__attribute__((always_inline)) inline void planes(const DwConv &a, int64_t begin, int64_t end) {
  static thread_local std::vector<float> scratch;
  const int64_t taps = a.kh * a.kw, phases = a.sh * a.sw;
  size_t words = static_cast<size_t>(phases * a.planeWords + a.outWords);
  if (scratch.size() < words)
    scratch.resize(words);
  float *in = scratch.data(), *out = in + phases * a.planeWords;
  // every plane writes the same positions of `in` (the image's): the padding stays zero
  std::fill(in, in + phases * a.planeWords, 0.0f);
  // per column phase cp: phase columns [m0, m1) hold input columns m * sw + cp - pw
  std::vector<int64_t> m0(a.sw), m1(a.sw), off(taps);
  for (int64_t cp = 0; cp < a.sw; ++cp) {
    m0[cp] = std::max<int64_t>(0, ceilDiv(a.pw - cp, a.sw));
    m1[cp] = std::max(m0[cp], std::min<int64_t>(a.wq, floorDiv(a.wd - 1 + a.pw - cp, a.sw) + 1));
  }
  // tap (ky, kx) of output (oy, ox) reads padded row oy * sh + ky * dh, column ox * sw + kx * dw:
  // phase ((ky * dh) % sh, (kx * dw) % sw) at row oy + ky * dh / sh, column ox + kx * dw / sw
  for (int64_t ky = 0; ky < a.kh; ++ky)
    for (int64_t kx = 0; kx < a.kw; ++kx) {
      int64_t r = ky * a.dh, c = kx * a.dw;
      off[ky * a.kw + kx] = ((r % a.sh) * a.sw + c % a.sw) * a.planeWords + (r / a.sh) * a.wq + c / a.sw;
    }
  std::vector<float> wt(taps);
  std::vector<const float *> src(taps);
  for (int64_t t = 0; t < taps; ++t)
    src[t] = in + off[t];
  for (int64_t p = begin; p < end; ++p) {
    const int64_t ch = p % a.c;
    const float *x = a.x + p * a.h * a.wd;
    const float *w = a.w + ch * taps;
    float *y = a.y + p * a.oh * a.ow;
    const float bias = a.b ? a.b[ch] : 0.0f;
    bool finite = true;
    for (int64_t t = 0; t < taps; ++t)
      finite &= std::isfinite(w[t]);
    if (!finite) {
      planeExact(a, x, w, y, bias);
      continue;
    }
    for (int64_t iy = 0; iy < a.h; ++iy) {
      const int64_t r = iy + a.ph;
      float *rows = in + (r % a.sh) * a.sw * a.planeWords + (r / a.sh) * a.wq;
      const float *xr = x + iy * a.wd - a.pw;
      if (a.sw == 1) {
        for (int64_t m = m0[0]; m < m1[0]; ++m)
          rows[m] = xr[m];
      } else {
        for (int64_t cp = 0; cp < a.sw; ++cp) {
          float *row = rows + cp * a.planeWords;
          const float *from = xr + cp;
          for (int64_t m = m0[cp]; m < m1[cp]; ++m)
            row[m] = from[m * a.sw];
        }
      }
    }
    for (int64_t t = 0; t < taps; ++t)
      wt[t] = w[t];
    run(out, a.oh * a.wq, bias, wt.data(), src.data(), taps);
    for (int64_t oy = 0; oy < a.oh; ++oy) {
      float *yr = y + oy * a.ow;
      const float *o = out + oy * a.wq;
      for (int64_t ox = 0; ox < a.ow; ++ox)
        yr[ox] = o[ox];
    }
  }
}

__attribute__((target("avx512f,avx2,fma"))) void planesAvx512(const DwConv &a, int64_t begin, int64_t end) {
  planes(a, begin, end);
}
__attribute__((target("avx2,fma"))) void planesAvx2(const DwConv &a, int64_t begin, int64_t end) {
  planes(a, begin, end);
}
void planesBase(const DwConv &a, int64_t begin, int64_t end) { planes(a, begin, end); }

using PlanesFn = void (*)(const DwConv &, int64_t, int64_t);

PlanesFn pick() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return planesAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return planesAvx2;
#endif
  return planesBase;
}

void body(void *ctx, int64_t begin, int64_t end) {
  static const PlanesFn fn = pick();
  fn(*static_cast<const DwConv *>(ctx), begin, end);
}

/// The aligned data pointer (plus offset) and sizes of a packed memref argument.
template <typename T>
T *memref(void *arg, int rank, int64_t *sizes) {
  auto *d = *static_cast<int64_t **>(arg);
  for (int i = 0; i < rank; ++i)
    sizes[i] = d[3 + i];
  return reinterpret_cast<T *>(d[1]) + d[2];
}

} // namespace

extern "C" {
void mlircap_cpu_depthwise_conv2d(void **args) {
  // args: a pointer to {has bias, stride h, stride w, padding h, padding w, dilation h,
  // dilation w}, then input (N, C, H, W), filter (C, KH, KW), [bias (C)], result (N, C, OH, OW)
  const int64_t *prm = static_cast<const int64_t *>(args[0]);
  const bool hasBias = prm[0] != 0;
  int64_t xs[4], ws[3], bs[1], ys[4];
  DwConv a;
  a.x = memref<const float>(args[1], 4, xs);
  a.w = memref<const float>(args[2], 3, ws);
  a.b = hasBias ? memref<const float>(args[3], 1, bs) : nullptr;
  a.y = memref<float>(args[hasBias ? 4 : 3], 4, ys);
  a.n = xs[0], a.c = xs[1], a.h = xs[2], a.wd = xs[3];
  a.kh = ws[1], a.kw = ws[2], a.oh = ys[2], a.ow = ys[3];
  a.sh = prm[1], a.sw = prm[2], a.ph = prm[3], a.pw = prm[4], a.dh = prm[5], a.dw = prm[6];
  if (a.sh < 1 || a.sw < 1 || a.dh < 1 || a.dw < 1 || ws[0] != a.c || ys[1] != a.c ||
      ys[0] != a.n)
    __builtin_trap(); // the runtime only adds steps it checked (runtime/cpu.py)
  // output row oy, column ox, tap (ky, kx) reads padded row oy * sh + ky * dh, padded
  // column ox * sw + kx * dw: rows up to (oh - 1) * sh + (kh - 1) * dh, columns likewise
  int64_t rows = std::max(a.h + 2 * a.ph, (a.oh - 1) * a.sh + (a.kh - 1) * a.dh + 1);
  int64_t cols = std::max(a.wd + 2 * a.pw, (a.ow - 1) * a.sw + (a.kw - 1) * a.dw + 1);
  a.hq = ceilDiv(rows, a.sh);
  a.wq = ceilDiv(cols, a.sw);
  // a run over the output plane reads up to a row (rounding: 64 columns) past a phase
  a.planeWords = (a.hq + 1) * a.wq + 64;
  a.outWords = a.oh * a.wq + 64;
  int64_t perPlane = std::max<int64_t>(1, a.oh * a.ow * a.kh * a.kw);
  mlircap_parallel_for(body, &a, 0, a.n * a.c, std::max<int64_t>(1, (1 << 15) / perPlane));
}
} // extern "C"
