{# Lua helpers shared by the kernel templates (renders no text). Included after prelude.cuh; the
   functions land in the template environment, which every include shares.
   Index conventions: axis a's index variable is <prefix><a> (P.axes numbering, 1 = batch axis). #}
{%
OPD = {x = 0, y = 1, res = 2, resout = 3, dy = 4, dx = 5, param = 6, stats = 7}

-- Named workspace regions (P.ws, laid out by the planner): " + <float offset>" of region name as C text,
-- "" at offset 0; an error for a region the plan does not have.
function ws_plus(name)
  local r = P.ws[name] or error("the plan has no workspace region " .. name)
  if r.fixed == 0 and r.per_row == 0 then return "" end
  if r.per_row == 0 then return " + " .. r.fixed end
  if r.fixed == 0 then return " + A.rows * " .. r.per_row .. "LL" end
  return " + (" .. r.fixed .. " + A.rows * " .. r.per_row .. "LL)"
end

-- Axis numbers (into P.axes) of the kept axes, the batch axis first, outermost first.
function kept_axes()
  local t = {1}
  for a = 2, P.rank do if not P.axes[a].reduce then t[#t + 1] = a end end
  return t
end

-- Axis numbers of the reduced axes, outermost first.
function reduced_axes()
  local t = {}
  for a = 2, P.rank do if P.axes[a].reduce then t[#t + 1] = a end end
  return t
end

-- C statements splitting the linear index `var` (type itype) over `axes` (outermost first): the
-- innermost axis varies fastest; the outermost takes what is left, so it needs no bound.
function split_index(var, axes, prefix, itype)
  itype = itype or "nj_i64"
  if #axes == 0 then return "" end
  if #axes == 1 then return string.format("const %s %s%d = %s;", itype, prefix, axes[1], var) end
  local rem = var .. "_rem"
  local out = {string.format("%s %s = %s;", itype, rem, var)}
  for k = #axes, 2, -1 do
    local a = axes[k]
    local e = need(P.axes[a].extent, "extent of axis " .. a)
    out[#out + 1] = string.format("const %s %s%d = %s %% %d; %s /= %d;", itype, prefix, a, rem, e, rem, e)
  end
  out[#out + 1] = string.format("const %s %s%d = %s;", itype, prefix, axes[1], rem)
  return table.concat(out, "\n        ")
end

-- Element offset (nj_i64) of operand `opd` from the index variables of `axes`, each below its axis' extent
-- (zero strides dropped). Without the batch axis and below 2^32 it is summed in 32 bits and widened once:
-- 64-bit multiplies in a walk's loop cost NVVM and ptxas up to 20 ms a kernel (and the GPU two IMADs each).
function offset(opd, axes, prefix)
  local terms, wide, top = {}, {}, 0
  for _, a in ipairs(axes) do
    local s = need(P.axes[a].stride[opd], "stride of " .. opd)
    if s ~= 0 then
      local v = prefix .. a
      wide[#wide + 1] = s == 1 and "(nj_i64)" .. v or string.format("(nj_i64)%s * %s", v, s)
      if a == 1 or math.type(s) ~= "integer" then
        top = math.maxinteger -- the batch axis: its extent and stride (a kernel argument) come at launch
      elseif top < 4294967296 then
        terms[#terms + 1] = s == 1 and "(unsigned)" .. v or string.format("(unsigned)%s * %du", v, s)
        top = top + (need(P.axes[a].extent, "extent of axis " .. a) - 1) * s
      end
    end
  end
  if #wide == 0 then return "0" end
  if top < 4294967296 then return "(nj_i64)(" .. table.concat(terms, " + ") .. ")" end
  return table.concat(wide, " + ")
end

-- Offset of element `var` of a row (a C expression counting elements along the reduced axes, innermost
-- fastest) within operand opd's row: "0" where opd does not vary along the row, var times the innermost
-- stride where the reduced axes are contiguous, else a term per axis (divisions by the inner extents).
function row_offset(opd, var)
  local red = reduced_axes()
  local inner_prod, prod = {}, 1
  for k = #red, 1, -1 do inner_prod[k] = prod; prod = prod * P.axes[red[k]].extent end
  local J = P.reduce_size < 2147483647 and "(unsigned)" .. var or var
  local st, zero = {}, true
  for k = 1, #red do st[k] = P.axes[red[k]].stride[opd]; zero = zero and st[k] == 0 end
  if zero then return "0" end
  local contiguous = true
  for k = 1, #red do contiguous = contiguous and st[k] == st[#red] * inner_prod[k] end
  if contiguous then return st[#red] == 1 and var or (var .. " * " .. st[#red]) end
  local terms = {}
  for k = 1, #red do
    if st[k] ~= 0 then
      local e = P.axes[red[k]].extent
      local idx
      if #red == 1 then idx = J
      elseif k == #red then idx = string.format("%s %% %d", J, e)
      elseif k == 1 then idx = string.format("%s / %d", J, inner_prod[k])
      else idx = string.format("%s / %d %% %d", J, inner_prod[k], e) end
      terms[#terms + 1] = string.format("(nj_i64)(%s) * %d", idx, st[k])
    end
  end
  return table.concat(terms, " + ")
end

-- Opens the scope of this block's work item `var` of `count` (C statements; the caller closes the
-- brace): launches that scale with the batch have a block per item, or `per` items a block (one a warp,
-- `sub` the warp's number), over a 2-D grid past 2^31 - 1 blocks (nj_launch_grid). Not a grid-stride
-- loop: a loop around the body cost NVVM and ptxas 7 to 14 ms a kernel and up to 30 registers. Except
-- with P.grid_loop (tiny items, planner.h): the capped grid's blocks loop over the items.
-- With `rev` (a block an item, no grid loop), the items are taken last first (P.reverse, planner.h).
function block_item(var, count, per, sub, rev)
  local first = per and string.format("nj_block_item() * %s + %s", per, sub) or "nj_block_item()"
  if rev and (per or P.grid_loop == 1) then error("block_item: a reversed walk takes a block an item") end
  if rev then
    return string.format("{\n        const nj_i64 %s = (%s) - 1 - %s;\n        if (%s < 0) return;", var, count, first, var)
  end
  if P.grid_loop == 1 then
    local step = "(nj_i64)gridDim.x * gridDim.y" .. (per and (" * " .. per) or "")
    return string.format("for (nj_i64 %s = %s; %s < %s; %s += %s) {", var, first, var, count, var, step)
  end
  return string.format("{\n        const nj_i64 %s = %s;\n        if (%s >= %s) return;", var, first, var, count)
end
-- The main launch's walk over the items its part launch walked first (block_item without per).
function main_item(var, count) return block_item(var, count, nil, nil, P.reverse == 1) end

-- A pipelined launch (P.lag; docs/architecture.md): declares `item` (the piece) and `second` (true where the
-- block normalizes it or writes its dx, false where it sums it) of block nj_block_item() among 2 * total
-- (a C expression of the pieces), returning past them. The first lag blocks sum the first lag pieces,
-- then blocks alternate piece q's second walk and piece q + lag's sums, and the last lag blocks take the
-- last pieces' second walks (model_trace.c's pipe_piece: the same order).
function pipe_item(total, item, second)
  return table.concat({
    string.format("const nj_i64 total = %s, lag = total < %dLL ? total : %dLL;", total, P.lag, P.lag),
    "const nj_i64 b = nj_block_item();",
    "if (b >= 2 * total) return;",
    "const nj_i64 m = b - lag;",
    string.format("const bool %s = b >= lag && (b >= 2 * total - lag || (m & 1) == 0);", second),
    string.format("const nj_i64 %s = b < lag ? b : b >= 2 * total - lag ? b - total : (m & 1) == 0 ? m >> 1 : lag + (m >> 1);", item),
  }, "\n    ")
end
-- The zero launch of a pipelined pass (P.role.zero): a thread a counter, the int at `at` (a C expression
-- of i, the counter's number) for i < count: the workspace is the caller's, its contents unknown.
function pipe_zero_kernel(count, at)
  return string.format([[NJ_KERNEL(%s, 256)
{
    nj_grid_enter();
    const nj_i64 i = nj_block_item() * 256 + threadIdx.x;
    if (i < %s) *(int *)(%s) = 0;
}]], P.role.zero.kernel, count, at)
end

-- The pragma before a walk over global memory that reads `streams` tensors an iteration (x, the
-- residual, dy; default 1): unrolled until two of those loads are in flight per thread (about 64 KB with
-- a full SM, enough to cover memory latency), and no further: NVVM's default unroll of 4 cost 10 to 30 ms
-- of compile a kernel (fwd column: 70 -> 59 ms, bwd column and its dgamma walks: 110 -> 80). The
-- unaligned variants, rare paths that only have to be right, keep their loops rolled.
function walk_unroll(streams)
  if P.unaligned or (streams or 1) >= 2 then return "#pragma unroll 1" end
  return "#pragma unroll 2"
end

-- Lanes a row of the row templates gets: the block, a warp, or a group of fewer lanes (several rows a
-- warp; then row_group_fns() must be rendered after NJ_TPR is defined).
function row_lanes() return P.block // P.rows_per_block end
-- Reductions over the threads that share one row: a group of lanes or a warp when rows_per_block > 1,
-- else the block.
function row_sum(v, scratch)
  if row_lanes() < 32 then return string.format("nj_group_sum(%s)", v) end
  if P.rows_per_block > 1 then return string.format("nj_warp_sum(%s)", v) end
  return string.format("nj_block_sum<%d>(%s, %s)", P.block // 32, v, scratch)
end
function row_welford(w, scratch)
  if row_lanes() < 32 then return string.format("nj_group_welford(%s)", w) end
  if P.rows_per_block > 1 then return string.format("nj_warp_welford(%s)", w) end
  return string.format("nj_block_welford<%d>(%s, %s)", P.block // 32, w, scratch)
end
-- The row a group of lanes works on, given its own row number g (a variable): a group past the last
-- row takes the last row's offsets, so that every lane of the warp reaches the group reductions'
-- shuffles; the templates keep it from loading, storing and adding to sums (g < nrows: `live`).
function row_of_group(g)
  return string.format("%s < nrows ? %s : nrows - 1", g, g)
end
%}
{# Reductions within a row's group of NJ_TPR consecutive lanes (rows_per_block > block / 32): butterflies
   over the group's lanes, the whole warp taking part (row_of_group: no lane leaves early). #}
{% function row_group_fns() %}
#define NJ_GPW (32 / NJ_TPR) /* rows (groups) a warp */
NJ_DEVICE float nj_group_sum(float v)
{
#pragma unroll
    for (int m = NJ_TPR / 2; m > 0; m >>= 1) v += nj_shfl_xor(v, m);
    return v;
}
NJ_DEVICE void nj_group_sum2(float &a, float &b)
{
#pragma unroll
    for (int m = NJ_TPR / 2; m > 0; m >>= 1) {
        a += nj_shfl_xor(a, m);
        b += nj_shfl_xor(b, m);
    }
}
NJ_DEVICE nj_welford nj_group_welford(nj_welford w)
{
    float n = w.n, s = w.n * w.mean;
    nj_group_sum2(n, s);
    nj_welford r = nj_welford_from_sums(n, s);
    r.m2 = nj_group_sum(nj_welford_dev(w, r.mean));
    return r;
}
{% end %}
{# A table of the reduction's gamma (g) and then beta (b) values by reduction index, as floats in shared
   memory nj_ptab, filled by the block before any of it leaves: the column templates' (where the
   parameters vary down the walk only: LayerNorm over the C of NCHW), and a persistent row plan's
   staged f32 gamma/beta (P.stage; dyn: in the launch's dynamic shared memory; "given": the caller
   declared nj_ptab, within its own layout of that memory). g, b: whether each is in it; ptab_at()
   reads it. #}
{%
function ptab_at(g, beta, idx)
  return "nj_ptab[" .. ((beta and g) and "NJ_N + " or "") .. idx .. "]"
end
%}
{% function param_table(g, b, dyn) %}
{% if dyn == "given" then %}
{% elseif dyn then %}
    /* the row's gamma, then beta, as floats, before any row */
    NJ_DYN_SHARED(float, nj_ptab);
{% else %}
    /* the walk's gamma, then beta, by walk index (PTAB above), before any block leaves */
    NJ_SHARED(float, nj_ptab, {{ (g and 1 or 0) + (b and 1 or 0) }} * NJ_N);
{% end %}
    for (unsigned i = threadIdx.x; i < (unsigned)NJ_N; i += {{ P.block }}) {
        {{ split_index("i", reduced_axes(), "r", "unsigned") }}
        const nj_i64 opi = {{ offset("param", reduced_axes(), "r") }};
{% if g then %}
        nj_ptab[i] = nj_load_f32(GAMMA, opi);
{% end %}
{% if b then %}
        nj_ptab[{{ g and "NJ_N + " or "" }}i] = nj_load_f32(BETA, opi);
{% end %}
    }
    __syncthreads();
{% end %}
