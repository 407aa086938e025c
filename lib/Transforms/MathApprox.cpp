//===- MathApprox.cpp - polynomial approximations for the CPU path ------===//
//
// Transcendentals become arithmetic so the loops around them vectorize
// (upstream's MathPolynomialApproximation patterns), except sin and cos of
// f32: upstream reduces their argument with one f32 multiple of pi/2, which
// is off by 0.02 at 1e6 and returns 0 at 1e10. Ours reduce exactly over the
// whole f32 range, still branch-free (see SinCos below); and erf of f32,
// which upstream approximates with coefficients selected per element from
// three intervals: ours is one rational function (see ErfRational below);
// and tanh of f32, whose upstream rational form was up to 4.6 ulp off (see
// TanhF32 below). See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include <limits>
#include <type_traits>

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPMATHAPPROX
#include "mlircap/Passes.h.inc"

namespace {
/// 4/pi in fixed point: entry k holds bits [8k - 24, 8k + 8) after the
/// binary point of 4/pi * 2^-1 (= floor(4/pi * 2^(8k+7)) mod 2^32), so three
/// entries k, k+4, k+8 form a 96-bit window of 4/pi starting anywhere a
/// float's exponent needs (the ARM optimized-routines sinf reduction).
constexpr uint32_t kInvPio4[24] = {
    0xa2,       0xa2f9,     0xa2f983,   0xa2f9836e, 0xf9836e4e, 0x836e4e44,
    0x6e4e4415, 0x4e441529, 0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1,
    0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0, 0x34ddc0db, 0xddc0db62,
    0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041};

} // namespace

