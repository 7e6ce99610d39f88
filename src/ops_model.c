/* The operator API of the performance model (include/normjit_ops.h): src/model.h behind handles and
 * malloc'd text, so that `normjit model` sees the public headers only. Beside ops.c for the same reason
 * (internal renames adapt here), in a file of its own to keep each small. */
#define NJ_OPERATOR_API
#include "normjit_ops.h"

#include "model.h"

#include <stdlib.h>
#include <string.h>

struct nj_ops_model {
    nj_context *ctx;
    nj_model_opts opts;
};

nj_status nj_ops_model_create(const nj_ops_model_opts *o, nj_ops_model **out)
{
    nj_error_clear();
    NJ_RETURN_IF(!o || !out, NJ_ERR_NULL_POINTER, "nj_ops_model_create: NULL argument");
    NJ_RETURN_IF(o->struct_size < sizeof *o, NJ_ERR_BAD_ARGUMENT, "nj_ops_model_opts: struct_size too small");
    *out = NULL;
    const char *name = o->device ? o->device : o->arch == 80 ? "A100" : "H200";
    const nj_model_device *dev = nj_model_device_find(name);
    NJ_RETURN_IF(!dev, NJ_ERR_BAD_ARGUMENT, "unknown device '%s' (H200, H100 or A100)", name);
    nj_ops_model *m = calloc(1, sizeof *m);
    NJ_RETURN_IF(!m, NJ_ERR_OUT_OF_MEMORY, "out of memory");
    m->opts.dev = dev;
    m->opts.ptxas = o->ptxas;
    m->opts.sample = o->sample;
    m->opts.passes = o->passes;
    nj_status s = nj_model_context(o->arch ? o->arch : dev->arch, o->cache_dir, &m->ctx);
    if (s != NJ_OK) {
        free(m);
        return s;
    }
    *out = m;
    return NJ_OK;
}

void nj_ops_model_destroy(nj_ops_model *m)
{
    if (!m) return;
    nj_context_destroy(m->ctx);
    free(m);
}

const char *nj_ops_model_device(const nj_ops_model *m)
{
    return m ? m->opts.dev->name : "";
}

nj_status nj_ops_model_run(nj_ops_model *m, const char *text, const nj_problem_desc *p, char **report,
                           char **brief)
{
    return nj_ops_model_run_goals(m, text, p, report, brief, NULL);
}

nj_status nj_ops_model_run_goals(nj_ops_model *m, const char *text, const nj_problem_desc *p, char **report,
                                 char **brief, char **goals)
{
    nj_error_clear();
    NJ_RETURN_IF(!m || !text || !p, NJ_ERR_NULL_POINTER, "nj_ops_model_run: NULL argument");
    char **out[3] = {report, brief, goals};
    for (int i = 0; i < 3; i++)
        if (out[i]) *out[i] = NULL;
    nj_model_result *r = malloc(sizeof *r); /* several kB: not on the caller's stack */
    NJ_RETURN_IF(!r, NJ_ERR_OUT_OF_MEMORY, "out of memory");
    nj_status s = nj_model_problem(m->ctx, p, &m->opts, r);
    if (s != NJ_OK) {
        free(r);
        return s;
    }
    nj_buf buf[3];
    char *text_out[3] = {NULL, NULL, NULL};
    bool oom = false;
    for (int i = 0; i < 3; i++) {
        nj_buf_init(&buf[i]);
        if (!out[i]) continue;
        if (i == 0) nj_model_report(&buf[i], text, r, m->opts.dev);
        else if (i == 1) nj_model_brief(&buf[i], text, r);
        else nj_model_goals(&buf[i], text, r, m->opts.dev);
        text_out[i] = nj_buf_take(&buf[i]);
        oom = oom || !text_out[i];
        nj_buf_free(&buf[i]);
    }
    free(r);
    if (oom) {
        for (int i = 0; i < 3; i++) free(text_out[i]);
        NJ_RETURN_IF(1, NJ_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int i = 0; i < 3; i++)
        if (out[i]) *out[i] = text_out[i];
    return s;
}

int nj_ops_model_compare(const char *base, const char *now, char *why, size_t cap)
{
    return nj_model_compare(base, now, why, cap);
}
