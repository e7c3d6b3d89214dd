"""Suite-wide fixtures."""
import mpmath
import pytest

MPMATH_DIGITS = 40


@pytest.fixture(autouse=True)
def mpmath_precision():
    """Every test starts at 40-digit mpmath precision, whatever earlier tests set.

    mpmath's precision is process-global; oracle code that raises or lowers it
    must not change the tolerance another test's reference is computed at.
    """
    mpmath.mp.dps = MPMATH_DIGITS
    yield
    mpmath.mp.dps = MPMATH_DIGITS
