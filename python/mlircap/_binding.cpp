// _mlircap: the pybind11 binding over libmlircap_core.so's C API.
//
// Deliberately thin: strings in and out, an engine handle, and a fast path that
// builds memref descriptors over raw tensor pointers and calls JIT code.
// Includes no MLIR header, so it builds in seconds for any Python.
#include "mlircap-c/Core.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <algorithm>

#include <dlfcn.h>

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

  py::bytes object() {
    size_t size = 0;
    const char *data = mlircap_cpu_object(handle, &size);
    return py::bytes(data, size);
  }
};

using Packed = void (*)(void **);

/// The CPU counterpart of LaunchProgram: packed kernel calls prepared once
/// (memref descriptors of the plan's static shapes, contiguous strides) and
/// run with a table of data pointers, one C++ call for a run of kernels.
struct CpuProgram {
  struct Call {
    Packed fn;
    std::vector<int> slots;           // per argument: index into the pointer table
    std::vector<size_t> offsets;      // per argument: its descriptor in `descriptors`
    std::vector<int64_t> descriptors; // {ptr, ptr, 0, sizes..., strides...} per argument
    std::vector<int64_t> params;      // non-empty: passed first, as a pointer to them
  };
  std::vector<Call> calls;
  size_t maxWords = 0, maxArgs = 0;

  void add(std::uintptr_t fn, std::vector<int> slots, const std::vector<std::vector<int64_t>> &shapes,
           std::vector<int64_t> params) {
    if (slots.size() != shapes.size())
      throw std::invalid_argument("slots and shapes differ in length");
    Call c{reinterpret_cast<Packed>(fn), std::move(slots), {}, {}, std::move(params)};
    for (const auto &shape : shapes) {
      c.offsets.push_back(c.descriptors.size());
      c.descriptors.insert(c.descriptors.end(), {0, 0, 0});
      c.descriptors.insert(c.descriptors.end(), shape.begin(), shape.end());
      std::vector<int64_t> strides(shape.size());
      int64_t acc = 1;
      for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = acc;
        acc *= std::max<int64_t>(shape[i], 1);
      }
      c.descriptors.insert(c.descriptors.end(), strides.begin(), strides.end());
    }
    maxWords = std::max(maxWords, c.descriptors.size());
    maxArgs = std::max(maxArgs, c.slots.size() + 1);
    calls.push_back(std::move(c));
  }

  /// Runs calls [begin, end) without the GIL. The descriptors are copied per
  /// call, so threads may run the same program at once.
  void run(const std::vector<int64_t> &table, size_t begin, size_t end) {
    end = std::min(end, calls.size());
    for (size_t i = begin; i < end; ++i)
      for (int slot : calls[i].slots)
        if (slot < 0 || static_cast<size_t>(slot) >= table.size())
          throw std::out_of_range("pointer table too short for the program");
    py::gil_scoped_release release;
    std::vector<int64_t> words(maxWords);
    std::vector<void *> descriptors(maxArgs), packed(maxArgs);
    for (size_t i = begin; i < end; ++i) {
      const Call &c = calls[i];
      std::copy(c.descriptors.begin(), c.descriptors.end(), words.begin());
      size_t first = c.params.empty() ? 0 : 1;
      if (first)
        packed[0] = const_cast<int64_t *>(c.params.data());
      for (size_t a = 0; a < c.slots.size(); ++a) {
        int64_t *d = words.data() + c.offsets[a];
        d[0] = d[1] = table[c.slots[a]];
        descriptors[a] = d;
        packed[first + a] = &descriptors[a];
      }
      c.fn(packed.data());
    }
  }
};

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
//===-- CUDA driver, loaded at run time -----------------------------------===//
// The binding does not link CUDA: libcuda.so.1 is dlopen'ed on first use, so
// the same build works on machines without a GPU.
struct Cuda {
  using Res = int;
  Res (*moduleLoadData)(void **, const void *) = nullptr;
  Res (*moduleGetFunction)(void **, void *, const char *) = nullptr;
  Res (*launchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                      unsigned, unsigned, void *, void **, void **) = nullptr;
  Res (*getErrorString)(Res, const char **) = nullptr;
  Res (*funcSetAttribute)(void *, int, int) = nullptr;
  Res (*occupancy)(int *, void *, int, size_t) = nullptr;

