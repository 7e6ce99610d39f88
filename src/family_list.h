/* The kernel families, in the order the planner tries them for a pass: the first whose applicability
 * test accepts the canonical problem plans it (GENERAL accepts every problem, so it comes last). One
 * row a family: its id (NJ_FAMILY_<ID>), name (plan text, P.family), forward and backward templates,
 * applicability test (given the device) and planners (planner_<family>.c). A family that plans one
 * pass only names no template for the other (NULL), and its test refuses that pass. Library modules
 * (nj_plan_library) have a family of their own that is never planned for a problem. Included with
 * NJ_FAMILY_X and NJ_FAMILY_LIB_X defined (family.c, planner.h, planner_impl.h). */
/*          ID, name, forward and backward templates,
 *          applicability test, forward planner, backward planner */
NJ_FAMILY_X(TILE, "tile", "fwd_tile.cu", "bwd_tile.cu",
            nj_tile_applies, nj_plan_fwd_tile, nj_plan_bwd_tile)
NJ_FAMILY_X(CLUSTER, "cluster", "fwd_cluster.cu", "bwd_cluster.cu",
            nj_cluster_applies, nj_plan_fwd_cluster, nj_plan_bwd_cluster)
NJ_FAMILY_X(ROW, "row", "fwd_row.cu", "bwd_row.cu",
            nj_row_applies, nj_plan_fwd_row, nj_plan_bwd_row)
NJ_FAMILY_X(IMAGE, "image", "fwd_image.cu", "bwd_image.cu",
            nj_image_applies, nj_plan_fwd_image, nj_plan_bwd_image)
NJ_FAMILY_X(COLUMN, "column", "fwd_column.cu", "bwd_column.cu",
            nj_column_applies, nj_plan_fwd_column, nj_plan_bwd_column)
NJ_FAMILY_X(CHANNELS_LAST, "channels_last", "fwd_channels_last.cu", "bwd_channels_last.cu",
            nj_cl_applies, nj_plan_fwd_channels_last, nj_plan_bwd_channels_last)
NJ_FAMILY_X(GENERAL, "general", "fwd_general.cu", "bwd_general.cu",
            nj_general_applies, nj_plan_fwd_general, nj_plan_bwd_general)
NJ_FAMILY_LIB_X(LIBRARY, "library")
