{# Lua helpers shared by the backward templates (renders no text). Included after lib_index.cuh.
   The per-element backward: xhat = (x - mean) * rstd; z = xhat * gamma + beta; dz = dy * act'(z);
   g = dz * gamma; dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (no mean(g) term under RMS). #}
{%
-- Feature axes, non-feature axes (the batch axis first) and the product of the non-batch non-feature
-- extents, outermost first.
function bwd_feature_axes()
  local feat, nonfeat, inner = {}, {1}, 1
  for a = 2, P.rank do
    if P.axes[a].feature then feat[#feat + 1] = a
    else nonfeat[#nonfeat + 1] = a; inner = inner * P.axes[a].extent end
  end
  return feat, nonfeat, inner
end

-- typedefs of the operand storage types the backward kernels touch
function bwd_typedefs()
  local t = {"typedef " .. P.ctype.x .. " nj_tx;", "typedef " .. P.ctype.dy .. " nj_tdy;",
             "typedef " .. P.ctype.dx .. " nj_tdx;"}
  if P.flags.scale or P.flags.bias then t[#t + 1] = "typedef " .. P.ctype.param .. " nj_tparam;" end
  return table.concat(t, "\n")
end

-- typed views of the kernel arguments (only those the problem uses, so no unused variables)
function bwd_pointers()
  local F = P.flags
  local t = {"    const nj_tx *X = (const nj_tx *)A.x;", "    const nj_tdy *DY = (const nj_tdy *)A.dy;",
             "    nj_tdx *DX = (nj_tdx *)A.dx;"}
  if F.scale then t[#t + 1] = "    const nj_tparam *GAMMA = (const nj_tparam *)A.gamma;" end
  if F.bias and P.act ~= "none" then t[#t + 1] = "    const nj_tparam *BETA = (const nj_tparam *)A.beta;" end
  t[#t + 1] = "    (void)DX;"
  if F.scale then t[#t + 1] = "    (void)GAMMA;" end
  return table.concat(t, "\n")
end

-- Statements computing xh, dz (and g unless no_g) for one element: xe, de are C expressions of the x
-- and dy values, po the element offset of gamma/beta (or their values). Needs mean, rstd in scope.
function bwd_element(xe, de, po, ind, no_g)
  local F = P.flags
  local t = {}
  t[#t + 1] = string.format("const float xh = (nj_to_f32(%s) - mean) * rstd;", xe)
  t[#t + 1] = string.format("float dz = nj_to_f32(%s);", de)
  -- po: an offset into GAMMA/BETA, or a table {g = expr, b = expr} of values already loaded
  local ge = type(po) == "table" and po.g or string.format("nj_load_f32(GAMMA, %s)", po)
  local be = type(po) == "table" and po.b or string.format("nj_load_f32(BETA, %s)", po)
  if F.scale and (not no_g or P.act ~= "none") then t[#t + 1] = string.format("const float gm = %s;", ge) end
  if P.act ~= "none" then
    local z = F.scale and "xh * gm" or "xh"
    if F.bias then z = z .. " + " .. be end
    t[#t + 1] = string.format("dz *= nj_dact_%s(%s);", P.act, z)
  end
  if not no_g then t[#t + 1] = F.scale and "const float g = dz * gm;" or "const float g = dz;" end
  return ind .. table.concat(t, "\n" .. ind)
end

-- dx from g, xhat and the two row means of g and g * xhat
function bwd_dx_expr(g, xh, m1, m2)
  if P.flags.center then return string.format("rstd * (%s - %s - %s * %s)", g, m1, xh, m2) end
  return string.format("rstd * (%s - %s * %s)", g, xh, m2)
end
%}
{# dgamma/dbeta from partial rows (bwd_row.cu's slots, bwd_channels_last.cu's tiles): a block per 32
   columns (ncols in all), warp w adding partials w, w + NW, ... below `nparts` and warp 0 the NW warp
   sums, in that order: deterministic. part_a, part_b: C expressions of the partials of index i (nj_i64)
   at column col. Needs nj_tparam and a fixed grid of ceil(ncols / 32) blocks. #}
{% function bwd_column_sums(name, block, ncols, nparts, part_a, part_b) %}
NJ_KERNEL({{ name }}, {{ block }})
{
    NJ_SHARED(float, nj_red, {{ 2 * block }});
    if (!A.dgamma && !A.dbeta) return; /* both skipped: uniform across the grid */
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, col = blockIdx.x * 32 + lane;
    const float *WS = (const float *)A.workspace;
    float a = 0.0f, b = 0.0f;
    if (col < {{ ncols }}) {
{{ walk_unroll(2) }}
        for (nj_i64 i = wp; i < {{ nparts }}; i += {{ block // 32 }}) {
            a += {{ part_a }};
            b += {{ part_b }};
        }
    }
    nj_red[threadIdx.x] = a;
    nj_red[{{ block }} + threadIdx.x] = b;
    __syncthreads();
    if (wp == 0 && col < {{ ncols }}) {
#pragma unroll 1
        for (int v = 1; v < {{ block // 32 }}; v++) {
            a += nj_red[v * 32 + lane];
            b += nj_red[{{ block }} + v * 32 + lane];
        }
{% if P.flags.scale then %}
        if (A.dgamma) nj_store_f32((nj_tparam *)A.dgamma, col, a);
{% end %}
{% if P.flags.bias then %}
        if (A.dbeta) nj_store_f32((nj_tparam *)A.dbeta, col, b);
{% end %}
    }
}
{% end %}
