// _mlircap: the pybind11 binding over libmlircap_core.so's C API.
//
// Deliberately thin: strings in and out, an engine handle, and a fast path that
// builds memref descriptors over raw tensor pointers and calls JIT code.
// Includes no MLIR header, so it builds in seconds for any Python.
#include "mlircap-c/Core.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {
struct CompileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string takeString(char *s) {
  if (!s)
    throw CompileError(mlircap_last_error());
  std::string out(s);
  mlircap_free(s);
  return out;
}

struct Engine {
  void *handle;
  explicit Engine(void *h) : handle(h) {}
  ~Engine() { mlircap_cpu_destroy(handle); }
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  std::uintptr_t lookup(const std::string &name) {
    void *fn = mlircap_cpu_lookup(handle, name.c_str());
    if (!fn)
      throw CompileError(mlircap_last_error());
    return reinterpret_cast<std::uintptr_t>(fn);
  }
};

using Packed = void (*)(void **);

/// Calls a packed C-interface function. Each argument is
/// (data_ptr, sizes, strides) in elements; a descriptor
/// {allocated, aligned, offset=0, sizes..., strides...} is built for it.
void callPacked(std::uintptr_t fn, const py::list &args) {
  size_t n = args.size();
  std::vector<std::vector<int64_t>> storage(n);
  std::vector<void *> descPtrs(n);
  std::vector<void *> packed(n);
  for (size_t i = 0; i < n; ++i) {
    auto t = args[i].cast<py::tuple>();
    auto ptr = t[0].cast<std::uintptr_t>();
    auto sizes = t[1].cast<std::vector<int64_t>>();
    auto strides = t[2].cast<std::vector<int64_t>>();
    if (sizes.size() != strides.size())
      throw std::invalid_argument("sizes and strides differ in rank");
    auto &d = storage[i];
    d.reserve(3 + 2 * sizes.size());
    d.push_back(static_cast<int64_t>(ptr));
    d.push_back(static_cast<int64_t>(ptr));
    d.push_back(0);
    d.insert(d.end(), sizes.begin(), sizes.end());
    d.insert(d.end(), strides.begin(), strides.end());
    descPtrs[i] = d.data();
    packed[i] = &descPtrs[i];
  }
  py::gil_scoped_release release;
  reinterpret_cast<Packed>(fn)(packed.data());
}
} // namespace

PYBIND11_MODULE(_mlircap, m) {
  m.doc() = "Binding over the mlircap compiler core (libmlircap_core.so)";
  py::register_exception<CompileError>(m, "CoreError", PyExc_RuntimeError);

  m.def("version", [] { return std::string(mlircap_version()); });
  m.def(
      "run_pipeline",
      [](const std::string &ir, const std::string &pipeline) {
        py::gil_scoped_release release;
        char *out = mlircap_run_pipeline(ir.c_str(), pipeline.c_str());
        py::gil_scoped_acquire acquire;
        return takeString(out);
      },
      py::arg("ir"), py::arg("pipeline"),
      "Run a textual pass pipeline on textual IR; returns the resulting IR.");
  m.def(
      "to_ptx",
      [](const std::string &ir, const std::string &chip,
         const std::string &features) {
        py::gil_scoped_release release;
        char *out = mlircap_to_ptx(ir.c_str(), chip.c_str(), features.c_str());
        py::gil_scoped_acquire acquire;
        return takeString(out);
      },
      py::arg("ir"), py::arg("chip") = "sm_90", py::arg("features") = "+ptx80");

  m.def(
      "gpu_compile",
      [](const std::string &ir, const std::string &chip,
         const std::string &features) {
        char *out;
        {
          py::gil_scoped_release release;
          out = mlircap_gpu_compile(ir.c_str(), chip.c_str(), features.c_str());
        }
        return takeString(out);
      },
      py::arg("ir"), py::arg("chip") = "sm_90", py::arg("features") = "+ptx80",
      "Compile linalg-on-tensors for the GPU; returns the launch plan as JSON text.");

  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine")
      .def("lookup", &Engine::lookup, py::arg("name"),
           "Address of the packed C-interface wrapper of a function.");
  m.def(
      "cpu_compile",
      [](const std::string &ir, int optLevel) {
        void *h;
        {
          py::gil_scoped_release release;
          h = mlircap_cpu_compile(ir.c_str(), optLevel);
        }
        if (!h)
          throw CompileError(mlircap_last_error());
        return std::make_shared<Engine>(h);
      },
      py::arg("ir"), py::arg("opt_level") = 3);
  m.def("call_packed", &callPacked, py::arg("fn"), py::arg("args"));
  m.def(
      "opt_main",
      [](const std::vector<std::string> &argv) {
        std::vector<char *> cargv;
        for (const auto &a : argv)
          cargv.push_back(const_cast<char *>(a.c_str()));
        cargv.push_back(nullptr);
        return mlircap_opt_main(static_cast<int>(argv.size()), cargv.data());
      },
      py::arg("argv"));
}