/// sin / cos of f32 (scalar or fixed-size vector), about 0.55 ulp over the
/// whole f32 range, without branches or calls (so the loops vectorize):
///  * |x| = n * pi/2 + y with |y| <= pi/4, computed twice and selected:
///    - |x| < kSinCosShortLimit (6400): in f64, n = round(|x| * 2/pi),
///      y = |x| - n*P1 - n*P2 with pi/2 = P1 + P2 and n*P1 exact (Cody-Waite;
///      n < 2^12. The error of n*P2, below 1e-24, stays far under an ulp of
///      y: every f32 in [100, 8192) is within 0.601 ulp of sin/cos);
///    - else: Payne-Hanek in integers: the 24-bit mantissa times a 96-bit
///      window of 4/pi chosen by the exponent gives |x| * 2/pi mod 4 as a
///      2.62 fixed-point number, exact; its integer part is n, the rest y.
///  * sin(y) and cos(y) by minimax polynomials in f64 (degree 7 and 8),
///    swapped and negated by the quadrant n mod 4; sin(x) takes x's sign.
///  * inf and NaN give NaN.
/// `largeArgs` false: only the Cody-Waite reduction, for inputs known to be
/// finite and below kSinCosShortLimit (mlircap-trig-functions' fast path).
Value emitSinCosF32(OpBuilder &rw, Location loc, Value x, bool isCos, bool largeArgs) {
  Type type = x.getType();
  auto vt = dyn_cast<VectorType>(type);
  auto ty = [&](Type e) -> Type {
    return vt ? (Type)VectorType::get(vt.getShape(), e) : e;
  };
  Type f32 = ty(rw.getF32Type()), f64 = ty(rw.getF64Type());
  Type i1 = ty(rw.getI1Type()), i32 = ty(rw.getI32Type()), i64 = ty(rw.getI64Type());
  auto cst = [&](Type t, TypedAttr a) -> Value {
    if (auto v = dyn_cast<VectorType>(t))
      return arith::ConstantOp::create(rw, loc, DenseElementsAttr::get(v, a));
    return arith::ConstantOp::create(rw, loc, a);
  };
  auto f64c = [&](double v) { return cst(f64, rw.getF64FloatAttr(v)); };
  auto f32c = [&](float v) { return cst(f32, rw.getF32FloatAttr(v)); };
  auto i32c = [&](uint32_t v) {
    return cst(i32, rw.getIntegerAttr(rw.getI32Type(), APInt(32, v)));
  };
  auto i64c = [&](uint64_t v) {
    return cst(i64, rw.getIntegerAttr(rw.getI64Type(), APInt(64, v)));
  };
  auto add = [&](Value a, Value b) { return arith::AddFOp::create(rw, loc, a, b).getResult(); };
  auto sub = [&](Value a, Value b) { return arith::SubFOp::create(rw, loc, a, b).getResult(); };
  auto mul = [&](Value a, Value b) { return arith::MulFOp::create(rw, loc, a, b).getResult(); };
  auto iand = [&](Value a, Value b) { return arith::AndIOp::create(rw, loc, a, b).getResult(); };
  auto ior = [&](Value a, Value b) { return arith::OrIOp::create(rw, loc, a, b).getResult(); };
  auto shr = [&](Value a, Value b) { return arith::ShRUIOp::create(rw, loc, a, b).getResult(); };
  auto shl = [&](Value a, Value b) { return arith::ShLIOp::create(rw, loc, a, b).getResult(); };
  auto imul = [&](Value a, Value b) { return arith::MulIOp::create(rw, loc, a, b).getResult(); };
  auto select = [&](Value c, Value a, Value b) {
    return arith::SelectOp::create(rw, loc, c, a, b).getResult();
  };

  Value bits = arith::BitcastOp::create(rw, loc, i32, x);
  Value absBits = iand(bits, i32c(0x7fffffff));
  Value ax = arith::BitcastOp::create(rw, loc, f32, absBits);
  Value dx = arith::ExtFOp::create(rw, loc, f64, ax);
  // NaN and inf compare false: they take the large path, replaced at the end.
  Value small = arith::CmpFOp::create(rw, loc, arith::CmpFPredicate::OLT, ax, f32c(kSinCosShortLimit));

  // |x| < kSinCosShortLimit: Cody-Waite in f64. P1 = pi/2 with 12 low bits cleared, so
  // n * P1 is exact for n < 2^12; the input is zeroed on the other path so
  // fptosi stays in range.
  Value dxs = largeArgs ? select(small, dx, f64c(0.0)) : dx;
  Value r = mul(dxs, f64c(0x1.45F306DC9C883p-1)); // 2/pi
  Value ns = arith::FPToSIOp::create(rw, loc, i32, add(r, f64c(0.5)));
  Value nf = arith::SIToFPOp::create(rw, loc, f64, ns);
  Value ys = sub(sub(dxs, mul(nf, f64c(0x1.921fb54442p0))),
                 mul(nf, f64c(0x1.a308d313198a3p-41)));

  Value n = ns, y = ys;
  if (largeArgs) {
    // |x| >= kSinCosShortLimit: Payne-Hanek (exact integer arithmetic; 32-bit where it
    // can be, 32x32->64 products as zero-extended multiplies).
    Value idx = iand(shr(absBits, i32c(26)), i32c(15));  // exponent bits 6..3
    Value shift = iand(shr(absBits, i32c(23)), i32c(7)); // exponent bits 2..0
    Value m = shl(ior(iand(absBits, i32c(0x7fffff)), i32c(0x800000)), shift);
    Value idxBit[4];
    for (int bit = 0; bit < 4; ++bit)
      idxBit[bit] = arith::TruncIOp::create(rw, loc, i1, shr(idx, i32c(bit)));
    auto lookup = [&](int base) {
      SmallVector<Value> vals;
      for (int k = 0; k < 16; ++k)
        vals.push_back(i32c(kInvPio4[base + k]));
      for (int bit = 0; bit < 4; ++bit) {
        SmallVector<Value> next;
        for (size_t j = 0; j < vals.size(); j += 2)
          next.push_back(select(idxBit[bit], vals[j + 1], vals[j]));
        vals = std::move(next);
      }
      return vals[0];
    };
    auto wide = [&](Value v) { return arith::ExtUIOp::create(rw, loc, i64, v).getResult(); };
    Value m64 = wide(m);
    Value r0 = wide(imul(m, lookup(0))); // low 32 bits of the product only
    Value r1 = imul(m64, wide(lookup(4)));
    Value r2 = imul(m64, wide(lookup(8)));
    r0 = arith::AddIOp::create(rw, loc, ior(shr(r2, i64c(32)), shl(r0, i64c(32))), r1);
    Value nl64 = shr(arith::AddIOp::create(rw, loc, r0, i64c(1ull << 61)), i64c(62));
    r0 = arith::SubIOp::create(rw, loc, r0, shl(nl64, i64c(62)));
    Value nl = arith::TruncIOp::create(rw, loc, i32, nl64);
    Value yl = mul(arith::SIToFPOp::create(rw, loc, f64, r0),
                   f64c(0x1.921FB54442D18p-62)); // pi/2 * 2^-62
    n = select(small, ns, nl);
    y = select(small, ys, yl);
  }
  Value y2 = mul(y, y), y4 = mul(y2, y2);
  Value sinY = add(y, mul(mul(y, y2),
                          add(f64c(-0x1.555545995a603p-3),
                              mul(y2, add(f64c(0x1.1107605230bc4p-7),
                                          mul(y2, f64c(-0x1.994eb3774cf24p-13)))))));
  Value cosY = add(add(add(f64c(1.0), mul(y2, f64c(-0x1.ffffffd0c621cp-2))),
                       mul(y4, f64c(0x1.55553e1068f19p-5))),
                   mul(mul(y4, y2), add(f64c(-0x1.6c087e89a359dp-10),
                                        mul(y2, f64c(0x1.99343027bf8c3p-16)))));
  // cos(|x|) = sin(|x| + pi/2): one more quadrant.
  Value q = isCos ? arith::AddIOp::create(rw, loc, n, i32c(1)).getResult() : n;
  Value odd = arith::TruncIOp::create(rw, loc, i1, q);
  Value neg = arith::TruncIOp::create(rw, loc, i1, shr(q, i32c(1)));
  Value v = select(odd, cosY, sinY);
  v = select(neg, arith::NegFOp::create(rw, loc, v).getResult(), v);
  Value res = arith::TruncFOp::create(rw, loc, f32, v);
  if (!isCos) { // sin(-x) = -sin(x), also for -0
    Value rb = arith::BitcastOp::create(rw, loc, i32, res);
    Value sign = iand(bits, i32c(0x80000000));
    res = arith::BitcastOp::create(rw, loc, f32,
                                   arith::XOrIOp::create(rw, loc, rb, sign));
  }
  if (!largeArgs)
    return res;
  Value nonFinite = arith::CmpIOp::create(rw, loc, arith::CmpIPredicate::uge, absBits,
                                          i32c(0x7f800000));
  return select(nonFinite, sub(x, x), res);
}

