"""Names shared by the obstore engine's conftest and tests (a module of its own: ``conftest`` is ambiguous)."""

AZ_CONNECTION_ENV = "PORTABLE_TEST_OBSTORE_AZ_CONNECTION"
AZ_KEY_ENV = "PORTABLE_TEST_OBSTORE_AZ_KEY"
