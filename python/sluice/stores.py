"""The window store's supplier under its first module name; :mod:`sluice.windowstore` is the
module (named as its Scala package)."""

from sluice.windowstore import InMemoryWindowStoreSupplier, Stores

__all__ = ["Stores", "InMemoryWindowStoreSupplier"]