namespace {
template <bool isCos, typename OpTy>
struct SinCos : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &rw) const override {
    Type type = op.getType();
    auto vt = dyn_cast<VectorType>(type);
    if (!getElementTypeOrSelf(type).isF32() || (vt && vt.isScalable()))
      return failure();
    rw.replaceOp(op, emitSinCosF32(rw, op.getLoc(), op.getOperand(), isCos, /*largeArgs=*/true));
    return success();
  }
};

/// erf of f32 (scalar or fixed-size vector) as one rational function,
/// without the interval selects of upstream's approximation (three sets of
/// coefficients chosen per element: 22 selects and 4 compares an element,
/// which made the erf-GELU kernel slower than torch's vectorized one):
///   a = min(|x|, 4)  (erf rounds to 1 in f32 from 3.93 on)
///   erf(x) = copysign(min(a * P(a^2) / Q(a^2), 1), x)
/// P and Q of degree 5 (a minimax fit of erf(a)/a in relative error over
/// [0, 3.95^2], about 2e-8 in exact arithmetic; bench/fit_erf.py fits them and
/// emulates this f32 evaluation): 10 FMAs and one division.
/// Between 3.95 and 4 the quotient stays within an ulp of 1, at 4 it is
/// 1 + 1 ulp, so erf is exactly +-1 from 4 on (+-inf included).
/// Max error in f32 3.5e-7 (6 ulp just below 1), 0.7 ulp on average; eager's
/// erf-GELU kernel is 1.2e-6 off at most. NaN stays NaN (the clamps are
/// unordered compares), -0 gives -0.
struct ErfRational : OpRewritePattern<math::ErfOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::ErfOp op, PatternRewriter &rw) const override {
    Type type = op.getType();
    auto vt = dyn_cast<VectorType>(type);
    if (!getElementTypeOrSelf(type).isF32() || (vt && vt.isScalable()))
      return failure();
    Location loc = op.getLoc();
    auto cst = [&](float v) -> Value {
      TypedAttr a = rw.getF32FloatAttr(v);
      if (vt)
        return arith::ConstantOp::create(rw, loc, DenseElementsAttr::get(vt, a));
      return arith::ConstantOp::create(rw, loc, a);
    };
    // The smaller of `v` and `c`; NaN stays NaN (ULT is true for it).
    auto minKeepNan = [&](Value v, float c) -> Value {
      Value k = cst(c);
      Value lt = arith::CmpFOp::create(rw, loc, arith::CmpFPredicate::ULT, v, k);
      return arith::SelectOp::create(rw, loc, lt, v, k);
    };
    static constexpr float kP[] = {1.1283791065216064f, 0.1915503889322281f,
                                   0.05287545919418335f, 0.003808165667578578f,
                                   0.00028468796517699957f, 2.0259092252672417e-06f};
    static constexpr float kQ[] = {1.0f,
                                   0.5030897855758667f,
                                   0.11455965787172318f,
                                   0.0150550976395607f,
                                   0.0011707270750775933f,
                                   3.7831825466128066e-05f};
    auto horner = [&](ArrayRef<float> c, Value t) {
      Value acc = cst(c.back());
      for (float k : llvm::reverse(c.drop_back()))
        acc = math::FmaOp::create(rw, loc, acc, t, cst(k));
      return acc;
    };
    Value x = op.getOperand();
    Value a = minKeepNan(math::AbsFOp::create(rw, loc, x), 4.0f);
    Value t = arith::MulFOp::create(rw, loc, a, a);
    Value num = arith::MulFOp::create(rw, loc, a, horner(kP, t));
    Value r = arith::DivFOp::create(rw, loc, num, horner(kQ, t));
    r = minKeepNan(r, 1.0f);
    rw.replaceOpWithNewOp<math::CopySignOp>(op, r, x);
    return success();
  }
};

