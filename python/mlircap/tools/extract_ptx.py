"""Extract the PTX that `gpu-module-to-binary{format=isa}` stored in gpu.binary ops.

    mlircap-opt k.mlir --mlircap-gpu-pipeline | python -m mlircap.tools.extract_ptx -o out.ptx

Writes every kernel module's PTX (concatenated, each assembles on its own with
ptxas when written with --split DIR: one file per module).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .. import config

_BINARY = re.compile(r'gpu\.binary @(\w+)\s.*?assembly = "((?:[^"\\]|\\.)*)"', re.S)


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt in '"\\':
                out.append(nxt)
                i += 2
                continue
            if re.fullmatch(r"[0-9A-Fa-f]{2}", s[i + 1:i + 3]):
                out.append(chr(int(s[i + 1:i + 3], 16)))
                i += 3
                continue
        out.append(c)
        i += 1
    return "".join(out)


def extract(text: str) -> dict[str, str]:
    """{kernel module name: PTX text} for every gpu.binary in `text`."""
    return {m.group(1): _unescape(m.group(2)) for m in _BINARY.finditer(text)}


def _assemble(ptxas: str, mods: dict[str, str]) -> int:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for name, ptx in mods.items():
            m = re.search(r"^\.target\s+(sm_\w+)", ptx, re.M)
            arch = m.group(1) if m else config.DEFAULT_CHIP
            src = Path(d) / f"{name}.ptx"
            src.write_text(ptx)
            r = subprocess.run([ptxas, f"-arch={arch}", str(src), "-o", str(src.with_suffix(".cubin"))],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(f"ptxas failed on {name}:\n{r.stderr}")
                return 1
    print(f"ptxas ok: {len(mods)} module(s)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("input", nargs="?", default="-")
    ap.add_argument("-o", "--output", default="-", help="concatenated PTX")
    ap.add_argument("--split", metavar="DIR", help="write DIR/<module>.ptx per module")
    ap.add_argument("--ptxas", metavar="PTXAS", help="assemble each module with this ptxas; fail if any fails")
    a = ap.parse_args(argv)
    text = sys.stdin.read() if a.input == "-" else Path(a.input).read_text()
    mods = extract(text)
    if not mods:
        sys.stderr.write("extract_ptx: no gpu.binary with PTX assembly found\n")
        return 1
    if a.split:
        d = Path(a.split)
        d.mkdir(parents=True, exist_ok=True)
        for name, ptx in mods.items():
            (d / f"{name}.ptx").write_text(ptx)
    if a.ptxas:
        return _assemble(a.ptxas, mods)
    joined = "".join(f"// mlircap-kernel-module: {n}\n{p}\n" for n, p in mods.items())
    if a.output == "-":
        sys.stdout.write(joined)
    else:
        Path(a.output).write_text(joined)
    return 0


if __name__ == "__main__":
    sys.exit(main())
