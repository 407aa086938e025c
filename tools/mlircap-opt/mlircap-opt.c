/* mlircap-opt: MlirOptMain over every upstream dialect and pass plus mlircap's.
 * The driver lives in libmlircap_core.so so the tool and the Python package
 * run exactly the same compiler. */
#include "mlircap-c/Core.h"

int main(int argc, char **argv) { return mlircap_opt_main(argc, argv); }
