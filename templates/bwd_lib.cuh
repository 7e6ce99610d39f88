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
  if BWD_DL and F.center then
    t[#t + 1] = string.format("const float xh = (nj_to_f32(%s) - mean) * rstd - %s;", xe, BWD_DL)
  else
    t[#t + 1] = string.format("const float xh = (nj_to_f32(%s) - mean) * rstd;", xe)
  end
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

-- The saved mean is the float32 rounding of the set's mean: (x - mean) * rstd is off by up to
-- |mean| * rstd * 2^-25, which reaches 3e-2 at |mean| / std = 1e6. A kernel that walks the whole set
-- sets BWD_DL to the name of the set's correction dl = mean((x - mean) * rstd) (exact differences, summed
-- in a pre-pass over x taken only where |mean| * rstd > NJ_FIX_RATIO: none for ordinary data), and
-- bwd_element subtracts it from xhat. Kernels that see pieces of sets only leave it nil.
BWD_DL = nil
-- Whether an unsplit dx kernel leaves its sets' dl to separate dgamma/dbeta walks (nj_bwd_pgrad,
-- nj_bwd_pgrad_col) in the workspace, a float a statistic after everything else (the planner's
-- region P.ws.dl, reserved by bwd_reserve_dl), and the C expression of that region.
function bwd_dl_store()
  return P.ws.dl ~= nil
end
function bwd_dl_base()
  return string.format("((float *)A.workspace + %d + A.rows * %dLL)", P.ws.dl.fixed, P.ws.dl.per_row)
end
-- dx from g, xhat and the two row means of g and g * xhat. A set of one element (two, centred) has
-- no direction orthogonal to its mean and xhat: dx is all in g's own xhat direction, scaled by
-- 1 - mean(xhat^2) = eps * rstd^2, which the general form gets as a difference of near-equal terms
-- (0.4-3% wrong, past the 1e-4 bound). There the exact form; eps 0 gives 0 (rstd^2 may overflow),
-- and eps < 0 (a caller's struct without it: launch.c) the general form.
function bwd_dx_expr(g, xh, m1, m2)
  local general
  if P.flags.center then general = string.format("rstd * (%s - %s - %s * %s)", g, m1, xh, m2)
  else general = string.format("rstd * (%s - %s * %s)", g, xh, m2) end
  if P.reduce_size > (P.flags.center and 2 or 1) then return general end
  local gc = P.flags.center and string.format("(%s - %s)", g, m1) or g
  return string.format("(A.eps < 0.0f ? %s : rstd * %s * (A.eps > 0.0f ? A.eps * rstd * rstd : 0.0f))", general, gc)
end
%}
