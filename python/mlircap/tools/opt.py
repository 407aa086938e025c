"""`mlircap-opt` console script: runs the mlircap-opt driver in the core library."""
import os
import sys

from .._core import tool_path


def main() -> int:
    exe = tool_path("mlircap-opt")
    if exe is None:
        sys.stderr.write("mlircap-opt is not built; run ./scripts/setup\n")
        return 1
    os.execv(str(exe), [str(exe)] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
