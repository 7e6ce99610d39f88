/* Built by ctest ops_header_opt_in, which expects it NOT to compile: the operator header refuses a user who
 * did not opt in with NJ_OPERATOR_API (it is outside the stable ABI). */
#include "normjit_ops.h"

int main(void) { return 0; }
