// PEP 523 frame-evaluation hook + frame introspection helpers for mlircap.capture.
// Supports CPython 3.11 and 3.12 (internal frame layout differs; guarded by PY_VERSION_HEX).
#define PY_SSIZE_T_CLEAN
#include <pybind11/pybind11.h>

#include <cstring>
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

namespace py = pybind11;

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "mlircap evalframe supports CPython 3.11 and 3.12 only"
#endif

#if PY_VERSION_HEX >= 0x030C0000
// 3.12 builds the core with -fvisibility=hidden, so _PyFrame_ClearExceptCode and
// _PyThreadState_PopFrame are not exported.  This is the subset we need for a fresh
// frame that never got a frame object and is not the first frame of a stack chunk
// (both conditions are checked before the frame is intercepted).
static bool can_skip_312(PyThreadState *tstate, _PyInterpreterFrame *frame) {
  return frame->frame_obj == nullptr && frame->owner == FRAME_OWNED_BY_THREAD &&
         (PyObject **)frame != &tstate->datastack_chunk->data[0];
}
static void clear_and_pop_312(PyThreadState *tstate, _PyInterpreterFrame *frame) {
  for (int i = 0; i < frame->stacktop; i++) Py_XDECREF(frame->localsplus[i]);
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  tstate->datastack_top = (PyObject **)frame;
}
#endif

static PyObject *g_callback = nullptr;   // callable(code, func, args_tuple) -> result | g_notHandled
static PyObject *g_registry = nullptr;   // set of code objects
static PyObject *g_nullSentinel = nullptr;
static PyObject *g_notHandled = nullptr;
static thread_local int g_skip = 0;      // >0: next registered frame runs normally
static thread_local int g_inCallback = 0;
static _PyFrameEvalFunction g_prev = nullptr;
static bool g_installed = false;

static inline PyCodeObject *frame_code(_PyInterpreterFrame *f) { return f->f_code; }
static inline PyObject *frame_func(_PyInterpreterFrame *f) {
#if PY_VERSION_HEX >= 0x030C0000
  return f->f_funcobj;
#else
  return (PyObject *)f->f_func;
#endif
}

static PyObject *custom_eval(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag) {
  PyCodeObject *code = frame_code(frame);
  if (throwflag || g_callback == nullptr || g_inCallback || (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))) {
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  }
  int contains = PySet_Contains(g_registry, (PyObject *)code);
  if (contains <= 0) {
    if (contains < 0) PyErr_Clear();
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  }
  if (g_skip > 0) {
    g_skip--;
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  }
#if PY_VERSION_HEX >= 0x030C0000
  if (!can_skip_312(tstate, frame)) return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
#endif
  // Arguments are bound by CPython already: the first n fast locals.
  int n = code->co_argcount + code->co_kwonlyargcount;
  if (code->co_flags & CO_VARARGS) n++;
  if (code->co_flags & CO_VARKEYWORDS) n++;
  PyObject *args = PyTuple_New(n);
  if (!args) return nullptr;
  for (int i = 0; i < n; i++) {
    PyObject *v = frame->localsplus[i];
    if (!v) v = Py_None;
    Py_INCREF(v);
    PyTuple_SET_ITEM(args, i, v);
  }
  g_inCallback++;
  PyObject *res = PyObject_CallFunctionObjArgs(g_callback, (PyObject *)code, frame_func(frame), args, nullptr);
  g_inCallback--;
  Py_DECREF(args);
  if (res == g_notHandled) {
    Py_DECREF(res);
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  }
#if PY_VERSION_HEX >= 0x030C0000
  // 3.12: the evaluator owns frame cleanup; we skipped it, so clear and pop here.
  clear_and_pop_312(tstate, frame);
#endif
  // 3.11: _PyEval_Vector clears and pops the frame after we return.
  return res;
}

static void install() {
  if (g_installed) return;
  PyThreadState *ts = PyThreadState_Get();
  g_prev = _PyInterpreterState_GetEvalFrameFunc(ts->interp);
  _PyInterpreterState_SetEvalFrameFunc(ts->interp, custom_eval);
  g_installed = true;
}
static void uninstall() {
  if (!g_installed) return;
  PyThreadState *ts = PyThreadState_Get();
  _PyInterpreterState_SetEvalFrameFunc(ts->interp, g_prev);
  g_installed = false;
}

static _PyInterpreterFrame *iframe(py::handle f) {
  if (!PyFrame_Check(f.ptr())) throw py::type_error("frame expected");
  return ((PyFrameObject *)f.ptr())->f_frame;
}

