r"""Proved bounds of the book, as functions (the chapters state and prove them; tests and
notebooks evaluate them here), one submodule per group of chapters.

* :mod:`~attnsvm.bounds.model`: Part III's equal-score model, shared by chapters 8, 9, 10 and 14
  (the lifted features, the proofs' constants, the cross-sequence condition (Cx));
* :mod:`~attnsvm.bounds.cones`: the saturation lemma and its cone version (chapter 4);
* :mod:`~attnsvm.bounds.globalconv`: global convergence under (Cx) (chapters 8 and 10);
* :mod:`~attnsvm.bounds.rates`: finite-time rates of GD, NGD and the Polyak step (chapter 9);
* :mod:`~attnsvm.bounds.squared`: the squared orders under strict complementarity (chapter 9);
* :mod:`~attnsvm.bounds.geometry`: Part IV's geometries (chapters 13 and 14);
* :mod:`~attnsvm.bounds.ntp`: next-token prediction (chapters 15 and 16).

Every public name is re-exported here: ``attnsvm.bounds.constants`` is
``attnsvm.bounds.model.constants``.
"""
from __future__ import annotations

from .model import lifted_factors, constants, cross_gram_min
from .cones import saturation_bound, cone_margin_bound
from .globalconv import (noloss_steps, s0_lower, global_mu0, global_steps, t_reach, global_excess_bound,
                         mass_from_excess, global_constants, q_monotone, global_ngd_direction_bound,
                         global_gd_direction_constant, global_gd_direction_bound)
from .rates import (direction_from_margin, ngd_direction_bound, gd_error_constant, gd_direction_bound,
                    ngd_norm_bounds, orth_component, orth_floor, polyak_cap_threshold,
                    polyak_star_progress_bound, gd_step_condition, ngd_linear_holds, gd_inverse_excess_holds,
                    direction_bound_from_t0, ngd_floorless_constants, ngd_floorless_bound)
from .squared import (support_constants, strictly_complementary, SC_FACTOR, SC_EXACT,
                      residual_parts, residual_constants, ngd_margin_offset,
                      gd_margin_offset, squared_direction_bound, nonsupport_mass, sharpness_constant,
                      residual_limit, residual_limit_distance, restart_constants, restart_direction_bound,
                      distinct_restart_constants, distinct_restart_bound, distinct_gd_margin_bounds)
from .geometry import (ngd_margin_step, ngd_margin_gap_bound, prgd_ideal_gap_bound, sd_att_constants,
                       sd_att_margin_bound, sd_margin_radius, check_sd_bound, adam_eps_split)
from .ntp import (finite_part_bound, ntp_path_constants, ntp_path_bounds, ntp_support_constants,
                  ntp_squared_bounds, ntp_support_potential, ntp_support_radius, smoothness_bound,
                  ntp_support_minimizer, ntp_sharp_bounds, ufm_geometry)

__all__ = [
    "lifted_factors", "constants", "cross_gram_min",
    "saturation_bound", "cone_margin_bound",
    "noloss_steps", "s0_lower", "global_mu0", "global_steps", "t_reach", "global_excess_bound",
    "mass_from_excess", "global_constants", "q_monotone", "global_ngd_direction_bound",
    "global_gd_direction_constant", "global_gd_direction_bound",
    "direction_from_margin", "ngd_direction_bound", "gd_error_constant", "gd_direction_bound",
    "ngd_norm_bounds", "orth_component", "orth_floor", "polyak_cap_threshold", "polyak_star_progress_bound",
    "gd_step_condition", "ngd_linear_holds", "gd_inverse_excess_holds", "direction_bound_from_t0",
    "ngd_floorless_constants", "ngd_floorless_bound",
    "support_constants", "strictly_complementary", "SC_FACTOR", "SC_EXACT",
    "residual_parts", "residual_constants", "ngd_margin_offset", "gd_margin_offset",
    "squared_direction_bound", "nonsupport_mass", "sharpness_constant", "residual_limit",
    "residual_limit_distance", "restart_constants", "restart_direction_bound",
    "distinct_restart_constants", "distinct_restart_bound", "distinct_gd_margin_bounds",
    "ngd_margin_step", "ngd_margin_gap_bound", "prgd_ideal_gap_bound", "sd_att_constants",
    "sd_att_margin_bound", "sd_margin_radius", "check_sd_bound", "adam_eps_split",
    "finite_part_bound", "ntp_path_constants", "ntp_path_bounds", "ntp_support_constants",
    "ntp_squared_bounds", "ntp_support_potential", "ntp_support_radius", "smoothness_bound",
    "ntp_support_minimizer", "ntp_sharp_bounds", "ufm_geometry",
]
