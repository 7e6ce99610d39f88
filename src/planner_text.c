/* Text forms of plans (planner.h): the one-line plan text that goes into signatures and `normjit plan`,
 * and the launch metadata stored with cache entries (written and parsed back). */
#include "family.h"
#include "planner.h"

#include <stdio.h>
#include <string.h>

static void plan_launch_text(nj_buf *b, const nj_launch *l)
{
    nj_buf_printf(b, "%s %d %d %d %d %d %d %lld %lld %lld %u", l->kernel, l->block[0], l->block[1], l->block[2],
                  l->grid_x, l->grid_y, l->grid_z, (long long)l->row_mult, (long long)l->row_div,
                  (long long)l->grid_x_cap, l->shmem);
    if (l->even) nj_buf_append(b, " even", 5);
    if (l->cluster > 1) nj_buf_printf(b, " cluster %d", l->cluster);
    if (l->lib == NJ_LIB_NONE) return;
    nj_buf_printf(b, " lib %d", (int)l->lib);
    for (int k = 0; k < NJ_LIB_NARGS; k++)
        nj_buf_printf(b, " %lld:%lld", (long long)l->arg[k][0], (long long)l->arg[k][1]);
}

/* The " lib N c:r ..." tail of a library launch's line (plan_launch_text); *used: characters read. */
static bool plan_parse_lib(const char *p, nj_launch *l, int *used)
{
    int lib = 0, k = 0;
    if (sscanf(p, " lib %d%n", &lib, &k) != 1 || !nj_lib_name(lib)) return false;
    int at = k;
    for (int i = 0; i < NJ_LIB_NARGS; i++) {
        long long c, r;
        if (sscanf(p + at, " %lld:%lld%n", &c, &r, &k) != 2) return false;
        l->arg[i][0] = c, l->arg[i][1] = r;
        at += k;
    }
    l->lib = lib;
    *used = at;
    return true;
}

char *nj_plan_text(const nj_plan_params *pp)
{
    if (!pp) return NULL;
    nj_buf b;
    nj_buf_init(&b);
    nj_buf_printf(&b, "pass=%s family=%s template=%s block=%d vec=%d rows_per_block=%d split=%d regs_cache=%d "
                  "loop=%d ",
                  pp->pass == NJ_PASS_BACKWARD ? "bwd" : "fwd", nj_family_name(pp->family),
                  pp->template_name ? pp->template_name : "-", pp->block, pp->vec, pp->rows_per_block, pp->split,
                  pp->regs_cache, pp->grid_loop);
    if (pp->chans) nj_buf_printf(&b, "chans=%d tile=%d ", pp->chans, pp->tile); /* channels-last family only */
    else if (pp->tile) nj_buf_printf(&b, "tile=%d ", pp->tile);                  /* column family */
    if (pp->unroll) nj_buf_printf(&b, "unroll=%d ", pp->unroll);
    if (pp->stage) nj_buf_printf(&b, "stage=%d ", pp->stage);
    if (pp->copy_vec) nj_buf_printf(&b, "copy_vec=%d ", pp->copy_vec);
    if (pp->persist) nj_buf_printf(&b, "persist=%d ", pp->persist);
    if (pp->reverse) nj_buf_printf(&b, "reverse=%d ", pp->reverse);
    if (pp->lag) nj_buf_printf(&b, "lag=%d ", pp->lag);
    if (pp->pipe_group) nj_buf_printf(&b, "group=%d ", pp->pipe_group);
    /* the named fields templates read (planner.h): in the signature like every other decision */
    if (pp->pgrad != NJ_PGRAD_NONE) nj_buf_printf(&b, "pgrad=%s:%d ", nj_pgrad_name(pp->pgrad), pp->pgrad_parts);
    nj_buf_append(&b, "roles=", 6);
    for (int r = 0; r < NJ_ROLE_COUNT; r++)
        if (pp->role[r]) nj_buf_printf(&b, "%s:%d,", nj_role_name(r), pp->role[r]);
    nj_buf_append(&b, " ", 1);
    if (pp->ws_used) {
        nj_buf_printf(&b, "ws=");
        for (int w = 0; w < NJ_WS_COUNT; w++)
            if (pp->ws_used & (1u << w))
                nj_buf_printf(&b, "%s:%lld+%lld,", nj_ws_name_text(w), (long long)pp->ws[w].fixed,
                              (long long)pp->ws[w].per_row);
        if (pp->ws_stride) nj_buf_printf(&b, "stride:%lld", (long long)pp->ws_stride);
        nj_buf_append(&b, " ", 1);
    }
    nj_buf_printf(&b, "variant=%s align=0x%x workspace=%llu+%llu*rows launches=%d", pp->unaligned ? "unaligned" : "main",
                  pp->align_opds, (unsigned long long)pp->workspace_fixed, (unsigned long long)pp->workspace_per_row,
                  pp->nlaunch);
    for (int i = 0; i < pp->nlaunch && i < NJ_MAX_LAUNCHES; i++) {
        nj_buf_append(&b, " [", 2);
        plan_launch_text(&b, &pp->launch[i]);
        nj_buf_append(&b, "]", 1);
    }
    return nj_buf_take(&b);
}

