{# Lua helpers shared by the kernel templates (renders no text). Included after prelude.cuh; the
   functions land in the template environment, which every include shares.
   Index conventions: axis a's index variable is <prefix><a> (P.axes numbering, 1 = batch axis). #}
{%
OPD = {x = 0, y = 1, res = 2, resout = 3, dy = 4, dx = 5, param = 6, stats = 7}

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

-- Element offset of operand `opd` from the index variables of `axes` (64-bit; zero strides dropped).
function offset(opd, axes, prefix)
  local terms = {}
  for _, a in ipairs(axes) do
    local s = need(P.axes[a].stride[opd], "stride of " .. opd)
    if s ~= 0 then
      if s == 1 then
        terms[#terms + 1] = string.format("(nj_i64)%s%d", prefix, a)
      else
        terms[#terms + 1] = string.format("(nj_i64)%s%d * %s", prefix, a, s)
      end
    end
  end
  if #terms == 0 then return "0" end
  return table.concat(terms, " + ")
end

-- Reductions over the threads that share one row: a warp when rows_per_block > 1, else the block.
function row_sum(v, scratch)
  if P.rows_per_block > 1 then return string.format("nj_warp_sum(%s)", v) end
  return string.format("nj_block_sum<%d>(%s, %s)", P.block // 32, v, scratch)
end
function row_welford(w, scratch)
  if P.rows_per_block > 1 then return string.format("nj_warp_welford(%s)", w) end
  return string.format("nj_block_welford<%d>(%s, %s)", P.block // 32, w, scratch)
end
%}
