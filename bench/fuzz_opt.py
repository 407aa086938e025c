"""Fuzz mlircap-opt with mutated .mlir inputs for a bounded time.

    python bench/fuzz_opt.py [--seconds 60] [--seed 0] [--crashers DIR]

Corpus: the lit tests' inputs (test/**/*.mlir, split at `// -----`). Mutations:
truncation, swapped element types, unknown ops, wrong attributes, deleted and
duplicated lines, shape changes. Each input runs through mlircap's pipelines;
a run must end with exit code 0 or 1 (diagnostics). A signal or an LLVM
fatal error/assertion is a crash: the input is saved to --crashers and reported.
"""
import argparse
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = [
    ["--mlircap-fuse"],
    ["--mlircap-cpu-pipeline"],
    ["--mlircap-gpu-pipeline"],
    ["--pass-pipeline=builtin.module(func.func(mlircap-generalize-elementwise,mlircap-fuse-elementwise))"],
]
TYPES = ["f32", "f16", "bf16", "i32", "i64", "i1", "index", "f64"]


def corpus():
    cases = []
    for f in sorted((ROOT / "test").rglob("*.mlir")):
        for chunk in f.read_text().split("// -----"):
            body = "\n".join(line for line in chunk.splitlines() if not line.lstrip().startswith("//"))
            if "func.func" in body:
                cases.append(body)
    return cases


def mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    kind = rng.randrange(8)
    if kind == 0 and len(text) > 10:                     # truncate
        return text[: rng.randrange(len(text))]
    if kind == 1:                                         # swap an element type
        ts = [t for t in TYPES if t in text]
        if ts:
            a = rng.choice(ts)
            return re.sub(rf"\b{a}\b", rng.choice(TYPES), text, count=rng.randrange(1, 4))
    if kind == 2 and lines:                               # unknown op
        i = rng.randrange(len(lines))
        lines.insert(i, '    "foo.bar"() : () -> ()')
        return "\n".join(lines)
    if kind == 3:                                         # wrong attributes
        return text.replace('"parallel"', rng.choice(['"reduction"', '"window"', '"bogus"', "42"]), 1)
    if kind == 4 and lines:                               # delete a line
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines)
    if kind == 5 and lines:                               # duplicate a line
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "\n".join(lines)
    if kind == 6:                                         # change a dimension
        dims = re.findall(r"\b(\d+)x", text)
        if dims:
            d = rng.choice(dims)
            return text.replace(f"{d}x", f"{rng.choice([0, 1, 3, 7, 1024])}x", 1)
    if kind == 7:                                         # permute affine map results
        return text.replace("(d0, d1) -> (d0, d1)", "(d0, d1) -> (d1, d0)", 1)
    return text + "\n}"


def is_crash(rc: int, err: str) -> bool:
    return rc < 0 or rc > 1 or "LLVM ERROR" in err or "Assertion" in err or "Stack dump" in err


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--crashers", default=str(ROOT / "build" / "fuzz-crashers"))
    ap.add_argument("--opt", default=str(ROOT / "build" / "bin" / "mlircap-opt"))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    cases = corpus()
    out = Path(a.crashers)
    tried = crashes = 0
    seen = set()
    end = time.time() + a.seconds
    while time.time() < end:
        text = mutate(mutate(rng.choice(cases), rng), rng) if rng.random() < 0.3 else mutate(rng.choice(cases), rng)
        pipe = rng.choice(PIPELINES)
        try:
            r = subprocess.run([a.opt, "-", *pipe, "-o", "/dev/null"], input=text, capture_output=True,
                               text=True, timeout=30)
            rc, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired:
            rc, err = -999, "timeout"
        tried += 1
        if is_crash(rc, err):
            sig = re.sub(r"0x[0-9a-f]+|\d+", "N", (err.strip().splitlines() or ["?"])[0])[:200]
            if sig not in seen:
                seen.add(sig)
                crashes += 1
                out.mkdir(parents=True, exist_ok=True)
                path = out / f"crash{crashes}.mlir"
                path.write_text(f"// pipeline: {' '.join(pipe)}\n// rc={rc}: {sig}\n{text}\n")
                print(f"CRASH {path} ({' '.join(pipe)}): {sig}", flush=True)
    print(f"fuzz_opt: {tried} inputs tried in {a.seconds:.0f} s, {crashes} distinct crashes")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
