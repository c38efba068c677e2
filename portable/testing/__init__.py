"""The contract suites shipped with portable, and a fault-injection driver.

An adapter proves itself with one-line subclasses of the suites::

    import pytest
    from portable.testing.storage_suite import StorageContract

    class TestS3(StorageContract):
        @pytest.fixture
        def bucket_url(self, moto_server, unique_name):
            return f"s3://{unique_name}?endpoint_url={moto_server.endpoints['endpoint_url']}"

An ``xfail`` in such a subclass names the provider behaviour that causes it.
"""
