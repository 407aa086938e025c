// TensorMetas: the metadata of many tensors (Python type, dispatch keys as the thread-local
// include/exclude sets apply them, dtype, device index, requires_grad, sizes, strides) checked
// in one call, for the merged tensor guard of a capture variant (guard_kinds.TensorMatchAll).
// The same facts as torch's TensorGuards (torch/csrc/dynamo/guards.cpp, TensorCheck), without
// its per-tensor SymInt and optional handling: plain strided tensors only (the constructor
// rejects others; the caller then uses TensorGuards).  Built on first use by _tensor_ext.py.
// DataPtrs: the data pointers and dtypes of the inputs a CUDA graph uses in place, checked
// in one call per replay (runtime/cuda.py, _StaticInputs).
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdint>
#include <vector>

static const char *kApiTag = "mlircap-tensor-meta-api-2";

namespace {

struct Meta {
  PyTypeObject *type;
  uint64_t keys;
  int8_t dtype;
  int16_t dev_index;
  bool requires_grad;
  int32_t ndim;
  int32_t off; // sizes at dims[off], strides at dims[off + ndim]
};

struct TensorMetas {
  PyObject_HEAD
      std::vector<Meta> *metas;
  std::vector<int64_t> *dims;
};

inline uint64_t applied(c10::DispatchKeySet ks, const c10::impl::LocalDispatchKeySet &tls) {
  return ((ks | tls.included_) - tls.excluded_).raw_repr();
}

// a dense strided tensor whose sizes and strides are plain integers (no Python dispatch,
// no symbolic or custom sizes)
inline bool plain(const c10::TensorImpl *impl) {
  return !impl->has_symbolic_sizes_strides() && impl->layout() == c10::kStrided &&
         !impl->key_set().has(c10::DispatchKey::Python) && !impl->is_nested();
}

PyObject *tm_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
  if (kw != nullptr && PyDict_Size(kw) != 0) {
    PyErr_SetString(PyExc_TypeError, "TensorMetas takes tensors only");
    return nullptr;
  }
  auto *self = reinterpret_cast<TensorMetas *>(tp->tp_alloc(tp, 0));
  if (self == nullptr) return nullptr;
  self->metas = new std::vector<Meta>();
  self->dims = new std::vector<int64_t>();
  auto tls = c10::impl::tls_local_dispatch_key_set();
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PyTuple_GET_ITEM(args, i);
    if (!THPVariable_Check(o)) {
      PyErr_SetString(PyExc_TypeError, "TensorMetas: not a tensor");
      Py_DECREF(self);
      return nullptr;
    }
    const at::Tensor &t = THPVariable_Unpack(o);
    const c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    if (!plain(impl)) {
      PyErr_SetString(PyExc_TypeError, "TensorMetas: not a plain strided tensor");
      Py_DECREF(self);
      return nullptr;
    }
    Meta m{Py_TYPE(o), applied(impl->key_set(), tls), static_cast<int8_t>(impl->dtype().toScalarType()),
           static_cast<int16_t>(impl->device().index()), t.requires_grad(), static_cast<int32_t>(impl->dim()),
           static_cast<int32_t>(self->dims->size())};
    for (int64_t s : impl->sizes()) self->dims->push_back(s);
    for (int64_t s : impl->strides()) self->dims->push_back(s);
    self->metas->push_back(m);
  }
  return reinterpret_cast<PyObject *>(self);
}