/// f32 scalars and fixed-size f32 vectors: what the fixes below rewrite.
bool isF32OrFixedF32Vector(Type type) {
  auto vt = dyn_cast<VectorType>(type);
  return getElementTypeOrSelf(type).isF32() && !(vt && vt.isScalable());
}

/// An f32 constant of type f32, or splat of vector type `vt` when given.
Value floatConstant(OpBuilder &b, Location loc, VectorType vt, TypedAttr a) {
  if (vt)
    return arith::ConstantOp::create(b, loc, DenseElementsAttr::get(vt, a));
  return arith::ConstantOp::create(b, loc, a);
}

Value f32Constant(OpBuilder &b, Location loc, VectorType vt, float v) {
  return floatConstant(b, loc, vt, b.getF32FloatAttr(v));
}

Value f64Constant(OpBuilder &b, Location loc, VectorType vt, double v) {
  return floatConstant(b, loc, vt, b.getF64FloatAttr(v));
}

/// tanh of f32 (scalar or fixed-size vector), about 1.1 ulp at most, exact
/// rounding where it saturates (upstream's rational approximation was up to
/// 4.6 ulp off, 59% of f32 results in [-10, 10] not correctly rounded; eager's
/// SLEEF tanh 0.56 ulp at most, 0.4%; this one 1.8%). One ulp below 1 decides
/// 1 + tanh(x) in a tanh GELU's tail: gelu(-5) was -0 where eager's is -1.5e-7,
/// so a sqrt of it was no NaN (bench/fuzz_graphs.py --grad seed 2205)):
///  * a = min(|x|, 10) (tanh rounds to 1 in f32 from 9.01 on);
///  * a < 1: a + a * t * P(t), t = a^2, P of degree 6 (a least-squares fit of
///    (tanh(a) / a - 1) / t; the correction is at most a quarter of a, so its
///    rounding costs a fraction of an ulp);
///  * else: 1 - 2 / (exp(2a) + 1): exp's error scales with 2 / (exp(2a) + 1)
///    <= 0.24, and vanishes next to 1 where the result saturates;
///  * x's sign copied; NaN stays NaN, +-inf gives +-1, -0 gives -0.
/// (A form in f64, correctly rounded throughout, made a tanh GELU 4x slower.)
struct TanhF32 : OpRewritePattern<math::TanhOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::TanhOp op, PatternRewriter &rw) const override {
    Type type = op.getType();
    auto vt = dyn_cast<VectorType>(type);
    if (!getElementTypeOrSelf(type).isF32() || (vt && vt.isScalable()))
      return failure();
    Location loc = op.getLoc();
    auto c = [&](float v) { return f32Constant(rw, loc, vt, v); };
    auto mul = [&](Value a, Value b) { return arith::MulFOp::create(rw, loc, a, b).getResult(); };
    auto fma = [&](Value a, Value b, Value d) {
      return math::FmaOp::create(rw, loc, a, b, d).getResult();
    };
    using P = arith::CmpFPredicate;
    Value x = op.getOperand();
    Value a = math::AbsFOp::create(rw, loc, x);
    // min(a, 10), NaN kept (ULT is true for it)
    a = arith::SelectOp::create(rw, loc, arith::CmpFOp::create(rw, loc, P::ULT, a, c(10.0f)), a,
                                c(10.0f));
    static constexpr float kP[] = {-0.33333295583724976f, 0.1333235204219818f,
                                   -0.05388044938445091f, 0.02148883230984211f,
                                   -0.007949626073241234f, 0.002304098568856716f,
                                   -0.0003592708962969482f};
    Value t = mul(a, a);
    Value p = c(kP[6]);
    for (int i = 5; i >= 0; --i)
      p = fma(p, t, c(kP[i]));
    Value small = fma(mul(a, t), p, a);
    Value e = math::ExpOp::create(rw, loc, arith::AddFOp::create(rw, loc, a, a));
    Value q = arith::DivFOp::create(rw, loc, c(2.0f), arith::AddFOp::create(rw, loc, e, c(1.0f)));
    Value large = arith::SubFOp::create(rw, loc, c(1.0f), q);
    Value r = arith::SelectOp::create(rw, loc, arith::CmpFOp::create(rw, loc, P::OLT, a, c(1.0f)),
                                      small, large);
    rw.replaceOpWithNewOp<math::CopySignOp>(op, r, x);
    return success();
  }
};

