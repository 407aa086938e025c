"""Compile worker: the crash-prone compile stages run in a child process.

torch-mlir's lowering and the compiler core are native code; a segfault or an
LLVM abort in them must not end the user's process. The parent imports the FX
graph to raw torch IR (Python) and sends the text here; the worker runs
torch-mlir's pipelines to linalg and then the core's codegen for the target
(GPU: the launch plan, stored in the on-disk plan cache so the parent loads it
without compiling; CPU: the launch-plan compile, as a proof that the parent's
own compile of the same IR will succeed). A worker that dies is reported as
`WorkerCrashed` naming the stage it was in, and the graph runs eagerly; the
next compile starts a fresh worker.

One worker per process, started on first use (`prestart` starts it early,
so its imports overlap the user's first call). `MLIRCAP_COMPILE_WORKER=0`
compiles in-process instead; `MLIRCAP_COMPILE_TIMEOUT` (seconds, default 900)
bounds one compile.

Protocol: length-prefixed pickles over the worker's stdin and a dup of its
stdout (the worker's fd 1 goes to stderr, so stray prints cannot corrupt it).
Messages from the worker: {"stage": name} progress, then {"result": ...} or
{"error": ...}.
"""
from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time

from . import config, logs

_HEADER = struct.Struct("<Q")


def enabled() -> bool:
    return config.env_flag("MLIRCAP_COMPILE_WORKER")


def timeout_s() -> float:
    return float(config.env("MLIRCAP_COMPILE_TIMEOUT"))


class WorkerCrashed(RuntimeError):
    """The compile worker died (signal, abort) or timed out in `stage`."""

    def __init__(self, stage: str, how: str, ir: dict | None = None):
        self.stage, self.how = stage, how
        self.ir = ir or {}   # the IR the worker had made before it died (MLIRCAP_DUMP_DIR set)
        super().__init__(f"the compile worker {how} in stage '{stage}' (the graph runs eagerly; "
                         f"MLIRCAP_DUMP_DIR=dir saves its IR for a repro)")


class WorkerError(RuntimeError):
    """A compile stage in the worker raised (not a crash)."""

    def __init__(self, info: dict):
        self.info = info
        super().__init__(f"{info.get('type', 'Error')}: {info.get('message', '')}")


def _write(f, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_HEADER.pack(len(data)) + data)
    f.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read(fd: int, deadline: float | None = None):
    head = _read_exact(fd, _HEADER.size, deadline)
    if head is None:
        return None
    body = _read_exact(fd, _HEADER.unpack(head)[0], deadline)
    return None if body is None else pickle.loads(body)


def _reap(proc: subprocess.Popen) -> int:
    for f in (proc.stdin, proc.stdout):
        try:
            f.close()
        except OSError:
            pass
    return proc.wait()


