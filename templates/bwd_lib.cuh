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
-- and dy storage values, po the element offset of gamma/beta. Needs mean, rstd in scope.
function bwd_element(xe, de, po, ind, no_g)
  local F = P.flags
  local t = {}
  t[#t + 1] = string.format("const float xh = (nj_to_f32(%s) - mean) * rstd;", xe)
  t[#t + 1] = string.format("float dz = nj_to_f32(%s);", de)
  if F.scale and (not no_g or P.act ~= "none") then t[#t + 1] = string.format("const float gm = nj_load_f32(GAMMA, %s);", po) end
  if P.act ~= "none" then
    local z = F.scale and "xh * gm" or "xh"
    if F.bias then z = z .. " + nj_load_f32(BETA, " .. po .. ")" end
    t[#t + 1] = string.format("dz *= nj_bwd_dact_%s(%s);", P.act, z)
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
{# Activation derivatives for backward. silu and sigmoid divide by 1 + e^-u: the prelude's IEEE division
   has a slow-path subroutine whose call made ptxas spill around it (sm_90, f32 LayerNorm + silu);
   __fdividef (2 ulp) has none, and its 0 for a denominator above 2^126 is the right limit here. #}
{% function bwd_dact_helpers() %}
NJ_DEVICE float nj_bwd_sigmoid(float u) { return __fdividef(1.0f, 1.0f + expf(-u)); }
NJ_DEVICE float nj_bwd_dact_none(float u) { return 1.0f; }
NJ_DEVICE float nj_bwd_dact_relu(float u) { return nj_dact_relu(u); }
NJ_DEVICE float nj_bwd_dact_gelu_erf(float u) { return nj_dact_gelu_erf(u); }
NJ_DEVICE float nj_bwd_dact_gelu_tanh(float u) { return nj_dact_gelu_tanh(u); }
NJ_DEVICE float nj_bwd_dact_sigmoid(float u)
{
    const float s = nj_bwd_sigmoid(u);
    return s * (1.0f - s);
}
NJ_DEVICE float nj_bwd_dact_silu(float u)
{
    const float s = nj_bwd_sigmoid(u);
    return s * (1.0f + u * (1.0f - s));
}
{% end %}