/// atan2 of f32 with the special values of IEEE/libm that upstream's
/// polynomial gets wrong: +-0/+-0 (NaN there; 0 or pi), +-inf/+-inf (NaN;
/// pi/4 or 3pi/4), and the sign of the result, which is always y's (it gave
/// +pi for atan2(-0, -1) and atan2(-1, -inf)). The approximation itself stays
/// (a new math.atan2, approximated by the upstream patterns afterwards).
void fixAtan2SpecialValues(math::Atan2Op op) {
  Type type = op.getType();
  auto vt = dyn_cast<VectorType>(type);
  if (!isF32OrFixedF32Vector(type))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto cst = [&](float v) { return f32Constant(b, loc, vt, v); };
  Type i32 = vt ? (Type)VectorType::get(vt.getShape(), b.getI32Type()) : b.getI32Type();
  Value y = op.getLhs(), x = op.getRhs();
  Value core = math::Atan2Op::create(b, loc, y, x);
  Value ax = math::AbsFOp::create(b, loc, x), ay = math::AbsFOp::create(b, loc, y);
  Value zero = cst(0.0f), inf = cst(std::numeric_limits<float>::infinity());
  using P = arith::CmpFPredicate;
  auto both = [&](P p, Value c) {
    return arith::AndIOp::create(b, loc, arith::CmpFOp::create(b, loc, p, ax, c),
                                 arith::CmpFOp::create(b, loc, p, ay, c));
  };
  // x's sign bit (-0 counts as negative)
  Value xNeg = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::slt, arith::BitcastOp::create(b, loc, i32, x),
      arith::ConstantOp::create(b, loc, cast<TypedAttr>(b.getZeroAttr(i32))));
  const float pi = 3.14159265358979f;
  Value r = arith::SelectOp::create(b, loc, both(P::OEQ, inf),
                                    arith::SelectOp::create(b, loc, xNeg, cst(0.75f * pi), cst(0.25f * pi)),
                                    core);
  r = arith::SelectOp::create(b, loc, both(P::OEQ, zero),
                              arith::SelectOp::create(b, loc, xNeg, cst(pi), zero), r);
  r = math::CopySignOp::create(b, loc, math::AbsFOp::create(b, loc, r), y);
  op.replaceAllUsesWith(r);
  op.erase();
}

