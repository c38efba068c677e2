import pytest

pytest_plugins = ["tests.emulators.fixtures"]


@pytest.fixture(autouse=True)
def _fresh_breakers():
    """Breakers are process-wide; a test must not inherit another test's open breaker."""
    from portable.resilience import reset_breakers

    reset_breakers()
    yield
    reset_breakers()