  static Cuda &get() {
    static Cuda cuda;
    static bool loaded = false;
    if (!loaded) {
      void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!h)
        throw std::runtime_error(std::string("cannot load libcuda.so.1: ") + dlerror());
      auto sym = [&](const char *name) {
        void *p = dlsym(h, name);
        if (!p)
          throw std::runtime_error(std::string("libcuda.so.1 lacks ") + name);
        return p;
      };
      cuda.moduleLoadData = reinterpret_cast<decltype(cuda.moduleLoadData)>(sym("cuModuleLoadData"));
      cuda.moduleGetFunction = reinterpret_cast<decltype(cuda.moduleGetFunction)>(sym("cuModuleGetFunction"));
      cuda.launchKernel = reinterpret_cast<decltype(cuda.launchKernel)>(sym("cuLaunchKernel"));
      cuda.getErrorString = reinterpret_cast<decltype(cuda.getErrorString)>(sym("cuGetErrorString"));
      cuda.funcSetAttribute = reinterpret_cast<decltype(cuda.funcSetAttribute)>(sym("cuFuncSetAttribute"));
      cuda.occupancy =
          reinterpret_cast<decltype(cuda.occupancy)>(sym("cuOccupancyMaxActiveBlocksPerMultiprocessor"));
      loaded = true;
    }
    return cuda;
  }

  void check(Res r, const char *what) {
    if (r == 0)
      return;
    const char *msg = nullptr;
    getErrorString(r, &msg);
    throw std::runtime_error(std::string(what) + " failed: " + (msg ? msg : "unknown CUDA error") +
                             " (" + std::to_string(r) + ")");
  }
};

/// A sequence of kernel launches prepared once and replayed with a table of
/// device pointers: each launch's parameters are 8-byte values, either a
/// constant or a slot of the table (the pointer of a plan value).
struct LaunchProgram {
  struct Launch {
    void *fn;
    unsigned grid[3], block[3], smem;
    std::vector<int64_t> constants; // parameter values (for slot params: unused)
    std::vector<int> slots;         // -1: constant, else index into the pointer table
  };
  std::vector<Launch> launches;

  void add(std::uintptr_t fn, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
           unsigned smem, std::vector<int64_t> constants, std::vector<int> slots) {
    if (constants.size() != slots.size())
      throw std::invalid_argument("constants and slots differ in length");
    launches.push_back({reinterpret_cast<void *>(fn), {grid[0], grid[1], grid[2]},
                        {block[0], block[1], block[2]}, smem, std::move(constants), std::move(slots)});
  }

