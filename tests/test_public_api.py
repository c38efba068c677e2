import importlib
import inspect
import subprocess
import sys

import pytest

import portable
import portable.errors


def test_all_is_sorted_and_unique():
    assert list(portable.__all__) == sorted(set(portable.__all__))


def test_all_is_complete_and_importable():
    for name in portable.__all__:
        assert hasattr(portable, name), name
    public = {
        name
        for name in dir(portable)
        if not name.startswith("_")
        and not inspect.ismodule(getattr(portable, name))
        and name not in {"annotations", "TYPE_CHECKING", "Any"}
    }
    assert public == set(portable.__all__)


def test_every_error_is_exported():
    errors = {
        name
        for name, value in vars(portable.errors).items()
        if inspect.isclass(value) and issubclass(value, portable.errors.PortableError)
    }
    assert errors <= set(portable.__all__) | {"Internal"}
    assert list(portable.errors.__all__) == sorted(portable.errors.__all__)


@pytest.mark.parametrize("module", ["portable.storage", "portable.errors", "portable.resilience", "portable.config", "portable.urls"])
def test_module_all_is_sorted(module):
    mod = importlib.import_module(module)
    assert list(mod.__all__) == sorted(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name}"


def test_portable_aio_all_is_sorted_and_every_name_is_lazy():
    import portable.aio

    assert list(portable.aio.__all__) == sorted(set(portable.aio.__all__))
    assert set(portable.aio.__all__) == set(portable.aio._LAZY)
    assert set(portable.aio.__all__) <= set(dir(portable.aio))
    with pytest.raises(AttributeError):
        portable.aio.NoSuchName  # noqa: B018


def test_portable_aio_storage_names_resolve_to_the_async_bucket():
    import portable.aio
    import portable.aio._bucket

    assert portable.aio.AsyncBucket is portable.aio._bucket.AsyncBucket
    assert portable.aio.open_bucket is portable.aio._bucket.open_bucket
    for name in ("get", "get_range", "head", "exists", "put", "delete", "copy", "list_page", "signed_url",
                 "abort_incomplete", "list_incomplete", "get_many", "put_many", "delete_many", "copy_many",
                 "copy_prefix", "aclose"):
        assert inspect.iscoroutinefunction(getattr(portable.aio.AsyncBucket, name)), name


@pytest.mark.parametrize("module", ["portable.aio._bucket", "portable.aio._streams", "portable.aio._batch",
                                    "portable.storage._requests", "portable.driver.aio_storage"])
def test_async_storage_module_all_is_sorted(module):
    mod = importlib.import_module(module)
    assert list(mod.__all__) == sorted(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name}"


def test_importing_portable_aio_loads_no_domain_until_a_name_is_used():
    code = (
        "import sys, portable.aio\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith(('portable.aio.', 'portable.storage', "
        "'portable.messaging', 'portable.compute')))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_importing_one_domain_does_not_load_the_others():
    code = (
        "import sys, portable.storage\n"
        "print(','.join(sorted(m for m in sys.modules if m in {'portable.messaging', 'portable.compute', 'asyncio'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_lazy_names_resolve_to_the_domain_objects():
    import portable.messaging
    import portable.storage

    assert portable.open_bucket is portable.storage.open_bucket
    assert portable.Topic is portable.messaging.Topic
    with pytest.raises(AttributeError):
        portable.no_such_name  # noqa: B018


def test_importing_the_core_loads_no_cloud_sdk():
    code = (
        "import sys, portable, portable.storage, portable.config, portable.resilience, "
        "portable.messaging, portable.compute, portable.idempotency, portable.testing.chaos\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'boto3','botocore','aiobotocore','s3fs','gcsfs','adlfs','google','azure','kafka','fsspec','dask','redis'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_error_codes_are_stable():
    from portable.errors import ErrorCode

    assert {c.name: c.value for c in ErrorCode} == {
        "UNKNOWN": 1,
        "NOT_FOUND": 2,
        "ALREADY_EXISTS": 3,
        "PRECONDITION_FAILED": 4,
        "PERMISSION_DENIED": 5,
        "INVALID_ARGUMENT": 6,
        "UNAVAILABLE": 7,
        "THROTTLED": 8,
        "DEADLINE_EXCEEDED": 9,
        "CANCELLED": 10,
        "UNSUPPORTED": 11,
        "IN_PROGRESS": 12,
        "IDEMPOTENCY_CONFLICT": 13,
        "TOO_LARGE": 14,
    }


def test_errors_pickle_with_their_fields():
    import pickle

    err = portable.Throttled("slow down", provider="s3", retry_after=2.5)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is portable.Throttled
    assert (again.provider, again.retryable, again.retry_after, str(again)) == ("s3", True, 2.5, "[s3] slow down")


def test_py_typed_is_shipped():
    from importlib.resources import files

    assert files("portable").joinpath("py.typed").is_file()


def _all_modules():
    import pkgutil

    return sorted(m.name for m in pkgutil.walk_packages(portable.__path__, "portable.") if m.name != "portable.__main__")


@pytest.mark.parametrize("module", _all_modules())
def test_every_module_imports_first_in_a_fresh_process(module):
    """No import cycle hides behind import order (portable._consumer once did)."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True, timeout=60)
