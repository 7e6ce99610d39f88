/* Compiles tools/check_lib.c into the test support library, so tests check kernels with the very same
 * code and tolerances as `normjit check` (one implementation, two users). */
#include "../../tools/check_lib.c"
