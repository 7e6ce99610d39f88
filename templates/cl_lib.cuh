{# Pieces the channels-last templates share (fwd_channels_last.cu, bwd_channels_last.cu; planner:
   src/planner_cl.c). Included after lib_index.cuh. cl_setup() checks the canonical form and the plan
   and sets the tiling globals; cl_defines() renders them with the tile helpers. #}
{%
-- HW pixels, G groups of CG channels (C in all); a thread owns CH channels loaded VV at a time, of the
-- pixels R apart in an image tile of TP pixels (S tiles an image); blocks of B threads, LT a pixel row.
function cl_setup(name)
  if P.rank ~= 4 or not P.axes[2].reduce or P.axes[3].reduce or not P.axes[4].reduce or not P.flags.center then
    error(name .. ": needs centered [batch, pixels, groups, channels]") end
  HW, G, CG = P.axes[2].extent, P.axes[3].extent, P.axes[4].extent
  C = G * CG
  CH, VV, R, B, S, TP = P.chans, P.vec, P.rows_per_block, P.block, P.split, P.tile
  LT = C // CH
  if CH < 1 or C % CH ~= 0 or CH % VV ~= 0 or B % 32 ~= 0 or LT * R > B or TP % R ~= 0 or S * TP < HW then
    error(name .. ": inconsistent plan") end
  -- The pixel loops: a block of ~512 threads with 60-100 registers holds one block an SM, so each thread
  -- keeps two vector loads in flight (unroll 2); the unaligned variant, a rare path, stays rolled (one
  -- copy of the activation: an exp costs ~10 ms of NVRTC time a copy).
  PIXEL_UNROLL = VV > 1 and "#pragma unroll 2" or "#pragma unroll 1"
end
-- Work item w's tile: image k1, tile `tile` of npx pixels.
function cl_tile_item()
  return "const nj_i64 k1 = w / NJ_S;\n        const int tile = (int)(w % NJ_S), npx = nj_cl_tile_pixels(tile);"
end
-- The base offsets of the operands opds (ox, oy, ores, oresout, ody, odx) at tile `tile` of image k1.
function cl_tile_offsets(opds)
  local names = {x = "ox", y = "oy", res = "ores", resout = "oresout", dy = "ody", dx = "odx"}
  local t = {}
  for _, o in ipairs(opds) do
    t[#t + 1] = string.format("const nj_i64 %s = %s + (nj_i64)tile * NJ_TP * %d;", names[o], offset(o, {1}, "k"),
                              P.axes[2].stride[o])
  end
  return table.concat(t, "\n        ")
end
%}
{# A pipelined launch's tile block, its sums stored (P.lag; fwd/bwd_channels_last.cu): adds one to image
   k1's counter, and the block whose add completes the count runs `merge` (a C call merging the image's
   tiles), then adds one more for the normalizing (dx) blocks. The tile's sums are stored by many threads
   (a group or a channel a thread): the barrier first orders every thread's stores before thread 0's
   gpu-scope fence and add (the fence is cumulative over what the barrier made visible to thread 0;
   without it a store of another warp could still be in flight when the count completes) #}
{% function cl_pipe_merge(merge) %}
        int *const FLAG = (int *)((float *)A.workspace + k1 * NJ_WS_IMAGE{{ ws_plus("flags") }});
        __syncthreads();
        if (__syncthreads_or(t == 0 && nj_pipe_arrive(FLAG) == NJ_S - 1)) {
            nj_fence_gpu();
            {{ merge }};
            if (t == 0) nj_pipe_arrive(FLAG);
        }
{% end %}
{% function cl_defines() %}
#define NJ_N {{ P.reduce_size }}LL
#define NJ_HW {{ HW }}
#define NJ_G {{ G }}
#define NJ_CG {{ CG }}
#define NJ_C {{ C }}
#define NJ_CH {{ CH }}
#define NJ_LT {{ LT }}
#define NJ_R {{ R }}
#define NJ_TP {{ TP }}
#define NJ_S {{ S }}

/* Pixels of tile `tile` (the last one may be short). */
NJ_DEVICE int nj_cl_tile_pixels(int tile) { return min(NJ_TP, NJ_HW - tile * NJ_TP); }
{% end %}