  void run(const std::vector<int64_t> &table, std::uintptr_t stream, size_t begin, size_t end) {
    Cuda &cuda = Cuda::get();
    end = std::min(end, launches.size());
    std::vector<int64_t> values;
    std::vector<void *> params;
    for (size_t i = begin; i < end; ++i) {
      Launch &l = launches[i];
      values.assign(l.constants.begin(), l.constants.end());
      for (size_t a = 0; a < l.slots.size(); ++a)
        if (l.slots[a] >= 0)
          values[a] = table.at(l.slots[a]);
      params.resize(values.size());
      for (size_t a = 0; a < values.size(); ++a)
        params[a] = &values[a];
      cuda.check(cuda.launchKernel(l.fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                                   l.block[2], l.smem, reinterpret_cast<void *>(stream),
                                   params.data(), nullptr),
                 "cuLaunchKernel");
    }
  }
};
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
      py::arg("ir"), py::arg("chip") = "", py::arg("features") = "");

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
      py::arg("ir"), py::arg("chip") = "", py::arg("features") = "",
      "Compile linalg-on-tensors for the GPU; returns the launch plan as JSON text\n"
      "(chip/features \"\" select the core's default target, TargetDefaults.h).");

  m.def("build_id", [] { return std::string(mlircap_build_id()); }, "Identity of this build of the core (compile caches key on it).");
  m.def("cpu_target", [] { return std::string(mlircap_cpu_target()); }, "'<triple> <cpu> <features>' the CPU JIT compiles for.");
  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine")
      .def("lookup", &Engine::lookup, py::arg("name"),
           "Address of the packed C-interface wrapper of a function.")
      .def("object", &Engine::object, "The object code (cpu_load rebuilds the engine from it).");
  m.def(
      "cpu_load",
      [](const py::bytes &object) {
        std::string data = object;
        void *h;
        {
          py::gil_scoped_release release;
          h = mlircap_cpu_load(data.data(), data.size());
        }
        if (!h)
          throw CompileError(mlircap_last_error());
        return std::make_shared<Engine>(h);
      },
      py::arg("object"), "An engine from Engine.object() bytes, without compiling.");
  py::class_<CpuProgram>(m, "CpuProgram")
      .def(py::init<>())
      .def("add", &CpuProgram::add, py::arg("fn"), py::arg("slots"), py::arg("shapes"),
           py::arg("params") = std::vector<int64_t>{},
           "Append a call of packed function `fn` on the table's `slots`, contiguous `shapes`; "
           "non-empty `params`: a pointer to them is passed before the memrefs.")
      .def("__len__", [](const CpuProgram &p) { return p.calls.size(); })
      .def("run", &CpuProgram::run, py::arg("table"), py::arg("begin") = 0,
           py::arg("end") = SIZE_MAX, "Run calls [begin, end) with data pointers `table`.");
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
  m.def(
      "cpu_plan_compile",
      [](const std::string &ir, int optLevel) {
        void *h;
        char *plan = nullptr;
        {
          py::gil_scoped_release release;
          h = mlircap_cpu_plan_compile(ir.c_str(), optLevel, &plan);
        }
        if (!h)
          throw CompileError(mlircap_last_error());
        return py::make_tuple(std::make_shared<Engine>(h), takeString(plan));
      },
      py::arg("ir"), py::arg("opt_level") = 3,
      "(engine, plan JSON): kernels JIT-compiled for the CPU, library ops in the plan.");
  m.def("call_packed", &callPacked, py::arg("fn"), py::arg("args"));
  m.def(
      "cpu_depthwise_conv2d", [] { return reinterpret_cast<std::uintptr_t>(&mlircap_cpu_depthwise_conv2d); },
      "Address of the packed float32 NCHW depthwise convolution (a CpuProgram step, with params).");
  m.def("set_num_threads", &mlircap_set_num_threads, py::arg("n"),
        "Threads the CPU kernels may use (caller included).");
  m.def("get_num_threads", &mlircap_get_num_threads);

  m.def(
      "cuda_load_module",
      [](const std::string &image) {
        Cuda &cuda = Cuda::get();
        void *mod = nullptr;
        cuda.check(cuda.moduleLoadData(&mod, image.c_str()), "cuModuleLoadData");
        return reinterpret_cast<std::uintptr_t>(mod);
      },
      py::arg("image"), "Load PTX (NUL-terminated text) or a cubin into the current context.");
  m.def(
      "cuda_get_function",
      [](std::uintptr_t mod, const std::string &name, int dynamicSmem) {
        Cuda &cuda = Cuda::get();
        void *fn = nullptr;
        cuda.check(cuda.moduleGetFunction(&fn, reinterpret_cast<void *>(mod), name.c_str()),
                   ("cuModuleGetFunction(" + name + ")").c_str());
        if (dynamicSmem > 48 * 1024) // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
          cuda.check(cuda.funcSetAttribute(fn, 8, dynamicSmem), "cuFuncSetAttribute");
        return reinterpret_cast<std::uintptr_t>(fn);
      },
      py::arg("module"), py::arg("name"), py::arg("dynamic_smem") = 0);
  m.def(
      "cuda_blocks_per_sm",
      [](std::uintptr_t fn, int block, int dynamicSmem) {
        Cuda &cuda = Cuda::get();
        int n = 0;
        cuda.check(cuda.occupancy(&n, reinterpret_cast<void *>(fn), block, (size_t)dynamicSmem),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor");
        return n;
      },
      py::arg("fn"), py::arg("block"), py::arg("dynamic_smem") = 0,
      "How many blocks of `fn` fit on one multiprocessor at once (its registers, shared memory).");
  py::class_<LaunchProgram>(m, "LaunchProgram")
      .def(py::init<>())
      .def("add", &LaunchProgram::add, py::arg("fn"), py::arg("grid"), py::arg("block"),
           py::arg("smem"), py::arg("constants"), py::arg("slots"))
      .def("__len__", [](const LaunchProgram &p) { return p.launches.size(); })
      .def("run", &LaunchProgram::run, py::arg("table"), py::arg("stream"), py::arg("begin") = 0,
           py::arg("end") = SIZE_MAX, "Launch kernels [begin, end) on `stream`.");
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
