/* The cache object behind a public nj_cachedir handle (src/cache_api.c), for src/ops.c's operator calls
 * (the Redis tier's push and pull) that work on the same handle. */
#ifndef NJ_CACHE_API_H
#define NJ_CACHE_API_H

#include "cache.h"

NJ_HIDDEN nj_cache *nj_cachedir_cache(nj_cachedir *d);

#endif
