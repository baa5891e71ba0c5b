"""Mode connectivity through parameter-space symmetry (dissertation ch. 3).

* :mod:`~paramsym.connectivity.paths`: paths in parameter space, the loss along them, the
  linear-interpolation barrier.
* :mod:`~paramsym.connectivity.matching`: permutation alignment by weight matching, automatic
  for the models :func:`paramsym.symmetries` analyses, any model with a
  :class:`PermutationSpec`.
* :mod:`~paramsym.connectivity.alignment`: alignment with every group the graph gives (unit and
  head permutations, per-head and stream orthogonal maps), for transformers (issue 30);
  :mod:`~paramsym.connectivity.merging`: weighted averages of aligned models, BatchNorm reset.
* :mod:`~paramsym.connectivity.curves`: symmetry-induced curves exp(t log g)·w (Eqs. 3.4-3.6),
  their curvature, the chord bound (Thm 3.4.2), the output change of Prop. 3.4.1.
* :mod:`~paramsym.connectivity.barriers`: the unbounded barrier of Prop. 3.3.3 in closed form.
* :mod:`~paramsym.connectivity.components`: components of minima of square linear networks
  (Prop. 3.2.1), their alignment by odd permutations (Prop. 3.3.2), the 1-D residual network
  (Prop. 3.2.3).
"""

from paramsym.connectivity.alignment import AlignResult, align
from paramsym.connectivity.barriers import (
    RescalingPair,
    max_rescaling_barrier,
    rescaling_barrier,
    rescaling_factor,
    rescaling_pair,
)
from paramsym.connectivity.components import (
    ComponentAlignment,
    MinimumComponents,
    SquareLinearChain,
    align_components,
    component_label,
    minimum_path,
    residual_minimum_components,
    square_linear_chain,
    square_linear_minimum,
)
from paramsym.connectivity.curves import (
    ChordBound,
    CurveGeometry,
    OutputChange,
    SymmetryPath,
    chord_bound,
    chord_distance,
    curve_derivatives,
    curve_geometry,
    group_log,
    layer_output_change,
    nested_derivatives,
    symmetry_path,
)
from paramsym.connectivity.learned_align import (
    LearnedAlignConfig,
    LearnedAlignment,
    learn_alignment,
)
from paramsym.connectivity.matching import (
    PermutationSpec,
    WeightMatchingConfig,
    WeightMatchingResult,
    apply_permutations,
    matching_objective,
    permutation_spec,
    weight_matching,
)
from paramsym.connectivity.merging import merge, reset_batchnorm_statistics
from paramsym.connectivity.paths import (
    InterpolationResult,
    Path,
    linear_interpolation,
    linear_path,
    losses_along,
)

__all__ = [
    "AlignResult",
    "ChordBound",
    "ComponentAlignment",
    "CurveGeometry",
    "InterpolationResult",
    "LearnedAlignConfig",
    "LearnedAlignment",
    "MinimumComponents",
    "OutputChange",
    "Path",
    "PermutationSpec",
    "RescalingPair",
    "SquareLinearChain",
    "SymmetryPath",
    "WeightMatchingConfig",
    "WeightMatchingResult",
    "align",
    "align_components",
    "apply_permutations",
    "chord_bound",
    "chord_distance",
    "component_label",
    "curve_derivatives",
    "curve_geometry",
    "group_log",
    "layer_output_change",
    "learn_alignment",
    "linear_interpolation",
    "linear_path",
    "losses_along",
    "matching_objective",
    "max_rescaling_barrier",
    "merge",
    "minimum_path",
    "nested_derivatives",
    "permutation_spec",
    "rescaling_barrier",
    "rescaling_factor",
    "rescaling_pair",
    "reset_batchnorm_statistics",
    "residual_minimum_components",
    "square_linear_chain",
    "square_linear_minimum",
    "symmetry_path",
    "weight_matching",
]
