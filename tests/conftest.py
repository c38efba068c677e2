import pytest

pytest_plugins = ["tests.emulators.fixtures"]


@pytest.fixture(autouse=True)
def _fresh_breakers():
    """Breakers are process-wide; a test must not inherit another test's open breaker."""
    from portable.resilience import reset_breakers

    reset_breakers()
    yield
    reset_breakers()


@pytest.fixture
def obstore_relays(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What the obstore engine's async face sends to a worker thread (``relay_blocking``'s
    argument, one per call), recorded while the test runs; the calls still go through."""
    import portable_obstore._aio as native

    relayed: list[object] = []
    real = native.relay_blocking

    def counting(fn: object, arg: object) -> object:
        relayed.append(arg)
        return real(fn, arg)  # type: ignore[arg-type]

    monkeypatch.setattr(native, "relay_blocking", counting)
    return relayed