// Dict version tags for the guards' fast path (guard_kinds.AllDictVersions): a dict's
// ma_version_tag changes on every mutation (3.12: also when a watcher is added, which only
// makes the fast path fail), so unchanged tags mean unchanged contents.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static uint64_t version_of(PyObject *d) { return ((PyDictObject *)d)->ma_version_tag; }
#pragma GCC diagnostic pop

// dict_version(d) -> int
static PyObject *dict_version(PyObject *, PyObject *d) {
  if (!PyDict_Check(d)) {
    PyErr_SetString(PyExc_TypeError, "dict_version: a dict is expected");
    return nullptr;
  }
  return PyLong_FromUnsignedLongLong(version_of(d));
}

// dicts_unchanged(dicts: tuple, versions: bytes of native uint64) -> bool
static PyObject *dicts_unchanged(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "dicts_unchanged(dicts: tuple, versions: bytes)");
    return nullptr;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
  if (PyBytes_GET_SIZE(args[1]) != n * (Py_ssize_t)sizeof(uint64_t)) Py_RETURN_FALSE;
  const char *vs = PyBytes_AS_STRING(args[1]);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *d = PyTuple_GET_ITEM(args[0], i);
    uint64_t v;
    memcpy(&v, vs + i * sizeof(uint64_t), sizeof(v));
    if (!PyDict_Check(d) || version_of(d) != v) Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

// funcs_unchanged(funcs: tuple, expected: tuple) -> bool: expected holds, for each function,
// its __code__, __defaults__ and __kwdefaults__ (None for none), compared by identity
// (guard_kinds.FunctionCodes).
static PyObject *funcs_unchanged(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "funcs_unchanged(funcs: tuple, expected: tuple)");
    return nullptr;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
  if (PyTuple_GET_SIZE(args[1]) != 3 * n) Py_RETURN_FALSE;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *f = PyTuple_GET_ITEM(args[0], i);
    if (!PyFunction_Check(f)) Py_RETURN_FALSE;
    PyObject *const *e = &PyTuple_GET_ITEM(args[1], 3 * i);
    PyObject *d = PyFunction_GET_DEFAULTS(f), *kd = PyFunction_GET_KW_DEFAULTS(f);
    if (PyFunction_GET_CODE(f) != e[0] || (d ? d : Py_None) != e[1] || (kd ? kd : Py_None) != e[2])
      Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

// cells_hold(cells: tuple, expected: tuple) -> bool: each cell holds the expected object
// (identity; an empty cell holds nothing).
static PyObject *cells_hold(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "cells_hold(cells: tuple, expected: tuple)");
    return nullptr;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
  if (PyTuple_GET_SIZE(args[1]) != n) Py_RETURN_FALSE;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *c = PyTuple_GET_ITEM(args[0], i);
    if (!PyCell_Check(c) || PyCell_GET(c) == nullptr || PyCell_GET(c) != PyTuple_GET_ITEM(args[1], i))
      Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