void tm_dealloc(TensorMetas *self) {
  delete self->metas;
  delete self->dims;
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

// check(*tensors) -> bool: every tensor has the metadata its example had
PyObject *tm_check(TensorMetas *self, PyObject *const *args, Py_ssize_t n) {
  const auto &metas = *self->metas;
  if (static_cast<size_t>(n) != metas.size()) Py_RETURN_FALSE;
  auto tls = c10::impl::tls_local_dispatch_key_set();
  const int64_t *dims = self->dims->data();
  for (Py_ssize_t i = 0; i < n; i++) {
    const Meta &m = metas[i];
    PyObject *o = args[i];
    if (Py_TYPE(o) != m.type) Py_RETURN_FALSE; // (a tensor type: the example's)
    const at::Tensor &t = THPVariable_Unpack(o);
    const c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    if (applied(impl->key_set(), tls) != m.keys || !plain(impl) ||
        static_cast<int8_t>(impl->dtype().toScalarType()) != m.dtype || impl->device().index() != m.dev_index ||
        t.requires_grad() != m.requires_grad || impl->dim() != m.ndim)
      Py_RETURN_FALSE;
    auto sizes = impl->sizes();
    auto strides = impl->strides();
    const int64_t *d = dims + m.off;
    for (int32_t k = 0; k < m.ndim; k++)
      if (sizes[k] != d[k] || strides[k] != d[m.ndim + k]) Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

PyObject *tm_len(TensorMetas *self, PyObject *) { return PyLong_FromSize_t(self->metas->size()); }

PyMethodDef tm_methods[] = {
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(tm_check)), METH_FASTCALL,
     "check(*tensors): each tensor has its example's type, dispatch keys, dtype, device, requires_grad, "
     "sizes and strides"},
    {"size", reinterpret_cast<PyCFunction>(tm_len), METH_NOARGS, "how many tensors"},
    {nullptr, nullptr, 0, nullptr}};

struct DataPtrs {
  PyObject_HEAD
      std::vector<Py_ssize_t> *idx;
  std::vector<const void *> *ptrs;
  std::vector<int8_t> *dtypes;
};

// DataPtrs(idx: tuple[int], tensors: tuple): tensors[k] is args[idx[k]] at capture
PyObject *dp_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
  PyObject *idx = nullptr, *tensors = nullptr;
  if ((kw != nullptr && PyDict_Size(kw) != 0) || !PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &idx, &PyTuple_Type, &tensors))
    return nullptr;
  if (PyTuple_GET_SIZE(idx) != PyTuple_GET_SIZE(tensors)) {
    PyErr_SetString(PyExc_ValueError, "DataPtrs: idx and tensors differ in length");
    return nullptr;
  }
  auto *self = reinterpret_cast<DataPtrs *>(tp->tp_alloc(tp, 0));
  if (self == nullptr) return nullptr;
  self->idx = new std::vector<Py_ssize_t>();
  self->ptrs = new std::vector<const void *>();
  self->dtypes = new std::vector<int8_t>();
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(idx); k++) {
    Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(idx, k));
    PyObject *o = PyTuple_GET_ITEM(tensors, k);
    if ((i < 0 && PyErr_Occurred()) || i < 0 || !THPVariable_Check(o)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "DataPtrs: an index >= 0 and a tensor expected");
      Py_DECREF(self);
      return nullptr;
    }
    const at::Tensor &t = THPVariable_Unpack(o);
    self->idx->push_back(i);
    self->ptrs->push_back(t.const_data_ptr());
    self->dtypes->push_back(static_cast<int8_t>(t.scalar_type()));
  }
  return reinterpret_cast<PyObject *>(self);
}

void dp_dealloc(DataPtrs *self) {
  delete self->idx;
  delete self->ptrs;
  delete self->dtypes;
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

// match(args: tuple | list) -> bool: args[idx[k]] is a tensor with the data pointer and dtype
// tensors[k] had
PyObject *dp_match(DataPtrs *self, PyObject *seq) {
  if (!PyTuple_Check(seq) && !PyList_Check(seq)) {
    PyErr_SetString(PyExc_TypeError, "DataPtrs.match: a tuple or list expected");
    return nullptr;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject **items = PySequence_Fast_ITEMS(seq);
  const auto &idx = *self->idx;
  for (size_t k = 0; k < idx.size(); k++) {
    if (idx[k] >= n) Py_RETURN_FALSE;
    PyObject *o = items[idx[k]];
    if (!THPVariable_Check(o)) Py_RETURN_FALSE;
    const at::Tensor &t = THPVariable_Unpack(o);
    if (t.const_data_ptr() != (*self->ptrs)[k] || static_cast<int8_t>(t.scalar_type()) != (*self->dtypes)[k])
      Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

PyMethodDef dp_methods[] = {
    {"match", reinterpret_cast<PyCFunction>(dp_match), METH_O,
     "match(args): args[idx[k]] has the data pointer and dtype of tensors[k] at construction"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject DataPtrsType = {PyVarObject_HEAD_INIT(nullptr, 0) "_mlircap_tensor_meta.DataPtrs"};

PyTypeObject TensorMetasType = {PyVarObject_HEAD_INIT(nullptr, 0) "_mlircap_tensor_meta.TensorMetas"};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_mlircap_tensor_meta", nullptr, -1, nullptr};

// fills in and readies one of the module's types; false on error (Python's exception set)
bool ready(PyTypeObject &t, Py_ssize_t size, newfunc make, destructor free, PyMethodDef *methods, const char *doc) {
  t.tp_basicsize = size;
  t.tp_flags = Py_TPFLAGS_DEFAULT;
  t.tp_new = make;
  t.tp_dealloc = free;
  t.tp_methods = methods;
  t.tp_doc = doc;
  return PyType_Ready(&t) >= 0;
}

} // namespace

PyMODINIT_FUNC PyInit__mlircap_tensor_meta() {
  if (!ready(TensorMetasType, sizeof(TensorMetas), tm_new, reinterpret_cast<destructor>(tm_dealloc), tm_methods,
             "the metadata of many tensors, checked in one call") ||
      !ready(DataPtrsType, sizeof(DataPtrs), dp_new, reinterpret_cast<destructor>(dp_dealloc), dp_methods,
             "data pointers and dtypes of tensors at given argument positions, checked in one call"))
    return nullptr;
  PyObject *m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  Py_INCREF(&TensorMetasType);
  PyModule_AddObject(m, "TensorMetas", reinterpret_cast<PyObject *>(&TensorMetasType));
  Py_INCREF(&DataPtrsType);
  PyModule_AddObject(m, "DataPtrs", reinterpret_cast<PyObject *>(&DataPtrsType));
  PyModule_AddIntConstant(m, "API_VERSION", 2);
  PyModule_AddStringConstant(m, "API_TAG", kApiTag);
  return m;
}
