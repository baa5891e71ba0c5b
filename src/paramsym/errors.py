"""Errors and warnings raised by paramsym.

Every error caused by bad input is a :class:`ParamsymError`. The subclasses also inherit the
matching built-in exception (``ValueError``, ``TypeError``, ...), so ``except ValueError``
keeps working for code that does not know paramsym. Messages name the offending module,
argument or parameter and say what to do instead.
"""

from __future__ import annotations


class ParamsymError(Exception):
    """Base class of every error paramsym raises for bad input."""


class InvalidArgumentError(ParamsymError, ValueError):
    """An argument has a value the function cannot use (unknown name, wrong range, ...)."""


class ShapeError(ParamsymError, ValueError):
    """A tensor (parameter, group element, vector) has the wrong shape."""


class MissingParameterError(ParamsymError, ValueError):
    """A parameter a symmetry or analysis needs is not in the given ``params`` dict."""


class NonFiniteError(ParamsymError, ValueError):
    """A parameter or input contains NaN or infinite entries."""


class InvalidGroupElementError(ParamsymError, ValueError):
    """A group element is not in the group: singular, not orthogonal, negative scale, ..."""


class UnsupportedModuleError(ParamsymError, TypeError):
    """A module cannot be analysed (raised by ``symmetries(..., strict=True)``)."""


class MissingDataError(ParamsymError, FileNotFoundError):
    """A data set's files are not where paramsym looked; the message lists the expected file
    names and the directories searched."""


class MissingCalibrationError(ParamsymError, ValueError):
    """An objective that reads activations was given no calibration batch to read them on."""


class DataFormatError(ParamsymError, ValueError):
    """A data file exists but is not in the expected format (or is unsafe to load)."""


class ExperimentError(ParamsymError, RuntimeError):
    """An experiment could not be run as asked (unknown name, bad override, failed member)."""


class AutodiffError(ParamsymError, RuntimeError):
    """An automatic-differentiation method failed for a known reason; the message says why."""


class EquivarianceError(ParamsymError, ValueError):
    """A transformation given as an equivariance is not one: the sanity check
    f(T(θ, g)) = S(f(θ), g) failed at g₀ or at a random g (the message gives the measured
    relative residual), or a discrete transformation does not leave the model unchanged."""


class NotAGoodPositionError(ParamsymError, ValueError):
    """(θ, g) is not a good position of an equivariance (seed 003, Def. 1): A = ∂_θT(θ, g) or
    C = ∂_yS(f(θ), g) is singular (or the solve for J = A⁻¹B, K = C⁻¹D did not converge)."""


class FixedPointError(ParamsymError, ValueError):
    """A discrete-symmetry identity (seed 003, Thm. 2) was asked for at a point that is not
    on the fixed set T(θ) = θ; the message says how far off and how to project."""


class DiscoveryError(ParamsymError, RuntimeError):
    """Symmetry discovery cannot set up its constraint system (every sampled gradient is zero, or
    the rows carry no information); the message says what was sampled and what to change."""


class ParamsymWarning(UserWarning):
    """Base class of paramsym's warnings."""


class PartialTransformWarning(ParamsymWarning):
    """A transform did only part of what was asked (``rotate`` found no stream to rotate, a
    norm was left unfolded): the result is exact, but the named part was not transformed."""


class UnanalysedModuleWarning(ParamsymWarning):
    """Some modules were not analysed, so symmetries passing through them are not reported."""


class SymmetryVerificationWarning(ParamsymWarning):
    """A symmetry the analysis found exact changed the model's output when acted on (checked by
    ``ps.symmetries(..., verify=...)``); it is reported as approximate, with the measured change."""


class TrainingModeWarning(ParamsymWarning):
    """The model is in training mode with random layers (dropout): detection reads the
    function of evaluation mode, where dropout is the identity; in training mode the symmetries
    hold in distribution only (the masks do not move with the features)."""


class ApproximateActionWarning(ParamsymWarning):
    """A data-dependent action was not exact on the given batch; the message gives the measured
    change of the layer's output."""


class ApproximateConservationWarning(ParamsymWarning):
    """The symmetry behind a conserved quantity is only approximate (e.g. BatchNorm scale
    invariance with eps > 0), so gradient flow conserves the quantity only approximately."""


class NotConvergedWarning(ParamsymWarning):
    """An iterative method stopped before reaching its tolerance; the result is approximate."""


class NonSmoothWarning(ParamsymWarning):
    """The model is not twice differentiable at the point analysed (a ReLU-type activation
    receives inputs exactly at its kink), so second-order identities need not hold there."""


class ApproximateEquivarianceWarning(ParamsymWarning):
    """A transformation labelled approximate (``exact=False``, e.g. normalisation-layer scale
    invariance with eps > 0) failed the equivariance sanity check by the measured residual; the
    identities are reported anyway and hold only approximately."""


class AmbiguousDimensionWarning(ParamsymWarning):
    """Exact symmetry discovery could not decide the dimension of the symmetry algebra: a
    singular value lies too close to the null threshold, or doubling the samples changed the
    null-space dimension; the result reports ``determined=False`` with the numbers."""
