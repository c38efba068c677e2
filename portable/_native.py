"""``as_(NativeType)``: the one way every portable type reaches its driver's native object."""

from __future__ import annotations

from typing import Any, TypeVar

from .errors import Unsupported

T = TypeVar("T")


def native_object(driver: Any, kind: type[T], provider: str) -> T:
    """Return the driver's native object of type ``kind``, or raise Unsupported naming it.

    The object bypasses portable's retry layer, breakers and deadlines: calls on it are
    the native library's alone.
    """
    found = driver.as_(kind)
    if found is None:
        raise Unsupported(f"{provider}:// has no native {getattr(kind, '__name__', kind)}", provider=provider)
    return found  # type: ignore[no-any-return]
