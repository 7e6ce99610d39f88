{# Forward, COLUMN kind: the innermost axis is kept and contiguous in x (channels-last InstanceNorm,
   BatchNorm NHWC, ...). A block takes a tile of 32 neighbouring columns of one outer kept index: lane
   tx owns column tile*32 + tx, and warp ty walks the reduction index space with stride block/32, so
   every warp reads 32 consecutive elements (coalesced) where a block per statistic would read one
   element per row. Partial statistics meet in shared memory; warp 0 merges them per column.
   Long walks (P.split > 1: BatchNorm NHWC over N x H x W, volumes) are cut into NJ_SPLIT pieces of
   contiguous walk indices, a block per (tile, piece), in three launches: nj_fwd_column_part writes each
   piece's (sum, squared deviations from the piece mean) per column, the library's merge (lib_merge.cu)
   combines a tile's pieces in a fixed order (m2 = sum(m2_q + n_q * (mean_q - mean)^2): nothing cancels)
   into its (mean, rstd), and nj_fwd_column normalizes each piece (piece 0 writes the saved statistics). Workspace: [tile][piece][2][32] partials, then
   [tile][2][32] statistics, tiles over the whole batch. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("fwd_lib.cuh") %}
{%
local kept, red = kept_axes(), reduced_axes()
local cax = P.rank
if P.axes[cax].reduce or P.axes[cax].stride.x ~= 1 then error("fwd_column needs a kept innermost axis of stride 1") end
if #red == 0 then error("fwd_column: no reduced axis") end
local EC = P.axes[cax].extent
local outer = {}
for _, a in ipairs(kept) do if a ~= cax then outer[#outer + 1] = a end end
local F = P.flags
local has_param = F.scale or F.bias
local B = P.block
local BY = B // 32
local NT = ceil_div(EC, 32)
local IT = P.reduce_size < 2147483647 and "unsigned" or "nj_i64"
local SPLIT = P.split
-- the walk indices a block covers: the whole reduction, or its piece
local LO = SPLIT > 1 and "(" .. IT .. ")lo + ty" or "ty"
local HI = SPLIT > 1 and "(" .. IT .. ")hi" or "(" .. IT .. ")NJ_N"
local NTASK = P.kept_inner // EC * NT -- tiles per batch row
%}

{% fwd_typedefs() %}

#define NJ_N {{ P.reduce_size }}LL
#define NJ_EC {{ EC }}LL
#define NJ_NT {{ NT }}LL
#define NJ_BY {{ BY }}
{% if SPLIT > 1 then %}
#define NJ_SPLIT {{ SPLIT }}
#define NJ_PIECE ((NJ_N + NJ_SPLIT - 1) / NJ_SPLIT)
{% end %}

{% local function load_x(dst) %}
            {{ split_index("i", red, "r", IT) }}
            float {{ dst }} = nj_load_f32(X, ox + {{ offset("x", red, "r") }});
{% if F.residual then %}
            {{ dst }} += nj_load_f32(RES, ores + {{ offset("res", red, "r") }});
{% end %}
{% end %}
{# mode: "full" (statistics and normalization), "part" (a piece's partials per column) or "norm" (a piece
   normalized with its tile's statistics) #}
{% local function col_kernel(name, mode) %}
NJ_KERNEL({{ name }}, {{ B }})
{
{% if mode == "norm" then %}
{% elseif F.center then %}
    NJ_SHARED(nj_welford, nj_part, {{ B }});
{% else %}
    NJ_SHARED(float, nj_part, {{ B }});
{% end %}
{% if mode == "full" then %}
    NJ_SHARED(float, nj_stat, 64); /* mean[32], rstd[32] of the tile's columns */
{% end %}
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const nj_i64 ntask = A.rows * {{ NTASK }}LL;
{% fwd_pointers() %}
{% if SPLIT > 1 then %}
    {{ block_item("wi", "ntask * NJ_SPLIT") }}
        const nj_i64 task = wi / NJ_SPLIT, piece = wi % NJ_SPLIT;
        const nj_i64 lo = piece * NJ_PIECE, hi = lo + NJ_PIECE < NJ_N ? lo + NJ_PIECE : NJ_N;
{% else %}
    {{ block_item("task", "ntask") }}
{% end %}
        const nj_i64 o = task / NJ_NT;
        const nj_i64 k{{ cax }} = (task % NJ_NT) * 32 + tx;
        const bool col_ok = k{{ cax }} < NJ_EC;
        {{ split_index("o", outer, "k") }}
{% fwd_offsets(kept, "k") %}
        /* the column's first element (a column past the tile's end reads its tile's first) */
        const nj_shift sh = nj_shift_of(col_ok ? nj_load_f32(X, ox){{ F.residual and " + nj_load_f32(RES, ores)" or "" }} : 0.0f, {{ F.center and "true" or "false" }});
{% if mode == "norm" then %}
        /* the tile's merged moments of the scaled values (lib_merge.cu) */
        const float *ST = (const float *)A.workspace{{ ws_plus("means") }} + task * 64;
{% fwd_finish("ST[tx]", "ST[32 + tx]") %}
{% fwd_save_stats("col_ok && piece == 0 && ty == 0", kept) %}
{% else %}
{% if F.center then %}
        nj_welford w = nj_welford_init();
{% else %}
        float s = 0.0f;
{% end %}
        if (col_ok) {
{{ walk_unroll(F.residual and 2 or 1) }}
            for ({{ IT }} i = {{ LO }}; i < {{ HI }}; i += NJ_BY) {
{% load_x("v") %}
{% fwd_resout("                ", offset("resout", red, "r"), "v") %}
{% if F.center then %}
                nj_welford_add(w, (v - sh.k) * sh.inv);
{% else %}
                s += nj_sq(v * sh.inv);
{% end %}
            }
        }
        nj_part[threadIdx.x] = {{ F.center and "w" or "s" }};
        __syncthreads();
        if (ty == 0) {
{% if F.center then %}
            /* count and sum give the mean, then the deviations the m2 (nj_block_welford's identity):
               cheaper to compile than NJ_BY - 1 unrolled pairwise merges */
            float n = 0.0f, sum = 0.0f, m2 = 0.0f;
#pragma unroll 1
            for (int k = 0; k < NJ_BY; k++) {
                const nj_welford p = nj_part[k * 32 + tx];
                n += p.n;
                sum += p.n * p.mean;
            }
            const float mean_s = nj_welford_from_sums(n, sum).mean;
#pragma unroll 1
            for (int k = 0; k < NJ_BY; k++) m2 += nj_welford_dev(nj_part[k * 32 + tx], mean_s);
{% else %}
#pragma unroll 1
            for (int k = 1; k < NJ_BY; k++) s += nj_part[k * 32 + tx];
{% end %}
{% if mode == "part" then %}
            float *WS = (float *)A.workspace{{ ws_plus("parts") }} + wi * 64;
            WS[tx] = {{ F.center and "sum" or "s" }};
            WS[32 + tx] = {{ F.center and "m2" or "0.0f" }};
        }
    }
}
{% do return end %}
{% end %}
{% if F.center then %}
            const float var_s = m2 * (1.0f / (float)NJ_N);
{% else %}
            const float mean_s = 0.0f, var_s = s * (1.0f / (float)NJ_N);
{% end %}
{% fwd_finish("mean_s", "var_s") %}
            nj_stat[tx] = md;
            nj_stat[32 + tx] = rstd;
{% fwd_save_stats("col_ok", kept) %}
        }
        __syncthreads();
        const float md = nj_stat[tx], rstd = nj_stat[32 + tx];
{% end %}
        if (col_ok) {
{{ walk_unroll(F.residual and 2 or 1) }}
            for ({{ IT }} i = {{ LO }}; i < {{ HI }}; i += NJ_BY) {
{% load_x("v") %}
                float u = {{ fwd_centered("v") }} * rstd;
{% if has_param then %}
                const nj_i64 opi = op + {{ offset("param", red, "r") }};
{% end %}
{% fwd_epilogue("                ", F.scale and "nj_load_f32(GAMMA, opi)", F.bias and "nj_load_f32(BETA, opi)", {y = offset("y", red, "r")}) %}
            }
        }
    }
}
{% end %}
{% if SPLIT > 1 then %}
{% col_kernel(P.role.part.kernel, "part") %}

{% col_kernel(P.role.main.kernel, "norm") %}
{% else %}
{% col_kernel(P.role.main.kernel, "full") %}
{% end %}