char *nj_launches_to_text(const nj_plan_params *pp)
{
    if (!pp) return NULL;
    nj_buf b;
    nj_buf_init(&b);
    nj_buf_printf(&b, "launches %d\n", pp->nlaunch);
    for (int i = 0; i < pp->nlaunch && i < NJ_MAX_LAUNCHES; i++) {
        plan_launch_text(&b, &pp->launch[i]);
        nj_buf_append(&b, "\n", 1);
    }
    return nj_buf_take(&b);
}

static bool plan_kernel_name_ok(const char *s)
{
    if (!*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

/* Parses nj_launches_to_text output into pp->launch / pp->nlaunch (other fields untouched). */
nj_status nj_launches_from_text(const char *text, nj_plan_params *pp)
{
    NJ_RETURN_IF(!text || !pp, NJ_ERR_NULL_POINTER, "launches: NULL argument");
    int n = -1, used = 0;
    NJ_RETURN_IF(sscanf(text, "launches %d\n%n", &n, &used) != 1 || used == 0 || n < 0 || n > NJ_MAX_LAUNCHES,
                 NJ_ERR_PARSE, "launches: bad header");
    const char *p = text + used;
    nj_launch ls[NJ_MAX_LAUNCHES];
    memset(ls, 0, sizeof ls);
    for (int i = 0; i < n; i++) {
        nj_launch *l = &ls[i];
        char name[64];
        long long rm, rd, cap;
        unsigned shmem;
        int k = 0;
        int got = sscanf(p, "%63s %d %d %d %d %d %d %lld %lld %lld %u%n", name, &l->block[0], &l->block[1],
                         &l->block[2], &l->grid_x, &l->grid_y, &l->grid_z, &rm, &rd, &cap, &shmem, &k);
        int tail = 0;
        if (got == 11 && k > 0 && strncmp(p + k, " even", 5) == 0 && (p[k + 5] == ' ' || p[k + 5] == '\n'))
            l->even = 1, k += 5;
        int cl = 0, ck = 0;
        if (got == 11 && k > 0 && sscanf(p + k, " cluster %d%n", &cl, &ck) == 1 && ck > 0) {
            NJ_RETURN_IF(cl < 2 || cl > 16, NJ_ERR_PARSE, "launches: bad cluster on line %d", i + 1);
            l->cluster = cl, k += ck;
        }
        if (got == 11 && k > 0 && p[k] == ' ' && !plan_parse_lib(p + k, l, &tail))
            return nj_fail(NJ_ERR_PARSE, "launches: bad library arguments on line %d", i + 1);
        k += tail;
        NJ_RETURN_IF(got != 11 || k == 0 || p[k] != '\n', NJ_ERR_PARSE, "launches: bad launch line %d", i + 1);
        NJ_RETURN_IF(!plan_kernel_name_ok(name) || strlen(name) >= sizeof l->kernel, NJ_ERR_PARSE,
                     "launches: bad kernel name on line %d", i + 1);
        for (int d = 0; d < 3; d++)
            NJ_RETURN_IF(l->block[d] < 1 || l->block[d] > 1024, NJ_ERR_PARSE, "launches: bad block on line %d", i + 1);
        NJ_RETURN_IF(l->grid_x < 0 || l->grid_y < 0 || l->grid_z < 0 || rm < 0 || rd < 0 || cap < 0 || cap > 0x7fffffff,
                     NJ_ERR_PARSE, "launches: negative grid or bad cap on line %d", i + 1);
        memcpy(l->kernel, name, strlen(name) + 1); /* length checked above */
        l->row_mult = rm, l->row_div = rd, l->grid_x_cap = cap, l->shmem = shmem;
        p += k + 1;
    }
    NJ_RETURN_IF(*p != '\0', NJ_ERR_PARSE, "launches: trailing text");
    memcpy(pp->launch, ls, sizeof ls);
    pp->nlaunch = n;
    return NJ_OK;
}