/// log and log2 of a subnormal f32: upstream's approximation reads the
/// exponent field as if the input were normal, so every subnormal came out as
/// log(FLT_MIN) (-87.34 for log(1e-45), eager -103.28). Subnormals are scaled
/// by 2^23 into the normal range first and 23 * log(2) subtracted again.
template <typename OpTy>
void scaleSubnormalLog(OpTy op, double log2Scale) {
  Type type = op.getType();
  auto vt = dyn_cast<VectorType>(type);
  if (!isF32OrFixedF32Vector(type))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto cst = [&](float v) { return f32Constant(b, loc, vt, v); };
  Value x = op.getOperand();
  Value tiny = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x,
                                     cst(std::numeric_limits<float>::min()));
  Value scaled = arith::SelectOp::create(b, loc, tiny, arith::MulFOp::create(b, loc, x, cst(8388608.0f)), x);
  Value core = OpTy::create(b, loc, scaled);
  Value shift = arith::SelectOp::create(b, loc, tiny, cst(static_cast<float>(23.0 * log2Scale)), cst(0.0f));
  op.replaceAllUsesWith(arith::SubFOp::create(b, loc, core, shift).getResult());
  op.erase();
}

/// log of a negative f64 (-inf included): libm's log returns the default NaN
/// of an invalid operation, which on x86 has the sign bit set, where eager's
/// kernels (Sleef's vector log and its scalar loop) return +NaN: signbit(log(x))
/// and the NaN's sign through later ops (std, copysign, bit views) differed
/// (bench/fuzz_graphs.py --grad seed 3839, signbit(log(-3000.0).std())). A NaN
/// input keeps its own NaN (an ordered compare is false for it).
void positiveNanLogF64(math::LogOp op) {
  Type type = op.getType();
  auto vt = dyn_cast<VectorType>(type);
  if (!getElementTypeOrSelf(type).isF64() || (vt && vt.isScalable()))
    return;
  OpBuilder b(op);
  b.setInsertionPointAfter(op);
  Location loc = op.getLoc();
  auto cst = [&](double v) { return f64Constant(b, loc, vt, v); };
  Value neg = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, op.getOperand(), cst(0.0));
  Value r = arith::SelectOp::create(b, loc, neg, cst(std::numeric_limits<double>::quiet_NaN()),
                                    op.getResult());
  op.getResult().replaceAllUsesExcept(r, r.getDefiningOp());
}

/// exp of f32 whose result is subnormal: upstream's approximation builds
/// 2^k in the exponent field and returns 0 below the normal range (exp(x) for
/// x < -87.34), where eager's gives subnormals down to exp(-103.97) (then
/// exp(x).log() of -100 was -inf, eager -99.98). There the op is computed as
/// exp(x / 2)^2: x / 2 is exact, exp(x / 2) normal, and the one rounding of the
/// square gives the subnormal. One compare, two selects and two multiplies.
void squareSubnormalExp(math::ExpOp op) {
  Type type = op.getType();
  auto vt = dyn_cast<VectorType>(type);
  if (!isF32OrFixedF32Vector(type))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto cst = [&](float v) { return f32Constant(b, loc, vt, v); };
  Value x = op.getOperand();
  Value tiny = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x, cst(-87.0f));
  Value arg = arith::SelectOp::create(b, loc, tiny, arith::MulFOp::create(b, loc, x, cst(0.5f)), x);
  Value core = math::ExpOp::create(b, loc, arg, op.getFastmathAttr());
  Value square = arith::MulFOp::create(b, loc, core, core);
  op.replaceAllUsesWith(arith::SelectOp::create(b, loc, tiny, square, core).getResult());
  op.erase();
}

