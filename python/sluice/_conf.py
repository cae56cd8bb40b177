"""Python-side checks of sluice options, so bad values fail before any Spark work, and every name
the Python side shares with the JVM side.

The key table, expected forms, messages, provider and class names, operator id ranges, the Connect
type URL and the input bound's option and metric names are not written here: they are read from
``sluice/conf.json`` inside the bundled jars, the file sluice.conf.SluiceConf (Scala) reads, so the
two sides cannot drift (``tests/product/test_contract.py`` fails on a copy written out elsewhere). Only the
parsers are code on both sides; both test suites check them against the vectors in that file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sluice import _spark

# Spark Connect: the setting that registers the server plugin planning suppress for Connect clients
# (its class is CONNECT_RELATION_PLUGIN; sluice._connect).
CONNECT_RELATION_CLASSES_KEY = "spark.connect.extensions.relation.classes"

_NUMBER_WITH_UNIT = re.compile(r"^([0-9]+)\s*([a-z]*)$")


def spec() -> dict[str, Any]:
    """The contents of sluice/conf.json in the bundled jars."""
    return _spark.spec()


def message(_template: str, **args: Any) -> str:
    text = spec()["messages"][_template]
    for k, v in args.items():
        text = text.replace("{" + k + "}", str(v))
    return str(text)


def supplier_message(_template: str, **args: Any) -> str:
    text = spec()["windowstore_supplier"][_template]
    for k, v in args.items():
        text = text.replace("{" + k + "}", str(v))
    return str(text)


def _parse_with_units(value: Any, units: dict[str, int]) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    m = _NUMBER_WITH_UNIT.match(str(value).strip().lower())
    if not m or m.group(2) not in units:
        return None
    return int(m.group(1)) * units[m.group(2)]


def parse_bytes(value: Any) -> int | None:
    return _parse_with_units(value, spec()["forms"]["bytes"]["units"])


def parse_millis(value: Any) -> int | None:
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    micros = _parse_with_units(value, spec()["forms"]["millis"]["units_in_micros"])
    return None if micros is None else micros // 1000


def parse_positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        n = int(str(value).strip())
    except ValueError:
        return None
    return n if n > 0 else None


def parse_boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return {"true": True, "false": False}.get(text)


def parse_string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Option:
    """A ``configure()`` option: the snake_case name of a ``spark.sluice.*`` key."""

    key: str
    expected: str
    parse: Callable[[Any], Any]

    def to_conf(self, value: Any) -> str | None:
        parsed = self.parse(value)
        if parsed is None:
            raise ValueError(message("invalid", value=value, key=self.key, expected=self.expected))
        return str(parsed).lower() if isinstance(parsed, bool) else str(parsed)


@dataclass(frozen=True)
class _FlagOption(Option):
    """A boolean option that sets `key` to `value_if_true` when True and leaves it alone when False."""

    value_if_true: str = ""

    def to_conf(self, value: Any) -> str | None:
        if not isinstance(value, bool):
            raise ValueError(message("invalid", value=value, key=self.key, expected=self.expected))
        return self.value_if_true if value else None


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "bytes": parse_bytes,
    "millis": parse_millis,
    "positive_int": parse_positive_int,
    "string": parse_string,
    "boolean": parse_boolean,
}


def _key_option(k: dict[str, Any]) -> Option:
    forms = spec()["forms"]
    key = spec()["prefix"] + k["name"]
    if k["form"] == "choice":
        allowed = tuple(k["values"])
        expected = forms["choice"]["expected"].replace("{values}", ", ".join(allowed))

        def choose(v: Any) -> str | None:
            name = str(v).strip().lower()
            return name if name in allowed else None

        return Option(key, expected, choose)
    expected = forms[k["form"]]["expected"]
    base = _PARSERS[k["form"]]
    if "min" not in k:
        return Option(key, expected, base)
    minimum = k["min"]

    def bounded(v: Any) -> Any:
        parsed = base(v)
        return parsed if parsed is not None and parsed >= minimum else None

    return Option(key, message("at_least", form=expected, min=minimum), bounded)


def contract() -> dict[str, Any]:
    """The names both languages use (conf.json's ``contract``)."""
    names: dict[str, Any] = spec()["contract"]
    return names


def operator_ids(kind: str) -> range:
    """The state operator ids of one kind of sluice operator (``suppress``, ``emit_cache``)."""
    ids = contract()["operator_ids"][kind]
    return range(ids["from"], ids["until"])


def loading_settings() -> dict[str, str]:
    """The comma-separated Spark settings that load sluice, each with the class configure() adds to it."""
    classes = contract()["classes"]
    return {
        "spark.plugins": classes["plugin"],
        "spark.sql.extensions": classes["extensions"],
        CONNECT_RELATION_CLASSES_KEY: classes["connect_relation_plugin"],
    }


def key(name: str) -> str:
    """The full Spark key of a conf.json key name (``windowstore.retention`` ->
    ``spark.sluice.windowstore.retention``); fails on a name conf.json does not list."""
    if not any(k["name"] == name for k in spec()["keys"]):
        raise KeyError(f"{name} is not a key of sluice/conf.json")
    return str(spec()["prefix"]) + name


def removed() -> list[dict[str, Any]]:
    """The keys sluice no longer has (conf.json's ``removed``): name, option, version, what, reason."""
    return list(spec()["removed"]["keys"])


def removed_refusal(name_or_option: str) -> str | None:
    """The error of a removed key (a full ``spark.sluice.*`` key) or ``configure()`` option, or None
    for a name sluice did not remove."""
    prefix = spec()["prefix"]
    for r in removed():
        key = prefix + r["name"]
        if name_or_option == key:
            return message("removed", key=key, version=r["version"], reason=r["reason"])
        if name_or_option == r.get("option"):
            return message("removed_option", option=name_or_option, key=key, version=r["version"], reason=r["reason"])
    return None


def experimental_keys() -> list[str]:
    """The keys conf.json marks experimental (a ``"status": "experimental"`` key)."""
    return [spec()["prefix"] + k["name"] for k in spec()["keys"] if k.get("status") == "experimental"]


def state_store_providers() -> dict[str, str]:
    """State store provider classes by the names sluice's options use."""
    return dict(spec()["providers"])


@functools.lru_cache(maxsize=1)
def options() -> dict[str, Option]:
    """``configure()``'s options: one per key that names its option, plus the provider choices."""
    out = {k["option"]: _key_option(k) for k in spec()["keys"] if "option" in k}
    providers = state_store_providers()
    out["state_store"] = Option(
        contract()["provider_class_key"],
        spec()["forms"]["choice"]["expected"].replace("{values}", ", ".join(providers)),
        lambda v: providers.get(v.strip().lower()) if isinstance(v, str) else None,
    )
    out["state_store_cache"] = _FlagOption(
        contract()["provider_class_key"], "True or False", lambda v: v, value_if_true=spec()["caching_provider"]
    )
    return out


_NAMES: dict[str, Callable[[], Any]] = {
    "STATE_STORE_PROVIDERS": state_store_providers,
    "PREFIX": lambda: spec()["prefix"],
    "PROVIDER_CLASS_KEY": lambda: contract()["provider_class_key"],
    "PLUGIN_CLASS": lambda: contract()["classes"]["plugin"],
    "EXTENSIONS_CLASS": lambda: contract()["classes"]["extensions"],
    "CONNECT_RELATION_PLUGIN": lambda: contract()["classes"]["connect_relation_plugin"],
    "CONNECT_TYPE_URL": lambda: contract()["connect_type_url"],
    "LOADING_SETTINGS": loading_settings,
}


def __getattr__(name: str) -> Any:
    # Module-level names computed from the spec on first use (the jar is read then, not at import).
    if name in _NAMES:
        return _NAMES[name]()
    raise AttributeError(name)
