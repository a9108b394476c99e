"""The price table: the defaults shipped in `prices.yaml`, the operator's file over them
(`TURNSTREAM_PRICES`), model by model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from turnstream.core.costs import Price, PriceTable

DEFAULTS = Path(__file__).with_name("prices.yaml")


class PriceFileError(ValueError):
    """A price file that cannot be read, with the file and the entry that is wrong."""


def load_prices(operator_file: Path | None = None) -> PriceTable:
    table = _read(DEFAULTS)
    if operator_file is not None:
        for provider, models in _read(operator_file).items():
            table[provider] = {**table.get(provider, {}), **models}
    return table


def _read(path: Path) -> dict[str, dict[str, Price]]:
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PriceFileError(f"price file {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise PriceFileError(f"price file {path}: expected {{provider: {{model: prices}}}}")
    table: dict[str, dict[str, Price]] = {}
    for provider, models in raw.items():
        if not isinstance(models, dict):
            raise PriceFileError(f"price file {path}: {provider}: expected {{model: prices}}")
        table[str(provider)] = {}
        for model, entry in models.items():
            try:
                table[str(provider)][str(model)] = Price(
                    **{k: float(entry[k]) for k in ("input", "output", "cache_write", "cache_read")}
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise PriceFileError(
                    f"price file {path}: {provider}/{model}: needs input, output, cache_write "
                    f"and cache_read in dollars per million tokens ({exc!r})"
                ) from exc
    return table