// types_hold(objs: tuple, types: tuple) -> bool: type(objs[i]) is types[i] for each i (the
// modules a variant calls: `m.__class__ = Other` keeps the object; guard_batches.TypesHold).
static PyObject *types_hold(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "types_hold(objs: tuple, types: tuple)");
    return nullptr;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
  if (PyTuple_GET_SIZE(args[1]) != n) Py_RETURN_FALSE;
  for (Py_ssize_t i = 0; i < n; i++) {
    if ((PyObject *)Py_TYPE(PyTuple_GET_ITEM(args[0], i)) != PyTuple_GET_ITEM(args[1], i))
      Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

static PyMethodDef g_fast_methods[] = {
    {"types_hold", (PyCFunction)(void (*)(void))types_hold, METH_FASTCALL, "each object has its type"},
    {"funcs_unchanged", (PyCFunction)(void (*)(void))funcs_unchanged, METH_FASTCALL,
     "each function keeps its code, defaults and keyword defaults"},
    {"cells_hold", (PyCFunction)(void (*)(void))cells_hold, METH_FASTCALL, "each cell holds its object"},
    {"dict_version", (PyCFunction)dict_version, METH_O, "the version tag of a dict"},
    {"dicts_unchanged", (PyCFunction)(void (*)(void))dicts_unchanged, METH_FASTCALL,
     "all dicts still have these version tags"},
    {nullptr, nullptr, 0, nullptr}};

PYBIND11_MODULE(_mlircap_evalframe, m) {
  if (PyModule_AddFunctions(m.ptr(), g_fast_methods) < 0) throw py::error_already_set();
  g_registry = PySet_New(nullptr);
  g_nullSentinel = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
  g_notHandled = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
  // The loader looks for this tag in a prebuilt binary before importing it: a stale
  // build imported first would shadow the fresh one (same module name).
  static const char kApiTag[] = "mlircap-evalframe-api-5";
  m.attr("API_VERSION") = 5;
  m.attr("API_TAG") = kApiTag;
  m.attr("NULL") = py::handle(g_nullSentinel);
  m.attr("NOT_HANDLED") = py::handle(g_notHandled);
  m.def("set_callback", [](py::object cb) {
    Py_XDECREF(g_callback);
    if (cb.is_none()) { g_callback = nullptr; uninstall(); return; }
    g_callback = cb.release().ptr();
    install();
  });
  m.def("register_code", [](py::object code) { PySet_Add(g_registry, code.ptr()); });
  m.def("unregister_code", [](py::object code) { PySet_Discard(g_registry, code.ptr()); });
  // While the callback runs, no frame is intercepted. A frame the callback runs as it is,
  // whose callees are captured on their own (callees._Callees.run), lifts that for its
  // duration: suspend_callback() -> the depth to hand back to resume_callback(depth).
  m.def("suspend_callback", []() { int d = g_inCallback; g_inCallback = 0; return d; });
  m.def("resume_callback", [](int d) { g_inCallback = d; });
  m.def("skip_next", []() { g_skip++; });
  m.def("clear_skip", []() { g_skip = 0; });
  // Stack introspection for the opcode tracer (valid inside a trace callback,
  // where CPython has saved the stack pointer into the frame).
  m.def("stack_depth", [](py::handle f) {
    _PyInterpreterFrame *fr = iframe(f);
    return fr->stacktop - fr->f_code->co_nlocalsplus;
  });
  m.def("peek", [](py::handle f, int n) -> py::object {
    _PyInterpreterFrame *fr = iframe(f);
    int depth = fr->stacktop - fr->f_code->co_nlocalsplus;
    if (n < 0 || n >= depth) throw py::index_error("stack peek out of range");
    PyObject *v = fr->localsplus[fr->stacktop - 1 - n];
    if (!v) return py::reinterpret_borrow<py::object>(g_nullSentinel);
    return py::reinterpret_borrow<py::object>(v);
  });
  // 3.12 does not save the stack pointer before INSTRUCTION events; the caller passes the
  // statically computed stack depth of the current instruction instead.
  m.def("peek_at", [](py::handle f, int depth, int n) -> py::object {
    _PyInterpreterFrame *fr = iframe(f);
    if (n < 0 || n >= depth || depth > fr->f_code->co_stacksize)
      throw py::index_error("stack peek out of range");
    PyObject *v = fr->localsplus[fr->f_code->co_nlocalsplus + depth - 1 - n];
    if (!v) return py::reinterpret_borrow<py::object>(g_nullSentinel);
    return py::reinterpret_borrow<py::object>(v);
  });
  // Replace a value-stack entry (valid inside an opcode trace callback, before the
  // instruction runs): the tracer swaps the callable of a CALL for a stand-in, or the
  // argument iterable of CALL_FUNCTION_EX for the tuple it already consumed.
  m.def("poke", [](py::handle f, int n, py::object value) {
    _PyInterpreterFrame *fr = iframe(f);
    int depth = fr->stacktop - fr->f_code->co_nlocalsplus;
    if (n < 0 || n >= depth) throw py::index_error("stack poke out of range");
    PyObject **slot = &fr->localsplus[fr->stacktop - 1 - n];
    PyObject *old = *slot;
    *slot = value.release().ptr();
    Py_XDECREF(old);
  });
  m.def("poke_at", [](py::handle f, int depth, int n, py::object value) {
    _PyInterpreterFrame *fr = iframe(f);
    if (n < 0 || n >= depth || depth > fr->f_code->co_stacksize)
      throw py::index_error("stack poke out of range");
    PyObject **slot = &fr->localsplus[fr->f_code->co_nlocalsplus + depth - 1 - n];
    PyObject *old = *slot;
    *slot = value.release().ptr();
    Py_XDECREF(old);
  });
  m.def("local_raw", [](py::handle f, int i) -> py::object {
    _PyInterpreterFrame *fr = iframe(f);
    if (i < 0 || i >= fr->f_code->co_nlocalsplus) throw py::index_error("local out of range");
    PyObject *v = fr->localsplus[i];
    if (!v) return py::reinterpret_borrow<py::object>(g_nullSentinel);
    return py::reinterpret_borrow<py::object>(v);
  });
}