/// expm1 and log1p of f64: convert-math-to-llvm lowers them as exp(x) - 1 and
/// log(1 + x), which cancel for small x (expm1(1e-10) was 8e-8 off relatively,
/// expm1(1e-30) and log1p(1e-30) 0, expm1(-0.0) +0.0: bench/fuzz_graphs.py --grad
/// seed 2007). Kahan's forms instead, on f64 exp and log (libm's): expm1(x) =
/// (u - 1) * x / log(u) with u = exp(x), log1p(x) = log(u) * x / (u - 1) with
/// u = 1 + x; x itself where u rounds to 1 (and NaN), u's own limits at the ends.
/// (f32's are upstream's polynomial approximations, built the same way.)
template <typename OpTy>
void kahanF64(OpTy op) {
  Type type = op.getType();
  auto vt = dyn_cast<VectorType>(type);
  if (!getElementTypeOrSelf(type).isF64() || (vt && vt.isScalable()))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto cst = [&](double v) { return f64Constant(b, loc, vt, v); };
  using P = arith::CmpFPredicate;
  Value x = op.getOperand(), one = cst(1.0);
  constexpr bool isExpm1 = std::is_same_v<OpTy, math::ExpM1Op>;
  Value u = isExpm1 ? (Value)math::ExpOp::create(b, loc, x)
                    : (Value)arith::AddFOp::create(b, loc, one, x);
  Value um1 = arith::SubFOp::create(b, loc, u, one);
  Value lu = math::LogOp::create(b, loc, u);
  Value r = isExpm1 ? (Value)arith::MulFOp::create(b, loc, um1, arith::DivFOp::create(b, loc, x, lu))
                    : (Value)arith::MulFOp::create(b, loc, lu, arith::DivFOp::create(b, loc, x, um1));
  // u = +inf (log(u) == u): expm1 +inf, log1p +inf
  r = arith::SelectOp::create(b, loc, arith::CmpFOp::create(b, loc, P::OEQ, lu, u), lu, r);
  if (isExpm1) // exp(x) - 1 == -1: x far below 0 (and -inf)
    r = arith::SelectOp::create(b, loc, arith::CmpFOp::create(b, loc, P::OEQ, um1, cst(-1.0)),
                                cst(-1.0), r);
  r = arith::SelectOp::create(b, loc, arith::CmpFOp::create(b, loc, P::UEQ, u, one), x, r);
  op.replaceAllUsesWith(r);
  op.erase();
}

struct MathApprox : impl::MlircapMathApproxBase<MathApprox> {
  void runOnOperation() override {
    // sin/cos/erf first: upstream's approximations of sin/cos are only
    // accurate for small arguments, its erf selects coefficients per element.
    RewritePatternSet trig(&getContext());
    trig.add<SinCos<false, math::SinOp>, SinCos<true, math::CosOp>, ErfRational, TanhF32>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(trig))))
      return signalPassFailure();
    getOperation().walk([](math::Atan2Op op) { fixAtan2SpecialValues(op); });
    SmallVector<math::LogOp> logs;
    SmallVector<math::Log2Op> log2s;
    getOperation().walk([&](math::LogOp op) { logs.push_back(op); });
    getOperation().walk([&](math::Log2Op op) { log2s.push_back(op); });
    for (math::LogOp op : logs) {
      positiveNanLogF64(op);
      scaleSubnormalLog(op, 0.69314718055994531);
    }
    for (math::Log2Op op : log2s)
      scaleSubnormalLog(op, 1.0);
    SmallVector<math::ExpOp> exps;
    getOperation().walk([&](math::ExpOp op) { exps.push_back(op); });
    for (math::ExpOp op : exps)
      squareSubnormalExp(op);
    SmallVector<math::ExpM1Op> expm1s;
    SmallVector<math::Log1pOp> log1ps;
    getOperation().walk([&](math::ExpM1Op op) { expm1s.push_back(op); });
    getOperation().walk([&](math::Log1pOp op) { log1ps.push_back(op); });
    for (math::ExpM1Op op : expm1s)
      kahanF64(op);
    for (math::Log1pOp op : log1ps)
      kahanF64(op);
    getOperation().walk([&](arith::FPToSIOp op) {
      op->setAttr(kOwnCast, UnitAttr::get(&getContext()));
    });
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    // Upstream's exp (and expm1, tanh, ... built on it) converts its exponent k with
    // fptosi after a clamp of unordered compares, which lets a NaN through; fptosi of
    // NaN is poison in LLVM, and where the NaN is a constant LLVM folds the result
    // to anything (softmax of a var() of no elements: 1 or inf, not NaN). k = 0 for
    // a NaN: the polynomial's NaN times 2^0 stays NaN.
    getOperation().walk([&](arith::FPToSIOp op) {
      if (op->hasAttr(kOwnCast)) {
        op->removeAttr(kOwnCast);
        return;
      }
      OpBuilder b(op);
      Value v = op.getIn();
      Value nan = arith::CmpFOp::create(b, op.getLoc(), arith::CmpFPredicate::UNO, v, v);
      Value zero = arith::ConstantOp::create(b, op.getLoc(), b.getZeroAttr(v.getType()));
      op.getInMutable().assign(arith::SelectOp::create(b, op.getLoc(), nan, zero, v));
    });
  }
  static constexpr llvm::StringLiteral kOwnCast = "mlircap.math_approx.input_cast";
};
} // namespace
} // namespace mlir::mlircap
