/* The tool's kernel-vs-reference checker (tools/check_lib.h) and tolerances (tools/tolerance.h), made
 * available to every test program through the support library (e.g. the numerics matrix). */
#ifndef NJ_TOOL_CHECK_SUPPORT_H
#define NJ_TOOL_CHECK_SUPPORT_H
#include "../../tools/check_lib.h"
#endif
