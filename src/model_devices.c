/* Every constant of the performance model, in one place, with where it comes from (docs/model.md says how
 * each is used). Data-sheet figures are NVIDIA's; "copy" is the bandwidth a large device-to-device copy
 * reaches, the 100% of the model's "% of copy"; the latency and the per-launch cost are fitted to the H200
 * runs in tools/bench/results/ (gpu-check 2026-12-04, commit 45f9db0) and carried to the other parts by
 * their clocks. Recalibrate with tools/model-beside whenever a GPU is lent. */
#include "model.h"

#include <strings.h>

static const nj_model_device devices[] = {
    {"H200", 90, 132, 4.8e12, 4.1e12, 128.0 * 1024, 50.0 * 1024 * 1024, 7.0e12, 650e-9, 300e-9, 3.0e-6, 1.5e-6, 0.8e-6, 2048, 32, 65536, 233472,
     "H200 SXM data sheet (132 SMs, 4.8 TB/s HBM3e, 50 MB L2); copy 4.1 TB/s measured (issue 17); "
     "occupancy limits: CUDA Programming Guide, compute capability 9.0 (228 KiB shared an SM; 256 KiB L1 and "
     "shared together: 128 KiB taken as L1); latency and "
     "launch cost fitted to the 2026-12-04 gpu-check H200 run; a dependent launch's cost (half of it: the "
     "launch hidden, the ramp after the wait kept) is assumed, not yet measured (gpu-check's NORMJIT_NO_PDL A/B)"},
    {"H100", 90, 132, 3.35e12, 2.9e12, 128.0 * 1024, 50.0 * 1024 * 1024, 7.0e12, 650e-9, 300e-9, 3.0e-6, 1.5e-6, 0.8e-6, 2048, 32, 65536, 233472,
     "H100 SXM5 white paper (132 SMs, 3.35 TB/s HBM3, 50 MB L2); copy ~87% of peak as on H200; the rest as "
     "H200 (same SM)"},
    {"A100", 80, 108, 2.039e12, 1.75e12, 96.0 * 1024, 40.0 * 1024 * 1024, 4.5e12, 700e-9, 330e-9, 3.5e-6, 3.5e-6, 1.0e-6, 2048, 32, 65536, 167936,
     "A100 SXM4 80 GB white paper (108 SMs, 2.04 TB/s HBM2e, 40 MB L2); copy ~86% of peak; compute "
     "capability 8.0 (164 KiB shared an SM); latency and launch cost: H200 fit scaled by the lower clock; "
     "no dependent launches before sm_90"},
};

const nj_model_device *nj_model_device_find(const char *name)
{
    for (size_t i = 0; name && i < NJ_ARRAY_LEN(devices); i++)
        if (strcasecmp(devices[i].name, name) == 0) return &devices[i];
    return NULL;
}

const nj_model_device *nj_model_device_at(int32_t i)
{
    return i >= 0 && (size_t)i < NJ_ARRAY_LEN(devices) ? &devices[i] : NULL;
}

double nj_model_l2_miss(double distance, double l2_bytes)
{
    double lo = NJ_MODEL_L2_HIT * l2_bytes, hi = NJ_MODEL_L2_MISS * l2_bytes;
    if (distance <= lo) return 0;
    if (distance >= hi) return 1;
    return (distance - lo) / (hi - lo);
}
