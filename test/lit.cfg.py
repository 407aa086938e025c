# lit configuration for mlircap's IR tests.
import os
import shutil

import lit.formats

config.name = "mlircap"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mlircap_obj_root, "test")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "python", "Inputs"]

path = [config.mlircap_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")]
config.environment["PATH"] = os.pathsep.join(path)
config.substitutions.append(("%PYTHON", config.python_executable))
config.substitutions.append(("%mlircap_src", config.mlircap_src_root))
config.environment["PYTHONPATH"] = os.path.join(config.mlircap_src_root, "python")

# ptxas assembles every PTX the tests generate. It is required: a machine without
# it cannot check that the GPU pipeline emits valid code.
ptxas = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.path.exists("/usr/local/cuda/bin/ptxas") else None)
if ptxas is None:
    lit_config.fatal("ptxas not found: install the CUDA toolkit (ptxas) to run the PTX tests")
config.substitutions.append(("%ptxas", ptxas))
