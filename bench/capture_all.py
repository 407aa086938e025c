"""Capture rate over every corpus: bench/capture.py's runner (mlircap.capture with an eager
backend against torch.compile(backend=counting) / Dynamo, capture only, no mlircap compiler)
on the cases of bench/capture.py, capture2-4.py and bench/modules.py (its own cases and
modules2-4.py's), modules5-7.py and capture5.py (Python idioms: dataclass configs, enums, partials,
registries, **kwargs wrappers, mixins, generators, try/except, NamedTuple outputs, recursion over
nested containers; registered as modules5-7.py's are) and capture6.py (training loops, grad-mode and
autocast blocks, contextmanager helpers, caches, decorated helpers, match / walrus, exceptions for
control flow, hand-written einops).  Cases whose eager call raises (the
error-parity cases of the modules corpora) are left out.

    PYTHONPATH=python python bench/capture_all.py [--jobs 2] [--no-dynamo] [--filter A,B] [--corpus capture2,modules7]

Prints the summary table (at most one graph with outputs ok / exactly one graph / breaks per
case / wrong) for both fronts, the cases not captured as one graph, and the most common
causes of capture giving up on a function and of graph breaks (ours)."""
import argparse
import collections
import multiprocessing
import re
import signal
import statistics
import warnings

import capture as bench  # noqa: E402  (bench/capture.py: Python puts this script's folder first on sys.path)

CORPORA = ("capture", "capture2", "capture3", "capture4", "modules", "modules2", "modules3", "modules4",
           "modules5", "modules6", "modules7", "capture5", "capture6")


def load_cases(corpora):
    """(corpus, name, factory, inputs, train, mutate, context, ncalls) of the corpora named."""
    import importlib

    out, seen = [], set()
    for corpus in corpora:
        if corpus == "capture":
            raw = [(n, f, i, t, mu, None, None) for n, f, i, t, mu in bench.CASES[:_FIRST_LEN]]
        elif corpus in ("capture2", "capture3", "capture4"):
            mod = importlib.import_module(corpus)
            raw = [(n, f, i, t, mu, None, None) for n, f, i, t, mu in mod.CASES]
        elif corpus == "modules":
            mod = importlib.import_module("modules")
            raw = [(n, f, i, t, None, None, None) for n, f, i, t in mod.NEW_CASES]
        elif corpus in ("modules2", "modules3", "modules4"):
            mod = importlib.import_module(corpus)
            raw = [(n, f, i, t, None, None, None) for n, f, i, t in mod.CASES]
        else:
            mod = importlib.import_module(corpus)
            raw = [(n, f, i, t, x.get("between"), x.get("context"), x.get("ncalls")) for n, f, i, t, x in mod.CASES]
        for r in raw:
            if r[0] not in seen:
                seen.add(r[0])
                out.append((corpus,) + r)
    return out


_FIRST_LEN = len(bench.CASES)   # (capture2-4.py add their cases to bench/capture.py's list)
_CASES = {}


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def run_one(args):
    name, dynamo, timeout = args
    corpus, name, factory, inputs, train, mutate, context, ncalls = _CASES[name]
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    res = {"name": name, "corpus": corpus}
    for front, run in (("mine", bench.run_mine), ("dyn", bench.run_dynamo if dynamo else None)):
        if run is None:
            continue
        signal.alarm(timeout)
        try:
            res[front] = run(name, factory, inputs, train, mutate, context, ncalls)
        except _Timeout:
            res[front] = {"error": "timeout"}
        except Exception as e:  # noqa: BLE001
            res[front] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"}
        finally:
            signal.alarm(0)
    return res


def _worker_init():
    warnings.simplefilter("ignore")
    bench.BACKEND = bench._eager_backend


def _short(reason):
    """A cause with its file:line, values and object ids taken out, to count alike ones together."""
    r = re.sub(r" at \S+:\d+.*", "", reason or "")
    r = re.sub(r"\(reached from .*\)", "", r)
    r = re.sub(r"0x[0-9a-f]+", "0x", r)
    r = re.sub(r"\(\([^)]*\) \w+\)", "(...)", r)
    return " ".join(r.split())[:150]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--no-dynamo", action="store_true")
    ap.add_argument("--filter", default="")
    ap.add_argument("--corpus", default=",".join(CORPORA))
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    bench.BACKEND = bench._eager_backend
    for c in load_cases(a.corpus.split(",")):
        if a.filter and not any(f in c[1] for f in a.filter.split(",")):
            continue
        _CASES[c[1]] = c
    work = [(n, not a.no_dynamo, a.timeout) for n in _CASES]
    if a.jobs > 1:
        with multiprocessing.get_context("fork").Pool(a.jobs, initializer=_worker_init, maxtasksperchild=20) as pool:
            results = list(pool.imap(run_one, work, chunksize=1))
    else:
        results = [run_one(w) for w in work]
    # cases whose eager call raises (error parity of the modules corpora): not capture cases
    errs = [r for r in results if "error" in r["mine"]]
    rows = [r for r in results if "error" not in r["mine"]]
    print(f"cases: {len(results)} ({len(errs)} left out: eager raised or the runner failed)")
    for r in errs:
        print(f"  left out {r['name']}: {r['mine']['error']}")
    n = len(rows)
    fronts = [("ours", "mine")] + ([] if a.no_dynamo else [("dynamo", "dyn")])
    print(f"{'':8s} {'<=1 graph ok':>13s} {'1 graph':>8s} {'brk/case':>9s} {'eager':>6s} {'wrong':>6s}")
    for front, key in fronts:
        rs = [r.get(key, {}) for r in rows]
        le1 = sum(1 for d in rs if d.get("graphs") is not None and d["graphs"] <= 1 and not d.get("breaks")
                  and not d.get("eager") and d.get("ok"))
        one = sum(1 for d in rs if d.get("full"))
        bk = [d["breaks"] for d in rs if d.get("breaks") is not None]
        print(f"{front:8s} {100.0 * le1 / n:12.1f}% {100.0 * one / n:7.1f}% "
              f"{statistics.mean(bk) if bk else float('nan'):9.3f} {sum(bool(d.get('eager')) for d in rs):6d} "
              f"{sum(1 for d in rs if not d.get('ok')):6d}")
    print("\nnot one graph (ours):  graphs breaks eager | dynamo graphs breaks")
    for r in rows:
        m, d = r["mine"], r.get("dyn", {})
        if not m["full"] or a.verbose:
            ds = f"{d.get('graphs')} {d.get('breaks')}{' E' if d.get('eager') else ''}" if d else "-"
            why = _short(m.get("eager_reason") or "; ".join(m.get("break_reasons") or []))
            print(f"  {r['corpus']:9s} {r['name']:44s} {m['graphs']:3d} {m['breaks']:3d} {'E' if m['eager'] else ' '}"
                  f"{' BAD' if not m['ok'] else ''} | {ds:10s} {why}")
    wrong = [r["name"] for r in rows if not r["mine"]["ok"]]
    if wrong:
        print("INCORRECT (ours):", wrong)
    gave_up = collections.Counter(_short(r["mine"]["eager_reason"]) for r in rows if r["mine"].get("eager_reason"))
    breaks = collections.Counter(_short(b) for r in rows for b in r["mine"].get("break_reasons") or [])
    print("\ncapture gave up (ours), by cause:")
    for k, v in gave_up.most_common(15):
        print(f"  {v:4d}  {k}")
    print("graph breaks (ours, first call), by cause:")
    for k, v in breaks.most_common(15):
        print(f"  {v:4d}  {k}")


if __name__ == "__main__":
    main()