class _Worker:
    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen([sys.executable, "-m", "mlircap.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        logs.log("progress", f"compile worker started (pid {self.proc.pid})")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            _reap(proc)

    def request(self, req: dict) -> dict:
        with self.lock:
            self.start()
            proc = self.proc
            stage, ir = "start", {}
            deadline = time.monotonic() + timeout_s()
            try:
                _write(proc.stdin, req)
                while True:
                    msg = _read(proc.stdout.fileno(), deadline)
                    if msg is None:
                        break
                    if "stage" in msg:
                        stage = msg["stage"]
                        ir.update(msg.get("ir") or {})
                        logs.log("progress", f"compile worker: {stage}")
                        continue
                    if "error" in msg:
                        raise WorkerError(msg["error"])
                    return msg["result"]
            except TimeoutError:
                self.stop()
                raise WorkerCrashed(stage, f"timed out after {timeout_s():.0f} s", ir) from None
            except (BrokenPipeError, OSError, EOFError, pickle.UnpicklingError):
                pass
            except WorkerError:   # the request's own answer: the conversation is in step
                raise
            except BaseException:
                # interrupted while the worker works on this request (Ctrl-C during a long
                # compile, a signal handler's exception): its answer would stay in the pipe
                # and answer the next request, whose graph was then built from this one's
                # IR (a silent wrong result where the two graphs' signatures agree). A
                # worker whose conversation is out of step is not reused.
                self.stop()
                raise
            rc = _reap(proc)
            self.proc = None
            how = (f"died with {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.Signals._value2member_map_
                   else f"exited with status {rc}")
            raise WorkerCrashed(stage, how, ir)


_worker = _Worker()
atexit.register(_worker.stop)


def prestart() -> None:
    """Start the worker now (its imports take seconds) if it is enabled."""
    if enabled():
        try:
            with _worker.lock:
                _worker.start()
        except OSError as e:
            logs.log("progress", f"compile worker could not start: {e}")


def settings() -> tuple[tuple[str, str | None], ...]:
    """This process's MLIRCAP_* settings now, and its sources' fingerprint: the worker compiles
    under them. It was started with the environment of its start: MLIRCAP_CACHE_DIR or
    MLIRCAP_CPU_CHANNELS_LAST set since then made it compile other IR than the parent's own
    compile, which its success is meant to prove safe, and fill another cache directory; and
    it hashed the package's sources when it started, the parent when it first compiled (a
    source edited in between: it filled entries under keys the parent never looks up)."""
    return tuple((k, os.environ.get(k)) for k in sorted(config.ENV)) + \
        (("code_fingerprint", config.code_fingerprint()),)


def _apply_settings(env: tuple | None) -> None:
    for k, v in env or ():
        if k == "code_fingerprint":
            config._FINGERPRINT[:] = [v]
        elif v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def compile_in_worker(raw_ir: str, device: str, chip: str, features: str, opt_level: int,
                      env: tuple | None = None) -> dict:
    """Runs `_compile` in the worker: {"torch_ir", "linalg_ir", "cpu_plan_error"}."""
    return _worker.request({"raw_ir": raw_ir, "device": device, "chip": chip, "features": features,
                            "opt_level": opt_level, "fault": config.env("MLIRCAP_WORKER_FAULT"),
                            "send_ir": bool(config.env("MLIRCAP_DUMP_DIR")),
                            "env": settings() if env is None else env})


def stage_in_worker(linalg_ir: str, stage: str, chip: str) -> str:
    """The text of a debugging stage of `linalg_ir` (see `stage_text`), computed in the
    worker: a pipeline that crashes on it raises WorkerCrashed, not SIGSEGV here."""
    return _worker.request({"stage_ir": linalg_ir, "stage": stage, "chip": chip})


def stage_text(linalg_ir: str, stage: str, chip: str) -> str:
    """fused (mlircap-fuse), llvm (mlircap-cpu-pipeline, the whole graph) or ptx."""
    from ._core import core

    if stage == "fused":
        return core().run_pipeline(linalg_ir, "mlircap-fuse")
    if stage == "llvm":
        return core().run_pipeline(linalg_ir, "mlircap-cpu-pipeline")
    return core().to_ptx(linalg_ir, chip=chip)


def _compile(req: dict, report) -> dict:
    """The worker's job (also the in-process path's steps)."""
    from .frontend import lower_torch_ir

    _apply_settings(req.get("env"))
    if "stage_ir" in req:
        report(f"mlircap {req['stage']} stage")
        return stage_text(req["stage_ir"], req["stage"], req["chip"])
    # fault injection for the isolation tests: abort, segv, hang, codegen-abort, and
    # lowering-segv:TEXT (a crash in torch-mlir's lowering of a graph whose IR holds TEXT)
    fault = req.get("fault")
    if fault and fault != "codegen-abort" and not fault.startswith("lowering-segv:"):
        report(f"fault injection ({fault})")
        if fault == "hang":
            time.sleep(3600)
        os.kill(os.getpid(), signal.SIGABRT if fault == "abort" else signal.SIGSEGV)
    report("torch-mlir lowering (torch -> linalg)")
    if fault and fault.startswith("lowering-segv:") and fault.split(":", 1)[1] in req["raw_ir"]:
        os.kill(os.getpid(), signal.SIGSEGV)
    fe = lower_torch_ir(req["raw_ir"])
    out = {"torch_ir": fe.torch_ir, "linalg_ir": fe.linalg_ir, "cpu_plan_error": None}
    if req["device"] == "none":
        return out
    # With MLIRCAP_DUMP_DIR set the parent gets the IR before codegen, so that a codegen
    # crash here still leaves linalg.mlir for a repro (`mlircap-opt --mlircap-gpu-pipeline`).
    ir = {"torch_ir": fe.torch_ir, "linalg_ir": fe.linalg_ir} if req.get("send_ir") else None
    if fault == "codegen-abort":   # dies in codegen, after lowering
        report("mlircap codegen (fault injection)", ir)
        os.kill(os.getpid(), signal.SIGABRT)
    if req["device"] == "cuda":
        from .runtime.cuda import compile_plan

        report("mlircap GPU codegen", ir)
        out["plan_cache_hit"] = compile_plan(fe.linalg_ir, req["chip"], req["features"])[1]
    else:
        from .runtime.cpu import compile_cpu

        report("mlircap CPU codegen + JIT", ir)
        try:   # fills the CPU compile cache: the caller loads what this compiled
            compile_cpu(fe.linalg_ir, req["opt_level"])
        except RuntimeError as e:   # the plan builder rejected the graph
            out["cpu_plan_error"] = str(e)
    return out


def _serve() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                  # stray prints from native code go to stderr
    inp = sys.stdin.buffer
    while True:
        req = _read(inp.fileno())
        if req is None:
            return
        try:
            _write(out, {"result": _compile(req, lambda stage, ir=None: _write(out, {"stage": stage, "ir": ir}))})
        except Exception as e:  # noqa: BLE001 - every error goes back to the parent
            from .frontend import FrontendError

            info = {"type": type(e).__name__, "message": str(e)}
            if isinstance(e, FrontendError):
                info.update(frontend=True, stage=e.stage, unsupported=e.unsupported)
            _write(out, {"error": info})


if __name__ == "__main__":
    _serve()
